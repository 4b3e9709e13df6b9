"""Backing stores for state migration between shared-nothing channels (elastic-scaling §6.1).

During a migration (Alg. 4) every channel *donates* the window state of the key groups it
loses to a backing store, waits at the vertical barrier, then *collects* the key groups it
gains. A store holds one pickled blob per ``(epoch, key group)``: the epoch numbers the
reconfiguration so that a slow reader can never see a later migration's blob.

Two implementations: :class:`MemoryStateStore` (a dict, for threads of one process) and
:class:`SQLiteStateStore` (the standard library's sqlite3, a file that processes on one host
could share). Both pickle, so what a channel collects is a copy, never an alias of the
donor's objects, and ``put`` reports the bytes moved.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import tempfile
import threading
from abc import ABC, abstractmethod
from typing import Any

__all__ = ["MemoryStateStore", "SQLiteStateStore", "StateStore", "open_store"]


class StateStore(ABC):
    """Where donated key-group state waits between donate and collect (Alg. 4)."""

    @abstractmethod
    def put_bytes(self, epoch: int, group: int, blob: bytes) -> None:
        """Stores the pickled state of key group ``group`` for migration ``epoch``."""

    @abstractmethod
    def take_bytes(self, epoch: int, group: int) -> bytes | None:
        """Removes and returns the blob of ``(epoch, group)``; None if nothing was donated."""

    def put(self, epoch: int, group: int, state: Any) -> int:
        """Donates ``state`` (pickled); returns the number of bytes stored."""
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        self.put_bytes(epoch, group, blob)
        return len(blob)

    def take(self, epoch: int, group: int) -> Any:
        """Collects the state donated for ``(epoch, group)``; None if there was none."""
        blob = self.take_bytes(epoch, group)
        return None if blob is None else pickle.loads(blob)

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Releases the store's resources."""


class MemoryStateStore(StateStore):
    """Pickled blobs in a dict guarded by a lock (channels are threads of one process)."""

    def __init__(self) -> None:
        self._blobs: dict[tuple[int, int], bytes] = {}
        self._lock = threading.Lock()

    def put_bytes(self, epoch: int, group: int, blob: bytes) -> None:
        with self._lock:
            self._blobs[(epoch, group)] = blob

    def take_bytes(self, epoch: int, group: int) -> bytes | None:
        with self._lock:
            return self._blobs.pop((epoch, group), None)

    def __len__(self) -> int:
        return len(self._blobs)


class SQLiteStateStore(StateStore):
    """Pickled blobs in an SQLite table ``state(epoch, grp, blob)``.

    ``path`` None creates a temporary file that :meth:`close` deletes. One connection is
    shared by the channel threads under a lock (sqlite3 objects are not thread-safe by
    themselves; ``check_same_thread=False`` only lifts the ownership check).
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self._tmpdir: tempfile.TemporaryDirectory | None = None
        if path is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="stretchflow-sn-")
            path = os.path.join(self._tmpdir.name, "state.sqlite")
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # migration state is transient (a crash restarts the query anyway): no fsync per blob,
        # which would otherwise dominate the migration time
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("PRAGMA journal_mode = MEMORY")
        self._db.execute("CREATE TABLE IF NOT EXISTS state (epoch INTEGER, grp INTEGER, "
                         "blob BLOB, PRIMARY KEY (epoch, grp))")

    def put_bytes(self, epoch: int, group: int, blob: bytes) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO state VALUES (?, ?, ?)",
                             (epoch, group, sqlite3.Binary(blob)))

    def take_bytes(self, epoch: int, group: int) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT blob FROM state WHERE epoch = ? AND grp = ?",
                                   (epoch, group)).fetchone()
            if row is None:
                return None
            self._db.execute("DELETE FROM state WHERE epoch = ? AND grp = ?", (epoch, group))
            return bytes(row[0])

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM state").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None


def open_store(store: str | StateStore | None) -> tuple[StateStore, bool]:
    """The store named by an executor option: ``"memory"`` (default), ``"sqlite"``, or an
    instance. Returns the store and whether the caller owns it (and must close it)."""
    if store is None or store == "memory":
        return MemoryStateStore(), True
    if store == "sqlite":
        return SQLiteStateStore(), True
    if isinstance(store, StateStore):
        return store, False
    raise ValueError(f"unknown state store {store!r}; use 'memory', 'sqlite' or a StateStore")
