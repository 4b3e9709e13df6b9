"""A stable hash of keys: the same in every process (Python's ``hash`` of str is salted)."""

from __future__ import annotations

import zlib
from collections.abc import Hashable


def stable_hash(key: Hashable) -> int:
    """A 32-bit hash of a key built from str, bytes, int, float, bool, None and tuples of them.

    >>> stable_hash("word") == stable_hash("word"), stable_hash(7)
    (True, 7)
    """
    if type(key) is int:
        return key & 0xFFFFFFFF
    return zlib.crc32(_encode(key))


def _encode(key: Hashable) -> bytes:
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return b"b" + key
    if isinstance(key, bool) or key is None:
        return b"c" + repr(key).encode()
    if isinstance(key, int | float):
        return b"n" + repr(key).encode()
    if isinstance(key, tuple):
        return b"t(" + b"\x00".join(_encode(k) for k in key) + b")"
    if isinstance(key, frozenset):
        return b"f(" + b"\x00".join(sorted(_encode(k) for k in key)) + b")"
    raise TypeError(f"cannot hash key {key!r} of type {type(key).__name__} stably")
