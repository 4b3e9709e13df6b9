"""Whole Arrow batches through the ordered engine's line (issues #16, #31).

When the flow is one file source -> stateless operators and A+ with columnar forms
(``Aggregate.columnar``) -> sinks (a chain, :class:`~.ordered_stages.Plan`; hot items' two
A+ included) and the source gives batches (``Source.batches``: a sorted, unpaced file), the
line carries :class:`~stretchflow.batch.Batch` items ``(last ts, batch)`` instead of tuples:

* the **source stage** reads ``n`` tuples' worth of batches per slice (at least one batch;
  ``n`` is the scheduler's slice size, §6) and follows each batch with the watermark at its
  last timestamp -- the implicit watermark, a no-op for the operator, which lets the sinks
  write the windows that batch closed at once. A latency marker (§7) is that watermark, taken
  once every ``marker_every`` tuples have passed (so at batch granularity);
* the **O+ stage** keeps the paper's machinery unchanged: every hand-over enters the hybrid
  or partitioned queue once per instance (p entries, consecutive serial numbers), each
  instance sends one unit per entry, the reorder buffer releases the p units of an entry
  together and :func:`~.ordered_stages.oplus_emitter` merges them by timestamp. Instance j is
  a :class:`~stretchflow.operators.columnar_shared.ColumnarVSNInstance` over one
  :class:`~stretchflow.operators.columnar_shared.ColumnarShared` σ -- the kernels VSN runs:
  each batch is exploded by f_MK's columnar form and summed per (slice, key) once, by the
  first instance to reach it (the others find it done, or sum later batches meanwhile), and
  instance j combines the closed windows over the key groups it owns, ``g % p == j``, with
  f_O's columnar form. Windows leave as batches, one per window and instance; the merge keeps
  them in timestamp order (before another A+ stage, each run of them between watermarks as
  one batch: :func:`~.ordered_stages.joined_windows`) and the sinks write them with
  ``write_batch``;
* a **stateless stage** keeps its slices, serials and reorder buffer; each batch of a slice
  goes through the operator's columnar form on its table (``batch_fn``: a filter's kept rows,
  a projection's columns; :func:`through_batches`), a lambda tuple by tuple on its payloads;
  an **A+ after an A+** takes the first's merged window batches as its input batches, its
  watermarks the ones the first forwards (f_MK's explode then runs in the O+'s instances,
  not in the source stage, as for an A+ after a stateless stage);
* **flow control** counts an entry (a batch, or its watermark) as ``capacity / (2 max(4,
  capacity // rows))`` (:attr:`~.ordered_stages.OPlusStage.weight`; ``rows``, the tuples of
  a source batch: :func:`~.plan.columnar_batch`), so the stage's input holds a few
  batches, as VSN's ESG_in of batches does, not ``capacity``; it follows the slowest
  instance (:attr:`~.ordered_stages.OPlusStage.done_of`), so a lagging instance holds a few
  batches alive, not a ring's worth. The scheduler's statistics of both
  stages count tuples, as on the tuple path.

Errors: a batch f_MK's columnar form refuses is summed tuple at a time in the same σ (f_MK and
f_U per tuple), so a failing tuple is named as the reference names it; every instance reads
every batch in order, so the first failing batch fails the run first.

Not on this path (tuple at a time; ``extra["columnar_fallback"]`` says why): ``columnar="off"``,
checkpoints (the partials are not snapshotted), a source that gives no batches, a stateful
operator or an A+ without columnar forms on the line, and any flow other than a line (several
sources, a node read twice, sinks on several nodes).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

from ..batch import Batch, prefer_system_allocator
from ..eventtime import WATERMARK
from ..operators.stateless import through_batch
from ..runtime.control import raise_user_error
from .ordered_stages import (
    END,
    Item,
    OPlusStage,
    Plan,
    SourceStage,
    StatelessStage,
    deposit_many,
)

__all__ = ["decide", "paths_extra", "use_batches"]


def decide(plan: Plan, columnar: str, checkpointing: bool) -> Iterator[Batch] | str | None:
    """The source's batches when the line takes the columnar path, else why not (a string),
    or None when no O+ of the flow has columnar forms (nothing to fall back from)."""
    if not any(n.kind == "oplus" and getattr(n.spec, "columnar", False) for n in plan.ops):
        return None
    if columnar == "off":
        return "columnar='off'"
    if checkpointing:
        return "a checkpointed run: the partials are not snapshotted"
    if not plan.chain:
        return ("a flow other than one line: one source -> operators, each read by the next "
                "only -> sinks on the last")
    for node in plan.ops:
        if node.kind == "stateful":
            return f"the stateful operator {node.name!r} takes tuples"
        if node.kind == "oplus" and not getattr(node.spec, "columnar", False):
            return f"the O+ {node.name!r} has no columnar forms"
    batches = getattr(plan.sources[0].spec, "batches", None)
    # read at run time: tests make batches small through pump's sizes
    it = batches(plan.source_batch()) if batches is not None else None
    if it is None:
        return "a source that gives no batches (not a sorted, unpaced file)"
    return it


def use_batches(ex: Any, batches: Iterator[Batch], key_groups: int | None) -> None:
    """Switches the executor ``ex`` (ordered.py's ``_Executor``, laid out for a line source
    -> stateless operators and A+ -> sinks) to batches: each O+'s instances share a columnar
    σ, the stateless stages take batches (their columnar form on the table), and the
    source's slice, the O+'s lease and the sinks' flush take batches (the module doc)."""
    from ..operators.columnar_shared import ColumnarShared, ColumnarVSNInstance

    prefer_system_allocator()
    src = ex.stages[0]
    assert isinstance(src, SourceStage)
    # a batch is two entries (itself and its watermark): the input holds about max(4,
    # capacity // rows) batches of a source's rows, as VSN's ESG_in of batches
    allowed = max(4, ex.capacity // ex.plan.source_batch())
    shareds = []
    for k, st in enumerate(ex.stages[1:], 1):
        if not isinstance(st, OPlusStage):
            continue
        p, op = st.p, st.op
        # one instance owning everything needs no key groups (no hashing of keys at all)
        groups = key_groups if key_groups is not None else (1 if p == 1 else 16 * p)
        shared = ColumnarShared(op, groups)
        assign = None if p == 1 else [g % p for g in range(groups)]
        st.instances = [ColumnarVSNInstance(op, shared, j, assign, connected=True)
                        for j in range(p)]
        # an A+ after it (hot items' arg_max) takes its windows several a batch (sinks
        # keep one window a batch: their flush counts batches)
        st.join_windows = k + 1 < len(ex.stages) and isinstance(ex.stages[k + 1], OPlusStage)
        st.weight = math.ceil(ex.capacity / (2 * allowed))
        st.done_of = [0] * p  # flow control follows the slowest instance
        ex.ctl.on_abort(lambda _e, sh=shared: sh.stop())  # nobody waits for a batch another sums
        shareds.append(shared)
    first = ex.stages[1]
    if isinstance(first, OPlusStage):
        # f_MK's explode in the source stage's slices (operators/columnar.explode_ahead): the
        # O+ stage's instances then only sum and combine, and the two stages share the work
        from ..operators.columnar import explode_ahead

        src.it = explode_ahead(first.op, iter(batches))
        offer = shareds[0].offer  # the source's batches are the first O+'s ESG_in
    else:  # stateless stages first: the O+ reads their batches, it explodes them itself
        src.it = iter(batches)
        offer = None
    # the steps that differ from the tuple path; everything else (queues, serials, reorder
    # buffers, scheduler, merge, the sinks' drains, which take batches) is the executor's own
    ex._run_source = lambda task, t0: _run_source(ex, offer, task, t0)
    ex._oplus_items = _oplus_items
    ex._apply = through_batches


def through_batches(op: Any, items: list[Item], markers: tuple[Any, ...]) -> list[Item]:
    """A stateless stage's slice on the columnar line: each batch through the operator
    (:func:`~stretchflow.operators.stateless.through_batch`: its columnar form on the table),
    watermarks and END passed on; a batch left empty is dropped (its watermark follows)."""
    out: list[Item] = []
    for ts, p in items:
        if type(p) is Batch:
            b = through_batch(op, p)
            if len(b):
                out.append((b.last, b))
        else:
            out.append((ts, p))
    return out


def _run_source(ex: Any, offer: Any, task: tuple[Any, ...], t0: float) -> None:
    """The source stage's slice on batches (ordered.py's ``_run_source``): ``n`` tuples'
    worth of batches, each followed by its watermark, END after the last."""
    _, st, n = task
    items: list[Item] = []
    fresh: list[Batch] = []
    end = False
    tuples = 0
    every, sent, it = st.marker_every, st.wm_sent, st.it
    while tuples < n:
        try:
            b = next(it)
        except StopIteration:
            end = True
            break
        if not len(b):
            continue
        last = b.last
        fresh.append(b)
        items.append((last, b))
        items.append((last, WATERMARK))
        tuples += len(b)
        if every:
            st.since_marker += len(b)
            if st.since_marker >= every:
                st.since_marker %= every
                with st.wm_lock:
                    sent.setdefault(last, time.perf_counter())
    st.count += tuples
    if fresh:
        ex.clock.record(fresh[-1].last)  # (latency)
    if end:
        items.append((math.inf, END))
    dt = time.perf_counter() - t0
    with ex.cond:
        if end:
            st.exhausted = True
    if offer is not None:  # an instance waiting for a batch another sums may sum these
        offer(fresh)
    ex._push(0, items)
    with ex.cond:
        st.busy = False  # only now: the next slice's items must follow these
    ex._finish_slice(st, max(tuples, 1), tuples, dt)


def _oplus_items(st: OPlusStage, lease: Any) -> tuple[float, int]:
    """Instance ``lease.bucket`` over the entries of one lease: one unit per entry (its
    windows as ``(right, batch)`` items, ts-sorted; instance 0 forwards the watermarks and
    END after what they closed, Alg. 2); statistics in tuples, 1/p of each input per
    instance (as ordered.py's ``_oplus_items``)."""
    j = lease.bucket
    inst = st.instances[j]
    n_in = n_out = entries = 0
    units: list[tuple[int, Any]] = []
    for serial, batch in lease.items:
        out: list[Item] = []
        ts = p = None
        try:
            for ts, p in batch:
                if type(p) is Batch:
                    inst.process_batch(p)
                    n_in += len(p)
                elif p is WATERMARK:
                    inst.advance(ts)
                else:  # END
                    inst.finish()
                if inst.out:
                    got = inst.take()
                    n_out += sum(len(b) for _, b in got)
                    out.extend(got)
                if j == 0 and type(p) is not Batch:
                    out.append((ts, p))
        except Exception as e:
            # a RunTupleError (f_MK or f_U on the tuple path of a batch) names its tuple
            if type(p) is Batch:
                ts, p = p.first, p.payloads[0]
            raise_user_error(st.op.name, None if p is END else ts, p, e)
        units.append((serial, out))
        entries += len(batch)
    deposit_many(st, units)
    assert st.done_of is not None
    st.done_of[j] += entries  # only this worker holds bucket j (the queue's lease)
    return n_in / st.p, n_out


def paths_extra(stages: list[Any], why: str | None) -> dict[str, Any]:
    """The run's ``paths`` (each O+'s: ``columnar``, or its instances' tuple path --
    ``sliced``, ``runs``, ``tuple``; on the columnar line each stateless operator's too:
    ``columnar`` on its table through ``batch_fn``, ``tuple`` tuple by tuple on the batch)
    and, when an O+ with columnar forms took tuples, ``columnar_fallback`` with the reason."""
    ops = [st for st in stages if isinstance(st, OPlusStage)]
    paths = {st.name: getattr(st.instances[0], "path", "tuple") for st in ops}
    out: dict[str, Any] = {"paths": paths}
    if any(p == "columnar" for p in paths.values()):
        paths.update({st.name: "columnar" if getattr(st.op, "batch_fn", None) is not None
                      else "tuple" for st in stages if isinstance(st, StatelessStage)})
    if why is not None:
        out["columnar_fallback"] = {st.name: why for st in ops
                                    if getattr(st.op, "columnar", False)}
    return out
