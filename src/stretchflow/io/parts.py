"""Part directories: output committed atomically and idempotently, one part per epoch.

A streaming run cannot append to one output file: a run that is stopped and resumed, or killed
and restarted, replays the epochs (Spark micro-batches) whose commit it had not recorded, and
appending would write them twice, while reopening the file would drop the earlier runs. So its
output is a *directory*: one part file per epoch id and a manifest of the committed parts.

Layout of ``DIR``::

    DIR/part-00000000.jsonl     epoch 0's records (or .csv / .parquet: the output's format)
    DIR/part-00000003.jsonl     epochs without output have no part
    DIR/_manifest.json          {"format": ..., "suffix": ..., "owner": ..., "parts": {id: n}}
    DIR/_lock                   held (flock) by the one writer
    DIR/.part-00000004.jsonl.tmp-PID   a part being written: never read

Committing epoch ``i`` (:meth:`PartWriter.commit`): the records go to a hidden temporary file,
which is fsynced and renamed (``os.replace``, atomic) to ``part-i``; the directory is fsynced;
then the manifest is rewritten the same way (temp, fsync, replace, directory fsync) with
``i`` in it. Committing ``i`` again (a replayed epoch) replaces the part: never two copies.
The manifest is the commit: a reader (:func:`committed_parts`, :func:`read_parts`) reads the
parts it lists in id order and ignores every other file, so a crash at any point leaves the
previous state readable (a part renamed but not yet in the manifest is not read; its epoch
is replayed and rewrites it).

The rule for ``--output PATH`` of a streaming run: PATH itself is the directory (as Spark
writes ``out.parquet/``); the format of the parts is PATH's extension. A plain file at PATH
(say from an earlier batch run) is never replaced: that is an error saying what to do, as is a
non-empty directory that is not a part directory.

The manifest names its ``owner`` (for Spark, the query id kept in the checkpoint): a resumed
query continues its own directory; a new query (fresh checkpoint) writing to a directory
owned by another one starts it over — it recomputes everything from its inputs, as a batch
run rewrites its output file — while a resumed query refuses a directory that another query
wrote (its parts would mix with theirs).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import SourceError, StretchflowError
from .sinks import CsvSink, JsonLinesSink, ObjectSink, ParquetSink, Sink

MANIFEST = "_manifest.json"
LOCK = "_lock"
FORMAT = "stretchflow-parts/1"
#: part formats by extension: the sink class that writes one part
WRITERS: dict[str, type[Sink]] = {".jsonl": JsonLinesSink, ".json": JsonLinesSink,
                                  ".ndjson": JsonLinesSink, ".csv": CsvSink,
                                  ".parquet": ParquetSink}
_PART = re.compile(r"part-(\d{8,})(\.[a-z]+)$")


def part_name(part_id: int, suffix: str = ".jsonl") -> str:
    """The file name of part ``part_id`` (zero-padded: names sort in id order)."""
    return f"part-{part_id:08d}{suffix}"


def is_part_dir(path: str | os.PathLike) -> bool:
    """True for a directory holding a part manifest."""
    return (Path(path) / MANIFEST).is_file()


def check_output_path(path: str | os.PathLike) -> Path:
    """``path`` as the directory of a streaming output, or a clear error: a plain file there
    (never destroyed), or a non-empty directory that is not a part directory."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise StretchflowError(
            f"--output {p}: a streaming run writes a directory of part files at this path "
            f"(read it with `stretchflow cat {p}`), and a file is there, probably from an "
            f"earlier non-streaming run; move or delete it, or give another --output")
    # a directory a killed run was creating holds its lock and temp files at most (the
    # manifest is written last): nothing in it was committed, so it opens as new
    if p.is_dir() and not is_part_dir(p) and any(
            c.name != LOCK and not is_temp(c.name) for c in p.iterdir()):
        raise StretchflowError(
            f"--output {p}: the directory is not empty and is not a stretchflow part "
            f"directory (no {MANIFEST}); give a new or empty directory")
    return p


