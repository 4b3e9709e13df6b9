"""Batches of rows through the ordered engine's line, for flows of Python functions (issue #32).

Tuple at a time, every item of the line is one tuple and each of an O+'s p instances calls
the user's f_MK on every tuple: p times one instance's Python work under the GIL. When the
flow is a chain (:class:`~.ordered_stages.Plan`: one source -> stateless operators and
one-input O+ -> sinks) whose source gives batches (``Source.batches``: a sorted, unpaced
file), and the columnar line (:mod:`.ordered_columnar`) did not take it, the line carries
:class:`~stretchflow.batch.Batch` items ``(last ts, batch)`` of rows instead (JSON Lines
parsed per line, Parquet as rows; Arrow tables only where a stateless operator's columnar
form reads them). The paper's machinery is unchanged; what a unit holds is:

* the **source stage** reads ``n`` tuples' worth of batches per slice (at least one; ``n``
  the scheduler's slice size, §6), a checkpointed run's batches cut at each barrier
  (:meth:`~stretchflow.runtime.checkpoint.Checkpointer.batches`); a latency marker (§7) is a
  watermark at a batch's last timestamp once ``marker_every`` tuples have passed;
* a **stateless stage** keeps its slices, serials and reorder buffer; each batch of a slice
  goes through the operator at once
  (:func:`~stretchflow.operators.stateless.over_batch`: its function over the rows in one
  loop, or its columnar form on the table);
* an **O+ stage** keeps its p entries per hand-over (hybrid or partitioned queue, consecutive
  serials, one unit per entry and instance, the p units merged by timestamp); the p entries
  share the hand-over's Batch objects, so an A+ instance takes a batch through
  ``AggregateInstance.process_shared``: the first instance to reach it computes f_MK on
  every row, each key's group and each instance's part
  (:class:`~stretchflow.operators.row_keys.RowKeys`, left on the batch under the stage's
  lock), and each instance updates its own key groups in one loop -- f_MK once per tuple at
  any p. Any other O+ takes a batch through ``process_rows``. The merged outputs of an entry
  leave as batches of rows (:func:`~.ordered_stages.merge_rows`), so an O+ or a stateless
  operator after it takes them whole too;
* **flow control** counts a queued item (a batch, or a marker) as
  :attr:`~.ordered_stages.StatelessStage.weight` tuples, as the columnar line does, so a
  stage's input holds a few batches, not ``capacity`` of them.

Errors. A user function's error becomes a :class:`~.ordered_stages.Failure` item at its
place in the line (after what the rows before the failing one gave) and the run fails when it
reaches the sinks; so an error of a later stage on an earlier tuple is raised first, as tuple
at a time: a Map failing late in a batch hands on the rows before it, and the O+ after it
failing on one of those wins. An O+ instance that fails or meets a failure stops (its later
units are empty); the p units of an entry are merged by timestamp, so of two instances
failing in one entry the earlier tuple's error reaches the sinks first. A source's error (bad
input) travels the same way, after the rows read before it.

Not on this path (tuple at a time): ``columnar="off"``, a line with a stateful operator, a
flow other than a chain (several sources, joins and other multi-input O+, a node read twice,
sinks on several nodes: their tuples are tagged and merged tuple by tuple), and a source that
gives no batches (paced sources, generators).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

from ..batch import Batch
from ..errors import RunTupleError
from ..eventtime import WATERMARK
from ..io.sources import read_batches
from ..operators.stateless import over_batch
from ..runtime.checkpoint import CheckpointBarrier
from ..runtime.control import Stopped, chained_user_error
from .ordered_stages import (
    END,
    Failure,
    Item,
    OPlusStage,
    Plan,
    SourceStage,
    deposit_many,
)

__all__ = ["decide_rows", "use_rows"]


def decide_rows(plan: Plan, columnar: str) -> Iterator[Batch] | None:
    """The source's batches of rows when the line takes them (see the module doc), else
    None (tuples)."""
    if columnar == "off" or not plan.chain:
        return None
    if any(n.kind == "stateful" for n in plan.ops):
        return None
    tables = any(getattr(n.spec, "batch_fn", None) is not None for n in plan.ops
                 if n.kind == "stateless")
    return read_batches(plan.sources[0].spec, plan.source_batch(), tables)


def use_rows(ex: Any, batches: Iterator[Batch]) -> None:
    """Switches the executor ``ex`` (ordered.py's ``_Executor``, laid out for a chain of
    stateless operators and O+) to batches of rows: the source's slice, the stateless
    stages' apply and the O+ stages' lease take batches (the module doc)."""
    src = ex.stages[0]
    assert isinstance(src, SourceStage)
    if ex.ck is not None:  # barriers between batches, a batch straddling a cut split there
        src.it = ex.ck.batches(ex.plan.sources[0], batches)
    else:
        src.it = ((b.last, b) for b in batches if len(b))
    allowed = max(4, ex.capacity // ex.plan.source_batch())
    weight = math.ceil(ex.capacity / (2 * allowed))
    for st in ex.stages[1:]:
        st.weight = weight
        if isinstance(st, OPlusStage):
            st.batch_outputs = True
            st.done_of = [0] * st.p  # flow control follows the slowest instance
    ex._run_source = lambda task, t0: _run_source(ex, task, t0)
    ex._oplus_items = _oplus_items
    ex._apply = rows_through
    ex.rows = True


def _failure(name: str, ts: Any, payload: Any, e: Exception) -> tuple[Any, Failure]:
    """The item for ``e`` raised by operator ``name`` at ``(ts, payload)`` (a
    :class:`RunTupleError` names its own tuple): the run's error as the tuple path raises
    it, chained to the user's exception."""
    err = chained_user_error(name, ts, payload, e)
    at = e.ts if isinstance(e, RunTupleError) else getattr(err, "ts", ts)
    return (ts if at is None else at), Failure(err)


