"""NEXMark's event generator: persons, auctions and bids of an online auction, vectorised.

NEXMark (Tucker et al., "NEXMark — a benchmark for queries over data streams", 2002) models
an auction site as one stream of three kinds of event. This module generates the stream the
way the Apache Beam NEXMark generator and its Flink port define it
(https://github.com/nexmark/nexmark, ``nexmark-flink/.../generator``: ``GeneratorConfig``,
``NexmarkGenerator``, ``PersonGenerator``, ``AuctionGenerator``, ``BidGenerator``,
``PriceGenerator``, ``StringsGenerator``; https://github.com/apache/beam,
``sdks/java/testing/nexmark/.../sources/generator`` and ``NexmarkConfiguration``), with
numpy instead of a per-event Java ``Random``: the same model and distributions, not the same
values.

The model (event number ``n = 0, 1, 2, ...``):

* **Kinds in proportions 1:3:46.** Of every 50 consecutive events (an *epoch*) the first is
  a new person, the next three are new auctions and the other 46 are bids
  (``personProportion``, ``auctionProportion``, ``bidProportion``).
* **Ids in order.** Persons are numbered 1000, 1001, ... and auctions 1000, 1001, ... in the
  order they are created (``FIRST_PERSON_ID``, ``FIRST_AUCTION_ID``); categories are 10..14.
* **Event time.** Event ``n`` happens at ``start + floor(n * 10**6 / rate) // 1000`` ms: a
  steady ``rate`` events per second of event time (``firstEventRate``, 10 000 by default),
  non-decreasing, many events per millisecond at high rates.
* **Hot auctions, bidders and sellers** (``hotAuctionRatio`` 2, ``hotBiddersRatio`` 4,
  ``hotSellersRatio`` 4; ``HOT_AUCTION_RATIO``, ``HOT_BIDDER_RATIO``, ``HOT_SELLER_RATIO``
  100): a bid goes with probability 1 - 1/2 to the *hot auction* — the latest auction id
  rounded down to a multiple of 100 — and otherwise to a uniformly drawn auction among the
  last ``in_flight_auctions`` (100) ones or up to 10 not created yet; a bid's bidder is with
  probability 1 - 1/4 the *hot bidder* (the latest person id rounded down to a multiple of
  100, plus one) and otherwise a uniformly drawn person among the last ``active_people``
  (1000) or up to 10 not created yet; an auction's seller is with probability 1 - 1/4 the
  *hot seller* (the latest person id rounded down to a multiple of 100) and otherwise drawn
  like a cold bidder. So a few auctions and people get most of the traffic, and the hot ones
  change as the stream goes on.
* **Prices** are ``round(10**(6u) * 100)`` cents for ``u`` uniform in [0, 1): log-uniform
  from 1 $ to 1 000 000 $. An auction's ``reserve`` is its ``initial_bid`` plus another
  such price.
* **Auction lengths.** An auction expires ``1 + uniform[0, 2h)`` ms after it opens, where
  ``h`` is the event time until ``in_flight_auctions`` more auctions will have been created
  (1666 events later): about ``in_flight_auctions`` auctions are open at any time, whatever
  the rate (at 10 000 events/s an auction lasts 167 ms on average).
* **Strings.** A person's name is one of 11 first names and one of 9 last names; email
  ``<3..6 letters>@<3..4 letters>.com``, credit card four groups of four digits, city one of
  10 and state one of 6 (AZ, CA, ID, OR, WA, WY) drawn independently, as NEXMark does. An
  auction's ``item_name`` and ``description`` are random lowercase text of 3..19 and 3..99
  characters with spaces. A bid's ``channel`` is, with probability 1/2, one of four hot
  channels (Google, Facebook, Baidu, Apple) with their URL and otherwise ``channel-<i>``,
  ``i`` in 0..9999, with that channel's URL (the Flink port's channel and URL fields).

Differences from the Java generators, all deliberate:

* Three tables instead of one stream of tagged events: ``persons``, ``auctions`` and
  ``bids``, each sorted by ``ts``, which is what the queries read (Flink's NEXMark SQL also
  reads three views of its one source). Every row carries ``ts`` (int64 ms, the event time,
  non-decreasing) first, and NEXMark's ``date_time`` (the same value: the query text reads
  it); ``expires`` is int64 ms too. Merging the three by ``ts`` (ties: persons, auctions,
  bids, then event order) gives NEXMark's single stream back.
* ``extra`` (NEXMark's padding to an average event size of 200, 500 and 100 bytes for
  persons, auctions and bids) has the Java generator's length rule — the average size less
  the row's other fields, plus or minus 20 % — but its letters are consecutive pieces of one
  fixed random text of 1 MiB, repeated, so it costs a copy, not a random draw per character.
* The bidder id is ``FIRST_PERSON_ID`` plus the base-0 id, as in Beam; the Flink port adds
  ``FIRST_PERSON_ID`` a second time (bidders 2000 and up), which no query relies on.
* No out-of-order groups, delayed events or rate shapes (``outOfOrderGroupSize`` 1, one
  constant rate): the stream is sorted, as every stretchflow file source expects.
* The channel URLs and the hot URLs are drawn from a fixed seed, the same for every ``seed``
  (Java draws them once per process).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["STREAMS", "nexmark"]

#: the tables :func:`nexmark` returns, in order
STREAMS = ("persons", "auctions", "bids")

PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
#: the hot auction, bidder and seller are the latest id rounded down to a multiple of these
HOT_AUCTION_RATIO = HOT_BIDDER_RATIO = HOT_SELLER_RATIO = 100
#: ids not created yet that a cold draw may pick (``AUCTION_ID_LEAD``, ``PERSON_ID_LEAD``)
ID_LEAD = 10
#: NEXMark's average event sizes in bytes, which ``extra`` pads to
AVG_PERSON_BYTES, AVG_AUCTION_BYTES, AVG_BID_BYTES = 200, 500, 100

#: NEXMark's names, cities and states (PersonGenerator)
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
                "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
               "Noris")
CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
           "Seattle", "Kent", "Cheyenne")
STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
_HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
_CHANNELS = 10_000
#: the fixed seed of what does not depend on ``seed``: channel URLs and the extra text
_FIXED_SEED = 0x4E45_584D
_EXTRA_TEXT = 1 << 20
_EXTRA_ROWS = 1 << 20
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


# --------------------------------------------------------------------------- strings


def _strings(lengths: np.ndarray, data: np.ndarray) -> pa.Array:
    """A string array whose row i is the next ``lengths[i]`` bytes of ``data`` (ASCII)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.LargeStringArray.from_buffers(
        len(lengths), pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))
    ).cast(pa.string())


