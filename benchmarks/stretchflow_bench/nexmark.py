"""NEXMark-shaped events for ``bench userflows``, deterministic by seed (numpy), written by
pyarrow to Parquet and, through orjson, to JSON Lines; cached by (kind, size, seed).

NEXMark (Tucker et al., "NEXMark: a benchmark for queries over data streams", 2002; the
Beam/Flink generator) has three event kinds in one stream: bids, auctions and persons. Here
each kind is its own file, sorted by ``ts`` (ms, non-decreasing, about 0.8 ms apart on
average, so 1 000 000 events span about 800 s), every field an int64 but the persons' strings:

* bids ``{"ts", "auction", "bidder", "price", "category"}``: one of :data:`AUCTIONS` auctions
  (ids from 1000) with a skewed popularity (the auction of popularity rank r is drawn with
  weight ``1 / r**0.8``; ranks are shuffled over the ids, so popularity does not follow the
  id), bidder ids 1000..20 999, price in cents 100..99 999, category ``10 + auction % 5``;
* persons ``{"ts", "id", "name", "city", "state"}`` and auctions ``{"ts", "id", "seller",
  "category", "initial_bid"}`` for the join (NEXMark Q8): one stream of ``n`` events, every
  fourth a new person (ids 1000, 1001, ... in order), the others new auctions (ids from 1000)
  whose seller is, with probability 0.8, one of the 100 latest persons (NEXMark's "hot"
  sellers: most auctions meet their seller in the same window) and otherwise any person so
  far.

The files live in :func:`data_dir` (``$STRETCHFLOW_CACHE/userflows`` or
``~/.cache/stretchflow/userflows``), named by kind, size, seed and :data:`VERSION` (bumped
whenever the generator changes what it writes); a file is written to a temporary name and
renamed, so a cache entry is whole or absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from stretchflow.workloads.nexmark import CITIES, FIRST_NAMES, LAST_NAMES, STATES

#: bumped when the generated data change (old cache entries are then not reused)
VERSION = 1
#: distinct auctions the bids go to
AUCTIONS = 5_000
FIRST_ID = 1_000
#: the skew of the auctions' popularity: rank r is drawn with weight 1 / r**SKEW
SKEW = 0.8
_STEPS = np.array([0, 0, 1, 1, 2])  # ms between two events, drawn uniformly: mean 0.8 ms
#: the kinds of file and their formats
KINDS = ("bids", "persons", "auctions")
FORMATS = ("jsonl", "parquet")


def _timestamps(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.cumsum(rng.choice(_STEPS, n)).astype(np.int64)


def bids(n: int, seed: int = 1) -> pa.Table:
    """``n`` bids (module docstring), sorted by ``ts``."""
    rng = np.random.default_rng(seed)
    ts = _timestamps(rng, n)
    weights = 1.0 / np.arange(1, AUCTIONS + 1) ** SKEW
    rank = rng.choice(AUCTIONS, n, p=weights / weights.sum())
    auction = (rng.permutation(AUCTIONS)[rank] + FIRST_ID).astype(np.int64)
    return pa.table({
        "ts": ts,
        "auction": auction,
        "bidder": rng.integers(FIRST_ID, FIRST_ID + 20_000, n, dtype=np.int64),
        "price": rng.integers(100, 100_000, n, dtype=np.int64),
        "category": auction % 5 + 10,
    })


def persons_auctions(n: int, seed: int = 1) -> tuple[pa.Table, pa.Table]:
    """The persons and the auctions of ``n`` events (module docstring), each sorted by
    ``ts``."""
    rng = np.random.default_rng(seed + 7_919)  # not the bids' stream of draws
    ts = _timestamps(rng, n)
    is_person = np.arange(n) % 4 == 0
    p_ts, a_ts = ts[is_person], ts[~is_person]
    n_p, n_a = len(p_ts), len(a_ts)
    p_id = np.arange(FIRST_ID, FIRST_ID + n_p, dtype=np.int64)
    first = np.array(FIRST_NAMES)[rng.integers(0, len(FIRST_NAMES), n_p)]
    last = np.array(LAST_NAMES)[rng.integers(0, len(LAST_NAMES), n_p)]
    persons = pa.table({
        "ts": p_ts,
        "id": p_id,
        "name": pa.array(np.char.add(np.char.add(first, " "), last).tolist(), pa.string()),
        "city": pa.array(np.array(CITIES)[rng.integers(0, len(CITIES), n_p)].tolist()),
        "state": pa.array(np.array(STATES)[rng.integers(0, len(STATES), n_p)].tolist()),
    })
    # the persons that exist when each auction is made: those of the events before it
    latest = np.cumsum(is_person)[~is_person] - 1 + FIRST_ID  # the newest person's id
    hot = rng.random(n_a) < 0.8
    back = np.where(hot, rng.integers(0, 100, n_a), (rng.random(n_a) * (latest - FIRST_ID + 1)
                                                     ).astype(np.int64))
    seller = np.maximum(latest - back, FIRST_ID).astype(np.int64)
    auctions = pa.table({
        "ts": a_ts,
        "id": np.arange(FIRST_ID, FIRST_ID + n_a, dtype=np.int64),
        "seller": seller,
        "category": rng.integers(10, 15, n_a, dtype=np.int64),
        "initial_bid": rng.integers(100, 10_000, n_a, dtype=np.int64),
    })
    return persons, auctions


def write_jsonl(table: pa.Table, path: str | os.PathLike, chunk: int = 500_000) -> None:
    """``table`` as JSON Lines, its columns in order in every line (orjson, a chunk of rows
    at a time)."""
    import orjson

    with open(path, "wb") as f:
        for off in range(0, table.num_rows, chunk):
            rows = table.slice(off, chunk).to_pylist()
            # one array per chunk, split between its objects: every row's first key is "ts"
            # and a string's quotes are escaped, so '},{"ts":' occurs only there
            f.write(orjson.dumps(rows)[1:-1].replace(b'},{"ts":', b'}\n{"ts":') + b"\n")


def write(table: pa.Table, path: str | os.PathLike, fmt: str) -> None:
    """``table`` to ``path`` as ``fmt`` (jsonl or parquet)."""
    if fmt == "jsonl":
        write_jsonl(table, path)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    else:
        raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")


def data_dir() -> Path:
    """Where generated files are cached (``$STRETCHFLOW_CACHE/userflows`` or
    ``~/.cache/stretchflow/userflows``)."""
    base = os.environ.get("STRETCHFLOW_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "stretchflow") / "userflows"


def dataset(kind: str, n: int, fmt: str, seed: int = 1,
            directory: str | os.PathLike | None = None) -> Path:
    """The file of ``kind`` (bids, persons, auctions) for ``n`` events in format ``fmt``,
    generated on first use and cached (:func:`data_dir` unless ``directory``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    d = Path(directory) if directory is not None else data_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{kind}-{n}-s{seed}-v{VERSION}.{fmt}"
    if not path.exists():
        if kind == "bids":
            table = bids(n, seed)
        else:
            persons, auctions = persons_auctions(n, seed)
            table = persons if kind == "persons" else auctions
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            write(table, tmp, fmt)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path
