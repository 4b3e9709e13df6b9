"""Where a file source's bytes come from: a local path, standard input (``-``), a URL
(``s3://``, ``gs://``, ``file://``: :mod:`stretchflow.io.objectstore`), gzip or zstd
compressed (``.gz``, ``.zst``/``.zstd`` after the format's extension), or a Spark output
directory (``part-*`` files and ``_SUCCESS``) read part by part in name order as one input.

:func:`resolve` names what to read (an :class:`Input`); :func:`open_stream` opens it for
sequential reading, decompressed; :func:`open_random` opens a Parquet file (which needs random
access). The file sources (:mod:`stretchflow.io.sources`) read through these, on the tuple and
the batch path alike, so both see the same bytes and errors name the same place: a line number
counts decompressed lines, and in a part directory it is the line (or row) of its part.

This module never imports the sources (they import it).
"""

from __future__ import annotations

import bisect
import io
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import SourceError

#: compression suffixes (after the format's: ``x.jsonl.gz``) and pyarrow's codec names
COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}
#: the format of each data suffix
FORMATS = {".jsonl": ".jsonl", ".json": ".jsonl", ".ndjson": ".jsonl", ".csv": ".csv",
           ".parquet": ".parquet"}
STDIN = "-"
SUCCESS = "_SUCCESS"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(spec: Any) -> bool:
    """Whether ``spec`` is a URL (``scheme://...``) rather than a local path."""
    return isinstance(spec, str) and _URL.match(spec) is not None


def local_path(spec: str | os.PathLike) -> str | os.PathLike:
    """``file://`` URLs as local paths (anything else unchanged): the local code reads them."""
    if isinstance(spec, str) and spec[:7].lower() == "file://":
        u = urlparse(spec)
        return unquote(u.netloc + u.path) if u.netloc not in ("", "localhost") else \
            unquote(u.path)
    return spec


def split_suffix(name: str) -> tuple[str, str | None]:
    """``(data suffix, compression)`` of a file name: ``("x.jsonl.gz")`` -> ``(".jsonl",
    "gzip")``; the suffix is lower case and may be unknown (the caller says so)."""
    p = PurePosixPath(name.lower())
    comp = COMPRESSIONS.get(p.suffix)
    if comp is not None:
        p = p.with_suffix("")
    return p.suffix, comp


def format_of(name: str) -> tuple[str, str | None]:
    """``(format, compression)`` of a file name, or a ValueError naming what is known."""
    suffix, comp = split_suffix(name)
    fmt = FORMATS.get(suffix)
    if fmt is None:
        raise ValueError(f"{name}: unknown input format {suffix!r}; use .jsonl, .csv or "
                         f".parquet, optionally compressed (.gz, .zst)")
    if comp is not None and fmt == ".parquet":
        raise ValueError(f"{name}: a Parquet file is compressed inside (its pages); a "
                         f"{comp}-compressed .parquet file cannot be read, decompress it")
    return fmt, comp


@dataclass
class Input:
    """One thing to read: ``spec`` is ``-`` (stdin), a local path or a URL; ``parts`` the part
    files of a Spark output directory, in name order (then ``spec`` is the directory)."""

    spec: str
    fmt: str
    compression: str | None = None
    parts: list[Input] | None = None
    #: ``(first line or row, part)`` of every part opened so far, for error messages
    starts: list[tuple[int, str]] = field(default_factory=list)

    @property
    def display(self) -> str:
        return "<stdin>" if self.spec == STDIN else self.spec

    def where(self, n: int, row: bool = False) -> str:
        """Line (or row) ``n`` of the whole input, as ``file:line`` (``file row r``) of the
        part holding it."""
        name, k = self.display, n
        if self.parts is not None and self.starts:
            i = bisect.bisect_right([s for s, _ in self.starts], n) - 1
            if i >= 0:
                name, k = self.starts[i][1], n - self.starts[i][0] + 1
        return f"{name} row {k}" if row else f"{name}:{k}"


