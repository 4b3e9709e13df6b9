"""Parametric micro-operators of the ordered-multicore evaluation (§7.2).

The paper builds its micro-benchmarks from operators doing matrix computations with settable
per-tuple cost, tuple size, state size and selectivity, with keys drawn from N(0, σ) and
range-partitioned (100 buckets for the hybrid queue) to induce skew. Here:

* the heavy part of every operator is ``reps`` numpy products of ``size`` x ``size`` matrices.
  numpy's BLAS releases the GIL for the product, so two workers really overlap; a measurement
  pins BLAS to one thread (the ordered benchmarks do, with threadpoolctl) or BLAS's own threads
  hide the executor's scaling;
* :func:`calibrate` finds the matrix size and repetitions giving a wanted cost on this machine;
* selectivity s: an input yields ``floor(s)`` outputs plus one more for a deterministic
  fraction ``s - floor(s)`` of the inputs (chosen by the tuple id, so every run -- sequential
  or parallel -- makes the same choice);
* state size: a stateful / partitioned-stateful operator keeps a float64 vector of
  ``state_size`` entries per key, updated by every input of the key;
* outputs carry the input's integer fields and a per-key counter, never the float results,
  so equality with the sequential run does not depend on BLAS rounding.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..buffers.hybrid_queue import RangePartitioner
from ..io.sources import IterableSource
from ..operators.stateful import PartitionedStateful, Stateful
from ..operators.stateless import FlatMap
from ..pipeline import Pipeline


class Work:
    """``reps`` products of two fixed ``size`` x ``size`` matrices: the cost of one tuple."""

    __slots__ = ("a", "b", "reps", "size")

    def __init__(self, size: int, reps: int = 1, seed: int = 0):
        if size < 0 or reps < 0:
            raise ValueError("size and reps must be >= 0")
        rng = np.random.default_rng(seed)
        self.size, self.reps = size, reps
        self.a = rng.random((size, size)) if size else None
        self.b = rng.random((size, size)) if size else None

    def __call__(self) -> float:
        """Runs the products (GIL released inside BLAS); returns a checksum entry."""
        x = 0.0
        if self.a is not None:
            a, b = self.a, self.b
            for _ in range(self.reps):
                x = float((a @ b)[0, 0])
        return x


def calibrate(cost_s: float, sizes: tuple[int, ...] = (64, 128, 192, 256, 320),
              probe_s: float = 0.15) -> tuple[int, int, float]:
    """``(size, reps, measured seconds per tuple)`` reaching at least ``cost_s`` per tuple.

    Takes the largest size whose single product stays below ``cost_s`` and repeats it. It
    measures under the caller's BLAS threading: call it with BLAS set as for the run it
    calibrates (the benchmarks pin one thread around both).
    """
    best = (sizes[0], 1e-9)
    for n in sizes:
        w = Work(n)
        w()
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < probe_s / len(sizes):
            w()
            k += 1
        per = (time.perf_counter() - t0) / k
        if per <= cost_s or n == sizes[0]:
            best = (n, per)
    n, per = best
    reps = max(1, math.ceil(cost_s / per))
    return n, reps, per * reps


def _fraction(tid: int, salt: int) -> float:
    """A deterministic number in [0, 1) from a tuple id (the selectivity coin)."""
    return zlib.crc32(b"%d:%d" % (tid, salt)) / 2**32


def _copies(selectivity: float, tid: int, salt: int) -> int:
    whole = int(selectivity)
    return whole + (1 if _fraction(tid, salt) < selectivity - whole else 0)


def stateless(size: int, reps: int = 1, selectivity: float = 1.0, salt: int = 1,
              name: str = "micro-stateless") -> FlatMap:
    """A stateless micro-operator: the work, then ``selectivity`` outputs per input on average.

    Output ``k`` of input ``t`` is ``{**t, "id": t["id"] * 64 + k}`` for k >= 1 (ids stay unique
    and deterministic) and ``t`` itself for k = 0.
    """
    work = Work(size, reps, seed=salt)

    def fn(t: dict) -> list[dict]:
        work()
        n = _copies(selectivity, t["id"], salt)
        return [t if k == 0 else {**t, "id": t["id"] * 64 + k} for k in range(n)]

    return FlatMap(fn, name)


def _ps_fn(work: Work, selectivity: float, salt: int) -> Callable[[Any, dict], list[dict]]:
    def fn(state: list, t: dict) -> list[dict]:
        vec = state[0]
        x = work()
        if vec.size:
            vec[t["id"] % vec.size] += x  # touches the state, as the paper's state size knob
        state[1] += 1
        n = _copies(selectivity, t["id"], salt)
        return [{"id": t["id"] * 64 + k, "key": t["key"], "seen": state[1]} for k in range(n)]

    return fn


def partitioned(size: int, reps: int = 1, selectivity: float = 1.0, state_size: int = 0,
                buckets: int = 100, key_range: float = 3.0, partitioning: str = "range",
                salt: int = 2, name: str = "micro-ps") -> PartitionedStateful:
    """A partitioned-stateful micro-operator keyed by the tuple's ``key`` (N(0, σ), rounded).

    ``partitioning="range"`` cuts [-key_range, key_range) into ``buckets`` equal ranges (the
    paper's skew set-up: with keys from N(0, σ) the middle buckets are hot, the more so the
    smaller σ is); ``"hash"`` spreads keys by CRC-32.
    """
    work = Work(size, reps, seed=salt)
    part: Any
    if partitioning == "range":
        part = RangePartitioner.uniform(-key_range, key_range, buckets)
    elif partitioning == "hash":
        part = None
    else:
        raise ValueError(f"partitioning is 'range' or 'hash', got {partitioning!r}")
    return PartitionedStateful(_ps_fn(work, selectivity, salt), key=lambda t: t["key"],
                               init=lambda k: [np.zeros(state_size), 0], buckets=buckets,
                               partitioner=part, name=name)


def stateful(size: int, reps: int = 1, selectivity: float = 1.0, state_size: int = 0,
             salt: int = 3, name: str = "micro-stateful") -> Stateful:
    """A stateful micro-operator (degree 1): one state vector for the whole stream."""
    work = Work(size, reps, seed=salt)
    return Stateful(_ps_fn(work, selectivity, salt), init=lambda: [np.zeros(state_size), 0],
                    name=name)


def keyed_tuples(n: int, sigma: float = 1.0, key_resolution: float = 0.01, seed: int = 0,
                 payload_bytes: int = 0) -> list[dict]:
    """``n`` tuples ``{"ts", "id", "key"[, "blob"]}``: ts = id, keys from N(0, σ) rounded to
    ``key_resolution`` (so keys repeat and per-key state matters)."""
    rng = np.random.default_rng(seed)
    keys = np.round(rng.normal(0.0, sigma, n) / key_resolution) * key_resolution
    blob = b"x" * payload_bytes
    out = []
    for i, k in enumerate(keys.tolist()):
        t = {"ts": i, "id": i, "key": k}
        if payload_bytes:
            t["blob"] = blob
        out.append(t)
    return out


def source(data: list[dict]) -> IterableSource:
    """A stretchflow source over ``data`` (re-iterable, so a pipeline can run twice)."""
    return IterableSource(lambda: iter(data), name="micro")


def pipeline(kinds: str, data: list[dict], size: int, reps: int = 1,
             selectivities: Iterator[float] | None = None, state_size: int = 16,
             buckets: int = 100, key_range: float = 3.0) -> Pipeline:
    """A pipeline of micro-operators from a string of kinds: ``L`` stateless, ``S`` stateful,
    ``P`` partitioned stateful (e.g. ``"LP"``: the paper's stateless feeding a PS operator)."""
    pl = Pipeline(source(data), name=f"micro-{kinds}")
    sels = iter(selectivities) if selectivities is not None else iter(())
    for i, k in enumerate(kinds):
        s = next(sels, 1.0)
        if k == "L":
            pl.add(stateless(size, reps, s, salt=10 + i, name=f"L{i}"))
        elif k == "S":
            pl.add(stateful(size, reps, s, state_size, salt=10 + i, name=f"S{i}"))
        elif k == "P":
            pl.add(partitioned(size, reps, s, state_size, buckets, key_range, salt=10 + i,
                               name=f"P{i}"))
        else:
            raise ValueError(f"unknown micro-operator kind {k!r}: use L, S or P")
    return pl