def _run_source(ex: Any, task: tuple[Any, ...], t0: float) -> None:
    """The source stage's slice on batches of rows (ordered.py's ``_run_source``): ``n``
    tuples' worth of batches, a barrier ending the slice (the source pauses behind it), END
    after the last batch; a source's error as a failure after what was read before it."""
    _, st, n = task
    items: list[Item] = []
    end = paused = False
    tuples = 0
    last = -math.inf
    every, sent, it = st.marker_every, st.wm_sent, st.it
    while tuples < n:
        try:
            ts, b = next(it)
        except StopIteration:
            end = True
            items.append((math.inf, END))
            break
        except Exception as e:  # noqa: BLE001 - bad input: raised once it reaches the sinks
            end = True
            items.append((last, Failure(e)))
            break
        if type(b) is CheckpointBarrier:
            st.epoch = b.epoch
            items.append((ts, b))
            paused = True  # until it reaches the sinks (ordered_checkpoint)
            break
        last = ts
        items.append((ts, b))
        tuples += len(b)
        if every:
            st.since_marker += len(b)
            if st.since_marker >= every:  # §7, at batch granularity
                st.since_marker %= every
                items.append((ts, WATERMARK))
                with st.wm_lock:
                    sent.setdefault(ts, time.perf_counter())
    st.count += tuples
    if last != -math.inf:
        ex.clock.record(last)  # (latency)
    ex._source_done(st, items, end, paused, max(tuples, 1), tuples, t0)


def rows_through(op: Any, items: list[Item], markers: tuple[Any, ...]) -> list[Item]:
    """A stateless stage's slice on the line of rows: each batch through the operator at
    once (a batch left empty is dropped), markers, barriers and failures passed on; a
    failure of the operator ends the slice after the outputs of the rows before it."""
    out: list[Item] = []
    for ts, p in items:
        if type(p) is not Batch:
            out.append((ts, p))
            continue
        try:
            b, err = over_batch(op, p)
        except Stopped:
            raise
        except Exception as e:  # noqa: BLE001 - a columnar form's error names its tuple
            out.append(_failure(op.name, p.first, p.payloads[0], e))
            return out
        if len(b):
            out.append((b.last, b))
        if err is not None:
            out.append((getattr(err, "ts", ts), Failure(err)))
            return out
    return out


def _oplus_items(st: OPlusStage, lease: Any) -> tuple[float, int]:
    """Instance ``lease.bucket`` over the entries of one lease (ordered.py's
    ``_oplus_items``): one unit per entry; statistics in tuples, 1/p of each input per
    instance; flow control's progress in entries, per instance."""
    j = lease.bucket
    n_in = n_out = entries = 0
    units: list[tuple[int, Any]] = []
    for serial, batch in lease.items:
        out, got, tuples = _unit(st, j, batch)
        units.append((serial, out))
        n_out += got
        n_in += tuples
        entries += len(batch)
    deposit_many(st, units)
    assert st.done_of is not None
    st.done_of[j] += entries  # only this worker holds bucket j (the queue's lease)
    return n_in / st.p, n_out


def _unit(st: OPlusStage, j: int, batch: list[Item]
          ) -> tuple[tuple[list[Item], list[Item]], int, int]:
    """Instance j over one entry: its unit -- its outputs, ts-sorted, and the control items
    it forwards (instance 0: watermarks, barriers, failures and END, after what came before
    them, Alg. 2; :func:`~.ordered_stages.merge_rows` puts them in place) -- its number of
    outputs and the tuples it went through. An instance that fails, or meets a
    failure, stops: its unit ends with the failure and its later units are empty."""
    if st.halted[j]:
        return ([], []), 0, 0
    inst = st.instances[j]
    shared = getattr(inst, "process_shared", None)
    lock = st.rows_lock
    o: list[Item] = []
    marks: list[Item] = []  # the control items it forwards or raises, in order
    n_out = tuples = 0
    for ts, p in batch:
        tp = type(p)
        failed = None  # this instance's own failure, as an item
        try:
            if tp is Batch:
                if shared is not None:
                    shared(p, lock)  # f_MK once per row for all instances (RowKeys)
                else:
                    inst.process_rows(p.ts_list(), p.payloads, 0)
                tuples += len(p)
            elif p is WATERMARK:
                inst.advance(ts)
            elif p is END:
                inst.finish()
            elif tp is not CheckpointBarrier and tp is not Failure:  # a single tuple
                inst.process(ts, p, 0)
                tuples += 1
        except Stopped:
            raise
        except Exception as e:  # noqa: BLE001 - travels as a failure (the module doc)
            if tp is Batch:
                failed = _failure(st.op.name, p.first, p.payloads[0], e)
            else:
                failed = _failure(st.op.name, None if p is END else ts, p, e)
        if inst.out:
            got = inst.take()
            n_out += len(got)
            o.extend(got)
        if failed is not None:
            marks.append(failed if failed[0] is not None else (ts, failed[1]))
            st.halted[j] = True
            break
        if j == 0 and tp is not Batch:
            marks.append((ts, p))  # forwarded after what it released or closed
        if tp is Failure:
            st.halted[j] = True
            break
    return (o, marks), n_out, tuples
