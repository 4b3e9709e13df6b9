"""stretchflow: parallel, elastic and deterministic stream processing of windowed queries.

>>> import stretchflow as sf
>>> flow = sf.Flow("demo")
>>> s = flow.source(sf.io.iterable([{"ts": 5, "x": 1}, {"ts": 9, "x": 2}]))
>>> out = s.map(lambda t: {"y": t["x"] * 10}).collect()
>>> _ = flow.run()
>>> out.records()
[{'ts': 5, 'y': 10}, {'ts': 9, 'y': 20}]
"""

from . import io
from .errors import (
    EngineUnavailableError,
    FlowDefinitionError,
    OperatorError,
    SourceError,
    StretchflowError,
)
from .eventtime import Watermark, parse_duration
from .expr import Expr, col, lit, when
from .flow import Flow, Stream
from .operators.aggregate import (
    Aggregate,
    arg_max,
    arg_min,
    count,
    max_of,
    mean_of,
    min_of,
    sum_of,
    top_k,
)
from .operators.join import Join
from .operators.oplus import OPlus, WindowSet

__version__ = "0.1.0"

__all__ = [
    "Aggregate", "EngineUnavailableError", "Expr", "Flow", "FlowDefinitionError", "Join", "OPlus",
    "OperatorError", "SourceError", "Stream", "StretchflowError", "Watermark", "WindowSet",
    "arg_max", "arg_min", "col", "count", "io", "lit", "max_of", "mean_of", "min_of",
    "parse_duration", "sum_of", "top_k", "when",
]