def resolve(spec: str | os.PathLike, source: str, fmt: str | None = None) -> Input:
    """What ``spec`` names, for source ``source`` (errors name it). ``fmt`` (``.jsonl``,
    ``.csv``, optionally with a compression suffix) is the format of stdin or of a part
    directory holding no part; files are known by their names."""
    s = os.fspath(local_path(spec))
    if fmt is not None and not fmt.startswith("."):
        fmt = "." + fmt  # "csv", "jsonl.gz" as well as ".csv"
    if s == STDIN:
        f, comp = format_of("stdin" + (fmt or ".jsonl"))
        if f == ".parquet":
            raise ValueError("--input -: Parquet needs random access and cannot be read from "
                             "standard input; give a file")
        return Input(STDIN, f, comp)
    if is_url(s):
        from .objectstore import is_dir, list_dir

        if is_dir(s, source):
            return _parts(s, list_dir(s, source), source, fmt)
        return Input(s, *format_of(s))
    p = Path(s)
    if p.is_dir():
        names = [c.name for c in p.iterdir()]
        return _parts(s, names, source, fmt, local=True)
    return Input(s, *format_of(p.name))


def is_spark_dir(names: list[str]) -> bool:
    """Whether a directory listing looks like a Spark output directory."""
    return SUCCESS in names or any(n.startswith("part-") for n in names)


def _parts(spec: str, names: list[str], source: str, fmt: str | None,
           local: bool = False) -> Input:
    if not is_spark_dir(names):
        raise SourceError(source, spec, "a directory that is neither a Spark output directory "
                          "(part-* files and _SUCCESS) nor a stretchflow part directory "
                          "(_manifest.json); give a file")
    if SUCCESS not in names:
        raise SourceError(source, spec, f"no {SUCCESS} marker: the Spark job writing this "
                          f"directory did not finish (its parts may be incomplete)")
    parts = sorted(n for n in names if n.startswith("part-"))
    sep = os.sep if local else "/"
    base = spec.rstrip("/" + sep)
    kinds = {}
    for n in parts:
        try:
            kinds[n] = format_of(n)
        except ValueError as e:
            raise SourceError(source, f"{base}{sep}{n}", str(e).split(": ", 1)[1]) from None
    fmts = {f for f, _ in kinds.values()}
    if len(fmts) > 1:
        raise SourceError(source, spec,
                          f"part files of several formats ({', '.join(sorted(fmts))})")
    if fmts:
        f = fmts.pop()
    else:  # an empty result: Spark wrote _SUCCESS and no part
        suffix = split_suffix(Path(base).name)[0]
        f = FORMATS.get(suffix) or format_of("x" + (fmt or ".jsonl"))[0]
    return Input(spec, f, None, [Input(f"{base}{sep}{n}", *kinds[n]) for n in parts])


# -- opening ------------------------------------------------------------------------------------
class _Raw(io.RawIOBase):
    """A pyarrow input stream as a raw Python stream (so io.BufferedReader can split lines:
    pyarrow's streams have no readline)."""

    def __init__(self, stream: Any):
        self._s = stream

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._s.read(len(b))
        n = len(data)
        b[:n] = data
        return n

    def close(self) -> None:
        if not self.closed:
            self._s.close()
        super().close()


class _Stdin(io.RawIOBase):
    """Standard input, read once: closing it leaves the process's stdin open."""

    def __init__(self) -> None:
        self._b = sys.stdin.buffer

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._b.read1(len(b)) if hasattr(self._b, "read1") else self._b.read(len(b))
        n = len(data)
        b[:n] = data
        return n


_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}


def _decompressed(stream: Any, comp: str | None) -> Any:
    if comp is None:
        return stream
    import pyarrow as pa

    return _Raw(pa.CompressedInputStream(stream, comp))


