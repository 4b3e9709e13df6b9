"""Whether Arrow's table of a JSON Lines chunk says what each line says (issue #31).

Arrow's JSON reader gives a chunk one schema, the union of its lines' keys, and fills it in:
a key missing from a line becomes a null, an object's keys come in the order they first
appeared in the chunk, and a field holding ints on some lines and floats on others becomes a
float column (``1`` reads as ``1.0``). The tuple path keeps each line's own object (orjson):
no key, the line's key order, the int. A table batch must not say otherwise, since a columnar
operator writes its output from the table. :func:`lines_agree` proves on the chunk's bytes,
vectorized, that it does not:

* **keys**: in every line, the keys (nested objects' too, in document order) are exactly the
  schema's keys in the schema's depth-first order. Each line must hold exactly as many key
  ends (a ``":`` whose quote follows a byte no opening or escaped quote follows, below) as
  the schema has keys, the ``j``-th the ``j``-th key's (told by the bytes that tell the
  schema's names apart, or by the whole name). A chunk where this cannot be shown (a name it
  cannot use, objects inside lists, a space between a key and its colon) goes to the exact
  path, never wrong, only slower;
* **floats**: where a float column holds an integral value, that line's value text must hold
  a ``.`` or an exponent (what makes orjson read a float); a float inside a list may not be
  integral at all; and no float may be infinite (a literal beyond the doubles, such as
  ``1.7976931348623159e308``, reads as inf in Arrow and is refused by orjson).

Why this is exact, in valid JSON (Arrow parsed it), for names free of quotes, backslashes and
control characters and not ending in whitespace, ``:``, ``,``, ``[`` or ``{``. A ``"``
followed by ``:`` whose byte before is none of those nor a backslash is an unescaped quote that
no opening quote can be (an opening quote follows whitespace or one of ``:,[{``), so a closing
one followed by ``:``: the end of a key. A line holding the schema's full count of keys, all
distinct paths (Arrow refuses a repeated key), holds every key path of the schema, since the
schema is the union of the lines'. The key ending at a place is one of the schema's names,
whose bytes at the telling distances before the colon (all within the shortest name's
``"K":``) are its own; and siblings have distinct names, so the same depth-first sequence of
names means the same order at every level.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

#: the bytes that may stand right before a string's opening quote (whitespace, ':', ',', '[',
#: '{') or make a quote an escaped one ('\\'): a key's name may not end in one
_BEFORE_OPEN = b" \t\r\n:,[{\\"
_BEFORE_OPEN_TEXT = _BEFORE_OPEN.decode()
_OPENS = np.zeros(256, bool)
_OPENS[list(_BEFORE_OPEN)] = True
_QUOTE, _COLON = ord('"'), ord(":")


def key_sequence(schema: Any) -> list[tuple[bytes, tuple[int, ...], Any]] | None:
    """The schema's keys in depth-first order: ``(text, path, type)`` each, ``text`` the
    key as it must stand in a line (``"K":``) and ``path`` the field indices down to it. None
    when a key cannot be spelled exactly (see the module doc) or an object type sits inside a
    list (a list's objects vary in number from line to line)."""
    import pyarrow as pa

    out: list[tuple[bytes, tuple[int, ...], Any]] = []
    # depth-first, without recursion: the reader bounds the depth, not Python's stack
    todo: list[tuple[Any, tuple[int, ...]]] = [
        (schema.field(i), (i,)) for i in reversed(range(len(schema)))]
    while todo:
        field, path = todo.pop()
        name = field.name
        if (not name or name[-1] in _BEFORE_OPEN_TEXT or '"' in name or "\\" in name
                or any(ord(ch) < 0x20 for ch in name)):
            return None
        out.append((b'"' + name.encode() + b'":', path, field.type))
        t = field.type
        if pa.types.is_struct(t):
            todo.extend((t.field(i), (*path, i)) for i in reversed(range(t.num_fields)))
        elif _holds_struct(t):
            return None
    return out


def _holds_struct(t: Any) -> bool:
    """Whether a (list) type holds an object type anywhere inside."""
    import pyarrow as pa

    while pa.types.is_list(t) or pa.types.is_large_list(t):
        t = t.value_type
        if pa.types.is_struct(t):
            return True
    return False


def _words(text: bytes) -> list[tuple[int, np.uint64, np.uint64 | None]]:
    """``text`` as little-endian 8-byte words ``(offset, word, mask)`` (mask None for a full
    word), to compare 8 bytes of a line at a time."""
    out = []
    for off in range(0, len(text), 8):
        w = text[off:off + 8]
        mask = None if len(w) == 8 else np.uint64((1 << (8 * len(w))) - 1)
        out.append((off, np.uint64(int.from_bytes(w.ljust(8, b"\0"), "little")), mask))
    return out


def lines_agree(chunk: bytes, a: np.ndarray, ends: np.ndarray, table: Any) -> bool:
    """Whether every line of ``chunk`` (``a``: its bytes as uint8, ``ends``: each line's last
    byte) holds exactly the keys of ``table`` (Arrow's parse of it) in its order, and a
    float column's integral values were written as floats. False when that cannot be proven:
    the caller then reads the chunk line by line."""
    plan = _plan(table.schema)
    if plan is None:
        return False
    keys, texts, telling = plan
    rows, nk = len(ends), len(keys)
    colons = np.flatnonzero(a == _COLON)
    colons = colons[a[colons - 1] == _QUOTE] if len(colons) else colons  # no line starts ':'
    if len(colons) != rows * nk:
        # a quote after whitespace, ':', ',', '[', '{' or a backslash may open a string or be
        # escaped, and no name ends in one of those: no key ends there (a string value that
        # opens with ':' or holds '\\":'). Dropped only when the count is off: a count that
        # holds with one of them among the ends is a line short of keys, rejected below
        colons = colons[~_OPENS[a[colons - 2]]]
        if len(colons) != rows * nk:
            return False
    if nk == 0:
        return True
    ends = ends.astype(np.int64, copy=False)
    c = colons.reshape(rows, nk)  # sorted: row r is line r when each line holds nk of them
    if not ((c[1:, 0] > ends[:-1]).all() and (c[:, -1] < ends).all()):
        return False
    # where the names' last bytes tell them apart (distance 2), comparing them shows too that
    # no end follows one of those bytes
    if (telling is None or 2 not in telling) and _OPENS[a[c - 2]].any():
        return False
    if telling is not None:
        for d in telling:  # the bytes that tell the names apart, at their place in each line
            if not (a[c - d] == np.array([t[-1 - d] for t in texts], np.uint8)).all():
                return False
    elif not _spelled(a, c, texts):
        return False
    return _floats_agree(a, keys, table, c, ends)


@functools.lru_cache(maxsize=64)
def _plan(schema: Any) -> tuple[list[tuple[bytes, tuple[int, ...], Any]], list[bytes],
                                list[int] | None] | None:
    """What :func:`lines_agree` needs of a schema, made once per schema (most chunks of a
    file share its first chunk's): its keys, their texts and the telling distances."""
    keys = key_sequence(schema)
    if keys is None:
        return None
    texts = [text for text, _, _ in keys]
    return keys, texts, _telling_offsets(sorted(set(texts))) if texts else []


def _telling_offsets(texts: list[bytes]) -> list[int] | None:
    """Distances ``d`` before a key's colon whose bytes, all within the shortest key's
    text, tell the (distinct) ``texts`` apart; None when no such distances do."""
    shortest = min(len(t) for t in texts)
    classes = [list(range(len(texts)))]  # keys not told apart yet
    out: list[int] = []
    for d in range(2, shortest):  # 0 and 1 are the ':' and '"' every key ends with
        split: dict[tuple[int, int], list[int]] = {}
        for n, cls in enumerate(classes):
            for k in cls:
                split.setdefault((n, texts[k][-1 - d]), []).append(k)
        if len(split) > len(classes):
            classes = list(split.values())
            out.append(d)
        if len(classes) == len(texts):
            return out
    return out if len(classes) == len(texts) else None


def _spelled(a: np.ndarray, c: np.ndarray, texts: list[bytes]) -> bool:
    """Whether the ``j``-th candidate of each line spells ``texts[j]`` in full, compared 8
    bytes at a time."""
    # 8 bytes from any offset, as one unaligned uint64 (padded: a key near the end)
    padded = np.zeros(len(a) + 8, np.uint8)
    padded[:len(a)] = a
    u = np.ndarray((len(a),), "<u8", padded, 0, (1,))
    for j, text in enumerate(texts):
        s = c[:, j] - (len(text) - 1)
        for off, word, mask in _words(text):
            got = u[s + off]
            if mask is not None:
                got = got & mask
            if not (got == word).all():
                return False
    return True


def _floats_agree(a: np.ndarray, keys: list[tuple[bytes, tuple[int, ...], Any]], table: Any,
                  c: np.ndarray, ends: np.ndarray) -> bool:
    """Whether every integral value of a float column was written with a ``.`` or an
    exponent (the value text of key ``j`` runs from its colon to the next key's opening
    quote, or to the line's end), and no float inside a list is integral."""
    import pyarrow as pa

    marks = None  # running count of '.', 'e', 'E' up to each byte, made when first needed
    for j, (_, path, t) in enumerate(keys):
        if not (pa.types.is_floating(t) or _holds_float_list(t)):
            continue
        # imported here: a reader of a table without floats need not load the kernels
        import pyarrow.compute as pc

        col = table.column(path[0])
        if len(path) > 1:
            col = pc.struct_field(col, list(path[1:]))
        if not pa.types.is_floating(t):  # floats in lists: no integral value at all
            while not pa.types.is_floating(col.type):
                col = pc.list_flatten(col)
        integral, finite = _integral(col)
        if not finite:  # a literal beyond the doubles: Arrow reads inf, orjson refuses it
            return False
        if not pa.types.is_floating(t):
            if integral.any():
                return False
            continue
        rows = np.flatnonzero(integral)
        if not len(rows):
            continue
        if marks is None:
            marks = np.zeros(len(a) + 1, np.int32)
            np.cumsum((a == ord(".")) | (a == ord("e")) | (a == ord("E")), out=marks[1:])
        # the next key's opening quote, or the line's end
        stop = c[rows, j + 1] - (len(keys[j + 1][0]) - 1) if j + 1 < len(keys) else ends[rows] + 1
        if ((marks[stop] - marks[c[rows, j] + 1]) == 0).any():
            return False
    return True


def _holds_float_list(t: Any) -> bool:
    import pyarrow as pa

    while pa.types.is_list(t) or pa.types.is_large_list(t):
        t = t.value_type
    return pa.types.is_floating(t)


def _integral(col: Any) -> tuple[np.ndarray, bool]:
    """Per value of a float (chunked) array, whether it is present and integral; and whether
    every present value is finite."""
    from ..batch import float_numpy

    parts, finite = [], True
    for ch in getattr(col, "chunks", [col]):
        v, valid = float_numpy(ch)
        ok = np.floor(v) == v
        fin = np.isfinite(v)
        if valid is not None:
            ok &= valid
            fin |= ~valid
        finite = finite and bool(fin.all())
        parts.append(ok)
    return (np.concatenate(parts) if parts else np.zeros(0, bool)), finite
