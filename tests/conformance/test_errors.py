"""Errors are the same on every engine (DESIGN.md, Semantics, "Bad input"): a user function
that raises stops the run with an OperatorError naming the operator and the tuple; a bad
record stops it with a SourceError naming the source and the record. Nothing is dropped."""

from __future__ import annotations

from collections import Counter

import pytest

import stretchflow as sf

from .contract import Variant, require, variant_params

POISON = "poison-7"


def _records(n: int = 24) -> list[dict]:
    out = [{"ts": 2 * i, "id": i, "k": i % 3, "text": "a b" if i % 2 else "c"}
           for i in range(n)]
    out[7]["text"] = POISON
    return out


def _fail_on_poison(t: dict) -> dict:
    if t["text"] == POISON:
        raise ZeroDivisionError("the user function failed")
    return t


def _flow(where: str) -> sf.Flow:
    """A flow whose ``where`` user function raises on the poison record: a map, f_MK or f_U
    of an A+, f_O at expiry, or f_U of a second O+ downstream of a first."""
    flow = sf.Flow(f"fails-in-{where}")
    s = flow.source(sf.io.iterable(_records(), name="events"))
    if where == "map":
        out = s.map(_fail_on_poison, name="bad-map")
    elif where == "keys":
        out = s.aggregate(size=10, keys=lambda t: _fail_on_poison(t)["text"].split(),
                          init=int, update=lambda n, t: n + 1, name="bad-keys")
    elif where == "update":
        out = s.aggregate(size=10, keys=lambda t: {t["k"]}, init=int,
                          update=lambda n, t: n + len(_fail_on_poison(t)["text"]),
                          name="bad-update")
    elif where == "output":
        def output(k: int, n: int) -> dict:
            if n and k == 1:
                raise ZeroDivisionError("f_O failed")
            return {"k": k, "n": n}
        out = s.aggregate(size=10, keys=lambda t: {t["k"]}, init=int,
                          update=lambda n, t: n + 1, output=output, name="bad-output")
    else:  # "second": the first O+ is fine, the one reading its outputs fails
        counts = s.aggregate(size=10, keys=lambda t: Counter(t["text"].split()), init=int,
                             update=lambda n, c: n + c,
                             output=lambda w, n: {"text": w, "n": n}, name="count")
        out = counts.aggregate(size=20, keys=lambda t: {t["n"]}, init=int,
                               update=lambda n, t: n + len(_fail_on_poison(t)["text"]),
                               name="bad-second")
    out.collect()
    return flow


OPERATOR = {"map": "bad-map", "keys": "bad-keys", "update": "bad-update",
            "output": "bad-output", "second": "bad-second"}


@pytest.mark.parametrize("variant", variant_params())
@pytest.mark.parametrize("where", sorted(OPERATOR))
def test_user_function_error_names_operator_and_tuple(where: str, variant: Variant) -> None:
    require(variant)
    with pytest.raises(sf.OperatorError) as info:
        _flow(where).run(variant.engine, **variant.draw_options_fixed())
    e, msg = info.value, str(info.value)
    # the message first (what a user reads), then the attributes (what a program reads)
    assert f"operator {OPERATOR[where]!r}" in msg and "ZeroDivisionError" in msg, msg
    if where in ("map", "keys", "update", "second"):
        # the tuple the function failed on: the poison record (for "second", the first O+'s
        # output that carries the poison word)
        assert POISON in msg, msg
    assert getattr(e, "operator", None) == OPERATOR[where], f"{type(e).__name__}: {msg}"
    if where in ("map", "keys", "update", "second"):
        assert f"ts={e.ts!r}" in msg and e.payload["text"] == POISON, msg


def _bad_records(kind: str) -> list[dict]:
    recs = _records()
    if kind == "missing-ts":
        del recs[9]["ts"]
        recs[9]["text"] = "no-ts-here"
    else:  # "ts-back"
        recs[9]["ts"] = 3
        recs[9]["text"] = "back-in-time"
    return recs


@pytest.mark.parametrize("variant", variant_params())
@pytest.mark.parametrize("kind", ["missing-ts", "ts-back"])
@pytest.mark.parametrize("shape", ["one-source", "join"])
def test_bad_input_names_source_and_record(shape: str, kind: str, variant: Variant) -> None:
    require(variant)
    flow = sf.Flow(f"bad-{kind}")
    good = flow.source(sf.io.iterable(_records(), name="good"))
    bad = flow.source(sf.io.iterable(_bad_records(kind), name="bad-input"))
    if shape == "one-source":
        out = bad.aggregate(size=10, keys=lambda t: {t["k"]}, init=int,
                            update=lambda n, t: n + 1)
        good.map(lambda t: t).collect()
    else:
        out = good.join(bad, size=10, keys=lambda t: {t["k"]})
    out.collect()
    with pytest.raises(sf.SourceError) as info:
        flow.run(variant.engine, **variant.draw_options_fixed())
    msg = str(info.value)
    assert info.value.source == "bad-input" and "'bad-input'" in msg, msg
    assert ("no-ts-here" if kind == "missing-ts" else "back-in-time") in msg, msg
    assert ("missing timestamp" if kind == "missing-ts" else "goes back") in msg, msg