def _open_one(inp: Input, source: str) -> Any:
    """One file of ``inp`` as a raw binary stream, decompressed."""
    if inp.spec == STDIN:
        stdin = io.BufferedReader(_Stdin(), 1 << 16)
        # a pipe has no name to tell compression by: its first bytes do (gzip, zstd magic)
        head = stdin.peek(4)[:4]
        comp = inp.compression or next((c for m, c in _MAGIC.items() if head.startswith(m)),
                                       None)
        if comp is None:
            return stdin
        import pyarrow as pa

        return _Raw(pa.CompressedInputStream(pa.PythonFile(stdin, mode="r"), comp))
    if is_url(inp.spec):
        from .objectstore import open_input_stream

        return _decompressed(open_input_stream(inp.spec, source), inp.compression)
    try:
        f = open(inp.spec, "rb", buffering=0)  # noqa: SIM115 (the caller closes it)
    except OSError as e:
        why = "no such file" if isinstance(e, FileNotFoundError) else e.strerror
        raise SourceError(source, inp.spec, f"cannot open: {why}") from e
    if inp.compression is None:
        return f
    import pyarrow as pa

    return _Raw(pa.CompressedInputStream(pa.PythonFile(f, mode="r"), inp.compression))


class _Concat(io.RawIOBase):
    """The part files of ``inp`` one after the other (a newline added after a part whose last
    line has none), recording in ``inp.starts`` the line each part starts at."""

    def __init__(self, inp: Input, source: str):
        self._inp, self._source = inp, source
        self._todo = list(inp.parts or [])
        self._cur: Any = None
        self._lines = 0  # newlines read so far
        self._last = b"\n"
        inp.starts.clear()

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while True:
            if self._cur is None:
                if not self._todo:
                    return 0
                part = self._todo.pop(0)
                self._cur = _open_one(part, self._source)
                self._inp.starts.append((self._lines + 1, part.spec))
            data = self._cur.read(len(b))
            if data:
                self._lines += data.count(b"\n")
                self._last = data[-1:]
                b[:len(data)] = data
                return len(data)
            self._cur.close()
            self._cur = None
            if self._last != b"\n":  # the part's last line ends here, not in the next part
                self._last = b"\n"
                self._lines += 1
                b[:1] = b"\n"
                return 1

    def close(self) -> None:
        if self._cur is not None:
            self._cur.close()
            self._cur = None
        super().close()


def open_stream(inp: Input, source: str) -> io.BufferedReader:
    """``inp`` (a file, stdin or a part directory) as one buffered binary stream of its
    decompressed bytes; errors name ``source`` and the file."""
    raw = _Concat(inp, source) if inp.parts is not None else _open_one(inp, source)
    return io.BufferedReader(raw, 1 << 20)


def arrow_stream(inp: Input, source: str) -> Any:
    """One file of ``inp`` as a pyarrow input stream (CSV reader input), decompressed."""
    import pyarrow as pa

    if inp.spec != STDIN and not is_url(inp.spec):
        if not os.path.isfile(inp.spec):
            raise SourceError(source, inp.spec, "cannot open: no such file")
        return pa.input_stream(inp.spec, compression=inp.compression)
    if is_url(inp.spec):
        from .objectstore import open_input_stream

        stream = open_input_stream(inp.spec, source)
        return pa.CompressedInputStream(stream, inp.compression) if inp.compression else stream
    return pa.PythonFile(open_stream(inp, source), mode="r")


def open_random(inp: Input, source: str) -> Any:
    """One Parquet file of ``inp`` for random access (a local path, or an object store
    file)."""
    if is_url(inp.spec):
        from .objectstore import open_input_file

        return open_input_file(inp.spec, source)
    if not os.path.isfile(inp.spec):
        raise SourceError(source, inp.spec, "cannot open: no such file")
    return inp.spec


def files_of(inp: Input) -> list[Input]:
    """The files to read, in order: the parts of a part directory, else ``inp`` itself."""
    return inp.parts if inp.parts is not None else [inp]


# -- timestamps ---------------------------------------------------------------------------------
_PER_MS = {"s": -1000, "ms": 1, "us": 1000, "ns": 1_000_000}


