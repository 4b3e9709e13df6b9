"""Stateless operators (journal §2.1): Map, FlatMap and Filter keep each tuple's timestamp."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import OperatorError, StretchflowError
from ..eventtime import WATERMARK


@dataclass(frozen=True)
class Map:
    """t_out = ⟨t_in.τ, fn(t_in.φ)⟩."""

    fn: Callable[[Any], Any]
    name: str = "map"


@dataclass(frozen=True)
class FlatMap:
    """Zero or more outputs per input, each with the input's timestamp."""

    fn: Callable[[Any], Iterable[Any]]
    name: str = "flat_map"


@dataclass(frozen=True)
class Filter:
    """Keeps the tuples for which ``fn`` is true."""

    fn: Callable[[Any], bool]
    name: str = "filter"


def apply_batch(op: Map | FlatMap | Filter, batch: list[tuple[int, Any]],
                markers: tuple[Any] | tuple[Any, Any] = (WATERMARK,)) -> list[tuple[int, Any]]:
    """``op`` over a batch of ``(ts, payload)`` items, keeping each timestamp; items whose
    payload is one of ``markers`` (watermarks, end markers) pass through. A user function that
    raises stops with an :class:`~stretchflow.errors.OperatorError` naming ``op`` and the tuple."""
    fn, kind, out = op.fn, type(op), []
    append = out.append
    m0, m1 = markers[0], markers[-1]  # one or two markers, compared by identity
    ts = p = None
    try:
        for ts, p in batch:
            if p is m0 or p is m1:
                append((ts, p))
            elif kind is Map:
                append((ts, fn(p)))
            elif kind is Filter:
                if fn(p):
                    append((ts, p))
            else:
                for q in fn(p):
                    append((ts, q))
    except StretchflowError:
        raise
    except Exception as e:
        raise OperatorError(op.name, ts, p, e) from e
    return out
