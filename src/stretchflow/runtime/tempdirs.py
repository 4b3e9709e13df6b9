"""Temporary directories a run owns, named after its process so that they never outlive it
for long.

A run removes its directory on every exit path it controls (success, error, SIGINT/SIGTERM
turned into an exception). A SIGKILL, or a second signal that skips the cleanup, leaves it
behind; the name ``stretchflow-<kind>-<pid>-<random>`` says whose it was, so the next run
that makes one sweeps every directory of its kind whose process is dead (a live or reused
pid is left alone: the sweep never removes what might be in use).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["pid_alive", "run_tempdir", "sweep_stale", "use_own_mp_tempdir"]


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (of any user)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        return True
    return True


def sweep_stale(kind: str, tmp: str | None = None) -> list[Path]:
    """Removes ``stretchflow-<kind>-<pid>-*`` directories of dead processes; returns them."""
    base = Path(tmp or tempfile.gettempdir())
    pattern = re.compile(rf"stretchflow-{re.escape(kind)}-(\d+)-")
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for d in entries:
        m = pattern.match(d.name)
        if m is None or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
            continue
        if d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)  # another user's, or gone meanwhile: skip
            if not d.exists():
                removed.append(d)
    return removed


def make_tempdir(kind: str) -> Path:
    """A new ``stretchflow-<kind>-<pid>-*`` directory, after sweeping stale ones of its kind."""
    sweep_stale(kind)
    return Path(tempfile.mkdtemp(prefix=f"stretchflow-{kind}-{os.getpid()}-"))


@contextmanager
def run_tempdir(kind: str) -> Iterator[Path]:
    """A directory for one run (:func:`make_tempdir`), removed when the block exits."""
    d = make_tempdir(kind)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def use_own_mp_tempdir() -> Path | None:
    """Makes multiprocessing keep its files (the fork server's socket) in a
    ``stretchflow-mp-<pid>-*`` directory instead of an anonymous ``pymp-*`` one, which a killed
    process would leave for good; the directory lives as long as the process (multiprocessing
    removes it at exit, as it does its own). Does nothing once multiprocessing made its
    directory. Uses multiprocessing's ``_config["tempdir"]``, the one setting its
    ``util.get_temp_dir`` reads (Python 3.8 to 3.13)."""
    import multiprocessing as mp
    from multiprocessing import util

    config = mp.current_process()._config  # type: ignore[attr-defined]
    if config.get("tempdir") is not None:
        return None
    d = make_tempdir("mp")
    config["tempdir"] = str(d)

    def remove() -> None:
        shutil.rmtree(d, ignore_errors=True)
        if config.get("tempdir") == str(d):
            config["tempdir"] = None

    util.Finalize(None, remove, exitpriority=-100)  # as multiprocessing's own: last of all
    return d