def ms_timestamps(batch: Any, ts_field: str) -> Any:
    """``batch`` (an Arrow record batch) with its timestamp column, when of a ``timestamp``
    type (any unit, with a time zone or not: Arrow stores UTC), as int64 milliseconds since
    the epoch (floor: 1 ms before the epoch plus 1 us is -1, as ``datetime`` arithmetic
    gives). Other batches are returned as they are."""
    import numpy as np
    import pyarrow as pa

    i = batch.schema.get_field_index(ts_field)
    if i < 0 or not pa.types.is_timestamp(batch.schema.field(i).type):
        return batch
    col = batch.column(i)
    k = _PER_MS[col.type.unit]
    ints = col.view(pa.int64()) if hasattr(col, "view") else col.cast(pa.int64())
    n, off = len(ints), ints.offset
    vals = np.frombuffer(ints.buffers()[1], np.int64, off + n) if n else np.empty(0, np.int64)
    # numpy, not Arrow compute: a Python scalar in pc calls makes pyarrow import pandas
    out = vals * -k if k < 0 else (vals // k if k > 1 else vals.copy())
    arr = pa.Array.from_buffers(pa.int64(), n, [ints.buffers()[0], pa.py_buffer(out)],
                                ints.null_count, off)
    return batch.set_column(i, pa.field(ts_field, pa.int64()), arr)


# -- the file sources' side ---------------------------------------------------------------------
def path_of(path: str | os.PathLike) -> tuple[Path | str, str]:
    """``(path attribute, spec)`` of a file source: a URL stays a string (a Path would fold
    its ``//``), a ``file://`` URL becomes its local path."""
    spec = os.fspath(local_path(path))
    return (spec if is_url(spec) else Path(spec)), spec


def name_of(spec: str) -> str:
    """A source's default name: the file's (or object's, or directory's) name."""
    if spec == STDIN:
        return "stdin"
    return PurePosixPath(urlparse(spec).path).name if is_url(spec) else Path(spec).name


class FileInput:
    """What the file sources (JSON Lines, CSV, Parquet) share: ``self.spec`` resolved once
    (:func:`resolve`), opened once per read, stdin only once ever."""

    spec: str
    name: str
    #: the format of stdin (``.jsonl``, ``.csv``; ``.jsonl.gz`` for compressed input)
    input_format: str | None = None

    def _input(self) -> Input:
        inp = self.__dict__.get("_inp")
        if inp is None:
            try:
                inp = resolve(self.spec, self.name, self.input_format)
            except ValueError as e:
                raise SourceError(self.name, self.spec, str(e).removeprefix(
                    f"{self.spec}: ")) from None
            self._inp = inp
        return inp

    def _where(self, n: Any, row: bool = False) -> str:
        inp = self.__dict__.get("_inp") or Input(self.spec, "")
        return inp.where(n, row) if isinstance(n, int) else f"{inp.display} {n}"

    def _claim_stdin(self) -> None:
        """Standard input can be read once: a second read (a flow run twice, a resumed run
        in the same process) is an error, not an empty input."""
        if self.spec != STDIN:
            return
        if self.__dict__.get("_stdin_read"):
            raise SourceError(self.name, "<stdin>", "standard input was read already: it is a "
                              "one-shot input and cannot be read again (save it to a file to "
                              "read it more than once)")
        self._stdin_read = True

    def _open_stream(self) -> io.BufferedReader:
        inp = self._input()
        self._claim_stdin()
        return open_stream(inp, self.name)

    def _part_batches(self, read: Any) -> Any:
        """The record batches of every file of the input in order, ``read(file)`` giving one
        file's; records where each part starts (row numbers in errors are per part)."""
        inp = self._input()
        self._claim_stdin()
        inp.starts.clear()
        row = 0
        for f in files_of(inp):
            inp.starts.append((row + 1, f.spec))
            for b in read(f):
                row += b.num_rows
                yield b