def _random_text(rng: np.random.Generator, n: int, max_length: int,
                 special: str = " ") -> pa.Array:
    """``StringsGenerator.nextString``: ``3 + uniform[0, max_length - 3)`` characters, each
    ``special`` with probability 1/13 and otherwise a random lowercase letter, trimmed of
    spaces at both ends (as Java's ``trim``)."""
    lengths = 3 + rng.integers(0, max_length - 3, n)
    total = int(lengths.sum())
    chars = _LETTERS[rng.integers(0, 26, total)]
    chars[rng.integers(0, 13, total) == 0] = ord(special)
    text = _strings(lengths, chars)
    return pc.utf8_trim(text, " ") if special == " " else text


def _extra(rng: np.random.Generator, current_size: np.ndarray, average: int,
           text: np.ndarray) -> pa.Array:
    """``StringsGenerator.nextExtra``: a string of ``average - current_size`` bytes plus or
    minus 20 % (empty when the row is already that big). The rows are consecutive pieces of
    ``text`` repeated, from a random place: random-looking letters for the cost of a copy."""
    desired = np.maximum(average - current_size, 0)
    delta = np.floor(desired * 0.2 + 0.5).astype(np.int64)
    lengths = desired - delta + (rng.random(len(desired)) * 2 * delta).astype(np.int64)
    chunks = []
    at = int(rng.integers(0, len(text)))
    # in chunks of rows, so that no chunk's text outgrows a string array's 32-bit offsets
    for lo in range(0, len(lengths), _EXTRA_ROWS):
        part = lengths[lo : lo + _EXTRA_ROWS]
        size = int(part.sum())
        chunks.append(_strings(part, np.resize(np.roll(text, -at), size)))
        at = (at + size) % len(text)
    return pa.chunked_array(chunks, pa.string())


