"""Object stores (``s3://bucket/key``, and whatever else ``pyarrow.fs`` knows: ``gs://``,
``hdfs://``) for inputs and outputs, through pyarrow's file systems.

S3 settings come from the environment, as every AWS tool reads them: the endpoint from
``STRETCHFLOW_S3_ENDPOINT`` or ``AWS_ENDPOINT_URL`` (``http://127.0.0.1:9000`` for a local
server; unset: AWS itself), the region from ``AWS_REGION``/``AWS_DEFAULT_REGION``, and the
credentials the usual way (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``~/.aws``, the
instance's role). ``STRETCHFLOW_S3_TIMEOUT`` (seconds, default 10) bounds connecting and each
request, so an unreachable endpoint is an error, never a hang.

An output object is published at commit only (:func:`publish`): the run's output is written to
a temporary key beside the target, then copied onto it (a server-side copy: S3 has no rename,
and a copy replaces the object whole or not at all), then the temporary key is deleted. A run
that fails or is killed before the copy leaves the previous object as it was.
"""

from __future__ import annotations

import os
import secrets
from typing import Any
from urllib.parse import urlparse

from ..errors import SourceError, StretchflowError

_FS: dict[tuple, Any] = {}


def _s3(region: str | None) -> Any:
    import pyarrow.fs as pafs

    endpoint = os.environ.get("STRETCHFLOW_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    timeout = float(os.environ.get("STRETCHFLOW_S3_TIMEOUT", "10"))
    kw: dict[str, Any] = {"connect_timeout": timeout, "request_timeout": timeout,
                          "region": region,
                          "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=2)}
    if endpoint:
        u = urlparse(endpoint if "://" in endpoint else "http://" + endpoint)
        kw["endpoint_override"] = u.netloc
        kw["scheme"] = u.scheme or "http"
    return pafs.S3FileSystem(**kw)


def filesystem(url: str) -> tuple[Any, str]:
    """``(pyarrow file system, path in it)`` for ``url`` (file systems are reused)."""
    import pyarrow.fs as pafs

    u = urlparse(url)
    scheme = u.scheme.lower()
    if scheme in ("s3", "s3a"):
        if not u.netloc:
            raise StretchflowError(f"{url}: no bucket (s3://BUCKET/KEY)")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        key = ("s3", region, os.environ.get("STRETCHFLOW_S3_ENDPOINT"),
               os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_ACCESS_KEY_ID"))
        if key not in _FS:
            _FS[key] = _s3(region)
        return _FS[key], u.netloc + u.path
    try:
        return pafs.FileSystem.from_uri(url)
    except Exception as e:  # pyarrow says which schemes it knows
        raise StretchflowError(f"{url}: cannot open this URL: {e}") from e


def _why(e: BaseException) -> str:
    if isinstance(e, FileNotFoundError):
        return "no such object"
    msg = " ".join(str(e).split())
    return msg if len(msg) < 300 else msg[:300] + "..."


def is_dir(url: str, source: str) -> bool:
    """Whether ``url`` names a directory (a prefix with objects under it)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(url)
    try:
        return fs.get_file_info(path).type == pafs.FileType.Directory
    except Exception as e:
        raise SourceError(source, url, f"cannot open: {_why(e)}") from e


def list_dir(url: str, source: str) -> list[str]:
    """The names of the objects directly under directory ``url``."""
    import pyarrow.fs as pafs

    fs, path = filesystem(url)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path.rstrip("/")))
    except Exception as e:
        raise SourceError(source, url, f"cannot list: {_why(e)}") from e
    return [i.base_name for i in infos]


def open_input_stream(url: str, source: str) -> Any:
    """The object at ``url`` for sequential reading (raw bytes)."""
    fs, path = filesystem(url)
    try:
        return fs.open_input_stream(path, compression=None)
    except Exception as e:
        raise SourceError(source, url, f"cannot open: {_why(e)}") from e


def open_input_file(url: str, source: str) -> Any:
    """The object at ``url`` for random access (Parquet)."""
    fs, path = filesystem(url)
    try:
        return fs.open_input_file(path)
    except Exception as e:
        raise SourceError(source, url, f"cannot open: {_why(e)}") from e


def publish(local: str | os.PathLike, url: str, sink: str) -> None:
    """Uploads file ``local`` as the object ``url``, all or nothing (see the module
    docstring); errors name ``sink``."""
    import shutil

    fs, path = filesystem(url)
    tmp = f"{path}.stretchflow-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        with open(local, "rb") as f, fs.open_output_stream(tmp, compression=None) as out:
            shutil.copyfileobj(f, out, 8 << 20)
        fs.copy_file(tmp, path)
    except Exception as e:
        raise StretchflowError(f"sink {sink!r}: cannot write {url}: {_why(e)}") from e
    finally:
        try:
            fs.delete_file(tmp)
        except Exception:  # noqa: BLE001, S110 - never written, or gone: nothing to remove
            pass


def check_writable(url: str, sink: str) -> None:
    """An error now, before the run, when ``url``'s bucket cannot be reached or the key is a
    directory (a run's output is published only at its end)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(url)
    try:
        info = fs.get_file_info(path)
        bucket = fs.get_file_info(path.split("/", 1)[0]) if isinstance(
            fs, pafs.S3FileSystem) else None
    except Exception as e:
        raise StretchflowError(f"sink {sink!r}: cannot reach {url}: {_why(e)}") from e
    if info.type == pafs.FileType.Directory:
        raise StretchflowError(f"sink {sink!r}: {url} is a directory")
    if bucket is not None and bucket.type == pafs.FileType.NotFound:
        raise StretchflowError(f"sink {sink!r}: {url}: no such bucket")
