// stretchflow live view: polls /api/state (or reads the state embedded in a report) and
// draws the flow's graph, its charts on canvas and the timeline of reconfigurations.
// Plain JavaScript, no library: the page must work with no network (issue #18).
"use strict";

const EVENT_COLORS = { reconfiguration: "#d83b3b", migration: "#8a3bd8", decision: "#e39b16",
  checkpoint: "#17a2b8" };
const PALETTE = ["#3b6fd8", "#2e9d57", "#b0661a", "#8a3bd8", "#d83b3b", "#17a2b8", "#6c757d",
  "#c2185b"];
let lastVersion = -1;
let updates = 0;

function fmt(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const d = digits === undefined ? 1 : digits;
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(d) + "M";
  if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(d) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(d);
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// -- the graph ---------------------------------------------------------------------------------
function depths(nodes) {
  const byName = {};
  nodes.forEach((n) => { byName[n.name] = n; });
  const memo = {};
  const depth = (n) => {
    if (memo[n.name] !== undefined) return memo[n.name];
    memo[n.name] = 0;
    let d = 0;
    n.inputs.forEach((i) => { if (byName[i]) d = Math.max(d, depth(byName[i]) + 1); });
    memo[n.name] = d;
    return d;
  };
  nodes.forEach(depth);
  return memo;
}

function nodeLines(n) {
  const c = n.current || {};
  const lines = [];
  if (n.kind === "source") lines.push(`read ${fmt(n.totals.out, 0)} · ${fmt(c.out_rate)}/s`);
  else if (n.kind === "sink") lines.push(`written ${fmt(n.totals.in, 0)} · ${fmt(c.in_rate)}/s`);
  else if (c.parallelism !== undefined) {
    lines.push(`in ${fmt(c.in_rate)}/s · processed ${fmt(c.out_rate)}/s`);
    lines.push(`busy ${c.busy === null || c.busy === undefined ? "–" : Math.round(c.busy * 100) + "%"}`
      + (c.backlog !== null && c.backlog !== undefined ? ` · backlog ${fmt(c.backlog, 0)}`
        : ` · congestion ${fmt(c.congestion, 2)}`));
  } else lines.push("not measured (stateless)");
  return lines;
}

function drawGraph(state) {
  const graph = document.getElementById("graph");
  const d = depths(state.nodes);
  const cols = [];
  state.nodes.forEach((n) => {
    (cols[d[n.name]] = cols[d[n.name]] || []).push(n);
  });
  graph.textContent = "";
  const boxes = {};
  cols.forEach((col) => {
    const ce = el("div", "column");
    col.forEach((n) => {
      const box = el("div", "node " + n.kind);
      box.dataset.name = n.name;
      const c = n.current || {};
      if (c.parallelism !== undefined) box.appendChild(el("span", "par", String(c.parallelism)));
      box.appendChild(el("div", "name", n.name));
      box.appendChild(el("div", "kind", n.kind));
      nodeLines(n).forEach((l) => box.appendChild(el("div", "line", l)));
      ce.appendChild(box);
      boxes[n.name] = box;
    });
    graph.appendChild(ce);
  });
  // edges on a canvas behind the boxes, from each input's right side to the node's left
  const wrap = document.getElementById("graph-wrap");
  const cv = document.getElementById("graph-edges");
  cv.width = wrap.scrollWidth;
  cv.height = wrap.scrollHeight;
  const ctx = cv.getContext("2d");
  ctx.clearRect(0, 0, cv.width, cv.height);
  ctx.strokeStyle = "#889";
  ctx.fillStyle = "#889";
  const wr = wrap.getBoundingClientRect();
  state.nodes.forEach((n) => {
    const to = boxes[n.name].getBoundingClientRect();
    n.inputs.forEach((i) => {
      if (!boxes[i]) return;
      const from = boxes[i].getBoundingClientRect();
      const x0 = from.right - wr.left, y0 = from.top + from.height / 2 - wr.top;
      const x1 = to.left - wr.left, y1 = to.top + to.height / 2 - wr.top;
      ctx.beginPath();
      ctx.moveTo(x0, y0);
      ctx.bezierCurveTo((x0 + x1) / 2, y0, (x0 + x1) / 2, y1, x1 - 6, y1);
      ctx.stroke();
      ctx.beginPath();
      ctx.moveTo(x1, y1);
      ctx.lineTo(x1 - 7, y1 - 4);
      ctx.lineTo(x1 - 7, y1 + 4);
      ctx.fill();
    });
  });
}

// -- charts ------------------------------------------------------------------------------------
function prepCanvas(cv) {
  const r = window.devicePixelRatio || 1;
  const w = cv.clientWidth || 460, h = cv.clientHeight || 200;
  cv.width = Math.round(w * r);
  cv.height = Math.round(h * r);
  const ctx = cv.getContext("2d");
  ctx.setTransform(r, 0, 0, r, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return { ctx, w, h };
}

function drawChart(id, lines, events, tmax, opts) {
  const cv = document.getElementById(id);
  const { ctx, w, h } = prepCanvas(cv);
  const L = 48, R = 10, T = 8, B = 34;
  let ymax = opts && opts.ymax ? opts.ymax : 0;
  let points = 0;
  lines.forEach((s) => s.v.forEach((v) => {
    if (v !== null && v !== undefined) { ymax = Math.max(ymax, v); points += 1; }
  }));
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  const X = (t) => L + (w - L - R) * (t / tmax);
  const Y = (v) => T + (h - T - B) * (1 - v / ymax);
  ctx.font = "11px sans-serif";
  ctx.strokeStyle = "#e3e6ee";
  ctx.fillStyle = "#667";
  for (let k = 0; k <= 4; k++) {
    const v = (ymax * k) / 4, y = Y(v);
    ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(w - R, y); ctx.stroke();
    ctx.fillText(fmt(v, v < 10 ? 2 : 0), 2, y + 4);
  }
  for (let k = 0; k <= 5; k++) {
    const t = (tmax * k) / 5;
    ctx.fillText(t.toFixed(1) + " s", X(t) - 12, h - B + 14);
  }
  events.forEach((e) => {  // vertical markers: what changed, when
    ctx.strokeStyle = EVENT_COLORS[e.kind] || "#999";
    ctx.setLineDash(e.kind === "decision" ? [2, 3] : [5, 3]);
    ctx.beginPath(); ctx.moveTo(X(e.t), T); ctx.lineTo(X(e.t), h - B); ctx.stroke();
  });
  ctx.setLineDash([]);
  lines.forEach((s, k) => {
    ctx.strokeStyle = s.color || PALETTE[k % PALETTE.length];
    ctx.lineWidth = 1.6;
    ctx.beginPath();
    let started = false, prev = null;
    s.t.forEach((t, i) => {
      const v = s.v[i];
      if (v === null || v === undefined) return;
      if (!started) { ctx.moveTo(X(t), Y(v)); started = true; }
      else if (s.step) { ctx.lineTo(X(t), Y(prev)); ctx.lineTo(X(t), Y(v)); }
      else ctx.lineTo(X(t), Y(v));
      prev = v;
    });
    if (s.step && started) ctx.lineTo(X(tmax), Y(prev));
    ctx.stroke();
    ctx.lineWidth = 1;
  });
  let x = L;  // the legend, under the axis
  lines.forEach((s, k) => {
    ctx.fillStyle = s.color || PALETTE[k % PALETTE.length];
    ctx.fillRect(x, h - 12, 10, 8);
    ctx.fillStyle = "#334";
    ctx.fillText(s.label, x + 13, h - 4);
    x += ctx.measureText(s.label).width + 26;
  });
  if (!points) { ctx.fillStyle = "#99a"; ctx.fillText(opts && opts.empty || "no data yet", L + 8, T + 16); }
  cv.dataset.points = String(points);
}

function seriesOf(state, name, field) {
  const s = state.series[name];
  return { t: s ? s.t : [], v: s ? s[field] : [] };
}

function drawCharts(state, tmax) {
  // checkpoints are marked on the timeline only: one every second would hide the charts' lines
  const ev = state.events.filter((e) => e.kind !== "checkpoint");
  const measured = state.nodes.filter((n) => n.current && n.current.parallelism !== undefined);
  const thr = [];
  state.nodes.forEach((n) => {
    if (n.kind === "source") thr.push({ label: n.name + " out", ...seriesOf(state, n.name, "out_rate") });
    else if (n.kind === "sink") thr.push({ label: n.name + " in", ...seriesOf(state, n.name, "in_rate") });
    else if (measured.includes(n)) thr.push({ label: n.name + " in", ...seriesOf(state, n.name, "in_rate") });
  });
  drawChart("chart-throughput", thr, ev, tmax);
  // parallelism: the step series of each measured operator, extended to now
  drawChart("chart-parallelism", measured.map((n) => ({ label: n.name, step: true,
    ...seriesOf(state, n.name, "parallelism") })), ev, tmax, { empty: "no elastic operator measured" });
  const lat = state.latency;
  drawChart("chart-latency", [{ label: "p50", t: lat.t, v: lat.p50, color: "#3b6fd8" },
    { label: "p99", t: lat.t, v: lat.p99, color: "#d83b3b" }], ev, tmax,
  { empty: state.latency_live ? "no latency measured yet"
    : "latency shows when the run ends (the engine reports it then)" });
  drawChart("chart-busy", measured.map((n) => ({ label: n.name, ...seriesOf(state, n.name, "busy") })),
    ev, tmax, { ymax: 1 });
  drawChart("chart-backlog", measured.map((n) => {
    const b = seriesOf(state, n.name, "backlog");
    const has = b.v.some((v) => v !== null && v !== undefined);
    return has ? { label: n.name + " backlog", ...b }
      : { label: n.name + " congestion", ...seriesOf(state, n.name, "congestion") };
  }), ev, tmax);
}

// -- timeline ----------------------------------------------------------------------------------
function drawTimeline(state, tmax) {
  const { ctx, w, h } = prepCanvas(document.getElementById("timeline-strip"));
  const L = 48, R = 10;
  ctx.strokeStyle = "#bbc";
  ctx.beginPath(); ctx.moveTo(L, h / 2); ctx.lineTo(w - R, h / 2); ctx.stroke();
  state.events.forEach((e) => {
    const x = L + (w - L - R) * (e.t / tmax);
    ctx.fillStyle = EVENT_COLORS[e.kind] || "#999";
    if (e.kind === "checkpoint") {  // a bar from its barrier entering the flow to its commit
      const x0 = L + (w - L - R) * (Math.max(e.t - (e.duration || 0), 0) / tmax);
      ctx.fillRect(x0, h / 2 + 3, Math.max(x - x0, 2), 6);
      return;
    }
    ctx.beginPath(); ctx.arc(x, h / 2, 5, 0, 2 * Math.PI); ctx.fill();
  });
  const ul = document.getElementById("timeline");
  ul.textContent = "";
  if (!state.events.length) ul.appendChild(el("li", "empty", "no reconfiguration or checkpoint yet"));
  state.events.forEach((e) => {
    const li = el("li", "event " + e.kind, `${e.t.toFixed(2)} s · ${e.kind} · ${e.text}`);
    li.dataset.operator = e.operator;
    ul.appendChild(li);
  });
}

// -- the page ----------------------------------------------------------------------------------
function render(state) {
  document.title = `${state.flow} · stretchflow`;
  document.getElementById("flow-name").textContent = state.flow;
  document.getElementById("engine").textContent = `on ${state.engine}`;
  const st = document.getElementById("status");
  st.textContent = state.status;
  st.className = state.status.split(":")[0];
  document.getElementById("elapsed").textContent = `${state.elapsed.toFixed(1)} s`;
  const read = state.nodes.filter((n) => n.kind === "source").reduce((a, n) => a + n.totals.out, 0);
  const written = state.nodes.filter((n) => n.kind === "sink").reduce((a, n) => a + n.totals.in, 0);
  const lat = state.latency_summary || {};
  document.getElementById("totals").textContent = `${fmt(read, 0)} tuples in · `
    + `${fmt(written, 0)} out` + (lat.samples ? ` · latency p50 ${fmt(lat.p50)} ms, p99 ${fmt(lat.p99)} ms` : "");
  let tmax = Math.max(state.elapsed, 1);
  state.events.forEach((e) => { tmax = Math.max(tmax, e.t); });
  drawGraph(state);
  drawCharts(state, tmax);
  drawTimeline(state, tmax);
  if (state.result && state.result.summary) document.getElementById("summary").textContent = state.result.summary;
  updates += 1;
  document.body.dataset.updates = String(updates);
  document.body.dataset.status = state.status;
}

async function poll() {
  try {
    const r = await fetch("/api/state", { cache: "no-store" });
    const state = await r.json();
    if (state.version !== lastVersion) { lastVersion = state.version; render(state); }
    setTimeout(poll, state.status === "running" ? 500 : 2000);
  } catch (e) {  // the run's process ended: keep the last picture, say so
    document.getElementById("status").textContent = "disconnected (the run's process ended)";
    setTimeout(poll, 3000);
  }
}

const embedded = document.getElementById("embedded-state");
if (embedded) render(JSON.parse(embedded.textContent));
else poll();
