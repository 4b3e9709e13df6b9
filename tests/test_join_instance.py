"""The J+ instance with its f_U inlined (:mod:`stretchflow.operators.join_instance`) against a
brute-force join and against the general O+ instance running ``Join._match_and_store``:
the same outputs in the same order (ts, then the order the matches were made), the same σ,
whichever key form (one key, a set, a dict of per-key values, none), window type, predicate
and assignment of key groups to instances."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from stretchflow.operators.join import Join
from stretchflow.operators.join_instance import JoinInstance
from stretchflow.operators.oplus import OPlusInstance, SharedState

KEY_FORMS = {
    "one": lambda t: t["k"],
    "set": lambda t: {t["k"], t["k"] + 1} if t["v"] % 3 else set(),
    "dict": lambda t: {t["k"]: {"id": t["id"], "v": t["v"] * 10},
                       "x": {"id": -t["id"], "v": -t["v"]}},
    "tuple": lambda t: (t["k"], "a"),
}

tuples = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(0, 3),
                            st.integers(0, 9)), max_size=60)


def _join(form: str, size: int, slide: int, window_type: str, pred: bool) -> Join:
    return Join(size=size, slide=slide, keys=KEY_FORMS[form], window_type=window_type,
                predicate=(lambda a, b: a["v"] <= b["v"]) if pred else None,
                output=lambda a, b: (a["id"], b["id"]))


def _stream(draw_steps: list) -> list[tuple[int, int, dict]]:
    ts, out = 0, []
    for n, (dt, i, k, v) in enumerate(draw_steps):
        ts += dt
        out.append((ts, i, {"id": n, "k": k, "v": v}))
    return out


def _run(insts: list, items: list, watermark_every: int = 0) -> list:
    out = []
    for n, (ts, i, t) in enumerate(items):
        for inst in insts:
            inst.process(ts, t, i)
            out += inst.take()
        if watermark_every and n % watermark_every == 0:
            for inst in insts:
                inst.advance(ts)
                out += inst.take()
    for inst in insts:
        inst.finish()
        out += inst.take()
    return out


def _brute(op: Join, items: list) -> list:
    """Every match as the definition makes it (WT multi): a tuple meets the other input's
    earlier tuples with a key in common in each window instance both fall in; an output
    carries the window's right boundary; sorted by it, ties in the order the matches were
    made."""
    made = []
    for n, (ts, i, t) in enumerate(items):
        ks = op.keys(t, i)
        pairs = ks.items() if isinstance(ks, dict) else [(k, t) for k in ks]
        for k, v in pairs:  # per key (f_MK's order), the other input's in arrival order
            for m in range(n):
                ts2, i2, t2 = items[m]
                if i2 == i:
                    continue
                ks2 = op.keys(t2, i2)
                pairs2 = dict(ks2.items() if isinstance(ks2, dict) else [(k, t2) for k in ks2])
                if k not in pairs2:
                    continue
                for right in _rights(op, ts):
                    if right not in _rights(op, ts2):
                        continue
                    left, r = (v, pairs2[k]) if i == 0 else (pairs2[k], v)
                    if op.predicate is None or op.predicate(left, r):
                        made.append((right, n, m, op.pair_output(left, r)))
    made.sort(key=lambda e: (e[0], e[1]))  # stable: within one tuple, as it met them
    return [(right, p) for right, _, _, p in made]


def _rights(op: Join, ts: int) -> set[int]:
    """Right boundaries of the window instances (WT multi) holding a tuple at ``ts``."""
    first = ((ts - op.WS) // op.WA + 1) * op.WA
    return {l + op.WS for l in range(first, ts - ts % op.WA + 1, op.WA)}


@settings(max_examples=150, deadline=None)
@given(steps=tuples, form=st.sampled_from(sorted(KEY_FORMS)),
       window=st.sampled_from([(4, 4), (6, 2), (5, 5)]), pred=st.booleans())
def test_the_join_instance_gives_the_brute_force_outputs_in_order(steps, form, window, pred):
    op = _join(form, *window, "multi", pred)
    items = _stream(steps)
    inst = op.instance()
    assert type(inst) is JoinInstance
    assert _run([inst], items) == _brute(op, items)


@settings(max_examples=150, deadline=None)
@given(steps=tuples, form=st.sampled_from(sorted(KEY_FORMS)),
       window=st.sampled_from([(4, 4), (6, 2), (8, 4)]), wt=st.sampled_from(["single", "multi"]),
       pred=st.booleans(), parallel=st.sampled_from([1, 2, 3]), wm=st.sampled_from([0, 3]))
def test_the_join_instance_matches_the_general_instance(steps, form, window, wt, pred,
                                                        parallel, wm):
    """Also WT single, watermarks, and P instances over a σ of several key groups (each
    instance's own outputs, in order); σ and the held outputs equal after every step."""
    op = _join(form, *window, wt, pred)
    items = _stream(steps)

    def made(cls: type) -> list:
        if parallel == 1:
            return [cls(op)]
        sigma, G = SharedState(4 * parallel), 4 * parallel
        return [cls(op, sigma, j, [g % parallel for g in range(G)]) for j in range(parallel)]

    fast, general = made(JoinInstance), made(OPlusInstance)
    for ts, i, t in items:
        for a, b in zip(fast, general, strict=True):
            a.process(ts, t, i)
            b.process(ts, t, i)
            assert a.take() == b.take()
            assert a._pending == b._pending and a._seq == b._seq
            assert _sigma(a) == _sigma(b)
    if wm:
        for a, b in zip(fast, general, strict=True):
            a.advance(math.inf)
            b.advance(math.inf)
    for a, b in zip(fast, general, strict=True):
        a.finish()
        b.finish()
        assert a.take() == b.take()


def _sigma(inst: OPlusInstance) -> list:
    return [{l: {k: (w.l, w.right, w.states) for k, w in d.items()} for l, d in g.items()}
            for g in inst.groups]


def test_a_subclass_with_its_own_f_u_gets_the_general_instance():
    class Counting(Join):
        def _match_and_store(self, ws, ts, value, i):
            ws.states[i].append((ts, value))
            return [len(ws.states[0]) + len(ws.states[1])]

    op = Counting(size=10, keys=lambda t: t["k"])
    inst = op.instance()
    assert type(inst) is OPlusInstance
    inst.process(1, {"k": 1}, 0)
    inst.process(2, {"k": 1}, 1)
    inst.finish()
    assert inst.take() == [(10, 1), (10, 2)]


def test_many_outputs_of_one_window_leave_in_the_order_they_were_made():
    """More than 16 held outputs, all released at once (the sort path of _emit_pending),
    and a release that takes only some of them (the heap path): both in (ts, made) order."""
    op = Join(size=10, slide=5, keys=lambda t: t["k"], output=lambda a, b: (a["id"], b["id"]))
    inst = op.instance()
    for n in range(30):
        inst.process(n // 10, {"id": n, "k": 0}, n % 2)
    assert inst.take() == []
    inst.advance(5)  # the window [-5, 5) closes: its outputs only
    first = inst.take()
    assert first and {ts for ts, _ in first} == {5}
    inst.finish()
    rest = inst.take()
    assert {ts for ts, _ in rest} == {10}
    items = [(n // 10, n % 2, {"id": n, "k": 0}) for n in range(30)]
    assert first + rest == _brute(op, items)


def test_key_groups_come_from_route_so_an_engine_can_place_keys_its_own_way():
    """sn's process channels place keys by a process-independent hash (``stable_instance``
    swaps ``_route``): the join instance must read every key's group through it. A shortcut
    that hashed the key itself lost the outputs of sn's joins."""
    from stretchflow.executors.sn_process import stable_instance

    op = _join("one", 4, 4, "multi", False)
    assign = [0, 1, 1, 0]
    group_of = {k: (k + 1) % 4 for k in range(4)}.__getitem__  # unlike hash(k) % 4
    insts = [stable_instance(op, SharedState(4), j, assign, group_of) for j in (0, 1)]
    items = _stream([(0, n % 2, n // 2 % 4, 0) for n in range(16)])  # both sides, each key
    want = _brute(op, items)
    assert len({t[0] for _, t in want}) == 8  # every key matched
    assert sorted(_run(insts, items)) == sorted(want)
