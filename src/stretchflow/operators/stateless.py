"""Stateless operators (journal §2.1): Map, FlatMap and Filter keep each tuple's timestamp."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


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


def apply_stateless(op: Map | FlatMap | Filter, ts: int, value: Any) -> list[Any]:
    """The payloads ``op`` produces for one input tuple (used by every executor)."""
    if type(op) is Map:
        return [op.fn(value)]
    if type(op) is Filter:
        return [value] if op.fn(value) else []
    return list(op.fn(value))
