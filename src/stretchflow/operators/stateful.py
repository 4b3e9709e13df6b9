"""The ordered-multicore paper's stateful operator kinds (ordered-multicore §2).

* :class:`Stateful` (degree 1): one state, inputs processed one at a time in arrival order;
* :class:`PartitionedStateful`: a key selector, hash or range partitioning into ``buckets``
  buckets and per-key state; inputs of one bucket one at a time in arrival order, different
  buckets in parallel.

In a :class:`~stretchflow.flow.Flow` they are nodes of kind ``"stateful"`` (built with
:class:`~stretchflow.pipeline.Pipeline`). Every engine runs them through one runtime object,
``op.instance()``, whose ``process(ts, payload)`` returns the tuple's outputs as ``(ts, out)``
items in order: that one method is the operator's per-tuple semantics (Def. 5.1's sequential
run is "one instance, every input in order"). A user function's exception becomes an
:class:`~stretchflow.errors.OperatorError` naming the operator and the tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from ..buffers.hybrid_queue import HashPartitioner, RangePartitioner
from ..runtime.control import user_error

Item = tuple[Any, Any]


@dataclass(frozen=True)
class Stateful:
    """A stateful operator (degree 1): ``fn(state, payload)`` returns the output payloads
    (an iterable, or None for none) and may mutate ``state``, created once by ``init()``."""

    fn: Callable[[Any, Any], Iterable[Any] | None]
    init: Callable[[], Any]
    name: str = "stateful"

    @property
    def buckets(self) -> int:
        """One bucket: the maximum degree of parallelism of a stateful operator is 1."""
        return 1

    def instance(self) -> StatefulInstance:
        """A runtime instance holding the operator's one state."""
        return StatefulInstance(self)


@dataclass(frozen=True)
class PartitionedStateful:
    """A partitioned-stateful operator: ``key(payload)`` selects the key, ``partitioner`` maps
    a key to one of ``buckets`` buckets (default: CRC-32 hash partitioning; give a
    :class:`~stretchflow.buffers.hybrid_queue.RangePartitioner` for range partitioning), and
    ``fn(state, payload)`` runs on the key's own state, created by ``init(key)``."""

    fn: Callable[[Any, Any], Iterable[Any] | None]
    key: Callable[[Any], Hashable]
    init: Callable[[Hashable], Any]
    buckets: int = 100
    partitioner: Callable[[Any], int] | None = None
    name: str = "partitioned"

    def __post_init__(self) -> None:
        if self.partitioner is None:
            object.__setattr__(self, "partitioner", HashPartitioner(self.buckets))
        n = getattr(self.partitioner, "num_buckets", self.buckets)
        if n != self.buckets:
            raise ValueError(f"operator {self.name!r}: the partitioner has {n} buckets, "
                             f"buckets={self.buckets}")

    def instance(self) -> StatefulInstance:
        """A runtime instance holding the states of the keys it sees (one per bucket in the
        ordered executor, one for every key in a sequential run)."""
        return StatefulInstance(self)

    def bucket_of(self, ts: Any, payload: Any) -> tuple[Hashable, int]:
        """The tuple's key and bucket; a user error or a bucket out of range names the
        operator and the tuple."""
        try:
            k = self.key(payload)
            b = self.partitioner(k)  # type: ignore[misc]
        except Exception as e:
            raise user_error(self.name, ts, payload, e) from e
        if not 0 <= b < self.buckets:
            raise user_error(self.name, ts, payload, ValueError(
                f"partitioner mapped key {k!r} to bucket {b}, not in [0, {self.buckets})"))
        return k, b


def range_partitioned(fn: Callable[[Any, Any], Iterable[Any] | None],
                      key: Callable[[Any], Hashable], init: Callable[[Hashable], Any],
                      low: float, high: float, buckets: int = 100,
                      name: str = "partitioned") -> PartitionedStateful:
    """A :class:`PartitionedStateful` with ``buckets`` equal-width key ranges over
    ``[low, high)`` (outliers go to the end buckets) -- the paper's skew set-up (§7.2.1)."""
    return PartitionedStateful(fn, key, init, buckets,
                               RangePartitioner.uniform(low, high, buckets), name)


_MISSING = object()


class StatefulInstance:
    """The state of a :class:`Stateful` or :class:`PartitionedStateful` (per key) and the
    operator's per-tuple step. One thread at a time: the ordered executor gives each bucket's
    instance to one worker at a time (its queue), the reference executor has one thread."""

    __slots__ = ("op", "states", "_keyed", "_fn", "_name")

    def __init__(self, op: Stateful | PartitionedStateful):
        self.op = op
        self.states: dict[Hashable, Any] = {}
        self._keyed = isinstance(op, PartitionedStateful)
        self._fn = op.fn
        self._name = op.name

    def process(self, ts: Any, payload: Any) -> list[Item]:
        """The outputs of one input tuple, ``(ts, out)`` in order (empty if none)."""
        if self._keyed:
            try:
                k = self.op.key(payload)  # type: ignore[union-attr]
            except Exception as e:
                raise user_error(self._name, ts, payload, e) from e
            return self.process_key(ts, payload, k)
        return self.process_key(ts, payload, None)

    def process_key(self, ts: Any, payload: Any, k: Hashable) -> list[Item]:
        """:meth:`process` for a tuple whose key ``k`` is already known (None: unkeyed)."""
        state = self.states.get(k, _MISSING)
        try:
            if state is _MISSING:
                state = self.states[k] = (self.op.init(k) if self._keyed  # type: ignore[call-arg]
                                          else self.op.init())  # type: ignore[call-arg]
            out = self._fn(state, payload)
        except Exception as e:
            raise user_error(self._name, ts, payload, e) from e
        return [] if out is None else [(ts, o) for o in out]


__all__ = ["PartitionedStateful", "Stateful", "StatefulInstance", "range_partitioned"]
