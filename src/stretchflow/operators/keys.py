"""What a key function's result means (issue #18): one key or several.

Users coming from Flink, Spark or Bytewax write ``keys=lambda t: t["user"]`` and mean "group by
user". f_MK's raw contract (:mod:`.oplus`) is an iterable of keys, which would read a str as a
set of characters. So every f_MK is wrapped once, when its operator is built, and its result
normalized on the way out: one key (a str, bytes, number, tuple or any other non-iterable)
becomes ``{key}``; a set, list, dict (key -> value f_U sees) or other iterable still means
several keys; None means none. Every engine calls ``op.keys``/``op.user_keys`` and so sees the
normalized form without knowing about it.

The check is one dict lookup by the result's type per tuple (a type's meaning is learnt on
first sight), so a set-returning f_MK pays a lookup and a call, no more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


#: what f_MK's result means, by its type: True, one key (a str is one key, not a set of
#: characters; a tuple is one composite key); False, several keys or none (a set, list, dict
#: or any other iterable; None means no keys). Filled per type on first sight so the per-tuple
#: check is one dict lookup; types are few, so the table stays small.
class _TypeTable(dict):
    """The type table; pickled (with a wrapped f_MK's closure, to a Spark worker or an SN
    process channel) as a reference to the receiving process's own table, never by value: by
    value it would carry every type learnt so far, and a type from a module the receiver
    cannot import (a test module, a user's helper module) made every later Spark task fail
    to unpickle."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_type_table, ())


def _type_table() -> dict[type, bool]:
    return _ONE_KEY


_ONE_KEY: dict[type, bool] = _TypeTable({
    str: True, bytes: True, int: True, float: True, tuple: True, bool: True, complex: True,
    set: False, frozenset: False, dict: False, list: False, type(None): False,
})


def _learn_type(tp: type) -> bool:
    """Whether a result of type ``tp`` is one key: a str, bytes or tuple (or subclass, e.g. a
    namedtuple), or anything that is not iterable (a number, a datetime, an enum member)."""
    one = issubclass(tp, str | bytes | tuple) or not (hasattr(tp, "__iter__")
                                                     or hasattr(tp, "__getitem__"))
    if tp is type(None):
        one = False
    _ONE_KEY[tp] = one
    return one


def one_key_test() -> tuple[dict[type, bool], Callable[[type], bool]]:
    """``(table, learn)``, :func:`one_key`'s test for a loop that inlines it: a result
    ``ks`` is one key when ``table.get(type(ks))`` is True, or is None and
    ``learn(type(ks))`` is True (the type is then remembered)."""
    return _ONE_KEY, _learn_type


def one_key(ks: Any) -> Any:
    """f_MK's result in the form the runtime reads (a set, any iterable of keys, or a dict
    key -> value): one key (a str, bytes, number, tuple ...) becomes ``{ks}``; a set, list,
    dict or other iterable is returned as is (several keys); None as is (no keys).

    >>> one_key("alice"), one_key(("a", 1)), one_key(["a", "b"]), one_key(7)
    ({'alice'}, {('a', 1)}, ['a', 'b'], {7})
    """
    one = _ONE_KEY.get(type(ks))
    if one or (one is None and _learn_type(type(ks))):
        return {ks}
    return ks


def one_key_fn(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn(t)`` (a user's f_MK of one argument) with its result read by :func:`one_key`;
    the check is inlined: this runs once per tuple."""
    if getattr(fn, "_stretchflow_one_key", False):
        return fn
    kind, learn = _ONE_KEY, _learn_type

    def keys(t: Any) -> Any:
        ks = fn(t)
        one = kind.get(type(ks))
        if one or (one is None and learn(type(ks))):
            return {ks}
        return ks

    keys._stretchflow_one_key = True  # type: ignore[attr-defined]
    keys.__wrapped__ = fn  # type: ignore[attr-defined]
    return keys


def one_key_fn2(fn: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """``fn(t, i)`` (an O+'s f_MK) with its result read by :func:`one_key`."""
    if getattr(fn, "_stretchflow_one_key", False):
        return fn
    kind, learn = _ONE_KEY, _learn_type

    def keys(t: Any, i: int) -> Any:
        ks = fn(t, i)
        one = kind.get(type(ks))
        if one or (one is None and learn(type(ks))):
            return {ks}
        return ks

    keys._stretchflow_one_key = True  # type: ignore[attr-defined]
    keys.__wrapped__ = fn  # type: ignore[attr-defined]
    return keys


def one_key_method(fn: Callable[[Any, Any, int], Any]) -> Callable[[Any, Any, int], Any]:
    """A subclass's ``keys(self, t, i)`` method with its result read by :func:`one_key`."""
    kind, learn = _ONE_KEY, _learn_type

    def keys(self: Any, t: Any, i: int) -> Any:
        ks = fn(self, t, i)
        one = kind.get(type(ks))
        if one or (one is None and learn(type(ks))):
            return {ks}
        return ks

    keys._stretchflow_one_key = True  # type: ignore[attr-defined]
    keys.__wrapped__ = fn  # type: ignore[attr-defined]
    keys.__doc__ = fn.__doc__
    keys.__name__ = keys.__qualname__ = getattr(fn, "__name__", "keys")
    return keys


def wrap_keys_method(cls: type) -> None:
    """Wraps the ``keys`` method a subclass of OPlus defines (unless it sets
    ``keys_iterable = True``) so its result is read by :func:`one_key`. On the class, not per
    instance, so copies of an operator (``copy.copy`` in the Spark plan) call their own."""
    own = cls.__dict__.get("keys")
    if own is None or not callable(own) or cls.__dict__.get("keys_iterable", False) \
            or getattr(own, "_stretchflow_one_key", False):
        return  # none of its own, a staticmethod object, opted out, or wrapped already
    cls.keys = one_key_method(own)  # type: ignore[attr-defined]


def key_pairs(ks: Any, value: Any) -> Any:
    """(key, value f_U sees) for every key f_MK returned: a dict gives its own per-key values;
    any other iterable is a set of keys (duplicates count once) that all see the tuple."""
    if isinstance(ks, dict):
        return ks.items()
    if type(ks) is not set and type(ks) is not frozenset:
        ks = dict.fromkeys(ks)
    return [(k, value) for k in ks]


def input_keys_fn(per_input: list[Callable[[Any], Any]]) -> Callable[[Any, int], Any]:
    """An O+'s f_MK from one user f_MK per input (a join's ``left_keys``/``right_keys``):
    ``per_input[i](t)`` read by :func:`one_key`."""
    fns = tuple(per_input)
    kind, learn = _ONE_KEY, _learn_type

    def keys(t: Any, i: int) -> Any:
        ks = fns[i](t)
        one = kind.get(type(ks))
        if one or (one is None and learn(type(ks))):
            return {ks}
        return ks

    keys._stretchflow_one_key = True  # type: ignore[attr-defined]
    return keys


__all__ = ["input_keys_fn", "key_pairs", "one_key", "one_key_fn", "one_key_fn2", "one_key_method",
           "one_key_test", "wrap_keys_method"]