def _digits(values: np.ndarray, groups: int) -> pa.Array:
    """``groups`` four-digit groups separated by spaces (a credit card number), group g of
    row i being ``values[i, g]`` zero-padded."""
    n = len(values)
    width = 5 * groups - 1
    chars = np.full((n, width), ord(" "), dtype=np.uint8)
    for g in range(groups):
        v = values[:, g]
        for d in range(4):
            chars[:, 5 * g + 3 - d] = ord("0") + v % 10
            v = v // 10
    return _strings(np.full(n, width, dtype=np.int64), chars.reshape(-1))


def _bit_reverse32(i: np.ndarray) -> np.ndarray:
    """Java's ``Math.abs(Integer.reverse(i))`` for non-negative ``i`` < 2**31."""
    x = i.astype(np.uint32)
    r = np.zeros_like(x)
    for _ in range(32):
        r = (r << np.uint32(1)) | (x & np.uint32(1))
        x >>= np.uint32(1)
    return np.abs(r.view(np.int32).astype(np.int64))


def _channel_urls() -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """The Flink port's channel table: names and URLs of the four hot channels and of the
    ``_CHANNELS`` others (nine in ten of those URLs name the channel's id)."""
    rng = np.random.default_rng([_FIXED_SEED, 1])
    n = len(_HOT_CHANNELS) + _CHANNELS
    parts = [_random_text(rng, n, 5, "_") for _ in range(3)]
    base = pc.binary_join_element_wise(pa.scalar("https://www.nexmark.com"), *parts,
                                       pa.scalar("item.htm?query=1"), "/")
    hot_urls, urls = base[: len(_HOT_CHANNELS)], base[len(_HOT_CHANNELS):]
    ids = np.arange(_CHANNELS)
    tagged = rng.integers(0, 10, _CHANNELS) > 0
    suffix = np.where(tagged, np.char.add("&channel_id=", _bit_reverse32(ids).astype(str)), "")
    urls = pc.binary_join_element_wise(urls, pa.array(suffix), "")
    names = pa.array(np.char.add("channel-", ids.astype(str)))
    return pa.array(_HOT_CHANNELS), hot_urls, names, urls


def _extra_text() -> np.ndarray:
    """The fixed random lowercase text every ``extra`` is cut from."""
    return _LETTERS[np.random.default_rng([_FIXED_SEED, 2]).integers(0, 26, _EXTRA_TEXT)]


# --------------------------------------------------------------------------- ids


def _last_person(n: np.ndarray) -> np.ndarray:
    """``lastBase0PersonId``: the id (base 0) of the latest person at event ``n``."""
    epoch, offset = n // TOTAL_PROPORTION, n % TOTAL_PROPORTION
    return epoch * PERSON_PROPORTION + np.minimum(offset, PERSON_PROPORTION - 1)


def _last_auction(n: np.ndarray) -> np.ndarray:
    """``lastBase0AuctionId``: the id (base 0) of the latest auction at event ``n`` (its own
    for an auction; -1 before the first)."""
    epoch, offset = n // TOTAL_PROPORTION, n % TOTAL_PROPORTION
    offset = np.clip(offset - PERSON_PROPORTION, -1, AUCTION_PROPORTION - 1)
    return epoch * AUCTION_PROPORTION + offset


def _cold_person(rng: np.random.Generator, n: np.ndarray, active_people: int) -> np.ndarray:
    """``nextBase0PersonId``: uniform among the last ``active_people`` persons and the next
    ``ID_LEAD`` ones."""
    people = _last_person(n) + 1
    active = np.minimum(people, active_people)
    return people - active + rng.integers(0, active + ID_LEAD)


