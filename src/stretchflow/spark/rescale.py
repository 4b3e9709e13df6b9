"""Rescaling a streaming query's state to N partitions (elastic-scaling §6's state migration,
done by Spark's offline checkpoint repartitioning).

``spark.sql.shuffle.partitions`` is fixed in a checkpoint's offset log: changing it on restart
is silently ignored (notes/SPARK.md). Since Spark 4.2 a *stopped* query's checkpoint can be
rewritten to N state partitions (``StreamingCheckpointManager.repartition``): it adds one
batch that moves every key's state — here one blob per key group — to the partition its hash
now gives. The query then restarts from that batch. Key groups make this cheap: G blobs move,
not one entry per key.

A running query is rescaled by :func:`rescale_running`: stop it at a micro-batch boundary
(``query.stop()`` between batches), repartition, restart on the same checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import StretchflowError


def state_partitions(checkpoint: str | os.PathLike) -> int | None:
    """The number of state partitions a checkpoint holds (from its latest offset log)."""
    import json

    offsets = Path(checkpoint) / "offsets"
    logs = sorted((p for p in offsets.glob("[0-9]*") if p.name.isdigit()),
                  key=lambda p: int(p.name))
    if not logs:
        return None
    for line in logs[-1].read_text().splitlines():
        if line.startswith("{") and "spark.sql.shuffle.partitions" in line:
            return int(json.loads(line)["conf"]["spark.sql.shuffle.partitions"])
    return None


def rescale(spark: Any, checkpoint: str | os.PathLike, n: int) -> None:
    """Rewrites a stopped query's checkpoint to ``n`` state partitions."""
    path = Path(checkpoint)
    if not (path / "offsets").is_dir():
        raise StretchflowError(f"{path}: not a streaming checkpoint (no offsets/ directory)")
    if n < 1:
        raise StretchflowError(f"rescale: the number of partitions must be >= 1, got {n}")
    if state_partitions(path) == n:
        return  # Spark refuses a no-op repartition; it is one
    try:
        # foreachBatch is the engine's sink: not an exactly-once sink, nothing to enforce
        spark._streamingCheckpointManager.repartition(str(path.resolve()), n, False)
    except Exception as e:
        raise StretchflowError(f"rescale of {path} to {n} partitions failed: {e}") from e


def rescale_running(run: Any, n: int) -> Any:
    """Stops a :class:`~stretchflow.spark.streaming.StreamRun` at a batch boundary, rescales
    its checkpoint to ``n`` partitions and restarts it; returns the run."""
    run.stop()
    rescale(run.spark, run.checkpoint, n)
    return run.start()
