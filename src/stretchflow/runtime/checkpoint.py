"""Checkpoints and resume (issue #17): consistent cuts taken with barriers, engine-neutral.

A checkpoint is the cut "every input tuple with ts <= T" (asynchronous barrier snapshotting,
Carbone et al. 2015, on the engine's own control tuples). Every source is timestamp-sorted,
so the cut needs no coordination with the data: :class:`Cuts` picks T as the latest
timestamp any source has read when ``--checkpoint-every`` is due (N input tuples or S seconds),
and each source (:meth:`Checkpointer.source`) puts the control tuple ``(T + 0.5,
CheckpointBarrier(e, T))`` after its last tuple with ts <= T, before its first one > T: no
source has read past T when T is chosen, so none is too late. The ``+ 0.5`` is the barrier's
place in every timestamp merge: after all tuples at T of every input, before any later one; so
an operator reading several inputs through a merge has processed exactly the tuples <= T when
the first barrier of epoch e reaches it, whatever input it came on (an input that has ended
sends none). There the operator advances its watermark to T (every later tuple is > T, so
what closes at T is emitted before the barrier and everything after the barrier is > T:
downstream merges see the barrier in place), snapshots its state and forwards the barrier.

The sink side (:meth:`Checkpointer.drain`) holds each sink's output as a part directory in the
checkpoint directory (``DIR/output-J/``, :class:`~stretchflow.io.parts.PartWriter`, parts
named by epoch): on barrier e a sink commits its part e; once every sink has, checkpoint e is
written: the snapshots and source offsets to ``state-E.pkl`` (temp, fsync, rename), then the
manifest ``_checkpoint.json`` naming it with its SHA-256 (the commit point). The reference
engine's drain does those writes on a committer thread while the run goes on, Flink's
asynchronous phase (:mod:`stretchflow.runtime.checkpoint_drain`). At the end of
input the last part is committed and the parts are published to the sinks' own files at once
(:func:`~stretchflow.runtime.sinks.sink_session`: temp file beside the target, renamed), so
``--output`` only ever holds a complete run; then the checkpoint is cleared.

Resume: a directory holding a manifest restores each operator's snapshot, skips every source
past T (checking that it skips as many tuples as it had read: else the input changed), drops
parts after e (an epoch replayed rewrites its part) and continues; determinism makes the
result that of an uninterrupted run. A checkpoint taken for another query, other inputs or
other parameters is refused (:meth:`Checkpointer.check`). A checkpoint completes only when
every sink and every stateful operator saw its barrier: after a branch of the flow has ended
(a sink's input is exhausted while another still runs) no further checkpoint completes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..batch import Batch
from ..errors import FlowDefinitionError, StretchflowError
from ..eventtime import WATERMARK
from ..io.parts import MANIFEST as PARTS_MANIFEST
from ..io.parts import fsync_dir, is_temp, take_lock, write_atomic
from ..io.sinks import JsonLinesSink
from .checkpoint_drain import AsyncDrain, AsyncParts, CheckpointBarrier
from .checkpoint_stats import CheckpointStats
from .epoch_parts import EpochParts

MANIFEST = "_checkpoint.json"
FORMAT = "stretchflow-checkpoint/1"
#: source tuples between two looks at the checkpoint schedule (per source): the cost of the
#: look stays off the per-tuple path; a cut comes at most this many tuples late per source
STEP = 1024
__all__ = ["MANIFEST", "CheckpointBarrier", "Checkpointer", "Cuts", "EpochParts",
           "parse_every"]


def parse_every(text: Any) -> tuple[str, float]:
    """``--checkpoint-every``: ``N`` (a checkpoint every N input tuples, all sources
    together), ``Ns`` or ``Nms`` (every N seconds or milliseconds of processing time); a
    ``("tuples", N)`` / ``("seconds", S)`` pair or an int passes through, checked."""
    if isinstance(text, tuple) and len(text) == 2 and text[0] in ("tuples", "seconds"):
        kind, amount = text
    elif isinstance(text, int) and not isinstance(text, bool):
        kind, amount = "tuples", text
    elif isinstance(text, str):
        t = text.strip().lower()
        try:
            if t.endswith("ms"):
                kind, amount = "seconds", float(t[:-2]) / 1000
            elif t.endswith("s"):
                kind, amount = "seconds", float(t[:-1])
            else:
                kind, amount = "tuples", int(t)
        except ValueError:
            raise FlowDefinitionError(
                f"checkpoint_every expects N (input tuples), Ns or Nms (seconds, "
                f"milliseconds), got {text!r}") from None
    else:
        raise FlowDefinitionError(f"checkpoint_every expects N, Ns or Nms, got {text!r}")
    if not (isinstance(amount, int | float) and amount > 0 and math.isfinite(amount)):
        raise FlowDefinitionError(f"checkpoint_every must be positive, got {text!r}")
    return kind, amount


# -- what a checkpoint belongs to --------------------------------------------------------------
_SIMPLE = (int, float, str, bool, type(None))


def _describe(obj: Any) -> Any:
    """What identifies an operator or source for a resume check: its type, its simple
    attributes, and for its functions their names and the simple values they close over (a
    query's parameters usually live there)."""
    if isinstance(obj, _SIMPLE):
        return obj
    if isinstance(obj, tuple | list) and all(isinstance(x, _SIMPLE) for x in obj):
        return list(obj)
    if callable(obj) and hasattr(obj, "__code__"):
        cells = [c.cell_contents for c in (obj.__closure__ or ()) if _has_contents(c)]
        return {"fn": f"{obj.__module__}.{obj.__qualname__}",
                "closure": [_describe(c) if isinstance(c, _SIMPLE + (tuple,)) else
                            type(c).__name__ for c in cells]}
    out: dict[str, Any] = {"type": type(obj).__name__}
    for k, v in sorted(getattr(obj, "__dict__", {}).items()):
        if k.startswith("_") or k in ("read",):
            continue
        if isinstance(v, _SIMPLE) or (callable(v) and hasattr(v, "__code__")):
            out[k] = _describe(v)
        elif isinstance(v, Path):
            out[k] = str(v)
    return out


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def fingerprint(flow: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The query a checkpoint belongs to: the flow's nodes and their parameters, its inputs
    (path, size, modification time) and the options whose change would make the snapshot
    mean something else."""
    nodes, inputs = [], []
    for n in flow.nodes:
        nodes.append([n.name, n.kind, [u.name for u in n.inputs], _describe(n.spec)])
        path = getattr(n.spec, "path", None)
        if n.kind == "source" and path is not None:
            try:
                st = Path(path).stat()
                inputs.append([n.name, str(path), st.st_size, st.st_mtime_ns])
            except OSError:
                inputs.append([n.name, str(path), None, None])
    sinks = [str(getattr(s, "path", s.name)) for _, s in flow.sinks]
    return {"flow": flow.name, "nodes": json.loads(json.dumps(nodes, default=str)),
            "inputs": inputs, "sinks": sinks, "options": options}


def mismatch(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What differs between two fingerprints, in words (None: the same query)."""
    if old.get("flow") != new.get("flow"):
        return f"it is of query {old.get('flow')!r}, this run is {new.get('flow')!r}"
    oi = {i[0]: i for i in old.get("inputs", [])}
    for i in new.get("inputs", []):
        o = oi.get(i[0])
        if o is None or o[1] != i[1]:
            return f"input {i[0]} is {i[1]}, the checkpoint read {o[1] if o else 'none'}"
        if o[2:] != i[2:]:
            return f"input {i[1]} changed since the checkpoint (size or modification time)"
    if old.get("nodes") != new.get("nodes"):
        for a, b in zip(old.get("nodes", []), new.get("nodes", []), strict=False):
            if a != b:
                return f"operator {b[0]!r} differs (another query or other --param values)"
        return "the flow has other operators (another query or other --param values)"
    if old.get("sinks") != new.get("sinks"):
        return f"its outputs are {old.get('sinks')}, this run writes {new.get('sinks')}"
    if old.get("options") != new.get("options"):
        def flags(o: dict) -> str:
            return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(o.items()))
        return (f"it ran with {flags(old.get('options') or {})}, this run with "
                f"{flags(new.get('options') or {})}")
    return None


# -- when to cut --------------------------------------------------------------------------------
class Cuts:
    """The checkpoint schedule: ``cuts[k]`` is the T of epoch ``base + 1 + k``, chosen as the
    latest timestamp any source has read when ``every`` is due. Sources report what they read
    every :data:`STEP` tuples (:meth:`progress`)."""

    def __init__(self, every: tuple[str, float], base: int):
        self.kind, self.amount = every
        self.base = base
        self.cuts: list[int] = []
        self.total = 0
        self.latest = -math.inf
        self.due = self.amount if self.kind == "tuples" else 0
        self.deadline = time.monotonic() + self.amount
        self.step = min(STEP, int(self.amount)) if self.kind == "tuples" else STEP

    def progress(self, n: int, ts: int) -> None:
        """``n`` more tuples read, the latest at ``ts``."""
        self.total += n
        if ts > self.latest:
            self.latest = ts
        if self.kind == "tuples":
            if self.total < self.due:
                return
            self.due = self.total + self.amount
        else:
            now = time.monotonic()
            if now < self.deadline:
                return
            self.deadline = now + self.amount
        if not self.cuts or self.latest > self.cuts[-1]:
            self.cuts.append(int(self.latest))


class Checkpointer(AsyncDrain):
    """One run's checkpoints in directory ``path``: sources wrapped to emit barriers and skip
    what a restored checkpoint covers, operator snapshots, the sinks' held output, the
    manifest. See the module docstring; an engine calls :meth:`source` (or
    :meth:`batches`) per source, :meth:`snapshot`/:meth:`restored` per stateful operator and
    :meth:`drain` once, then :meth:`publish`."""

    def __init__(self, path: str | os.PathLike, every: Any, flow: Any,
                 options: dict[str, Any], stateful: list[str]):
        self.path = Path(path)
        self.every = parse_every(every if every is not None else "10s")
        self.stateful = set(stateful)  # nodes that snapshot: all must, for a checkpoint
        self.sources = [n.name for n in flow.nodes if n.kind == "source"]
        self.source_specs = {n.name: n.spec for n in flow.nodes if n.kind == "source"}
        self.sinks = [s for _, s in flow.sinks]
        self.fingerprint = fingerprint(flow, options)
        self.stats = CheckpointStats()  # each checkpoint's duration and bytes (issue #18)
        self._check_sinks()
        if self.path.exists() and not self.path.is_dir():
            raise StretchflowError(f"--checkpoint {self.path}: not a directory")
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = self._take_lock()
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _check_sinks(self) -> None:
        from ..io.parts import FILE_SINKS
        from ..io.sinks import Stdout

        for s in self.sinks:
            if not isinstance(s, (*FILE_SINKS, Stdout)):
                raise FlowDefinitionError(
                    f"checkpoint: sink {s.name!r} ({type(s).__name__}) is not a file or "
                    f"stdout; a checkpointed run holds its output until the end and writes "
                    f"it there (use a .jsonl, .csv or .parquet file, or -)")

    def _take_lock(self) -> Any:
        return take_lock(self.path, f"--checkpoint {self.path}: another run is using this "
                                    f"checkpoint directory")

    def _open(self) -> None:
        for tmp in self.path.glob(".*.tmp-*"):  # a killed run's: never committed
            tmp.unlink(missing_ok=True)
        self.manifest = self._load() if (self.path / MANIFEST).is_file() else None
        base = self.manifest["epoch"] if self.manifest else 0
        self.restored_cut: int | None = self.manifest["cut"] if self.manifest else None
        self.offsets_in: dict[str, int] = self.manifest["offsets"] if self.manifest else {}
        self.plan = Cuts(self.every, base)
        for j in range(len(self.sinks)):
            _unborn_parts(self.path / f"output-{j}")
        self.writers = [AsyncParts(self.path / f"output-{j}", ".jsonl")
                        for j in range(len(self.sinks))]
        for w in self.writers:  # parts after the checkpoint: their epochs are replayed
            for k in [int(k) for k in w.manifest["parts"] if int(k) > base]:
                w.commit(k, [])
        self.offsets: dict[int, dict[str, int]] = {}
        self.ended: dict[str, int] = {}
        self.snaps: dict[int, dict[str, bytes]] = {}
        self.done: dict[int, set[int]] = {}
        self.taken = 0  # checkpoints written by this run

    def _load(self) -> dict[str, Any]:
        try:
            man = json.loads((self.path / MANIFEST).read_bytes())
            if man.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} manifest")
            state = (self.path / man["state"]).read_bytes()
        except (OSError, ValueError, KeyError) as e:
            raise StretchflowError(f"--checkpoint {self.path}: cannot read the checkpoint: "
                                   f"{e}") from None
        if hashlib.sha256(state).hexdigest() != man["sha256"]:
            raise StretchflowError(f"--checkpoint {self.path}: {man['state']} does not match "
                                   f"its checksum in {MANIFEST} (the checkpoint is damaged); "
                                   f"delete the directory to start over")
        why = mismatch(man["fingerprint"], self.fingerprint)
        if why:
            raise StretchflowError(f"--checkpoint {self.path} holds a checkpoint of another "
                                   f"run: {why}; give a new directory (or delete it) to "
                                   f"start over")
        self.states: dict[str, bytes] = pickle.loads(state)  # noqa: S301 - our own file
        return man

    # -- sources ------------------------------------------------------------------------------
    def source(self, name: str, items: Iterator[Any], counter: list[int]) -> Iterator[Any]:
        """Source ``name``'s ``(ts, payload)`` items with the checkpoints' barriers, past
        what the restored checkpoint covers; ``counter[0]``: data tuples read so far."""
        plan, cuts, step = self.plan, self.plan.cuts, self.plan.step
        n = self._skip_count(name)
        if self.restored_cut is not None:
            items = self._skipped(name, items, n)
        k, seen, latest = 0, 0, -math.inf
        for item in items:
            ts = item[0]
            while k < len(cuts) and ts > cuts[k]:
                yield self._barrier(name, k, n)
                k += 1
            yield item
            if item[1] is not WATERMARK:
                n += 1
                seen += 1
                latest = ts
                if seen >= step:
                    counter[0] = n
                    plan.progress(seen, latest)
                    seen = 0
        counter[0] = n
        if seen:
            plan.progress(seen, latest)
        self.ended[name] = n
        while k < len(cuts):
            yield self._barrier(name, k, n)
            k += 1

    def batches(self, name: str, batches: Iterator[Batch], counter: list[int]
                ) -> Iterator[Any]:
        """:meth:`source` for a source read as :class:`Batch` items ``(last ts, batch)``: a
        batch straddling a cut is split there."""
        import numpy as np

        plan, cuts = self.plan, self.plan.cuts
        n = self._skip_count(name)
        skip = self.restored_cut
        skipped = 0
        k = 0
        for b in batches:
            if skip is not None:
                if b.last <= skip:
                    skipped += len(b)
                    continue
                i = int(np.searchsorted(b.ts, skip, side="right"))
                skipped += i
                self._check_skipped(name, skipped, n)
                skip = None
                if i:
                    b = b.split(i)[1]
            while k < len(cuts) and b.last > cuts[k]:
                i = int(np.searchsorted(b.ts, cuts[k], side="right"))
                if i:
                    head, b = b.split(i)
                    n += len(head)
                    yield head.last, head
                yield self._barrier(name, k, n)
                k += 1
            if len(b):
                n += len(b)
                counter[0] = n
                yield b.last, b
                plan.progress(len(b), b.last)
        if skip is not None:
            self._check_skipped(name, skipped, n)
        counter[0] = n
        self.ended[name] = n
        while k < len(cuts):
            yield self._barrier(name, k, n)
            k += 1

    def _skip_count(self, name: str) -> int:
        if self.restored_cut is None:
            return 0
        if name not in self.offsets_in:
            raise StretchflowError(f"--checkpoint {self.path}: the checkpoint has no offset "
                                   f"for source {name!r}")
        return self.offsets_in[name]

    def _skipped(self, name: str, items: Iterator[Any], want: int) -> Iterator[Any]:
        """``items`` after the restored cut: every item with ts <= T is dropped (sources are
        timestamp-sorted), and there must be as many data tuples among them as the
        checkpoint had read."""
        cut = self.restored_cut
        n = 0
        for item in items:
            if item[0] <= cut:  # type: ignore[operator]
                if item[1] is not WATERMARK:
                    n += 1
                continue
            self._check_skipped(name, n, want)
            yield item
            yield from items
            return
        self._check_skipped(name, n, want)

    def _check_skipped(self, name: str, n: int, want: int) -> None:
        if n != want:
            raise StretchflowError(
                f"--checkpoint {self.path}: source {name!r} has {n} tuples up to the "
                f"checkpoint's cut (ts {self.restored_cut}), the checkpoint had read {want}: "
                f"the input changed; delete the checkpoint directory to start over")

    def _barrier(self, name: str, k: int, n: int) -> tuple[float, CheckpointBarrier]:
        epoch = self.plan.base + 1 + k
        self.offsets.setdefault(epoch, {})[name] = n
        self.stats.injected(epoch)
        cut = self.plan.cuts[k]
        return cut + 0.5, CheckpointBarrier(epoch, cut)

    # -- operators ----------------------------------------------------------------------------
    def snapshot(self, node: str, epoch: int, data: bytes) -> None:
        """Operator ``node``'s state at barrier ``epoch`` (already serialized: the operator
        goes on changing it before the checkpoint is written)."""
        self.snaps.setdefault(epoch, {})[node] = data

    def restored(self, node: str) -> bytes | None:
        """Operator ``node``'s state in the restored checkpoint (None: a fresh start)."""
        if self.manifest is None:
            return None
        if node not in self.states:
            raise StretchflowError(f"--checkpoint {self.path}: the checkpoint has no state "
                                   f"for operator {node!r}")
        return self.states[node]

    # -- sinks (the drain and its asynchronous phase: checkpoint_drain.AsyncDrain) -----------
    def _checkpoint(self, epoch: int, cut: int) -> None:
        """Writes checkpoint ``epoch`` now (every sink has committed its part)."""
        taken = self._take_epoch(epoch)
        if taken is not None:
            self._write_checkpoint(epoch, cut, *taken)

    def _take_epoch(self, epoch: int) -> tuple[dict[str, bytes], dict[str, int]] | None:
        """The snapshots and source offsets of ``epoch``, taken out of what the run holds
        (on the thread that adds to it), or None when the epoch cannot be a checkpoint."""
        snaps = self.snaps.pop(epoch, {})
        offsets = self.offsets.pop(epoch, {})
        for e in [e for e in self.snaps if e < epoch]:  # superseded
            del self.snaps[e]
        for name in self.sources:
            if name not in offsets and name in self.ended:
                offsets[name] = self.ended[name]  # ended before the cut: read it all
        if set(snaps) != self.stateful or set(offsets) != set(self.sources):
            self.stats.dropped(epoch)
            return None  # a branch has ended: its operators cannot snapshot this epoch
        return snaps, offsets

    def _write_checkpoint(self, epoch: int, cut: int, snaps: dict[str, bytes],
                          offsets: dict[str, int]) -> None:
        """The state file, then the manifest naming it (the commit point); on the drain's
        committer thread for the reference engine (checkpoint_drain)."""
        write_start = time.perf_counter()
        state = pickle.dumps(snaps, protocol=5)
        name = f"state-{epoch:08d}.pkl"
        # written in place and fsynced, no rename nor directory fsync of its own: only the
        # manifest names it, and the manifest's directory fsync (same directory, after) makes
        # its entry durable too; a crash before leaves a file no manifest names (removed
        # below by the next checkpoint), and its SHA-256 is checked on load
        with open(self.path / name, "wb") as f:
            f.write(state)
            f.flush()
            os.fsync(f.fileno())
        man = {"format": FORMAT, "epoch": epoch, "cut": cut, "state": name,
               "sha256": hashlib.sha256(state).hexdigest(), "offsets": offsets,
               "parts": [w.manifest["parts"] for w in self.writers],
               "fingerprint": self.fingerprint, "written": time.time()}
        manifest = json.dumps(man).encode()
        write_atomic(self.path / MANIFEST, manifest)
        self.stats.committed(epoch, cut, write_start, len(state) + len(manifest))
        for src, n in offsets.items():  # e.g. a Redis consumer group's position follows it
            hook = getattr(self.source_specs.get(src), "checkpointed", None)
            if hook is not None:
                hook(n)
        for old in self.path.glob("state-*.pkl"):  # the manifest no longer names them
            if old.name != name:
                old.unlink(missing_ok=True)
        self.taken += 1

    def publish(self) -> None:
        """The held output, every part in epoch order, to the sinks' own files at once (a
        temporary file beside each, renamed on commit); then the checkpoint is cleared."""
        from ..io.parts import committed_parts, copy_file, read_parts
        from ..io.sinks import Stdout
        from .sinks import sink_session

        staged = self.staged(0) if self.sinks else None
        session = staged[0] if staged else sink_session(self.sinks).open()
        self._staged = None
        try:
            for j, (s, w) in enumerate(zip(self.sinks, self.writers, strict=True)):
                raw = (getattr(s, "_f", None) if type(s) is JsonLinesSink else
                       sys.stdout.buffer if type(s) is Stdout else None)
                if raw is not None:
                    # the parts are what this sink writes, byte for byte: copied (those the
                    # drain's committer has not already copied while the run went on)
                    done = self._staged_ids[j] if staged else ()
                    for k, f in committed_parts(w.path):
                        if k not in done:
                            copy_file(f, raw)  # in the kernel where it can
                    if type(s) is Stdout:
                        sys.stdout.flush()  # (text printed through sys.stdout goes first)
                        raw.flush()
                    s.count += sum(w.manifest["parts"].values())
                    continue
                buf: list[Any] = []
                # a record is its own to_record(ts, record): the same record again
                for rec in read_parts(w.path):
                    buf.append((rec["ts"], rec))
                    if len(buf) >= 4096:
                        s.write(buf)
                        buf = []
                if buf:
                    s.write(buf)
        except BaseException as e:
            session.end(e)  # aborts every sink: --output stays as it was
            raise
        session.end()
        self.clear()

    def clear(self) -> None:
        """Removes the checkpoint (the manifest first: a crash in between leaves none)."""
        (self.path / MANIFEST).unlink(missing_ok=True)
        fsync_dir(self.path)
        for f in self.path.glob("state-*.pkl"):
            f.unlink(missing_ok=True)
        for w in self.writers:
            w.reset()

    def end(self, ok: bool) -> None:
        """The run ended: on success the held output goes to the sinks (:meth:`publish`,
        then the checkpoint is cleared); the directory's lock is released either way."""
        try:
            if ok:
                self.publish()
        finally:
            self.close()

    def extra(self) -> dict[str, Any]:
        """The run's ``checkpoints`` and ``checkpoint_log`` (runtime/result.py)."""
        return {"checkpoints": self.taken, "checkpoint_log": self.stats.log()}

    def close(self) -> None:
        self._abort_staged()  # drained but never published (a failure in between)
        for w in getattr(self, "writers", []):
            w.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _unborn_parts(path: Path) -> None:
    """A part directory a killed run was creating (its manifest not yet written: a temp file
    and the lock at most) opens as new (:func:`~stretchflow.io.parts.check_output_path`); its
    dead temp files are removed here (nothing in it was committed; the checkpoint directory's
    lock keeps every other run out)."""
    if path.is_dir() and not (path / PARTS_MANIFEST).exists():
        for f in path.iterdir():
            if is_temp(f.name):
                f.unlink(missing_ok=True)
