"""Executors: every one runs any Flow and gives the reference executor's output.

Which engines exist and which options each takes is declared once in
:mod:`stretchflow.engines`; this package holds their algorithms.
"""

from ..engines import ENGINES, get_engine

__all__ = ["ENGINES", "get_engine"]
