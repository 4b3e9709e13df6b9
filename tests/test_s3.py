"""Object store inputs and outputs (issue #19) against a real S3 API server on localhost
(moto's server mode, tests/s3server.py): s3:// in and out equal the local run, a failed run
leaves the previous output object, a missing key is one clear error line."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import stretchflow as sf
from s3server import s3_server
from stretchflow.cli import main
from stretchflow.errors import SourceError, StretchflowError
from stretchflow.io.generators import generate

BUCKET = "sf-test"


@pytest.fixture(scope="module")
def s3():
    """``(endpoint, boto3 client)`` with the environment pointing the AWS SDKs at it."""
    boto3 = pytest.importorskip("boto3")
    with s3_server() as endpoint, pytest.MonkeyPatch.context() as mp:
        env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
               "STRETCHFLOW_S3_TIMEOUT": "5"}
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("STRETCHFLOW_S3_ENDPOINT", raising=False)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield endpoint, client


def keys(client) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def get(client, key: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


@pytest.fixture(scope="module")
def tweets(tmp_path_factory, s3):
    """Tweets as local files and as objects: .jsonl, .jsonl.gz, .parquet."""
    _, client = s3
    d = tmp_path_factory.mktemp("tweets")
    jl = generate("tweets", rows=800, seed=11, out=d / "tw.jsonl")[0]
    pqf = generate("tweets", rows=800, seed=11, out=d / "tw.parquet")[0]
    client.put_object(Bucket=BUCKET, Key="in/tw.jsonl", Body=jl.read_bytes())
    client.put_object(Bucket=BUCKET, Key="in/tw.jsonl.gz", Body=gzip.compress(jl.read_bytes()))
    client.put_object(Bucket=BUCKET, Key="in/tw.parquet", Body=pqf.read_bytes())
    return d


@pytest.mark.parametrize("key,out", [("in/tw.jsonl", "out/wc.jsonl"),
                                     ("in/tw.jsonl.gz", "out/wc-gz.jsonl"),
                                     ("in/tw.parquet", "out/wc.parquet")])
def test_wordcount_s3_to_s3_equals_the_local_run(s3, tweets, tmp_path, key, out):
    _, client = s3
    local_in = tweets / ("tw.parquet" if key.endswith(".parquet") else "tw.jsonl")
    local_out = tmp_path / ("local" + os.path.splitext(out)[1])
    assert main(["run", "wordcount", "--input", str(local_in), "--output", str(local_out),
                 "-q"]) == 0
    assert main(["run", "wordcount", "--input", f"s3://{BUCKET}/{key}", "--output",
                 f"s3://{BUCKET}/{out}", "--engine", "vsn", "-q"]) == 0
    got = get(client, out)
    if out.endswith(".parquet"):
        (tmp_path / "got.parquet").write_bytes(got)
        assert pq.read_table(tmp_path / "got.parquet").equals(pq.read_table(local_out))
        assert pq.read_table(local_out).num_rows > 0
    else:
        assert got and got == local_out.read_bytes()
    assert not [k for k in keys(client) if k.endswith(".tmp")]  # no temporary key left


def test_batches_from_s3_equal_items(s3, tweets):
    src = sf.io.open_source(f"s3://{BUCKET}/in/tw.jsonl.gz")
    items = list(src.items())
    assert len(items) == 800
    batches = sf.io.open_source(f"s3://{BUCKET}/in/tw.jsonl.gz").batches(rows=300)
    assert [it for b in batches for it in b.items()] == items


def test_a_failed_run_leaves_the_previous_output_object(s3, tweets):
    _, client = s3
    client.put_object(Bucket=BUCKET, Key="out/keep.jsonl", Body=b'{"ts":0,"old":true}\n')
    bad = (tweets / "tw.jsonl").read_bytes() + b"{not json\n"
    client.put_object(Bucket=BUCKET, Key="in/bad.jsonl", Body=bad)
    assert main(["run", "wordcount", "--input", f"s3://{BUCKET}/in/bad.jsonl", "--output",
                 f"s3://{BUCKET}/out/keep.jsonl", "-q"]) == 2
    assert get(client, "out/keep.jsonl") == b'{"ts":0,"old":true}\n'
    assert not [k for k in keys(client) if k.endswith(".tmp")]


def test_a_failed_publish_is_an_error_and_changes_nothing(s3, tweets, monkeypatch):
    from stretchflow.io import objectstore

    _, client = s3
    client.put_object(Bucket=BUCKET, Key="out/keep2.jsonl", Body=b"old\n")

    real = objectstore.filesystem
    written = []

    class CopyFails:  # the real file system, but the copy onto the target fails
        def __init__(self, fs):
            self.fs = fs

        def __getattr__(self, name):
            return getattr(self.fs, name)

        def copy_file(self, src, dest):
            written.append(get(client, src.split("/", 1)[1]))  # the temporary key is complete
            raise OSError("copy refused")

    def filesystem(url):
        fs, path = real(url)
        return CopyFails(fs), path

    flow = sf.Flow()
    flow.source(sf.io.open_source(tweets / "tw.jsonl")).sink(f"s3://{BUCKET}/out/keep2.jsonl")
    monkeypatch.setattr(objectstore, "filesystem", filesystem)
    with pytest.raises(StretchflowError,
                       match="cannot write s3://sf-test/out/keep2.jsonl: copy refused"):
        flow.run()
    monkeypatch.undo()
    assert len(written) == 1 and written[0].count(b"\n") == 800
    assert get(client, "out/keep2.jsonl") == b"old\n"
    assert not [k for k in keys(client) if k.endswith(".tmp")]


def test_missing_key_is_one_error_line_and_exit_2(s3, tmp_path):
    endpoint, _ = s3
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint}
    r = subprocess.run([sys.executable, "-m", "stretchflow", "run", "wordcount", "--input",
                        f"s3://{BUCKET}/in/nope.jsonl", "--output", str(tmp_path / "o.jsonl"),
                        "-q"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "s3://sf-test/in/nope.jsonl" in lines[0] and "no such object" in lines[0]
    assert not (tmp_path / "o.jsonl").exists()


def test_missing_bucket_for_output_fails_before_the_run(s3, tweets):
    flow = sf.Flow()
    flow.source(sf.io.open_source(tweets / "tw.jsonl")).sink("s3://no-such-bucket/o.jsonl")
    with pytest.raises(StretchflowError, match="no such bucket"):
        flow.run()


def test_spark_part_directory_on_s3(s3):
    _, client = s3
    client.put_object(Bucket=BUCKET, Key="spark/d/part-00000-x-c000.json",
                      Body=b'{"ts":1}\n{"ts":2}\n')
    client.put_object(Bucket=BUCKET, Key="spark/d/part-00001-x-c000.json", Body=b'{"ts":3}\n')
    client.put_object(Bucket=BUCKET, Key="spark/d/_SUCCESS", Body=b"")
    src = sf.io.open_source(f"s3://{BUCKET}/spark/d")
    assert [ts for ts, _ in src.items()] == [1, 2, 3]
    client.put_object(Bucket=BUCKET, Key="spark/e/part-00000-x-c000.json", Body=b'{"ts":1}\n')
    with pytest.raises(SourceError, match="no _SUCCESS marker"):
        sf.io.open_source(f"s3://{BUCKET}/spark/e")
