"""Starting processes from a script whose run is not under ``if __name__ == "__main__":``.

A ``spawn`` or ``forkserver`` child of :mod:`multiprocessing` first runs the parent's main
module again (as ``__mp_main__``), so that objects the parent pickled by reference to
``__main__`` resolve in the child. A script that calls ``flow.run(...)`` at its top level, as a
user's first ten-line flow does, would then start the run again in every channel process,
where multiprocessing refuses it with a page of text, and the parent's run fails.

The channels do not need the script: the O+ travels by cloudpickle, which ships what
``__main__`` defines by value. So when the run comes from an unguarded top-level statement of
the main script (:func:`unguarded_call`), the channels start without re-running it
(:func:`main_not_rerun`), and the script works as written. A guarded script keeps
multiprocessing's behaviour: its children load it as ``__mp_main__`` (harmless behind the
guard), and records holding instances of classes it defines travel as before.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["main_not_rerun", "unguarded_call"]

_skip = threading.local()  # .on: processes this thread starts do not re-run __main__
_install_lock = threading.Lock()


def _main_frame() -> FrameType | None:
    """The frame running the main module's top level, on the main thread's stack (a run
    started from another thread comes from a statement there as much as from its own)."""
    main = sys.modules.get("__main__")
    if main is None:
        return None
    ns = vars(main)
    frame: FrameType | None
    if threading.current_thread() is threading.main_thread():
        frame = sys._getframe(1)
    else:
        frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is ns:
            return frame
        frame = frame.f_back
    return None


def _is_main_test(test: ast.expr) -> bool | None:
    """True for ``__name__ == "__main__"``, False for ``!=`` (either operand order), None for
    any other test."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq | ast.NotEq)):
        return None
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    if not (names and consts):
        return None
    return isinstance(test.ops[0], ast.Eq)


def _guarded(body: list[ast.stmt], line: int) -> bool:
    """Whether ``line`` of a module with this body runs only under a main guard."""
    for node in body:
        if not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        if isinstance(node, ast.If):
            eq = _is_main_test(node.test)
            if eq is not None and _within(node.body if eq else node.orelse, line):
                return True
        return any(_guarded(sub, line) for sub in _blocks(node))
    return False


def _within(body: list[ast.stmt], line: int) -> bool:
    return any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in body)


def _blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    blocks = [getattr(node, f, None) for f in ("body", "orelse", "finalbody")]
    out = [b for b in blocks if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]
    out += [h.body for h in getattr(node, "handlers", [])]
    return out


def unguarded_call() -> tuple[str, int] | None:
    """``(script path, line)`` of the main script's top-level statement that led here when a
    ``spawn``/``forkserver`` child would run that statement again (the script is a file and
    the statement is not under ``if __name__ == "__main__":``); None otherwise. A script
    whose source cannot be read or parsed counts as unguarded: running it again in every
    child is the worse mistake."""
    frame = _main_frame()
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if frame is None or not path:
        return None
    line = frame.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return (path, line)
    return None if _guarded(tree.body, line) else (path, line)


def _install() -> None:
    """Wraps :func:`multiprocessing.spawn.get_preparation_data` (what a ``spawn`` or
    ``forkserver`` child is told to set up, ``init_main_from_path``/``_from_name`` among it)
    so that it leaves the main module out for starts on a thread inside
    :func:`main_not_rerun`. Every other start, on any thread, gets what it got before."""
    from multiprocessing import spawn

    with _install_lock:
        orig = spawn.get_preparation_data
        if getattr(orig, "_stretchflow_main", False):
            return

        @functools.wraps(orig)
        def get_preparation_data(name: str, *args: Any, **kw: Any) -> dict:
            data = orig(name, *args, **kw)
            if getattr(_skip, "on", False):
                data.pop("init_main_from_path", None)
                data.pop("init_main_from_name", None)
            return data

        get_preparation_data._stretchflow_main = True  # type: ignore[attr-defined]
        spawn.get_preparation_data = get_preparation_data


@contextlib.contextmanager
def main_not_rerun(on: bool = True) -> Iterator[None]:
    """Processes this thread starts inside do not run the main module again (when ``on``)."""
    if not on:
        yield
        return
    _install()
    before = getattr(_skip, "on", False)
    _skip.on = True
    try:
        yield
    finally:
        _skip.on = before