def take_lock(directory: Path, busy: str) -> Any:
    """An exclusive lock on ``directory`` (its ``_lock`` file, flock: released when the
    returned file is closed or the process dies), or a StretchflowError ``busy`` when another
    process holds it."""
    import fcntl

    f = open(directory / LOCK, "a")  # noqa: SIM115 (held until close)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise StretchflowError(busy) from None
    return f


def is_temp(name: str) -> bool:
    """A temporary file :func:`write_atomic` writes (``.NAME.tmp-PID``)."""
    return name.startswith(".") and ".tmp-" in name


def sweep_spark_temps(checkpoint: str | os.PathLike) -> list[Path]:
    """Removes the temporary files a killed Spark driver left in its streaming checkpoint and
    returns them: Spark writes every offset, commit and state changelog file as
    ``.NAME.UUID[.TIDn].tmp`` (with Hadoop's ``..NAME....tmp.crc``) and renames it into place;
    a SIGKILL in between leaves it there and no later run removes it (bench kills found them).
    Call it before the query starts, while no other run uses the checkpoint (the output
    directory's lock: one run per query). A checkpoint that is not a local directory (a URI)
    is left alone."""
    root = Path(checkpoint)
    if not root.is_dir():
        return []
    found = [f for pattern in (".*.tmp", ".*.tmp.crc") for f in root.rglob(pattern)]
    for f in found:
        f.unlink(missing_ok=True)
    return found


