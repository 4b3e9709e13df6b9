"""Consistent hashing of partitioning keys onto channels (elastic-scaling §6.2).

The paper's partitioning function for partitioned-stateful parallel regions:
keys and channels hash onto one 128-bit ring, every channel at several points
("using multiple hash functions"), and a key belongs to the channel whose
point comes first clockwise from the key's position (a point at exactly the
key's position included). That gives

* *balance*: with V points per channel every channel owns about 1/N of the
  ring (relative spread about 1/sqrt(V));
* *monotonicity*: adding a channel moves keys only to it, removing one moves
  only its keys; on average M/N of M keys move (§6.2) and no key moves
  between two channels present before and after (what the migration
  protocol of §6.1 relies on to keep state moves small).

Lookup is O(1) expected, by the segment method the paper cites ([19], Karger
et al.): the ring is cut into S equal segments; each segment keeps the few
channel points inside it and the owner of anything after its last point.
A key's position picks its segment by one multiplication and shift, then at
most a handful of comparisons. With S at least twice the number of points
(the default) a segment holds under one point on average. The result is the
exact consistent-hashing owner, not a quantized approximation.

Positions come from BLAKE2b over a canonical encoding of the key, never from
Python's ``hash()``, which is salted per process (PYTHONHASHSEED): a key must
map to the same channel in every process of a shared-nothing region and
across restarts.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections.abc import Hashable, Iterable
from typing import Any

__all__ = [
    "ConsistentHashRing",
    "canonical_bytes",
    "moved_keys",
    "stable_hash",
]

RING_BITS = 128
_RING = 1 << RING_BITS
_KEY_PERSON = b"sf-ring-key"
_POINT_PERSON = b"sf-ring-point"


def canonical_bytes(key: Any) -> bytes:
    """A process-independent, unambiguous byte encoding of a partitioning key.

    Supported: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, and
    tuples and frozensets of those (nested). Other types have no encoding that is
    both process-independent and faithful to ``==`` (``pickle`` bytes differ for
    equal values, e.g. two equal dataclasses built differently), so they raise
    :class:`TypeError` naming the type. Values that compare equal as Python
    dict keys encode the same (``True``, ``1`` and ``1.0`` all encode as the
    integer 1), so a key and its state in a dict always land on the same
    channel.
    """
    out = bytearray()
    _encode(key, out)
    return bytes(out)


def _encode(key: Any, out: bytearray) -> None:
    # Each value is tag + length + payload, so no two different values (and no
    # two differently nested tuples) can produce the same bytes.
    if key is None:
        out += b"N"
    elif isinstance(key, int):  # bool included, as dicts treat True == 1
        _encode_int(int(key), out)
    elif isinstance(key, float):
        if key.is_integer():
            _encode_int(int(key), out)
        elif key != key:
            raise TypeError("NaN is not a usable partitioning key (NaN != NaN)")
        else:
            out += b"F" + struct.pack(">d", key)
    elif isinstance(key, str):
        data = key.encode("utf-8", "surrogatepass")
        out += b"S" + struct.pack(">Q", len(data)) + data
    elif isinstance(key, bytes | bytearray | memoryview):
        data = bytes(key)
        out += b"B" + struct.pack(">Q", len(data)) + data
    elif isinstance(key, tuple):
        out += b"T" + struct.pack(">Q", len(key))
        for item in key:
            _encode(item, out)
    elif isinstance(key, frozenset):
        # a set has no order: its elements' encodings, sorted, are the same whatever order
        # this process iterates it in (each encoding is self-delimiting, so sorting the
        # encodings cannot make two different sets collide)
        parts = []
        for item in key:
            part = bytearray()
            _encode(item, part)
            parts.append(bytes(part))
        parts.sort()
        out += b"Z" + struct.pack(">Q", len(parts))
        for part in parts:
            out += part
    else:
        raise TypeError(
            f"cannot hash a partitioning key of type {type(key).__name__}: use None, bool, "
            "int, float, str, bytes, or tuples and frozensets of those"
        )


def _encode_int(value: int, out: bytearray) -> None:
    data = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
    out += b"I" + struct.pack(">Q", len(data)) + data


def stable_hash(key: Any) -> int:
    """The key's position on the 128-bit ring (same in every process)."""
    digest = hashlib.blake2b(canonical_bytes(key), digest_size=16, person=_KEY_PERSON)
    return int.from_bytes(digest.digest(), "big")


def _point_hash(channel: Hashable, index: int) -> int:
    data = canonical_bytes((channel, index))
    digest = hashlib.blake2b(data, digest_size=16, person=_POINT_PERSON)
    return int.from_bytes(digest.digest(), "big")


