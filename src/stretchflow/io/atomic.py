"""A file written as a transaction: the atomic-commit machinery of the file sinks
(:mod:`stretchflow.io.sinks`).

The output goes to a hidden temporary file beside its target
(``.out.jsonl.stretchflow-<pid>-<random>.tmp``: same directory, so same file system and an
atomic rename); :meth:`FileTxn.prepare` flushes, fixes the mode, fsyncs and closes it,
:meth:`FileTxn.commit` renames it onto the target and syncs the directory, and
:meth:`FileTxn.abort` removes it, leaving the previous target as it was. The temporary files a
killed run left behind are swept when the next run writes the same target. Several sinks
commit together (two-phase: every one prepared, then each renamed) through
:func:`stretchflow.runtime.sink_session`.
"""

from __future__ import annotations

import errno
import glob
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..errors import StretchflowError

__all__ = ["FileTxn"]


class FileTxn:
    """A file sink's output as a transaction: written to a hidden temporary file in the
    target's directory (so that the rename is atomic: same file system), renamed onto the
    target by :meth:`commit`, removed by :meth:`abort`. A process killed before the commit
    leaves the target as it was and the temporary file beside it (its name says what it is).

    A target that exists and is not a regular file (``/dev/null``, a named pipe) cannot be
    replaced by a rename: it is written in place, as before; abort only closes it.

    ``state``: new, open (writing), prepared (complete, synced and closed, not yet renamed),
    committed or aborted.
    """

    def __init__(self, sink: str, target: Path):
        self.sink = sink
        # through a symlink: the file it points to is replaced, the link stays
        self.target = Path(os.path.realpath(target))
        self.tmp: Path | None = None
        self.file: Any = None
        self.mode = 0
        self.state = "new"

    @property
    def write_path(self) -> Path:
        """Where the output is being written."""
        return self.tmp if self.tmp is not None else self.target

    def _error(self, doing: str, e: OSError) -> StretchflowError:
        return StretchflowError(f"sink {self.sink!r}: cannot {doing}: {e.strerror or e}")

    def begin(self) -> Any:
        """Creates the file to write; returns it (a binary file object)."""
        target = self.target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            st: os.stat_result | None = os.stat(target)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise self._error(f"prepare {target}", e) from e
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise StretchflowError(f"sink {self.sink!r}: {target} is a directory")
        if st is not None and not os.access(target, os.W_OK):
            # a rename would replace a file its owner made read-only; writing in place never did
            raise StretchflowError(f"sink {self.sink!r}: {target} is not writable")
        if st is not None and not stat.S_ISREG(st.st_mode):
            try:
                self.file = open(target, "wb")  # noqa: SIM115  # closed by prepare/abort
            except OSError as e:
                raise self._error(f"open {target}", e) from e
            self.state = "open"
            return self.file
        # mkstemp creates 0600; the published file gets the target's mode, or a new file's
        self.mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
        _sweep_dead_temps(target)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{_cut(target.name)}.stretchflow-{os.getpid()}-",
                                       suffix=".tmp", dir=target.parent)
        except OSError as e:
            raise self._error(f"create a temporary file in {target.parent}/ (output is "
                              f"written there, then renamed onto {target.name})", e) from e
        self.tmp = Path(tmp)
        self.file = os.fdopen(fd, "wb")
        self.state = "open"
        return self.file

    def prepare(self) -> None:
        """Flushes, fixes the mode, syncs and closes the file (idempotent)."""
        if self.state == "aborted":
            raise StretchflowError(f"sink {self.sink!r}: commit after abort")
        if self.state != "open":
            return
        f = self.file
        try:
            f.flush()
            if self.tmp is not None:
                os.fchmod(f.fileno(), self.mode)
                os.fsync(f.fileno())  # the data is on disk before the rename makes it visible
            f.close()
        except OSError as e:
            raise self._error(f"write {self.write_path}", e) from e
        self.state = "prepared"

    def commit(self) -> None:
        """Renames the complete file onto the target and syncs the directory (idempotent)."""
        self.prepare()
        if self.state != "prepared":
            return
        if self.tmp is not None:
            try:
                os.replace(self.tmp, self.target)
            except OSError as e:
                raise self._error(f"rename {self.tmp.name} onto {self.target}", e) from e
        self.state = "committed"
        if self.tmp is not None:
            self._sync_dir()

    def _sync_dir(self) -> None:
        # the rename itself is durable only once the directory is synced
        if os.name != "posix":
            return
        try:
            fd = os.open(self.target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as e:
            raise self._error(f"sync the directory {self.target.parent}", e) from e
        try:
            os.fsync(fd)
        except OSError as e:
            # some file systems cannot sync a directory; the rename is done all the same
            if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
                raise self._error(f"sync the directory {self.target.parent}", e) from e
        finally:
            os.close(fd)

    def abort(self) -> None:
        """Closes and removes the temporary file (idempotent; no-op after commit)."""
        if self.state in ("committed", "aborted"):
            return
        self.state = "aborted"
        if self.file is not None:
            try:
                self.file.close()
            except (OSError, ValueError):  # a failed flush: the file is discarded anyway
                pass
        if self.tmp is not None:
            try:
                self.tmp.unlink(missing_ok=True)
            except OSError as e:
                raise self._error(f"remove {self.tmp}", e) from e


def _sweep_dead_temps(target: Path) -> None:
    """Removes the temporary files a killed run left beside ``target`` (their names carry
    the writing process's pid, :meth:`FileTxn.begin`) whose process is gone: nothing will
    ever commit them. A live process's, or this one's, are left alone."""
    from ..runtime.tempdirs import pid_alive

    prefix = f".{_cut(target.name)}.stretchflow-"
    for tmp in target.parent.glob(f"{glob.escape(prefix)}*.tmp"):
        pid = tmp.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _cut(name: str, limit: int = 180) -> str:
    """``name`` cut to ``limit`` bytes: the temporary file's name adds ~40 to the target's and
    must still fit NAME_MAX (255 bytes on common file systems)."""
    while len(os.fsencode(name)) > limit:
        name = name[:-1]
    return name


_umask_lock = threading.Lock()


def _umask() -> int:
    """The process's umask. Linux shows it in /proc; elsewhere os.umask reads it only by
    setting it, so it is set to the common 022 (not 0) for that instant, under a lock."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask
