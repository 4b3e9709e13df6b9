"""Consistent hashing (elastic-scaling §6.2): balance, monotonicity, stability."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretchflow.elastic import ConsistentHashRing, canonical_bytes, moved_keys, stable_hash

KEYS = [f"user-{i}" for i in range(20_000)]
SMALL_KEYS = [f"k{i}" for i in range(3_000)] + list(range(1_000)) + [("w", i) for i in range(500)]


def _brute_owner(ring: ConsistentHashRing, key: object) -> object:
    """Reference: scan the sorted points for the first at or after the key."""
    position = stable_hash(key)
    points = sorted(
        (stable_pos, ch)
        for ch in ring.channels
        for stable_pos in _points_of(ring, ch)
    )
    for pos, channel in points:
        if pos >= position:
            return channel
    return points[0][1]


def _points_of(ring: ConsistentHashRing, channel: object) -> list[int]:
    from stretchflow.elastic.consistent_hash import _point_hash

    return [_point_hash(channel, i) for i in range(ring.points_per_channel)]


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 24), prefix=st.sampled_from(["", "ch", "node-"]))
def test_balance(n: int, prefix: str) -> None:
    channels = [f"{prefix}{i}" if prefix else i for i in range(n)]
    ring = ConsistentHashRing(channels)
    counts = Counter(ring.owner(key) for key in KEYS)
    assert set(counts) == set(channels)
    for channel in channels:
        share = counts[channel] / len(KEYS)
        # 256 points per channel: ~6 % relative spread of arcs, plus sampling.
        assert abs(share * n - 1) <= 0.35, (channel, share)
    shares = ring.shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert max(shares.values()) * n <= 1.35


@settings(max_examples=25, deadline=None)
@given(
    channels=st.lists(st.integers(0, 200), min_size=1, max_size=12, unique=True),
    new=st.integers(201, 400),
    points=st.sampled_from([1, 8, 64]),
)
def test_monotonic_add_and_remove(channels: list[int], new: int, points: int) -> None:
    old = ConsistentHashRing(channels, points_per_channel=points)
    grown = old.copy()
    grown.add_channel(new)
    moved = moved_keys(old, grown, SMALL_KEYS)
    # Adding moves keys only TO the new channel ...
    assert all(after == new for _, after in moved.values())
    # ... and removing it again moves exactly those keys back.
    shrunk = grown.copy()
    shrunk.remove_channel(new)
    back = moved_keys(grown, shrunk, SMALL_KEYS)
    assert set(back) == set(moved)
    assert all(before == new for before, _ in back.values())
    assert all(shrunk.owner(k) == old.owner(k) for k in SMALL_KEYS)
    if len(channels) > 1:
        victim = channels[0]
        smaller = old.copy()
        smaller.remove_channel(victim)
        gone = moved_keys(old, smaller, SMALL_KEYS)
        # Removing moves only the removed channel's keys.
        assert all(before == victim for before, _ in gone.values())
        assert set(gone) == {k for k in SMALL_KEYS if old.owner(k) == victim}


def test_moved_fraction_is_about_one_over_n() -> None:
    # §6.2: on average M/N partitions move when the N-th channel arrives.
    old = ConsistentHashRing(range(7))
    new = old.copy()
    new.add_channel(7)
    fraction = len(moved_keys(old, new, KEYS)) / len(KEYS)
    assert abs(fraction * 8 - 1) < 0.3


@pytest.mark.parametrize("segments", [None, 1, 3, 1024])
def test_segment_lookup_is_exact(segments: int | None) -> None:
    ring = ConsistentHashRing(["a", "b", "c"], points_per_channel=16, segments=segments)
    for key in SMALL_KEYS[::7]:
        assert ring.owner(key) == _brute_owner(ring, key)
    # The ring wraps: a key past the last point belongs to the first point.
    assert ring.owner_of_position((1 << 128) - 1) == ring.owner_of_position(0)


def test_auto_segments_grow_with_points() -> None:
    ring = ConsistentHashRing(range(4), points_per_channel=100)
    assert ring.segments >= 2 * 400
    ring.add_channel(4)
    assert ring.segments >= 2 * 500
    assert ConsistentHashRing(range(4), segments=7).segments == 7


def test_canonical_encoding() -> None:
    # Equal dict keys encode equal, so state and routing agree.
    assert canonical_bytes(1) == canonical_bytes(True) == canonical_bytes(1.0)
    assert canonical_bytes(("a", 1)) != canonical_bytes(("a", "1"))
    assert canonical_bytes(("ab", "c")) != canonical_bytes(("a", "bc"))
    assert canonical_bytes((("a",), "b")) != canonical_bytes(("a", ("b",)))
    assert canonical_bytes(-1) != canonical_bytes(255)
    assert canonical_bytes(0.5) != canonical_bytes(1)
    assert canonical_bytes(b"x") != canonical_bytes("x")
    with pytest.raises(TypeError):
        canonical_bytes([1, 2])
    with pytest.raises(TypeError):
        canonical_bytes(float("nan"))


def test_golden_values() -> None:
    # Pinned so that a change of encoding or hash, which would silently
    # re-partition persisted state, fails loudly.
    ring = ConsistentHashRing(range(4))
    observed = {key: ring.owner(key) for key in ("alpha", 42, ("x", 7))}
    assert observed == GOLDEN_OWNERS
    assert stable_hash("alpha") == GOLDEN_HASH


GOLDEN_OWNERS: dict[object, object] = {"alpha": 1, 42: 0, ("x", 7): 0}
GOLDEN_HASH = 199611880963198953425580709245918293943


_CHILD = """
import json, sys
from stretchflow.elastic import ConsistentHashRing
ring = ConsistentHashRing(["a", "b", "c", "d", "e"])
keys = [f"key-{i}" for i in range(2000)] + list(range(500)) + [("t", i, "u") for i in range(200)]
json.dump([ring.owner(k) for k in keys], sys.stdout)
"""


def _owners_in_subprocess(seed: str) -> list[str]:
    src = Path(__file__).resolve().parents[1] / "src"
    env = dict(os.environ, PYTHONHASHSEED=seed)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, check=True,
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def test_owner_does_not_depend_on_pythonhashseed() -> None:
    first = _owners_in_subprocess("1")
    second = _owners_in_subprocess("4242")
    assert first == second
    ring = ConsistentHashRing(["a", "b", "c", "d", "e"])
    keys = [f"key-{i}" for i in range(2000)] + list(range(500))
    keys += [("t", i, "u") for i in range(200)]
    assert [ring.owner(k) for k in keys] == first


def test_errors() -> None:
    with pytest.raises(LookupError):
        ConsistentHashRing().owner("x")
    ring = ConsistentHashRing([1, 2])
    with pytest.raises(ValueError):
        ring.add_channel(1)
    with pytest.raises(ValueError):
        ring.remove_channel(3)
    with pytest.raises(ValueError):
        ConsistentHashRing([1, 1])
    with pytest.raises(TypeError):
        ring.add_channel([3])  # type: ignore[arg-type]
    assert 1 in ring and len(ring) == 2 and ring.channels == (1, 2)
    assert ConsistentHashRing.of_size(3).channels == (0, 1, 2)
