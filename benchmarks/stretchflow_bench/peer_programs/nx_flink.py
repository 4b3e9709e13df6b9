"""NEXMark Q0–Q8 as stretchflow defines them (docs/nexmark.md), run by Flink SQL entirely in
the JVM: PyFlink's ``TableEnvironment`` only submits the statements; every operator is a
built-in (no Python function of any kind), reading the JSON Lines files with the
``filesystem``/``json`` connector and writing with the ``filesystem``/``json`` sink.

``python nx_flink.py QUERY DATA_DIR OUTPUT [format=jsonl] [parallelism=2] [window=10000]
[slide=2000]``

Measures the wall time from just before the job is submitted (the ``TableEnvironment`` and
its mini-cluster configuration are start-up) until OUTPUT is closed: Flink's sink writes a
directory of part files next to OUTPUT, concatenated into OUTPUT once the job has finished
(part of the measured time). The last stdout line is ``{"elapsed_s", "rows_out",
"settings"}``; a query that cannot be said exactly prints ``{"unsupported": ...}`` and exits 3.

Streaming mode, event time: each source's ``rt AS TO_TIMESTAMP_LTZ(ts, 3)`` with
``WATERMARK FOR rt AS rt`` (the files are sorted by ``ts``; a row at the watermark is not
late), session time zone UTC, so Flink's windows are stretchflow's: ``[l, l + W)`` with ``l``
a multiple of ``W`` since the epoch. A window bound (``TIMESTAMP(3)``) becomes epoch ms as
``CAST(TIMESTAMPDIFF(SECOND, epoch, t) AS BIGINT) * 1000 + EXTRACT(MILLISECOND FROM t)``
(``TIMESTAMPDIFF`` is an ``INT``). Each query, and its output ``ts``:

* Q0/Q1/Q2: a projection (Q1 ``CAST(price AS DOUBLE) * 0.908``, a double as stretchflow's,
  not Flink NEXMark's ``DECIMAL``), Q2 with ``MOD(auction, 123) = 0``; at the bid's ts. No
  watermark (no event time is needed).
* Q3: a window join of the filtered persons and auctions, both ``TUMBLE``d, on ``id =
  seller`` and equal windows; at the window's end.
* Q4: the auctions that close in the window they open in (``expires < date_time -
  MOD(date_time, W) + W``) interval-joined with the bids ``B.rt BETWEEN A.rt AND A.rt + W``
  (every bid that can count lies there) and ``B.date_time <= A.expires``; a ``TUMBLE``
  aggregate on the bid's time (the auction's window: all its bids lie in it) takes the
  winning ``MAX(price)`` per auction, and a cascaded ``TUMBLE`` on that aggregate's
  ``window_time`` the ``AVG`` (of doubles) per category; at the window's start + 3 W.
* Q5: a ``HOP`` aggregate counts the bids per auction; each window's largest count (a
  window aggregate of the counts) is window-joined back on the window and ``num = top``, so
  ties are kept; at the window's end + the slide. Flink's window Top-N would be one operator,
  but it has ``ROW_NUMBER`` only ("RANK() function is not supported on Window TopN"), which
  drops ties.
* Q6: ``AVG(final) OVER (PARTITION BY seller ORDER BY t ROWS BETWEEN 9 PRECEDING AND CURRENT
  ROW)`` needs ``t``, a time attribute, to order a seller's closed auctions by window, expiry
  and id with no ties: Flink's ``OVER`` takes rows of equal time in arrival order, and an
  ``ORDER BY`` in a subquery is dropped by the planner. So Q6 runs on a scaled time line
  (:func:`q6_scale`, :func:`_q6`): every time is ``(t - base) * K`` (1/K ms units), and an
  auction closing in its window gets the time ``(expires - base) * K + (id - first id)``,
  unique and in closing order; an interval join takes its bids (from opening to expiry), a
  ``TUMBLE`` of one scaled ms on that time (one auction per window) their ``MAX``, whose
  ``window_time`` is the ``OVER``'s order; at the window's start + 2 W + 1 ms. The base,
  first id and K come from the first and last lines of the input files (a few KB read before
  the job); when no K fits (ids spanning more than K, or a span too long for
  ``TIMESTAMP_LTZ``), the query reports itself unsupported.
* Q7: each window's highest price (a local-global window aggregate) window-joined back with
  the ``TUMBLE``d bids on the window and ``price = top`` (ties kept; no ``RANK`` in window
  Top-N); at the window's end.
* Q8: a window semi join: the ``TUMBLE``d persons whose ``id IN`` the same window's auction
  sellers, so once per person and window; at the window's start + 2 W.

Each input file is one split (the local file system reports a file as one block), so one
source instance reads and parses each file, in order, and its watermark never goes back.

Settings: parallelism 2 (``parallelism.default``), ``pipeline.object-reuse`` (no copies
between chained operators); the window aggregates are split into local and global phases by
the planner's default (``table.optimizer.agg-phase-strategy`` AUTO), which matters for Q5's
hot auction and for the single-key maxima of Q5 and Q7.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tempfile
import time

QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8")

#: columns each source declares (the json format reads only these fields of a line)
BID = "ts BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, date_time BIGINT, extra STRING"
PERSON = "ts BIGINT, id BIGINT, name STRING, city STRING, state STRING, date_time BIGINT"
AUCTION = ("ts BIGINT, id BIGINT, date_time BIGINT, expires BIGINT, seller BIGINT, "
           "category BIGINT")

#: each query's sink columns (``ts`` is stretchflow's output timestamp)
SINKS = {
    "q0": "ts BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, date_time BIGINT, "
          "extra STRING",
    "q1": "ts BIGINT, auction BIGINT, bidder BIGINT, price DOUBLE, date_time BIGINT, "
          "extra STRING",
    "q2": "ts BIGINT, auction BIGINT, price BIGINT",
    "q3": "ts BIGINT, name STRING, city STRING, state STRING, id BIGINT",
    "q4": "ts BIGINT, category BIGINT, `avg` DOUBLE",
    "q5": "ts BIGINT, auction BIGINT, num BIGINT",
    "q6": "ts BIGINT, seller BIGINT, `avg` DOUBLE",
    "q7": "ts BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, date_time BIGINT, "
          "extra STRING",
    "q8": "ts BIGINT, id BIGINT, name STRING, starttime BIGINT",
}


class Unsupported(Exception):
    """A query that cannot be said exactly for these inputs (the message says why)."""


def _interval(ms: int) -> str:
    """SQL: an interval of ``ms`` ms (Flink's planner takes at most 3 digits of days)."""
    s, frac = divmod(ms, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    d, h = divmod(h, 24)
    return f"INTERVAL '{d} {h:02d}:{m:02d}:{s:02d}.{frac:03d}' DAY(3) TO SECOND(3)"


def _ms(t: str) -> str:
    """SQL: the epoch milliseconds of ``TIMESTAMP(3)`` ``t`` (the session zone is UTC)."""
    return (f"(CAST(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', {t}) AS BIGINT)"
            " * 1000"
            f" + EXTRACT(MILLISECOND FROM {t}))")


def _source(name: str, cols: str, path: str, watermark: bool = True) -> str:
    time_cols = (", rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt"
                 if watermark else "")
    return (f"CREATE TEMPORARY TABLE {name} ({cols}{time_cols}) WITH ("
            f"'connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')")


def _winning(w: int) -> list[str]:
    """Q4's and Q6's views: ``closing`` (the auctions that close in the window they open in),
    their bids from opening to expiry (``auction_bids``, an interval join: such a bid is at
    most W after the auction opened), and ``winning``, the highest of them per auction, a
    ``TUMBLE`` aggregate on the bid's time (all of an auction's bids fall in its window)."""
    iw = _interval(w)
    return [
        f"""CREATE TEMPORARY VIEW closing AS
            SELECT id, seller, category, expires, rt FROM auctions
            WHERE expires < date_time - MOD(date_time, {w}) + {w}""",
        f"""CREATE TEMPORARY VIEW auction_bids AS
            SELECT A.id, A.seller, A.category, A.expires, B.price, B.rt
            FROM closing A JOIN bids B
            ON A.id = B.auction AND B.rt BETWEEN A.rt AND A.rt + {iw}
               AND B.date_time <= A.expires""",
        f"""CREATE TEMPORARY VIEW winning AS
            SELECT window_time, id, category, MAX(price) AS final
            FROM TABLE(TUMBLE(TABLE auction_bids, DESCRIPTOR(rt), {iw}))
            GROUP BY window_start, window_end, window_time, id, category""",
    ]


#: the largest epoch ms a ``TIMESTAMP_LTZ(3)`` holds (9999-12-31): ``TO_TIMESTAMP_LTZ`` is NULL
#: beyond it
MAX_LTZ_MS = 253402300799999
#: the largest interval literal Flink's planner takes (``DAY(3)``: 999 days), in ms
MAX_INTERVAL_MS = 999 * 86400000


def _edge_lines(path: str) -> tuple[dict, dict]:
    """The first and the last row of JSON Lines file ``path`` (reads a few KB, not the file)."""
    with open(path, "rb") as f:
        first = json.loads(f.readline())
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - (1 << 16)))
        last = json.loads(f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1])
    return first, last