def _prices(rng: np.random.Generator, n: int) -> np.ndarray:
    """``PriceGenerator.nextPrice``: ``round(10**(6u) * 100)``, Java's ``Math.round``."""
    return np.floor(10.0 ** (rng.random(n) * 6.0) * 100.0 + 0.5).astype(np.int64)


def _table(ts: np.ndarray, columns: dict[str, pa.Array | np.ndarray]) -> pa.Table:
    return pa.table({"ts": pa.array(ts, pa.int64()), **columns})


# --------------------------------------------------------------------------- the generator


def nexmark(
    rows: int,
    seed: int = 0,
    rate: float = 10_000.0,
    start: int | None = None,
    hot_auction_ratio: int = 2,
    hot_bidders_ratio: int = 4,
    hot_sellers_ratio: int = 4,
    in_flight_auctions: int = 100,
    active_people: int = 1000,
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """NEXMark's first ``rows`` events as ``(persons, auctions, bids)`` (module docstring).

    * persons: ``ts, id, name, email_address, credit_card, city, state, date_time, extra``;
    * auctions: ``ts, id, item_name, description, initial_bid, reserve, date_time, expires,
      seller, category, extra``;
    * bids: ``ts, auction, bidder, price, channel, url, date_time, extra``.

    ``rows`` counts events of all kinds (NEXMark's ``numEvents``): 1 in 50 is a person, 3 in
    50 an auction. ``rate`` is events per second of event time; ``start`` the first event's
    ts (default :data:`~stretchflow.io.generator_args.DEFAULT_START`). The ``hot_*`` ratios,
    ``in_flight_auctions`` and ``active_people`` are NexmarkConfiguration's options of those
    names. Deterministic by ``seed`` (numpy's ``default_rng``).

    >>> persons, auctions, bids = nexmark(500, seed=1)
    >>> persons.num_rows, auctions.num_rows, bids.num_rows
    (10, 30, 460)
    >>> persons["id"].to_pylist() == list(range(1000, 1010))
    True
    """
    from ..io.generator_args import DEFAULT_START
    from ..io.generator_args import check as _check
    from ..io.generator_args import check_rows as _check_rows

    _check_rows(rows)
    _check(rate > 0, f"rate must be positive, got {rate!r}")
    for name, value in (("hot_auction_ratio", hot_auction_ratio),
                        ("hot_bidders_ratio", hot_bidders_ratio),
                        ("hot_sellers_ratio", hot_sellers_ratio),
                        ("in_flight_auctions", in_flight_auctions),
                        ("active_people", active_people)):  # fmt: skip
        _check(int(value) == value and value >= 1,
               f"{name} must be a positive integer, got {value!r}")
    rows = int(rows)
    start = DEFAULT_START if start is None else int(start)
    delay_us = 1e6 / rate

    def timestamp(n: np.ndarray) -> np.ndarray:  # GeneratorConfig.timestampForEvent
        return start + (n * delay_us).astype(np.int64) // 1000

    n = np.arange(rows, dtype=np.int64)
    offset = n % TOTAL_PROPORTION
    n_person = n[offset < PERSON_PROPORTION]
    n_auction = n[(offset >= PERSON_PROPORTION)
                  & (offset < PERSON_PROPORTION + AUCTION_PROPORTION)]
    n_bid = n[offset >= PERSON_PROPORTION + AUCTION_PROPORTION]
    person_rng, auction_rng, bid_rng = np.random.default_rng(seed).spawn(3)
    text = _extra_text()

    # persons
    np_ = len(n_person)
    ts = timestamp(n_person)
    names = pa.array([f"{f} {g}" for f in FIRST_NAMES for g in LAST_NAMES])
    name = names.take(person_rng.integers(0, len(names), np_))
    email = pc.binary_join_element_wise(
        _random_text(person_rng, np_, 7), _random_text(person_rng, np_, 5), "@")
    email = pc.binary_join_element_wise(email, pa.scalar(".com"), "")
    card = _digits(person_rng.integers(0, 10_000, (np_, 4)), 4)
    city = pa.array(CITIES).take(person_rng.integers(0, len(CITIES), np_))
    state = pa.array(STATES).take(person_rng.integers(0, len(STATES), np_))
    size = 8 + sum(pc.binary_length(c).to_numpy(zero_copy_only=False)
                   for c in (name, email, card, city, state))
    persons = _table(ts, {
        "id": _last_person(n_person) + FIRST_PERSON_ID,
        "name": name, "email_address": email, "credit_card": card, "city": city,
        "state": state, "date_time": ts,
        "extra": _extra(person_rng, size, AVG_PERSON_BYTES, text)})

    # auctions
    na = len(n_auction)
    ts = timestamp(n_auction)
    hot = auction_rng.integers(0, hot_sellers_ratio, na) > 0
    seller = np.where(hot, _last_person(n_auction) // HOT_SELLER_RATIO * HOT_SELLER_RATIO,
                      _cold_person(auction_rng, n_auction, active_people))
    category = FIRST_CATEGORY_ID + auction_rng.integers(0, NUM_CATEGORIES, na)
    initial_bid = _prices(auction_rng, na)
    ahead = in_flight_auctions * TOTAL_PROPORTION // AUCTION_PROPORTION
    horizon = timestamp(n_auction + ahead) - ts
    expires = ts + 1 + auction_rng.integers(0, np.maximum(2 * horizon, 1))
    item_name = _random_text(auction_rng, na, 20)
    description = _random_text(auction_rng, na, 100)
    reserve = initial_bid + _prices(auction_rng, na)
    size = (48 + pc.binary_length(item_name).to_numpy(zero_copy_only=False)
            + pc.binary_length(description).to_numpy(zero_copy_only=False))
    auctions = _table(ts, {
        "id": _last_auction(n_auction) + FIRST_AUCTION_ID,
        "item_name": item_name, "description": description, "initial_bid": initial_bid,
        "reserve": reserve, "date_time": ts, "expires": expires,
        "seller": seller + FIRST_PERSON_ID, "category": category,
        "extra": _extra(auction_rng, size, AVG_AUCTION_BYTES, text)})

    # bids
    nb = len(n_bid)
    ts = timestamp(n_bid)
    last = _last_auction(n_bid)
    lowest = np.maximum(last - in_flight_auctions, 0)
    cold = lowest + bid_rng.integers(0, last - lowest + 1 + ID_LEAD)
    hot = bid_rng.integers(0, hot_auction_ratio, nb) > 0
    auction = np.where(hot, last // HOT_AUCTION_RATIO * HOT_AUCTION_RATIO, cold)
    hot = bid_rng.integers(0, hot_bidders_ratio, nb) > 0
    bidder = np.where(hot, _last_person(n_bid) // HOT_BIDDER_RATIO * HOT_BIDDER_RATIO + 1,
                      _cold_person(bid_rng, n_bid, active_people))
    price = _prices(bid_rng, nb)
    hot_names, hot_urls, names, urls = _channel_urls()
    hot = bid_rng.integers(0, 2, nb) > 0
    # one index into hot channels followed by the others
    channel_index = np.where(hot, bid_rng.integers(0, len(_HOT_CHANNELS), nb),
                             len(_HOT_CHANNELS) + bid_rng.integers(0, _CHANNELS, nb))
    channel_index = pa.array(channel_index)
    bids = _table(ts, {
        "auction": auction + FIRST_AUCTION_ID, "bidder": bidder + FIRST_PERSON_ID,
        "price": price,
        "channel": pa.concat_arrays([hot_names, names]).take(channel_index),
        "url": pa.concat_arrays([hot_urls, urls]).take(channel_index),
        "date_time": ts,
        "extra": _extra(bid_rng, np.full(nb, 32, dtype=np.int64), AVG_BID_BYTES, text)})
    return persons, auctions, bids
