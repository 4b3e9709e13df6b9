"""``python PATH/peak.py OUT (-m MODULE | SCRIPT) [ARG ...]``: runs ``MODULE`` (as ``python
-m`` would) or the file ``SCRIPT`` (as ``python SCRIPT`` would) as ``__main__`` with ``ARG
...``, then writes this process's own peak RSS in MiB to the file ``OUT``.

A benchmark that measures a child's memory needs this: on Linux a child's ``ru_maxrss``
(``wait4``, ``RUSAGE_CHILDREN``) keeps the parent's peak across fork and exec, so a 180 MB
benchmark process would report every child at 180 MB at least; ``VmHWM`` (what
:func:`peak_rss_mb` reads) is reset by exec.

**The wrapper must cost every variant nothing.** It is started by path (:func:`command`), not
as ``-m stretchflow_bench.peak``, and imports only the standard library: run as a module of
the package it imported ``stretchflow`` and ``stretchflow_bench`` first — about 80 ms here, which
an engine's run needs anyway (most of it) but a hand-written baseline does not, so every
whole-process ratio against the baseline came out in the engine's favour. ``sys.path[0]`` is
what the plain command would have set (the working directory for ``-m``, the script's folder
for a script), not this file's folder.
"""

from __future__ import annotations

import os
import runpy
import sys


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB. VmHWM is reset by exec, unlike
    ``ru_maxrss``, which a child started with fork+exec inherits from its parent on Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def command(out: str | os.PathLike, target: str | os.PathLike, *args: str,
            script: bool = False) -> list[str]:
    """The argv of a child that runs module ``target`` (or, with ``script``, the file
    ``target``) with ``args`` under this wrapper, writing its peak RSS to ``out``."""
    run = [os.fspath(target)] if script else ["-m", os.fspath(target)]
    return [sys.executable, os.path.abspath(__file__), os.fspath(out), *run, *args]


def main() -> None:
    out, *rest = sys.argv[1:]
    code: object = 0
    try:
        if rest[:1] == ["-m"]:
            module, *args = rest[1:]
            sys.argv = [module, *args]
            sys.path[0] = os.getcwd()
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script, *args = rest
            sys.argv = [script, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code
    finally:
        with open(out, "w") as f:
            f.write(f"{peak_rss_mb()}\n")
    sys.exit(code)


if __name__ == "__main__":
    main()
