"""``python -m stretchflow.bench.peak OUT MODULE [ARG ...]``: runs ``MODULE`` as ``__main__``
with ``ARG ...``, then writes this process's own peak RSS in MiB to the file ``OUT``.

A benchmark that measures a child's memory needs this: on Linux a child's ``ru_maxrss``
(``wait4``, ``RUSAGE_CHILDREN``) keeps the parent's peak across fork and exec, so a 180 MB
benchmark process would report every child at 180 MB at least; ``VmHWM`` (what
:func:`~stretchflow.bench.common.peak_rss_mb` reads) is reset by exec.
"""

from __future__ import annotations

import runpy
import sys

from .common import peak_rss_mb


def main() -> None:
    out, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    code: object = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
    finally:
        with open(out, "w") as f:
            f.write(f"{peak_rss_mb()}\n")
    sys.exit(code)


if __name__ == "__main__":
    main()
