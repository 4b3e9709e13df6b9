"""Elasticity: controllers that choose a parallelism, and key partitioning.

* :mod:`.controller` — the interface every executor talks to
  (:class:`Metrics` in, :class:`Decision` out).
* :mod:`.threshold` — STRETCH's threshold controller and a key-group packer
  for VSN's f_μ.
* :mod:`.level` — the SASO level controller of elastic-scaling (Alg. 1–3).
* :mod:`.consistent_hash` — the consistent-hashing ring of the SN executor.
"""

from __future__ import annotations

from typing import Any

from .consistent_hash import ConsistentHashRing, canonical_bytes, moved_keys, stable_hash
from .controller import (
    Controller,
    Decision,
    Metrics,
    PeriodAccumulator,
    coefficient_of_variation,
    combine_metrics,
)
from .level import LevelController, LevelRecord, LoadChange, level_channels, level_table
from .threshold import (
    Packing,
    ThresholdController,
    pack_key_groups,
    round_robin_key_groups,
    threshold_parallelism,
)

#: Controllers by the name the command line's ``--controller NAME`` uses.
CONTROLLERS: dict[str, type[Controller]] = {
    ThresholdController.name: ThresholdController,
    LevelController.name: LevelController,
}


def make_controller(name: str, **options: Any) -> Controller:
    """Build a controller by name (``threshold`` or ``level``) with keyword options."""
    try:
        cls = CONTROLLERS[name]
    except KeyError:
        known = ", ".join(sorted(CONTROLLERS))
        raise ValueError(f"unknown controller {name!r}; known: {known}") from None
    return cls(**options)


__all__ = [
    "CONTROLLERS",
    "ConsistentHashRing",
    "Controller",
    "Decision",
    "LevelController",
    "LevelRecord",
    "LoadChange",
    "Metrics",
    "Packing",
    "PeriodAccumulator",
    "ThresholdController",
    "canonical_bytes",
    "coefficient_of_variation",
    "combine_metrics",
    "level_channels",
    "level_table",
    "make_controller",
    "moved_keys",
    "pack_key_groups",
    "round_robin_key_groups",
    "stable_hash",
    "threshold_parallelism",
]
