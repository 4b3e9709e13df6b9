"""The columnar batch path of an A+ whose f_U adds and whose f_MK has a columnar form
(``Aggregate.columns``, e.g. wordcount): no Python work per tuple-and-key.

The pickled-chunk path (:mod:`.plan`) calls f_MK once per tuple, splits its keys by owner
in Python and pickles every (tuple, keys) row: ~25 µs a tweet before the O+ runs. Here:

1. ``explode_kernel`` (mapInArrow over the source's chunks): the fused stateless chain, then
   f_MK's columnar form over the whole Arrow batch — the tuple becomes rows
   ``(ts, key, value)`` of primitive Arrow columns (no pickle) — then each row goes to the
   bucket owning its key, ``b = stable_hash(key) % G % P`` (key groups as in :mod:`.plan`;
   the hash is computed once per distinct key of the batch, via Arrow's dictionary
   encoding). A row carries one key, so nothing is duplicated (elastic-scaling §3, Alg. 1
   forwardSN with one owner per key). The rows of one bucket travel as *one* Spark row
   holding an Arrow IPC stream: Spark's shuffle moves a few large binary rows instead of
   one row per (tweet, word) — 3 million for 200 000 tweets.
2. ``repartition(P, dest)``: bucket b to partition b (``session.partition_tokens``).
3. ``keyed_kernel`` (mapInArrow per partition): the partition's rows sorted by ts (numpy,
   stable), one :class:`AggregateInstance` — the operator the local executors run — fed
   through ``process_keyed`` (Alg. 2 with the values of each (window, key) summed by Arrow
   and f_U called once per (window, key)), then end-of-input expiry. Its outputs travel as
   the usual pickled stream chunks to the sinks.

Restriction: keys are Arrow strings (``columns`` returns them so); a tuple whose keys cannot
be encoded as UTF-8 (lone surrogates) stops the job with an ``OperatorError`` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import OperatorError, RunTupleError
from ..operators.aggregate import Aggregate
from ..operators.oplus import OPlus, key_pairs
from ..runtime.control import user_error
from . import plan

#: an exploded stream for one bucket: partitioning token, bucket, Arrow IPC stream of
#: (ts long, k string, v long) rows, one per (tuple, key)
KEYED_SCHEMA = "dest int, b int, p binary"
#: rows one ``process_keyed`` call takes (bounds the Arrow group-by's memory)
SLICE = 1 << 18


def applies(op: OPlus) -> bool:
    """True when the stage of ``op`` can take the columnar path."""
    # keys travel as one Arrow string column here: an f_MK whose keys are tuples of columns
    # (paircount's, output_columns naming two key fields) stays on the row path
    return isinstance(op, Aggregate) and getattr(op, "columns", None) is not None \
        and op.WT == "multi" and len(op.output_columns or ("k", "v")) == 2 \
        and getattr(op, "column_agg", None) is None  # declarative (#31): Spark's own compile


def explode(op: Aggregate, ts: list[int], payloads: list[Any]) -> tuple[Any, Any, Any]:
    """(ts, key, value) columns of the tuples: f_MK's columnar form, or — when it refuses a
    batch — f_MK per tuple, which names the offending tuple if it fails too."""
    import numpy as np
    import pyarrow as pa

    try:
        rows, keys, values = op.columns(payloads)  # type: ignore[misc]
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        return np.asarray(ts, dtype=np.int64)[np.asarray(rows, dtype=np.int64)], keys, values
    except Exception:
        pass
    ts_o: list[int] = []
    ks: list[Any] = []
    vs: list[int] = []
    for t, q in zip(ts, payloads, strict=True):
        try:
            pairs = key_pairs(op.keys(q, 0) or (), q)
            for k, v in pairs:
                pa.array([k], pa.string())  # the key must travel as an Arrow string
                ts_o.append(t), ks.append(k), vs.append(int(v))
        except Exception as e:
            raise user_error(op.name, t, q, e) from e
    return (np.asarray(ts_o, dtype=np.int64), pa.array(ks, pa.string()),
            np.asarray(vs, dtype=np.int64))


def explode_kernel(chain: list[plan.Stateless], op: Aggregate, n_groups: int,
                   tokens: list[int]) -> plan.Kernel:
    """mapInArrow function: stream chunks -> one row per bucket (:data:`KEYED_SCHEMA`)."""
    P = len(tokens)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        buckets = plan.Buckets(n_groups, P)
        for batch in batches:
            ts: list[int] = []
            payloads: list[Any] = []
            for raw in batch.column("p").to_pylist():
                for t, _, _, p in plan.loads(raw):
                    if chain:
                        for q in plan.chain_outputs(chain, t, p):
                            ts.append(t), payloads.append(q)
                    else:
                        ts.append(t), payloads.append(p)
            if not payloads:
                continue
            t_col, keys, values = explode(op, ts, payloads)
            rows = pa.table({"ts": pa.array(t_col, pa.int64()), "k": keys,
                             "v": pa.array(values, pa.int64())})
            dest, bs, blobs = [], [], []
            for b, part in by_owner(rows, buckets):
                dest.append(tokens[b])
                bs.append(b)
                blobs.append(ipc_bytes(part))
            yield pa.RecordBatch.from_arrays(
                [pa.array(dest, pa.int32()), pa.array(bs, pa.int32()),
                 pa.array(blobs, pa.binary())], names=["dest", "b", "p"])

    return plan.gc_paused(run)


def by_owner(rows: Any, buckets: plan.Buckets) -> Iterator[tuple[int, Any]]:
    """``(b, rows of bucket b)`` for the buckets owning some row's key ``k``, each part in the
    rows' order. The key hash is computed once per distinct key (Arrow dictionary encoding)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    P = buckets.P
    if P == 1:
        if rows.num_rows:
            yield 0, rows
        return
    enc = pc.dictionary_encode(rows.column("k").combine_chunks())
    of = buckets.of
    per_key = np.fromiter((of(k) for k in enc.dictionary.to_pylist()), dtype=np.int64,
                          count=len(enc.dictionary))
    owner = per_key[enc.indices.to_numpy(zero_copy_only=False)]
    order = np.argsort(owner, kind="stable")  # keeps each bucket's rows in order
    cuts = np.searchsorted(owner[order], np.arange(P + 1))
    rows = rows.take(pa.array(order))
    for b in np.flatnonzero(cuts[1:] > cuts[:-1]).tolist():
        yield b, rows.slice(cuts[b], cuts[b + 1] - cuts[b])