def q6_scale(auctions: str, bids: str, w: int) -> tuple[int, int, int] | str:
    """Q6's time line: (base ms, first auction id, K) with event time ``t`` at ``(t - base) *
    K`` (in units of 1/K ms), so that an auction's closing time ``(expires - base) * K + (id -
    first id)`` orders a seller's closed auctions by expiry, then id, with no two equal
    (Flink's time attributes are whole ms); or why no K fits. K is the largest power of two
    whose scaled times stay within ``TIMESTAMP_LTZ`` and whose scaled window is an interval
    literal Flink takes; it must exceed the auctions' id range (NEXMark numbers auctions in
    the order they are created, so the file's first and last ids bound it)."""
    (fa, la), (fb, lb) = _edge_lines(auctions), _edge_lines(bids)
    base = min(fa["ts"], fb["ts"])
    span = max(la["ts"], lb["ts"]) + w - base  # a closing auction expires within W
    k = 1
    while (2 * k) * (span + 1) <= MAX_LTZ_MS and (2 * k) * w <= MAX_INTERVAL_MS:
        k *= 2
    if la["id"] - fa["id"] >= k:
        return (f"q6: the ids span {la['id'] - fa['id']}, more than the {k} steps a ms can "
                "be scaled to for this event-time span")
    return base, fa["id"], k