class ConsistentHashRing:
    """Channels on a consistent-hashing ring with O(1) expected lookup.

    Args:
        channels: channel identifiers (ints or strs, or anything
            :func:`canonical_bytes` accepts); order does not matter.
        points_per_channel: virtual points per channel (default 256: about
            6 % relative spread of channel shares).
        segments: number of equal ring segments for lookup; ``None`` sizes it
            to the next power of two at least twice the number of points, and
            resizes it as channels come and go. Any positive count works.
    """

    def __init__(
        self,
        channels: Iterable[Hashable] = (),
        *,
        points_per_channel: int = 256,
        segments: int | None = None,
    ) -> None:
        if points_per_channel < 1:
            raise ValueError(f"points_per_channel must be >= 1, got {points_per_channel!r}")
        if segments is not None and segments < 1:
            raise ValueError(f"segments must be >= 1, got {segments!r}")
        self.points_per_channel = points_per_channel
        self._fixed_segments = segments
        self._channels: list[Hashable] = []
        # position -> channel for every point; collisions of 128-bit hashes are
        # not a practical concern, but the lower-sorting channel wins one
        # deterministically if they happen.
        self._points: dict[int, Hashable] = {}
        for channel in channels:
            if channel in self._channels:
                raise ValueError(f"duplicate channel {channel!r}")
            self._channels.append(channel)
            self._add_points(channel)
        self._rebuild()

    @classmethod
    def of_size(cls, n: int, **kwargs: Any) -> ConsistentHashRing:
        """A ring over channels ``0 .. n-1`` (the SN executor's numbering)."""
        return cls(range(n), **kwargs)

    # -- queries ---------------------------------------------------------

    @property
    def channels(self) -> tuple[Hashable, ...]:
        """The channels, in the order they were added."""
        return tuple(self._channels)

    @property
    def segments(self) -> int:
        """Number of lookup segments currently in use."""
        return self._segments

    def __len__(self) -> int:
        return len(self._channels)

    def __contains__(self, channel: object) -> bool:
        return channel in self._channels

    def __repr__(self) -> str:
        return (
            f"ConsistentHashRing(channels={self._channels!r}, "
            f"points_per_channel={self.points_per_channel}, segments={self._segments})"
        )

    def owner(self, key: Any) -> Hashable:
        """The channel that owns ``key``."""
        if not self._channels:
            raise LookupError("the ring has no channels")
        return self.owner_of_position(stable_hash(key))

    def owner_of_position(self, position: int) -> Hashable:
        """The channel owning a ring position in [0, 2**128)."""
        seg = (position * self._segments) >> RING_BITS
        positions = self._seg_positions[seg]
        if positions:
            i = bisect.bisect_left(positions, position)
            if i < len(positions):
                return self._seg_owners[seg][i]
        return self._seg_after[seg]

    def shares(self) -> dict[Hashable, float]:
        """Fraction of the ring each channel owns (what balance is about)."""
        result: dict[Hashable, float] = dict.fromkeys(self._channels, 0.0)
        if not self._channels:
            return result
        ordered = self._sorted_positions
        previous = ordered[-1] - _RING
        for pos in ordered:
            result[self._points[pos]] += (pos - previous) / _RING
            previous = pos
        return result

    # -- changes ---------------------------------------------------------

    def add_channel(self, channel: Hashable) -> None:
        """Add a channel; only keys that now belong to it change owner."""
        if channel in self._channels:
            raise ValueError(f"channel {channel!r} is already on the ring")
        canonical_bytes(channel)  # fail before changing anything
        self._channels.append(channel)
        self._add_points(channel)
        self._rebuild()

    def remove_channel(self, channel: Hashable) -> None:
        """Remove a channel; only its keys change owner."""
        if channel not in self._channels:
            raise ValueError(f"channel {channel!r} is not on the ring")
        self._channels.remove(channel)
        # Rebuilt from scratch rather than deleted point by point, so that a
        # (theoretical) hash collision the removed channel won is handed back.
        self._points = {}
        for other in self._channels:
            self._add_points(other)
        self._rebuild()

    def copy(self) -> ConsistentHashRing:
        """An independent ring with the same channels and settings."""
        return ConsistentHashRing(
            self._channels,
            points_per_channel=self.points_per_channel,
            segments=self._fixed_segments,
        )

    # -- internals -------------------------------------------------------

    def _add_points(self, channel: Hashable) -> None:
        for index in range(self.points_per_channel):
            pos = _point_hash(channel, index)
            holder = self._points.get(pos)
            if holder is None or _sort_token(channel) < _sort_token(holder):
                self._points[pos] = channel

    def _rebuild(self) -> None:
        self._sorted_positions = sorted(self._points)
        if self._fixed_segments is not None:
            self._segments = self._fixed_segments
        else:
            self._segments = 1 << max(0, (2 * len(self._points) - 1).bit_length())
        s = self._segments
        seg_positions: list[list[int]] = [[] for _ in range(s)]
        seg_owners: list[list[Hashable]] = [[] for _ in range(s)]
        for pos in self._sorted_positions:
            seg = (pos * s) >> RING_BITS
            seg_positions[seg].append(pos)
            seg_owners[seg].append(self._points[pos])
        # Owner of anything past a segment's last point: the first point of the
        # following segments, wrapping round the ring (hence the start value).
        after: list[Hashable | None] = [None] * s
        following: Hashable | None = (
            self._points[self._sorted_positions[0]] if self._sorted_positions else None
        )
        for seg in range(s - 1, -1, -1):
            after[seg] = following
            if seg_owners[seg]:
                following = seg_owners[seg][0]
        self._seg_positions = [tuple(p) for p in seg_positions]
        self._seg_owners = [tuple(o) for o in seg_owners]
        self._seg_after = after


def _sort_token(channel: Hashable) -> bytes:
    return canonical_bytes(channel)


def moved_keys(
    old: ConsistentHashRing, new: ConsistentHashRing, keys: Iterable[Any]
) -> dict[Any, tuple[Hashable, Hashable]]:
    """Keys whose owner differs between two rings: ``{key: (old, new)}``.

    This is the set of partitions the migration protocol must move when the
    splitter switches from ``old`` to ``new``.
    """
    result: dict[Any, tuple[Hashable, Hashable]] = {}
    for key in keys:
        position = stable_hash(key)
        before = old.owner_of_position(position)
        after = new.owner_of_position(position)
        if before != after:
            result[key] = (before, after)
    return result
