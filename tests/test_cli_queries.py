"""``stretchflow run QUERY`` on JSON Lines files against the brute force of the contract.

The brute force lives in ``test_queries_bruteforce.py`` (written from DESIGN.md alone).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from stretchflow.cli import main
from test_queries_bruteforce import bruteforce, check_output

WORDS = ["a", "b", "c", "aa", "é", "#x", "#y", "#", "#é", "z#"]
SEPARATORS = [" ", " ", " ", "  ", "\t"]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def gen_ts(rng: random.Random, n: int, small: int, gap: int) -> list[int]:
    """Sorted timestamps from 0: equal ones, small steps and occasional long gaps."""
    t, out = 0, []
    for _ in range(n):
        out.append(t)
        r = rng.random()
        if r < 0.25:
            continue  # an equal timestamp
        t += rng.randint(gap + 1, 3 * gap) if r > 0.97 else rng.randint(1, small)
    return out


def gen_tweets(seed: int, n: int = 300, small: int = 7, gap: int = 60) -> list[dict]:
    rng = random.Random(seed)
    recs = []
    for t in gen_ts(rng, n, small, gap):
        k = rng.choice([0, 0, 1, 2, 3, 5, 8])
        text = ""
        for i in range(k):
            text += (rng.choice(SEPARATORS) if i else "") + rng.choice(WORDS)
        if rng.random() < 0.1:
            text = " " + text + " "
        recs.append({"ts": t, "user": f"u{rng.randint(1, 5)}", "text": text})
    return recs


def gen_join(seed: int, n: int = 100, small: int = 5, gap: int = 60,
             attr: int = 100) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    left, right = [], []
    # One shared timeline split between the sides, so equal timestamps across sides occur.
    for t in gen_ts(rng, 2 * n, small, gap):
        if (rng.random() < 0.5 and len(left) < n) or len(right) >= n:
            left.append({"ts": t, "id": f"L{len(left)}", "x": rng.randint(0, attr),
                         "y": rng.randint(0, attr)})
        else:
            right.append({"ts": t, "id": f"R{len(right)}", "a": rng.randint(0, attr),
                          "b": rng.randint(0, attr), "c": rng.randint(0, 9),
                          "d": rng.random()})
    return left, right


def gen_forward(seed: int, k: int, n: int = 150) -> list[list[dict]]:
    rng = random.Random(seed)
    return [[{"ts": t, "src": i, "seq": j, "val": rng.choice(["p", "q", 1, 2.5, None])}
             for j, t in enumerate(gen_ts(rng, n, 4, 30))] for i in range(k)]


def run_cli(tmp_path: Path, query: str, inputs: list[list[dict]],
            params: dict[str, str]) -> list[dict]:
    argv = ["run", query]
    for i, inp in enumerate(inputs):
        argv += ["--input", str(write_jsonl(tmp_path / f"in{i}.jsonl", inp))]
    out = tmp_path / "out.jsonl"
    argv += ["--output", str(out)]
    for k, v in params.items():
        argv += ["--param", f"{k}={v}"]
    rc = main(argv)
    assert rc == 0, f"stretchflow {' '.join(argv)} exited {rc}"
    return read_jsonl(out)


def typed(params: dict[str, str]) -> dict:
    return {k: (None if v == "inf" else int(v)) for k, v in params.items()}


FIELDS = {
    "wordcount": ("ts", "word", "count"),
    "paircount": ("ts", "first", "second", "count"),
    "longest-hashtag": ("ts", "hashtag", "chars"),
    "scalejoin": ("ts", "left", "right"),
}

DEFAULTS = {
    "wordcount": {"size": "120000", "slide": "60000"},
    "paircount": {"size": "120000", "slide": "60000", "distance": "3"},
    "longest-hashtag": {"size": "3600000", "slide": "1800000"},
    "scalejoin": {"window": "300000", "band": "10"},
}


@pytest.mark.parametrize(
    ("query", "params", "seed"),
    [
        ("wordcount", {"size": "50", "slide": "20"}, 1),
        ("wordcount", {"size": "30", "slide": "30"}, 2),
        ("paircount", {"size": "40", "slide": "10", "distance": "1"}, 3),
        ("paircount", {"size": "40", "slide": "15", "distance": "3"}, 4),
        ("paircount", {"size": "25", "slide": "25", "distance": "inf"}, 5),
        ("longest-hashtag", {"size": "60", "slide": "20"}, 6),
        ("longest-hashtag", {"size": "35", "slide": "10"}, 7),
    ],
)
def test_cli_tweet_queries_match_bruteforce(tmp_path, query, params, seed):
    recs = gen_tweets(seed)
    got = run_cli(tmp_path, query, [recs], params)
    assert got, "expected some output"
    check_output(got, bruteforce(query, [recs], **typed(params)), FIELDS[query])


@pytest.mark.parametrize("query", ["wordcount", "paircount", "longest-hashtag"])
def test_cli_tweet_queries_default_params(tmp_path, query):
    # Tweets spread over about an hour and a half of event time, no --param.
    recs = gen_tweets(11, n=300, small=40_000, gap=4_000_000)
    got = run_cli(tmp_path, query, [recs], {})
    assert got
    check_output(got, bruteforce(query, [recs], **typed(DEFAULTS[query])), FIELDS[query])


@pytest.mark.parametrize(
    ("params", "seed"),
    [
        ({"window": "30", "band": "25"}, 21),
        ({"window": "0", "band": "40"}, 22),
    ],
)
def test_cli_scalejoin_matches_bruteforce(tmp_path, params, seed):
    left, right = gen_join(seed)
    got = run_cli(tmp_path, "scalejoin", [left, right], params)
    expected = bruteforce("scalejoin", [left, right], **typed(params))
    assert expected, "the generated input should have matches"
    check_output(got, expected, FIELDS["scalejoin"])


def test_cli_scalejoin_default_params(tmp_path):
    left, right = gen_join(23, small=20_000, gap=400_000, attr=60)
    got = run_cli(tmp_path, "scalejoin", [left, right], {})
    expected = bruteforce("scalejoin", [left, right], **typed(DEFAULTS["scalejoin"]))
    assert expected
    check_output(got, expected, FIELDS["scalejoin"])


@pytest.mark.parametrize("k", [2, 3])
def test_cli_forward_matches_bruteforce(tmp_path, k):
    inputs = gen_forward(30 + k, k)
    got = run_cli(tmp_path, "forward", inputs, {})
    assert len(got) == sum(len(i) for i in inputs)
    check_output(got, bruteforce("forward", inputs), ("ts", "src", "seq", "val"))


def test_cli_output_is_ts_nondecreasing_jsonl(tmp_path):
    recs = gen_tweets(41)
    run_cli(tmp_path, "wordcount", [recs], {"size": "20", "slide": "3"})
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines
    tss = []
    for line in lines:
        rec = json.loads(line)
        assert isinstance(rec, dict)
        assert next(iter(rec)) == "ts"
        assert type(rec["ts"]) is int
        tss.append(rec["ts"])
    assert tss == sorted(tss)


# ------------------------------------------------------------------ errors: exit code 2


@pytest.fixture
def tweets_file(tmp_path):
    return write_jsonl(tmp_path / "in.jsonl", gen_tweets(50, n=20))


def test_cli_unknown_query(tmp_path, tweets_file, capsys):
    rc = main(["run", "no-such-query", "--input", str(tweets_file),
               "--output", str(tmp_path / "o.jsonl")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "no-such-query" in err
    assert "unknown" in err.lower()
    assert not (tmp_path / "o.jsonl").exists()


def test_cli_missing_input(tmp_path, capsys):
    rc = main(["run", "wordcount", "--output", str(tmp_path / "o.jsonl")])
    assert rc == 2
    assert "--input" in capsys.readouterr().err


def test_cli_bad_param_name(tmp_path, tweets_file, capsys):
    rc = main(["run", "wordcount", "--input", str(tweets_file),
               "--output", str(tmp_path / "o.jsonl"), "--param", "sizee=10"])
    assert rc == 2
    assert "sizee" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("wordcount", "size=abc"),
        ("paircount", "distance=far"),
        ("scalejoin", "band=wide"),
    ],
)
def test_cli_bad_param_value(tmp_path, tweets_file, capsys, query, param):
    inputs = ["--input", str(tweets_file)] * (2 if query == "scalejoin" else 1)
    rc = main(["run", query, *inputs, "--output", str(tmp_path / "o.jsonl"),
               "--param", param])
    assert rc == 2
    name, _, value = param.partition("=")
    err = capsys.readouterr().err
    assert value in err
    assert name in err


def test_cli_malformed_param(tmp_path, tweets_file, capsys):
    rc = main(["run", "wordcount", "--input", str(tweets_file),
               "--output", str(tmp_path / "o.jsonl"), "--param", "size"])
    assert rc == 2
    assert "size" in capsys.readouterr().err