def _q6(auctions: str, bids: str, w: int, scale: tuple[int, int, int]) -> list[str]:
    """Q6 on the scaled time line of :func:`q6_scale`: ``OVER ... ORDER BY`` a time attribute
    with no ties, so each seller's last 10 are taken in stretchflow's closing order.

    With ``s(t) = (t - base) * K``, an auction's time ``ck`` is ``s(expires) + id - first
    id`` when it closes in the window it opens in (every other auction is dropped; its ``ck``
    is ``s(date_time)``, which only keeps the watermark bounded); ``ck`` is less than
    ``s(date_time + W)``, so ``ck - W K`` is a watermark no later auction is behind. A bid's
    time is ``s(ts)``. The interval join takes each closing auction's bids from its opening to
    its expiry (``B.bt`` within ``W K`` before ``A.ck``: a bid counts only if it is no later
    than the expiry and no earlier than the opening, which is at most W before), keeping
    ``ck`` as a time attribute; a ``TUMBLE`` of one (scaled) ms on ``ck`` holds exactly one
    auction, so its ``MAX(price)`` is the winning bid and its ``window_time`` is ``ck`` again,
    which the ``OVER`` orders by."""
    base, id0, k = scale
    wk = _interval(w * k)

    def closes(a: str = "") -> str:
        return f"{a}expires < {a}date_time - MOD({a}date_time, {w}) + {w}"

    return [
        f"""CREATE TEMPORARY TABLE auctions (id BIGINT, date_time BIGINT, expires BIGINT,
              seller BIGINT,
              ck AS TO_TIMESTAMP_LTZ(CASE WHEN {closes()} THEN (expires - {base}) * {k} + id - {id0}
                                          ELSE (date_time - {base}) * {k} END, 3),
              WATERMARK FOR ck AS ck - {wk})
            WITH ('connector' = 'filesystem', 'path' = '{auctions}', 'format' = 'json')""",
        f"""CREATE TEMPORARY TABLE bids (ts BIGINT, auction BIGINT, price BIGINT,
              date_time BIGINT, bt AS TO_TIMESTAMP_LTZ((ts - {base}) * {k}, 3),
              WATERMARK FOR bt AS bt)
            WITH ('connector' = 'filesystem', 'path' = '{bids}', 'format' = 'json')""",
        f"""CREATE TEMPORARY VIEW auction_bids AS
            SELECT A.id, A.seller, A.expires, A.ck, B.price
            FROM auctions A JOIN bids B
            ON A.id = B.auction AND B.bt BETWEEN A.ck - {wk} AND A.ck
               AND B.date_time BETWEEN A.date_time AND A.expires
            WHERE {closes('A.')}""",
        """CREATE TEMPORARY VIEW winning AS
            SELECT window_time, seller, expires, MAX(price) AS final
            FROM TABLE(TUMBLE(TABLE auction_bids, DESCRIPTOR(ck), INTERVAL '0.001' SECOND(3)))
            GROUP BY window_start, window_end, window_time, id, seller, expires""",
        f"""INSERT INTO nx_out
            SELECT expires - MOD(expires, {w}) + {2 * w + 1}, seller,
                   AVG(CAST(final AS DOUBLE)) OVER (
                     PARTITION BY seller ORDER BY window_time
                     ROWS BETWEEN 9 PRECEDING AND CURRENT ROW)
            FROM winning""",
    ]


