"""The sinks' side of a checkpointed run on one thread (the reference engine's drain), with
the checkpoint's asynchronous phase (issue #17).

Asynchronous barrier snapshotting (Carbone et al. 2015) splits a checkpoint in two: what must
happen at the barrier — each operator's state captured, each sink's output cut there — and
making that durable, which need not hold the stream back; Flink's "asynchronous phase" writes
the state backend's snapshot on another thread while the operator goes on, and the checkpoint
counts (is acknowledged) only once it is durable. Here the operators' states are serialized at
the barrier (:meth:`Checkpointer.snapshot`) and each sink's open part is *sealed* there (its
buffer flushed, the file renamed out of the next part's way: :meth:`AsyncParts.seal`); the
rest — fsync and rename of the parts, the parts' manifests, the state file, its fsync, the
checkpoint's manifest (the commit point) — is done by one committer thread, in the order the
synchronous code did it, while the drain goes on with the next epoch. A crash at any point
therefore leaves the previous checkpoint or the new one, never a torn one; the checkpoint
counts (``Checkpointer.taken``, its stats record, the sources' ``checkpointed`` hooks) only
once its manifest is durable; the first failure of the committer stops every later write (a
later manifest could name what failed) and is raised in the drain at its next barrier or at
the end.

The committer also *stages* the output while the run goes on: each committed part of a JSON
Lines sink is appended (in the kernel, :func:`~stretchflow.io.parts.copy_file`) to the sink's
own temporary file beside ``--output`` and synced there (:class:`~stretchflow.runtime.sinks.
SinkSession`, opened early), so at the end of input only the last part is left to copy and
sync before the rename; the parts stay in the checkpoint directory until ``--output`` is
renamed (a crash before resumes from them).

Before, all of this ran on the drain's thread: the parts' fsyncs at each barrier, then at the
end the last part's fsync, the copy of every part and the sync of the copy — the columnar
wordcount's 0.89 of its throughput with a checkpoint every second (benchmarks/results/
checkpoint.json).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import StretchflowError
from ..io.parts import copy_file, part_name
from ..io.sinks import JsonLinesSink
from .control import CheckpointBarrier
from .epoch_parts import EpochParts
from .ordered_jobs import JobsTimeout, OrderedJobs

#: seconds the drain waits at its end for the committer's pending writes (fsyncs of at most
#: a few checkpoints); a disk that takes longer is reported, never waited on forever
FINISH_WAIT = 300.0


class AsyncParts(EpochParts):
    """:class:`~stretchflow.runtime.epoch_parts.EpochParts` whose open part can be sealed on the
    writing thread (:meth:`seal`) and committed later on another (:meth:`commit_sealed`);
    the synchronous ``commit_open`` and ``commit_chunks`` work as before."""

    _sealed = 0

    def seal(self) -> tuple[Any, Path, Any] | None:
        """Ends the open part: its buffer written out and the file renamed to a name of its
        own (``.sealed-N.jsonl.tmp-PID``: swept as any temporary file when the directory is
        next opened), so that the next part opens at once. Returns the sealed part for
        :meth:`commit_sealed`, or None when nothing was written."""
        if self._open is None:
            return None
        f, tmp, out = self._open
        self._open = None
        self._sealed += 1
        sealed = tmp.with_name(f".sealed-{self._sealed}{self.suffix}.tmp-{os.getpid()}")
        try:
            f.flush()
            os.rename(tmp, sealed)
        except BaseException:
            f.close()
            tmp.unlink(missing_ok=True)
            raise
        return f, sealed, out

    def commit_sealed(self, part_id: int, sealed: tuple[Any, Path, Any] | None) -> int:
        """Commits a sealed part as part ``part_id`` (fsync, rename, then the manifest);
        None commits an empty part (no part), as ``commit_open`` does."""
        if sealed is None:
            return self.commit(part_id, [])
        # the synchronous commit of an open part (``commit_open``), on a view of this writer
        # whose open part is the sealed one: the writer's own open part is the next epoch's,
        # being written meanwhile; the view shares the manifest and the path
        view = copy.copy(self)
        view._open = sealed
        return view.commit_open(part_id)

    @staticmethod
    def discard(sealed: tuple[Any, Path, Any] | None) -> None:
        """Drops a sealed part that will not be committed (a failed run's)."""
        if sealed is not None:
            sealed[0].close()
            sealed[1].unlink(missing_ok=True)


class Committer(OrderedJobs):
    """One thread running submitted jobs in order (the asynchronous phase), with no bound on
    the jobs queued (a job holds a sealed part's file, not its data). After a job fails,
    later jobs are discarded, not run; :meth:`check` raises the failure on the caller's
    thread, :meth:`finish` waits for the queue to empty (bounded) and raises it."""

    def __init__(self, name: str = "stretchflow-checkpoint"):
        super().__init__(name)

    def finish(self, timeout: float | None = FINISH_WAIT) -> None:
        """Waits for every submitted job, then raises the first failure if any."""
        try:
            super().finish(timeout)
        except JobsTimeout as e:  # the cause names the job under way
            raise StretchflowError(
                f"checkpoint: writing the checkpoint did not finish within {timeout:.0f} "
                f"s (is the disk of the checkpoint directory stalled?)") from e


class AsyncDrain:
    """The drain of :class:`~stretchflow.runtime.checkpoint.Checkpointer` (a mixin: it uses
    the checkpointer's ``writers``, ``sinks``, ``plan``, ``done``, ``snaps`` and its
    ``_take_epoch`` / ``_write_checkpoint``)."""

    writers: list[AsyncParts]
    sinks: list[Any]
    plan: Any
    done: dict[int, set[int]]
    _committer: Committer | None = None
    _staged: Any = None  # the sinks' session opened early by the committer (JSON Lines only)
    _staged_ids: list[set[int]]

    def drain(self, streams: list[Iterator[Any]]) -> None:
        """Pulls the sinks' streams (one per sink, in sink order) to their end through the
        runtime's sink drain (:mod:`stretchflow.runtime.drain`), committing each sink's
        output per epoch and writing each checkpoint once every sink has its part; the
        output after the last barrier becomes the last part. Returns once every write is
        done (the committer's too).

        Each sink's output goes into its open part file as it comes (the drain's runs): an
        epoch's output is never held in memory, which kept the whole epoch's tuples alive and
        made the garbage collector walk them again and again (issue #17). The items are
        pulled one by one: a barrier is acted on as soon as it comes, however sparse the
        output (pulling a chunk ahead would hold a checkpoint back until the chunk fills)."""
        from .drain import SinkDrain, pull_merged

        self._committer = Committer()
        self._staged_ids = [set() for _ in self.sinks]
        stage = all(type(s) is JsonLinesSink for s in self.sinks)
        n = len(streams)
        drains = [SinkDrain(w, epoch=self.plan.base,
                            on_barrier=lambda b, j=j: self._at_barrier(j, b, n))
                  for j, w in enumerate(self.writers[:n])]
        try:
            if n == 1:
                drains[0].pull(streams[0])
            else:
                pull_merged(streams, drains)
            last = self.plan.base + len(self.plan.cuts) + 1
            for j in range(n):
                self._commit_async(j, last)
            if stage:
                self._committer.submit(self._stage)
            self._committer.finish()
        except BaseException as e:
            try:  # the checkpoints whose barriers passed are still written
                self._committer.finish()
            except BaseException as late:  # noqa: BLE001 - the drain's own error wins
                if late is not e:
                    e.add_note(f"while finishing the checkpoints: {late}")
            for w in self.writers:
                w.abort_open()
            self._abort_staged()
            raise
        finally:
            self._committer = None

    def _at_barrier(self, j: int, b: CheckpointBarrier, sinks: int) -> None:
        self._commit_async(j, b.epoch)
        if len(self.done[b.epoch]) == sinks:
            taken = self._take_epoch(b.epoch)  # what the barrier closed: on this thread
            if taken is not None:
                committer = self._committer
                assert committer is not None
                committer.submit(lambda: self._write_checkpoint(b.epoch, b.cut, *taken))
            if all(type(s) is JsonLinesSink for s in self.sinks):
                self._committer.submit(self._stage)  # type: ignore[union-attr]

    def _commit_async(self, j: int, epoch: int) -> None:
        w = self.writers[j]
        sealed = w.seal()
        committer = self._committer
        assert committer is not None
        try:
            committer.submit(lambda: w.commit_sealed(epoch, sealed),
                             lambda: w.discard(sealed))
        except BaseException:  # the committer failed before: this part is not written
            w.discard(sealed)
            raise
        self.done.setdefault(epoch, set()).add(j)

    # -- the sinks' files, written while the run goes on -----------------------------------------
    def _stage(self) -> None:
        """(Committer thread.) Appends every committed part not yet staged, in id order, to
        its sink's temporary file beside the sink's target, and syncs it."""
        from .sinks import sink_session

        if self._staged is None:
            self._staged = sink_session(self.sinks).open()
        for j, (s, w) in enumerate(zip(self.sinks, self.writers, strict=True)):
            done = self._staged_ids[j]
            # the writer's own manifest (this thread commits its parts): no directory reads,
            # each system call here being one more hand-over of the GIL to the drain
            new = sorted(k for k in map(int, w.manifest["parts"]) if k not in done)
            if not new:
                continue
            if done and new[0] < max(done):  # never: parts are committed in epoch order
                raise StretchflowError(f"checkpoint: part {new[0]} of {s.name} came after "
                                       f"part {max(done)}")
            for k in new:
                copy_file(w.path / part_name(k, w.suffix), s._f)
                done.add(k)
            # synced as it comes: the end of the run syncs only what is still dirty
            os.fdatasync(s._f.fileno())

    def staged(self, j: int) -> tuple[Any, set[int]] | None:
        """The sinks' session opened by the drain and the part ids sink ``j``'s file already
        holds (None: nothing was staged); publish appends the rest and commits it."""
        if self._staged is None:
            return None
        return self._staged, self._staged_ids[j]

    def _abort_staged(self) -> None:
        if self._staged is not None:
            session, self._staged = self._staged, None
            session.abort()