def ipc_bytes(table: Any) -> bytes:
    """``table`` as an Arrow IPC stream."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def keyed_kernel(op: Aggregate,
                 final_wm: int | None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInArrow function over one partition's exploded rows: one O+ instance for all the
    keys the partition owns, the rows in ts order (a stable sort keeps arrival order among
    equal timestamps), end-of-input expiry; emits stream chunks (:data:`.plan.STREAM_SCHEMA`)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        tables = [pa.ipc.open_stream(blob).read_all()
                  for b in batches for blob in b.column("p").to_pylist()]
        inst = op.instance()
        out = plan.Outputs()
        try:
            if tables:
                table = pa.concat_tables(tables)
                ts = table.column("ts").to_numpy()
                order = np.argsort(ts, kind="stable")
                ts = ts[order]
                keys = table.column("k").take(pa.array(order))
                values = table.column("v").to_numpy()[order]
                for a in range(0, len(ts), SLICE):
                    inst.process_keyed(ts[a:a + SLICE], keys.slice(a, SLICE),
                                       values[a:a + SLICE])
                    if inst.out:
                        yield from out.collect(inst)
            if final_wm is not None:
                inst.advance(final_wm)
            inst.finish()
        except Exception as e:
            # a run of tuples failed; a RunTupleError from the kernel names its tuple
            err = user_error(op.name, None, None, e)
            if err is not e and not isinstance(e, RunTupleError):
                err = OperatorError(op.name, None, "<a run of tuples>", e)
            raise err from e
        yield from out.collect(inst, final=True)

    return plan.gc_paused(run)
