"""Redis Streams as a source and a sink (issue #19): the message-bus connector.

A stream is an append-only log of entries with increasing IDs (``<ms>-<seq>``), read from any
ID on (``XREAD``), so a source is a *replayable log* in the sense of Flink's Kafka source: the
run's position is a point in the log, not something the broker forgets.

**Source** (:class:`RedisStream`). Entries are read in ID order with ``XREAD BLOCK`` from
``start`` (the whole stream by default). Each entry holds one record, JSON in field ``data``
(what :class:`RedisStreamSink` writes), or flat fields when ``field=None`` (values are strings;
an integer-looking timestamp is read as an int). The end of input is explicit, as for a
followed file: ``until="marker"`` (an entry whose record is ``{"__end__": true}``, the
marker :mod:`stretchflow.spark.streaming` uses), ``until="idle:SECONDS"`` (no new entry for
that long), ``until="count:N"`` (after N records) or ``until=None`` (never; the run ends on
SIGINT/SIGTERM).

Checkpoints (docs/checkpoints.md) count a source's records and, on resume, read the source
again from its start and skip as many as the checkpoint covers, checking that the skipped
ones are the same count. For a stream this means: read from the same ``start`` ID; nothing
before the checkpoint's cut is delivered twice and nothing after it is lost, as long as the
stream was not trimmed below ``start`` in between (then the skip check fails with a clear
error instead of silently shifting). With ``group=`` the source creates a consumer group and
can move its position to what the query has durably consumed (:meth:`RedisStream.checkpointed`,
called by the checkpointer for each checkpoint written, and :meth:`RedisStream.acknowledge`,
called by ``Flow.run`` when the run commits: ``XGROUP SETID``, shown by ``XINFO GROUPS``). The
group is
never where a resume starts: the checkpoint is the one source of truth, as in Flink, where
committed Kafka offsets only mirror checkpoints.

**Sink** (:class:`RedisStreamSink`). Each output record is one entry (``XADD``, field
``data`` = the record's JSON), pipelined per batch of outputs as they come, so consumers see
results live. Entries are published when written; a failed run cannot take back what it
published (at-least-once across a failed run). A checkpointed run refuses this sink for now
(checkpoints hold output only for file sinks and stdout).

The ``redis`` package is an extra (``pip install 'stretchflow[redis]'``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import orjson

from ..errors import SourceError, StretchflowError
from ..eventtime import WATERMARK
from ..extras import require
from .follow import parse_until
from .sinks import Sink
from .sources import Source

#: the end-of-input record (the same marker as the spark engine's directory streams)
END_FIELD = "__end__"


def _client(url: str, what: str) -> Any:
    redis = require("redis", "redis", what)
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
        client.ping()
    except redis.RedisError as e:
        raise StretchflowError(f"{what}: cannot reach Redis at {url}: {e}") from None
    return client


class RedisStream(Source):
    """The entries of Redis stream ``key`` at ``url`` as a source, in ID order (see the
    module's docstring for the end condition, checkpoints and consumer groups)."""

    def __init__(self, key: str, *, url: str = "redis://127.0.0.1:6379/0", ts: str = "ts",
                 field: str | None = "data", start: str = "0-0", until: str | None = "marker",
                 group: str | None = None, consumer: str = "stretchflow",
                 block_ms: int = 100, count: int = 1000, sorted: bool = True,  # noqa: A002
                 name: str | None = None, **event_time: Any):
        self.url, self.key, self.field, self.start = url, key, field, start
        self.until = parse_until(until, counts=True)
        self.group, self.consumer = group, consumer
        if not (isinstance(block_ms, int) and block_ms > 0 and isinstance(count, int)
                and count > 0):
            raise ValueError(f"block_ms and count must be positive integers, got "
                             f"{block_ms!r}, {count!r}")
        self.block_ms, self.count = block_ms, count
        self.last_id: str | None = None  # the last entry delivered (for acks and errors)
        # with a group: (record count, entry ID) read and not yet committed to the group
        self._unacked: deque[tuple[int, bytes]] = deque()
        self._ack_lock = threading.Lock()
        # event_time: max_delay, idle_timeout, late (docs/event-time.md)
        super().__init__(name or f"redis:{key}", ts, sorted, None, **event_time)


    def describe_where(self, where: Any) -> str:
        return f"{self.url} stream {self.key!r} entry {where}"

    def _record(self, fields: dict[bytes, bytes], eid: str) -> Any:
        if self.field is not None:
            raw = fields.get(self.field.encode())
            if raw is None:
                raise self._error(eid, f"entry has no field {self.field!r} "
                                       f"(fields: {sorted(k.decode() for k in fields)})")
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise self._error(eid, f"malformed JSON ({e})", raw[:200].decode(
                    errors="replace")) from None
        rec: dict[str, Any] = {k.decode(): v.decode() for k, v in fields.items()}
        t = rec.get(self.ts_field)
        if isinstance(t, str) and t.lstrip("-").isdigit():
            rec[self.ts_field] = int(t)
        return rec

    def _ensure_group(self, r: Any) -> None:
        import redis

        try:
            r.xgroup_create(self.key, self.group, id=self.start, mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def _entries(self, r: Any, after: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
        got = r.xread({self.key: after}, count=self.count, block=self.block_ms)
        return got[0][1] if got else []

    def _raw(self) -> Iterator[tuple[Any, Any, Any]]:
        import redis

        kind, amount = self.until
        r = _client(self.url, f"source {self.name}")
        after, n, quiet_since = self.start, 0, time.monotonic()
        last_ts = marked = -math.inf  # the latest timestamp read; the latest idle watermark
        grouped = self.group is not None
        if grouped:
            self._ensure_group(r)
        try:
            while True:
                try:
                    entries = self._entries(r, after)
                except redis.RedisError as e:
                    raise SourceError(self.name, f"{self.url} stream {self.key!r}",
                                      f"cannot read: {e}") from None
                if not entries:
                    if kind == "idle" and time.monotonic() - quiet_since >= amount:
                        return
                    if self.sorted and last_ts > marked:
                        # quiet: nothing later can be earlier than the latest timestamp, so
                        # the engine may close what it passes now, not at the next entry
                        # (once per quiet spell; as io.follow does)
                        marked = last_ts
                        yield last_ts, WATERMARK, f"{after} (idle)"
                    continue
                quiet_since = time.monotonic()
                for eid_b, fields in entries:
                    eid = eid_b.decode()
                    after = self.last_id = eid
                    rec = self._record(fields, eid)
                    if kind == "marker" and type(rec) is dict and rec.get(END_FIELD) is True:
                        if grouped:
                            self._track(n, eid_b)  # the marker is consumed with the last one
                        return
                    n += 1
                    self.read = n
                    if grouped:
                        self._track(n, eid_b)
                    ts = self._ts_of(rec, eid)
                    last_ts = max(last_ts, ts)
                    yield ts, rec, eid
                    if kind == "count" and n >= amount:
                        return
                if len(entries) < self.count and self.sorted and last_ts > marked:
                    # caught up with the writers (a short read): the next read waits, so
                    # give the engine a watermark now, as a followed file does at its end;
                    # else a reference O+ holds its run until it fills (about 1 s at 500 t/s)
                    marked = last_ts
                    yield last_ts, WATERMARK, f"{after} (caught up)"
        finally:
            r.close()

    def _track(self, n: int, eid: bytes) -> None:
        with self._ack_lock:
            self._unacked.append((n, eid))

    def checkpointed(self, records: int) -> str | None:
        """With a consumer group: moves the group's position (``XGROUP SETID``, what
        ``XINFO GROUPS`` shows as last-delivered-id) to the entry of record ``records`` (a
        checkpoint covering the first ``records`` records was written, or the run
        committed); returns that entry's ID. Without a group, or nothing new: None."""
        if self.group is None:
            return None
        last = None
        with self._ack_lock:
            while self._unacked and self._unacked[0][0] <= records:
                last = self._unacked.popleft()[1]
        if last is None:
            return None
        r = _client(self.url, f"source {self.name}")
        try:
            r.xgroup_setid(self.key, self.group, last)
        finally:
            r.close()
        return last.decode()

    def acknowledge(self) -> str | None:
        """Commits the group's position at everything delivered (the run committed); see
        :meth:`checkpointed`."""
        return self.checkpointed(1 << 62)

    def __repr__(self) -> str:
        return f"RedisStream({self.key!r}, url={self.url!r})"


class RedisStreamSink(Sink):
    """Appends each output record to Redis stream ``key`` as one entry (field ``data``: the
    record's JSON, ``ts`` included), pipelined per batch of outputs. ``maxlen`` caps the
    stream (approximately, ``XADD MAXLEN ~``) so that memory stays bounded under overload."""

    def __init__(self, key: str, *, url: str = "redis://127.0.0.1:6379/0",
                 maxlen: int | None = None, end_marker: bool = False, name: str | None = None):
        self.key, self.url, self.maxlen, self.end_marker = key, url, maxlen, end_marker
        self.name = name or f"redis:{key}"
        self._r: Any = None

    def open(self) -> None:
        self.count = 0
        self._r = _client(self.url, f"sink {self.name}")

    def _add(self, records: list[bytes]) -> None:
        import redis

        pipe = self._r.pipeline(transaction=False)
        for data in records:
            pipe.xadd(self.key, {"data": data}, maxlen=self.maxlen,
                      approximate=self.maxlen is not None)
        try:
            pipe.execute()
        except redis.RedisError as e:
            raise StretchflowError(f"sink {self.name}: cannot write to {self.url}: {e}") \
                from None
        self.count += len(records)

    def write(self, items: list[tuple[int, Any]]) -> None:
        from .sinks import to_record

        dumps = orjson.dumps
        self._add([dumps(to_record(ts, p)) for ts, p in items])

    def prepare(self) -> None:
        if self.end_marker and self._r is not None:
            self._add([orjson.dumps({END_FIELD: True})])

    def commit(self) -> None:
        self.close()

    def abort(self) -> None:
        self.close()

    def close(self) -> None:
        if self._r is not None:
            self._r.close()
            self._r = None


def from_url(url: str, **kw: Any) -> RedisStream:
    """``redis://HOST:PORT/DB?stream=KEY&until=marker&group=G&ts=FIELD&field=data&start=ID``
    (what ``--input`` takes) -> a :class:`RedisStream`; keyword arguments override."""
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    key = kw.pop("key", None) or query.pop("stream", None)
    if not key:
        raise ValueError(f"{url}: a Redis input names its stream: {url.split('?')[0]}?stream=KEY")
    opts: dict[str, Any] = {}
    for name in ("until", "group", "consumer", "ts", "field", "start", "name"):
        if name in query:
            value = query.pop(name)
            opts[name] = None if value in ("", "none", "None") else value
    for name in ("block_ms", "count"):
        if name in query:
            try:
                opts[name] = int(query.pop(name))
            except ValueError:
                raise ValueError(f"{url}: {name} must be an integer") from None
    if query:
        raise ValueError(f"{url}: unknown option(s) {sorted(query)}; use stream, until, group, "
                         f"consumer, ts, field, start, name, block_ms, count")
    opts.update(kw)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return RedisStream(key, url=base, **opts)


def sink_from_url(url: str) -> RedisStreamSink:
    """``redis://HOST:PORT/DB?stream=KEY[&maxlen=N][&end_marker=1]`` -> a sink."""
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    key = query.pop("stream", None)
    if not key:
        raise ValueError(f"{url}: a Redis output names its stream: ...?stream=KEY")
    maxlen = query.pop("maxlen", None)
    end = query.pop("end_marker", "0") in ("1", "true", "yes")
    if query:
        raise ValueError(f"{url}: unknown option(s) {sorted(query)}; use stream, maxlen, "
                         f"end_marker")
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return RedisStreamSink(key, url=base, maxlen=int(maxlen) if maxlen else None,
                           end_marker=end)