def fsync_dir(path: Path) -> None:
    """Makes a rename or a new file in directory ``path`` durable (fsync of the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path`` all or nothing: temp file, fsync, rename, directory fsync."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def copy_file(src: Path, out: Any) -> int:
    """Appends the bytes of file ``src`` to ``out`` (an open binary file: a sink's, or
    stdout's buffer) and returns how many. The copy is the kernel's (``copy_file_range``):
    through Python (``shutil.copyfileobj``) a checkpointed run's publish of a 250 MB output
    took about 1 s under load, in the kernel 0.07 s (a measurement on this machine,
    docs/checkpoints.md "Cost"). Where the kernel cannot (a pipe or terminal, a file opened
    for append, another file system on an old kernel) the rest is copied through Python."""
    out.flush()  # what ``out`` buffered goes before
    n = 0
    with open(src, "rb", buffering=0) as fh:
        if hasattr(os, "copy_file_range"):
            ifd, ofd = fh.fileno(), out.fileno()
            try:
                while k := os.copy_file_range(ifd, ofd, 1 << 30):
                    n += k
                return n
            except OSError:  # from where the kernel stopped (both offsets moved with it)
                pass
        while chunk := fh.read(1 << 20):
            out.write(chunk)
            n += len(chunk)
    return n


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of part directory ``path`` (an error naming it when unreadable)."""
    m = Path(path) / MANIFEST
    try:
        man = json.loads(m.read_bytes())
    except (OSError, ValueError) as e:
        raise SourceError(str(path), MANIFEST, f"cannot read the part manifest: {e}") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT or not isinstance(
            man.get("parts"), dict):
        raise SourceError(str(path), MANIFEST, f"not a {FORMAT} manifest", man)
    return man


def committed_parts(path: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(id, file)`` of every committed part of ``path``, in id order (temporary files and
    parts the manifest does not list are left out)."""
    p = Path(path)
    man = read_manifest(p)
    suffix = man.get("suffix", ".jsonl")
    out = []
    for k in sorted(man["parts"], key=int):
        f = p / part_name(int(k), suffix)
        if not f.is_file():
            raise SourceError(str(p), f.name, "a committed part is missing (the directory "
                              "was changed by hand?)")
        out.append((int(k), f))
    return out


def read_parts(path: str | os.PathLike) -> Iterator[dict]:
    """The records of every committed part of ``path``, parts in id order, each part's
    records in file order: the whole output as one stream."""
    for _, f in committed_parts(path):
        yield from _part_records(f)


def _part_records(f: Path) -> Iterator[dict]:
    suffix = f.suffix
    if WRITERS.get(suffix) is JsonLinesSink:
        with open(f, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    raise SourceError(str(f.parent), f"{f.name}:{n}", f"malformed JSON ({e})",
                                      line[:200].decode("utf-8", "replace")) from None
        return
    try:
        if suffix == ".csv":
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(str(f)) if f.stat().st_size else None
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(str(f)) if f.stat().st_size else None
    except Exception as e:  # pyarrow's message carries the reason
        raise SourceError(str(f.parent), f.name, f"cannot read: {e}") from e
    if table is not None:
        yield from table.to_pylist()


class PartWriter:
    """The one writer of a part directory (see the module docstring): ``commit(id, items)``
    per epoch, ``close()`` at the end. ``suffix`` (the part format) defaults to the
    directory's extension, JSON Lines when it has none of the known ones."""

    def __init__(self, path: str | os.PathLike, suffix: str | None = None):
        self.path = check_output_path(path)
        self.suffix = suffix or (self.path.suffix.lower() if self.path.suffix.lower()
                                 in WRITERS else ".jsonl")
        if self.suffix not in WRITERS:
            raise StretchflowError(f"{self.path}: unknown part format {self.suffix!r}; use "
                                   f"{', '.join(WRITERS)}")
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = self._take_lock()
        for tmp in self.path.glob(".*.tmp-*"):  # a crashed writer's: never committed
            tmp.unlink(missing_ok=True)
        if is_part_dir(self.path):
            self.manifest = read_manifest(self.path)
            if self.manifest.get("suffix", ".jsonl") != self.suffix:
                self.close()
                raise StretchflowError(
                    f"--output {self.path}: its parts are {self.manifest.get('suffix')} "
                    f"files, this run writes {self.suffix}; give another --output")
        else:
            self.manifest = {"format": FORMAT, "suffix": self.suffix, "owner": None,
                             "parts": {}}
            self._save()

    def _take_lock(self) -> Any:
        return take_lock(self.path, f"--output {self.path}: another run is writing this "
                                    f"directory; wait for it or give another --output")

    @property
    def owner(self) -> str | None:
        return self.manifest.get("owner")

    def claim(self, owner: str, fresh: bool) -> None:
        """Binds the directory to ``owner`` (a query id). Its own directory is continued; one
        without owner is taken; another owner's is started over when this query is ``fresh``
        (it recomputes the whole output) and refused otherwise."""
        if self.owner == owner:
            return
        if self.owner is not None and self.manifest["parts"]:
            if not fresh:
                raise StretchflowError(
                    f"--output {self.path} holds the output of another query (id "
                    f"{self.owner}), not of the query in this checkpoint ({owner}): give "
                    f"the --output this checkpoint wrote, or a new directory")
            self.reset()
        self.manifest["owner"] = owner
        self._save()

    def reset(self) -> None:
        """Drops every part (the manifest first: a crash in between leaves no part listed)."""
        old = list(self.manifest["parts"])
        self.manifest["parts"] = {}
        self._save()
        for k in old:
            (self.path / part_name(int(k), self.suffix)).unlink(missing_ok=True)

    def commit(self, part_id: int, items: list[tuple[int, Any]]) -> int:
        """Commits ``items`` (``(ts, payload)`` tuples, written as the sinks write them) as
        part ``part_id``, replacing a part of that id; an empty epoch writes no part (and
        removes one of that id). Returns the number of records."""
        if type(part_id) is not int or part_id < 0:
            raise StretchflowError(f"{self.path}: part id must be an integer >= 0, got "
                                   f"{part_id!r}")
        final = self.path / part_name(part_id, self.suffix)
        key = str(part_id)
        if not items:
            if key in self.manifest["parts"]:
                del self.manifest["parts"][key]
                self._save()
                final.unlink(missing_ok=True)
            return 0
        tmp = self.path / f".{final.name}.tmp-{os.getpid()}"
        sink = WRITERS[self.suffix](tmp)
        sink.open()
        try:
            sink.write(items)
        finally:
            sink.close()
        with open(tmp, "rb") as f:  # the sink closed it: fsync through a new descriptor
            os.fsync(f.fileno())
        os.replace(tmp, final)
        fsync_dir(self.path)
        self.manifest["parts"][key] = len(items)
        self._save()
        return len(items)

    def _save(self) -> None:
        write_atomic(self.path / MANIFEST, json.dumps(self.manifest).encode())

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None


#: sinks written as part directories when a run commits output by epoch
FILE_SINKS = (JsonLinesSink, CsvSink, ParquetSink)


class EpochOutputs:
    """A flow's sinks fed epoch by epoch, each epoch's output exactly once: a file sink
    becomes a part directory at its path (:class:`PartWriter`, committed by epoch id, so a
    replayed epoch replaces its part); any other sink (in memory, stdout, a callback) gets an
    epoch's tuples once per process — an epoch replayed after a restart of the process
    reaches it again, as nothing of it survives the process to compare with."""

    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks
        for s in sinks:
            if isinstance(s, ObjectSink):  # S3 has no rename: no part directory there (yet)
                raise StretchflowError(
                    f"--output {s.path}: a streaming run writes a part directory, which an "
                    f"object store cannot hold; write to a local directory and copy it")
        # checked before anything runs: a plain file in the way is an error at once
        self.writers: list[PartWriter | None] = []
        try:
            for s in sinks:
                self.writers.append(PartWriter(s.path) if isinstance(s, FILE_SINKS) else None)
        except BaseException:
            for w in self.writers:
                if w is not None:
                    w.close()  # the directory locks taken so far
            raise
        self._done: set[int] = set()
        self._sizes: dict[tuple[int, int], int] = {}  # (sink, epoch) -> tuples committed
        self._bind: Callable[[], str] | None = None
        for s, w in zip(sinks, self.writers, strict=True):
            if w is not None:
                s.count = 0  # tuples this run committed (the sink's own file is never opened)
            elif not getattr(s, "_sf_open", False):
                s.open()
                s._sf_open = True

    def bind(self, owner: Callable[[], str]) -> None:
        """Binds the part directories to the query ``owner()`` (:meth:`PartWriter.claim`) at
        the next commit (an engine may know its query's id only once the query runs). Epochs
        count from 0: a run whose first commit is epoch 0 is a new query."""
        self._bind = owner

    def _claim(self, epoch: int) -> None:
        name = self._bind()
        self._bind = None
        for w in self.writers:
            if w is not None:
                w.claim(name, fresh=epoch == 0)

    def commit(self, epoch: int, outs: list[list[tuple[int, Any]]]) -> None:
        """Epoch ``epoch``'s tuples, ``outs[j]`` for sink j (ts-sorted)."""
        if self._bind is not None:
            self._claim(epoch)
        replay = epoch in self._done
        for j, (s, w, out) in enumerate(zip(self.sinks, self.writers, outs, strict=True)):
            if w is not None:  # a replay replaces its part: count it once
                n = w.commit(epoch, out)
                s.count += n - self._sizes.get((j, epoch), 0)
                self._sizes[j, epoch] = n
            elif out and not replay:
                s.write(out)
        self._done.add(epoch)

    def close(self) -> None:
        for s, w in zip(self.sinks, self.writers, strict=True):
            if w is not None:
                w.close()
            elif getattr(s, "_sf_open", False):
                s.close()
                s._sf_open = False


def cat_lines(paths: list[str]) -> Iterator[bytes]:
    """What ``stretchflow cat DIR [DIR ...]`` writes (the command, in :mod:`stretchflow.cli`,
    puts it on standard output): the records of part directories (or plain .jsonl, .csv,
    .parquet files) as JSON Lines, one line at a time, parts in id order; JSON Lines parts are
    copied byte for byte (a last line without its newline gets one). A path that does not
    exist or is of no known format raises :class:`StretchflowError` naming it, when the cat
    reaches it (what came before it is out already)."""
    for path in paths:
        p = Path(path)
        if not p.exists():
            raise StretchflowError(f"{p}: no such file or directory")
        files = [f for _, f in committed_parts(p)] if p.is_dir() else [p]
        for f in files:
            if f.suffix not in WRITERS:
                raise StretchflowError(f"{f}: not a part directory nor a .jsonl, .csv or "
                                       f".parquet file")
            if WRITERS[f.suffix] is JsonLinesSink:
                with open(f, "rb") as fh:
                    for line in fh:
                        yield line if line.endswith(b"\n") else line + b"\n"
            else:
                for rec in _part_records(f):
                    yield orjson.dumps(rec) + b"\n"
