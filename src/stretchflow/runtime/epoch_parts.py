"""A sink's output in a checkpointed run: one part per epoch, written as it comes.

A checkpointed run holds its sinks' output in the checkpoint directory until the end of input
(docs/checkpoints.md): each sink writes into an open part file as its drain hands it output
(:mod:`stretchflow.runtime.drain`), and the part is committed under its epoch when the sink
reads that epoch's first barrier. :class:`EpochParts` is that part directory's writer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..batch import Batch
from ..io.parts import PartWriter, part_name
from ..io.sinks import JsonLinesSink


class EpochParts(PartWriter):
    """A :class:`~stretchflow.io.parts.PartWriter` of JSON Lines parts whose next part is
    written as the output comes (:meth:`write`, :meth:`write_batch`: tuples ``(ts,
    payload)`` and whole :class:`Batch` es, which its sink writes from their Arrow tables)
    and committed under its epoch by :meth:`commit_open`; :meth:`commit_chunks` does both at
    once. The open part is a temporary file (``.open.jsonl.tmp-PID``): a killed run's is
    swept when the directory is next opened, never read."""

    _open: Any = None  # the open part: (file, its path, its JSON Lines writer), or None

    def _begin(self) -> _PartFile:
        if self._open is None:
            tmp = self.path / f".open{self.suffix}.tmp-{os.getpid()}"
            f = open(tmp, "wb")  # noqa: SIM115 - closed by commit_open / abort_open
            self._open = (f, tmp, _PartFile(f, tmp))
        return self._open[2]

    def write(self, items: list[Any]) -> None:
        """Appends ``(ts, payload)`` data tuples to the open part."""
        if items:
            self._begin().write(items)

    def write_batch(self, batch: Batch) -> None:
        """Appends a :class:`Batch` to the open part."""
        if len(batch):
            self._begin().write_batch(batch)

    def commit_open(self, part_id: int) -> int:
        """Commits what was written since the last commit as part ``part_id`` (as
        :meth:`PartWriter.commit`: fsync, rename, then the manifest; an empty part is no
        part). Returns its number of records."""
        if self._open is None:
            return self.commit(part_id, [])
        f, tmp, out = self._open
        self._open = None
        try:
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()
        final = self.path / part_name(part_id, self.suffix)
        os.replace(tmp, final)
        # no directory fsync of its own: the manifest is renamed next in the same directory
        # and its directory fsync makes both renames durable, the part's first (one fsync
        # less per checkpoint; a journaling file system keeps the two in order, and were
        # the part's lost anyway, reading the parts names the missing part)
        self.manifest["parts"][str(part_id)] = out.count
        self._save()
        return out.count

    def abort_open(self) -> None:
        """Drops the open part (a failed run's: never committed)."""
        if self._open is not None:
            f, tmp, _ = self._open
            self._open = None
            f.close()
            tmp.unlink(missing_ok=True)

    def commit_chunks(self, part_id: int, chunks: list[Any]) -> int:
        """Commits ``chunks`` (lists of ``(ts, payload)`` and whole :class:`Batch` es, in
        order) as part ``part_id``."""
        for c in chunks:
            if type(c) is Batch:
                self.write_batch(c)
            else:
                self.write(c)
        return self.commit_open(part_id)

    def close(self) -> None:
        self.abort_open()
        super().close()


class _PartFile(JsonLinesSink):
    """The JSON Lines sink's writing into an open part file (the bytes the sink writes for
    its output, which the checkpoint's publish copies), without the sink's own temporary
    file and rename: the part has its own."""

    def __init__(self, f: Any, path: Path):
        super().__init__(path)
        self._f = f
        self.count = 0