def statements(query: str, data: str, sink: str, w: int, slide: int) -> list[str]:
    """The DDL and the ``INSERT INTO nx_out`` of ``query``."""
    bids = os.path.join(data, "nx-bids.jsonl")
    persons = os.path.join(data, "nx-persons.jsonl")
    auctions = os.path.join(data, "nx-auctions.jsonl")
    iw = _interval(w)
    out = [f"CREATE TEMPORARY TABLE nx_out ({SINKS[query]}) WITH ('connector' = 'filesystem', "
           f"'path' = '{sink}', 'format' = 'json')"]
    if query in ("q0", "q1", "q2"):
        out.append(_source("bids", BID, bids, watermark=False))  # no event time needed
        price = "CAST(price AS DOUBLE) * 0.908" if query == "q1" else "price"
        if query == "q2":
            out.append("INSERT INTO nx_out SELECT ts, auction, price FROM bids "
                       "WHERE MOD(auction, 123) = 0")
        else:
            out.append(f"INSERT INTO nx_out SELECT ts, auction, bidder, {price}, date_time, "
                       "extra FROM bids")
    elif query == "q3":
        out += [_source("persons", PERSON, persons), _source("auctions", AUCTION, auctions),
                f"""INSERT INTO nx_out
                SELECT {_ms('P.window_end')}, P.name, P.city, P.state, A.id
                FROM (SELECT * FROM TABLE(TUMBLE(TABLE persons, DESCRIPTOR(rt), {iw}))
                      WHERE state IN ('OR', 'ID', 'CA')) P
                JOIN (SELECT * FROM TABLE(TUMBLE(TABLE auctions, DESCRIPTOR(rt), {iw}))
                      WHERE category = 10) A
                ON P.id = A.seller AND P.window_start = A.window_start
                   AND P.window_end = A.window_end"""]
    elif query == "q4":
        out += [_source("auctions", AUCTION, auctions), _source("bids", BID, bids),
                *_winning(w),
                f"""INSERT INTO nx_out
                SELECT {_ms('window_start')} + {3 * w}, category,
                       AVG(CAST(final AS DOUBLE))
                FROM TABLE(TUMBLE(TABLE winning, DESCRIPTOR(window_time), {iw}))
                GROUP BY window_start, window_end, category"""]
    elif query == "q5":
        out += [_source("bids", BID, bids),
                f"""CREATE TEMPORARY VIEW counts AS
                SELECT window_start, window_end, auction, COUNT(*) AS num
                FROM TABLE(HOP(TABLE bids, DESCRIPTOR(rt), {_interval(slide)}, {iw}))
                GROUP BY window_start, window_end, auction""",
                # Flink's window Top-N has ROW_NUMBER only (no RANK: ties would be lost), so
                # each window's largest count is a window aggregate on the counts, joined
                # back on the window and the count (a window join: the planner reuses the
                # counting for both sides)
                """CREATE TEMPORARY VIEW maxima AS
                SELECT window_start, window_end, MAX(num) AS top
                FROM counts GROUP BY window_start, window_end""",
                f"""INSERT INTO nx_out
                SELECT {_ms('C.window_end')} + {slide}, C.auction, C.num
                FROM counts C JOIN maxima M
                ON C.window_start = M.window_start AND C.window_end = M.window_end
                   AND C.num = M.top"""]
    elif query == "q6":
        scale = q6_scale(auctions, bids, w)
        if isinstance(scale, str):
            raise Unsupported(scale)
        out += _q6(auctions, bids, w, scale)
    elif query == "q7":
        # as Q5: the window's highest price (a window aggregate, local-global) joined back
        # with the window's bids on the window and the price (no RANK in window Top-N)
        out += [_source("bids", BID, bids),
                f"""CREATE TEMPORARY VIEW windowed AS
                SELECT * FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(rt), {iw}))""",
                """CREATE TEMPORARY VIEW maxima AS
                SELECT window_start, window_end, MAX(price) AS top
                FROM windowed GROUP BY window_start, window_end""",
                f"""INSERT INTO nx_out
                SELECT {_ms('B.window_end')}, B.auction, B.bidder, B.price, B.date_time,
                       B.extra
                FROM windowed B JOIN maxima M
                ON B.window_start = M.window_start AND B.window_end = M.window_end
                   AND B.price = M.top"""]
    elif query == "q8":
        out += [_source("persons", PERSON, persons), _source("auctions", AUCTION, auctions),
                f"""INSERT INTO nx_out
                SELECT {_ms('P.window_start')} + {2 * w}, P.id, P.name,
                       {_ms('P.window_start')}
                FROM (SELECT * FROM TABLE(TUMBLE(TABLE persons, DESCRIPTOR(rt), {iw}))) P
                WHERE P.id IN (
                  SELECT A.seller
                  FROM (SELECT * FROM TABLE(TUMBLE(TABLE auctions, DESCRIPTOR(rt), {iw}))) A
                  WHERE P.window_start = A.window_start AND P.window_end = A.window_end)"""]
    return out


