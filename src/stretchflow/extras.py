"""Optional dependencies: the extras of ``pip install 'stretchflow[...]'``.

The core install (numpy, pyarrow and a few small libraries) runs the reference, vsn, sn,
ordered and slack engines. Spark, the SLTuner's scikit-learn estimators, the numba kernels
and Redis Streams each need an extra (pyproject.toml's ``optional-dependencies``); the
benchmarks' own dependencies (their plots' matplotlib) belong to the dev-only benchmarks
package, not to an extra.
Their modules are imported only where a feature uses them, through :func:`require`, so that
``import stretchflow`` and a run on a core engine never load them, and a missing one is a
single :class:`~stretchflow.errors.StretchflowError` naming the extra to install — which the
CLI prints as one line with exit code 2 — instead of a ``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import StretchflowError

__all__ = ["EXTRAS", "MissingExtraError", "require"]

#: extra -> the top-level modules it installs that stretchflow imports (for docs and tests)
EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pandas"),
    "tuner": ("sklearn", "joblib", "scipy"),
    "kernels": ("numba",),
    "redis": ("redis",),
}


class MissingExtraError(StretchflowError, ImportError):
    """A feature's optional dependency is not installed. An ImportError too, so code that
    already falls back on ImportError keeps doing so."""

    def __init__(self, module: str, extra: str, feature: str):
        self.module = module
        self.extra = extra
        self.feature = feature
        super().__init__(f"{feature} needs the '{extra}' extra: "
                         f"pip install 'stretchflow[{extra}]' (module {module!r} is missing)",
                         name=module)


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Imports and returns ``module``; if it, or a module it imports, is missing, raises
    :class:`MissingExtraError` naming ``feature`` and the ``extra`` to install (the extra
    brings the module's own dependencies too: pyspark's py4j, scikit-learn's scipy)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise MissingExtraError(e.name or module, extra, feature) from None