def _concatenate(parts: str, output: str) -> int:
    """Every part file under ``parts`` (Flink names them ``part-*``; a file still in progress
    when a bounded streaming job ends starts with a dot) appended to ``output``; the rows."""
    rows = 0
    files = sorted(f for f in glob.glob(os.path.join(parts, "**", "*"), recursive=True)
                   + glob.glob(os.path.join(parts, "**", ".*"), recursive=True)
                   if os.path.isfile(f) and not f.endswith(".crc"))
    with open(output, "wb") as out:
        for f in files:
            with open(f, "rb") as src:
                while chunk := src.read(1 << 22):
                    rows += chunk.count(b"\n")
                    out.write(chunk)
    return rows


def main(argv: list[str]) -> int:
    query, data, output, *rest = argv
    kw = dict(a.split("=", 1) for a in rest)
    fmt = kw.pop("format", "jsonl")
    parallelism = int(kw.pop("parallelism", "2"))
    w = int(kw.pop("window", "10000"))
    slide = int(kw.pop("slide", "2000"))
    explain = kw.pop("explain", "0") == "1"
    if kw:
        raise SystemExit(f"nx_flink: unknown parameters {sorted(kw)}")
    if query not in QUERIES:
        raise SystemExit(f"nx_flink: unknown query {query!r}")
    if fmt != "jsonl":
        print(json.dumps({"unsupported": f"format={fmt}: this PyFlink has no Parquet jar; "
                          "only jsonl"}))
        return 3

    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    settings = {
        "parallelism.default": str(parallelism),
        "table.local-time-zone": "UTC",
        # rows are not kept by reference between chained operators: copying them is waste
        "pipeline.object-reuse": "true",
    }
    for k, v in settings.items():
        conf.set(k, v)
    parts = tempfile.mkdtemp(prefix=f".nx-flink-{query}-",
                             dir=os.path.dirname(os.path.abspath(output)))
    try:
        try:
            stmts = statements(query, data, parts, w, slide)
        except Unsupported as e:
            print(json.dumps({"unsupported": str(e)}))
            return 3
        for s in stmts[:-1]:
            env.execute_sql(s)
        if explain:
            print(env.explain_sql(stmts[-1]), file=sys.stderr)
        t0 = time.perf_counter()
        env.execute_sql(stmts[-1]).wait()
        rows = _concatenate(parts, output)
        elapsed = time.perf_counter() - t0
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    print(json.dumps({"elapsed_s": elapsed, "rows_out": rows,
                      "settings": {"query": query, "format": fmt, "window": w,
                                   "slide": slide, **settings}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
