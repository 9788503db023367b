"""The Nexmark event streams (persons, auctions, bids), generated with numpy from event numbers.

The schema, the event mix and the distributions are those of the Nexmark generator of
https://github.com/nexmark/nexmark (``NexmarkGenerator``, ``GeneratorConfig``,
``PersonGenerator``, ``AuctionGenerator``, ``BidGenerator``; Apache Beam's Nexmark is its
ancestor), written anew over arrays:

* Event ``n`` (0, 1, 2, ...) is a person when ``n % 50 == 0``, an auction when
  ``n % 50`` is 1 to 3, a bid otherwise: 1 person : 3 auctions : 46 bids per 50 events.
* Its event time is ``base_time + n * 1e6 / rate`` microseconds, in milliseconds: the
  generator's constant inter-event delay (``first-event.rate``; 10 M events/s as in the
  published Flink runs, so 10 M events span one second of event time). The stream is in
  event-time order; the Flink DDL's watermark is ``dateTime - 4 s``.
* Ids: person ``1000 + n // 50``; auction ``1000 + 3 * (n // 50) + (n % 50 - 1)``.
  A bid is for a hot auction (the first of the last 100 auctions) with probability 1/2,
  otherwise for one of the last 100 auctions or 10 not yet created; its bidder is a hot
  person (the second of the last 100 people) with probability 3/4, otherwise one of the
  last 1,000 people or 10 not yet created. An auction's seller is a hot person (the first
  of the last 100) with probability 3/4. Categories are 10 to 14.
* Prices are ``round(10 ** (6 u) * 100)`` for uniform ``u``; an auction expires a random
  time up to twice the time in which 100 more auctions are generated after it; the
  ``extra`` strings pad the events to 200 (person), 500 (auction) and 100 (bid) bytes on
  average, +-20%.

Unlike the Java generator (which draws from a ``java.util.Random`` per generator), every
random value here is a hash of ``(seed, event number, field)``, so any range of event
numbers generates its part of the stream alone and identically: a parallel source splits
the range ``0..N-1`` (``env.from_sequence``) and each subtask maps its numbers to events.
Strings are cut from a fixed pool of random letters at hashed offsets.

Example:
    >>> import numpy as np
    >>> numbers = np.arange(0, 100, dtype=np.int64)
    >>> bids(numbers).num_rows, auctions(numbers).num_rows, persons(numbers).num_rows
    (92, 6, 2)
    >>> auctions(numbers).column("id").to_pylist()
    [1000, 1001, 1002, 1003, 1004, 1005]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5

#: NexmarkConfiguration's defaults: 1 in hot_*_ratio draws is *not* hot.
HOT_AUCTION_RATIO = 2
HOT_SELLERS_RATIO = 4
HOT_BIDDERS_RATIO = 4
#: The batch of recent ids whose first (seller, auction) or second (bidder) member is hot.
HOT_BATCH = 100
NUM_ACTIVE_PEOPLE = 1000
NUM_IN_FLIGHT_AUCTIONS = 100
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10

AVG_PERSON_BYTES = 200
AVG_AUCTION_BYTES = 500
AVG_BID_BYTES = 100

#: Beam's Nexmark base time, 2015-07-15T00:00:00Z: event times are fixed, not wall-clock.
BASE_TIME_MS = 1_436_918_400_000
#: Events per second of event time (the published Flink runs' ``TPS``).
DEFAULT_RATE = 10_000_000
DEFAULT_SEED = 20_250_101

US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend",
             "Redmond", "Seattle", "Kent", "Cheyenne"]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
              "Noris"]
HOT_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
HOT_CHANNELS_RATIO = 2
CHANNELS_NUMBER = 10_000

PERSON_SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("email_address", pa.string()),
    ("credit_card", pa.string()), ("city", pa.string()), ("state", pa.string()),
    ("date_time", pa.int64()), ("extra", pa.string())])
AUCTION_SCHEMA = pa.schema([
    ("id", pa.int64()), ("item_name", pa.string()), ("description", pa.string()),
    ("initial_bid", pa.int64()), ("reserve", pa.int64()), ("date_time", pa.int64()),
    ("expires", pa.int64()), ("seller", pa.int64()), ("category", pa.int64()),
    ("extra", pa.string())])
BID_SCHEMA = pa.schema([
    ("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()),
    ("channel", pa.string()), ("url", pa.string()), ("date_time", pa.int64()),
    ("extra", pa.string())])

_POOL_BYTES = 1 << 20
_MAX_EXTRA = 512  #: longest string cut from the pool


@dataclass(frozen=True)
class GeneratorConfig:
    """What the stream depends on besides the event numbers."""

    seed: int = DEFAULT_SEED
    rate: int = DEFAULT_RATE  #: events per second of event time
    base_time_ms: int = BASE_TIME_MS


DEFAULT = GeneratorConfig()

# -- counter-based random numbers ---------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


class _Draws:
    """Independent uniform draws per event: ``draw(k)`` is field ``k``'s value for each."""

    def __init__(self, numbers: np.ndarray, seed: int) -> None:
        with np.errstate(over="ignore"):
            self._base = _mix(numbers.astype(np.uint64) * _GOLDEN + np.uint64(seed))

    def bits(self, field: int) -> np.ndarray:
        with np.errstate(over="ignore"):
            return _mix(self._base + np.uint64(field) * _GOLDEN)

    def uniform(self, field: int) -> np.ndarray:
        """Floats in [0, 1)."""
        return (self.bits(field) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def below(self, field: int, bound: np.ndarray | int) -> np.ndarray:
        """Integers in [0, bound), bound per event or one for all."""
        return (self.uniform(field) * bound).astype(np.int64)


# -- ids and times ----------------------------------------------------------------------------


def event_times(numbers: np.ndarray, config: GeneratorConfig = DEFAULT) -> np.ndarray:
    """Event time (epoch ms) of each event number: the constant inter-event delay."""
    return config.base_time_ms + numbers * 1_000_000 // config.rate // 1000


def last_person(numbers: np.ndarray) -> np.ndarray:
    """The last person id (base 0) created at or before each event."""
    return numbers // TOTAL_PROPORTION * PERSON_PROPORTION


def last_auction(numbers: np.ndarray) -> np.ndarray:
    """The last auction id (base 0) created at or before each event."""
    epoch = numbers // TOTAL_PROPORTION
    offset = numbers % TOTAL_PROPORTION
    person = offset < PERSON_PROPORTION
    offset = np.where(offset >= PERSON_PROPORTION + AUCTION_PROPORTION,
                      AUCTION_PROPORTION - 1, offset - PERSON_PROPORTION)
    offset = np.where(person, AUCTION_PROPORTION - 1, offset)
    return (epoch - person) * AUCTION_PROPORTION + offset


def _random_person(numbers: np.ndarray, draws: _Draws, field: int) -> np.ndarray:
    """One of the active people or a few not created yet (base 0)."""
    people = last_person(numbers) + 1
    active = np.minimum(people, NUM_ACTIVE_PEOPLE)
    return people - active + draws.below(field, active + PERSON_ID_LEAD)


def _random_auction(numbers: np.ndarray, draws: _Draws, field: int) -> np.ndarray:
    """One of the auctions likely still open or a few not created yet (base 0)."""
    newest = last_auction(numbers)
    oldest = np.maximum(newest - NUM_IN_FLIGHT_AUCTIONS, 0)
    return oldest + draws.below(field, newest - oldest + 1 + AUCTION_ID_LEAD)


def _prices(draws: np.ndarray) -> np.ndarray:
    return np.round(np.power(10.0, draws * 6.0) * 100.0).astype(np.int64)


# -- strings ----------------------------------------------------------------------------------


class _Memo(dict):  # type: ignore[type-arg]
    """A per-process memo that is pickled empty.

    The functions of this module travel to the TaskExecutors by value, with the globals
    they use: a filled memo (the pool is 1 MiB) would ride along in every job graph, and a
    ``functools.cache`` wrapper would be pickled by reference to a module they cannot import.
    """

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return type(self), ()


_POOLS: _Memo = _Memo()  #: seed -> pool of letters
_CHANNELS: _Memo = _Memo()  #: seed -> (channel names, urls)


def _pool(seed: int) -> np.ndarray:
    """Random lowercase letters with about one space in 13 (StringsGenerator.nextString)."""
    if seed not in _POOLS:
        rng = np.random.default_rng(seed)
        letters = rng.integers(ord("a"), ord("z") + 1, _POOL_BYTES + _MAX_EXTRA,
                               dtype=np.uint8)
        letters[rng.random(letters.size) < 1 / 13] = ord(" ")
        _POOLS[seed] = letters
    return _POOLS[seed]


def _cut(draws: _Draws, field: int, lengths: np.ndarray, seed: int) -> pa.Array:
    """Strings of the given lengths cut from the pool at hashed offsets."""
    pool = _pool(seed)
    n = len(lengths)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    if n == 0:
        return pa.array([], pa.string())
    width = int(lengths.max())
    starts = draws.below(field, _POOL_BYTES)
    windows = np.lib.stride_tricks.sliding_window_view(pool, width)[starts]
    data = windows[np.arange(width) < lengths[:, None]]
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def _next_strings(draws: _Draws, field: int, max_length: int, seed: int) -> pa.Array:
    """StringsGenerator.nextString: 3 to max_length - 1 characters."""
    lengths = 3 + draws.below(field, max_length - 3)
    return _cut(draws, field + 1, lengths, seed)


def _extras(draws: _Draws, field: int, current: np.ndarray | int, average: int,
            seed: int) -> pa.Array:
    """StringsGenerator.nextExtra: pads ``current`` bytes to ``average`` on average, +-20%."""
    wanted = np.maximum(average - np.asarray(current, dtype=np.int64), 0)
    wanted = np.broadcast_to(wanted, draws.bits(0).shape)
    delta = np.round(wanted * 0.2).astype(np.int64)
    lengths = wanted - delta + np.where(delta > 0, draws.below(field, np.maximum(2 * delta, 1)),
                                        0)
    return _cut(draws, field + 1, np.minimum(lengths, _MAX_EXTRA), seed)


def _channels(seed: int) -> tuple[pa.Array, pa.Array]:
    """(channel, url) of the 4 hot channels followed by the 10,000 others."""
    if seed not in _CHANNELS:
        _CHANNELS[seed] = _make_channels(seed)
    return _CHANNELS[seed]


def _make_channels(seed: int) -> tuple[pa.Array, pa.Array]:
    rng = np.random.default_rng(seed + 1)
    count = len(HOT_CHANNELS) + CHANNELS_NUMBER
    # BidGenerator.getBaseUrl: three random 5-letter path segments per channel.
    letters = rng.integers(ord("a"), ord("z") + 1, (count, 3, 5), dtype=np.uint8)
    offsets = pa.py_buffer(np.arange(0, 5 * count + 1, 5, dtype=np.int32))
    segments = [pa.StringArray.from_buffers(count, offsets,
                                            pa.py_buffer(letters[:, i, :].tobytes()))
                for i in range(3)]
    urls = pc.binary_join_element_wise("https://www.nexmark.com/", *segments,
                                       "item.htm?query=1", "/")
    urls = pc.replace_substring(urls, "com//", "com/", max_replacements=1)
    numbers = np.arange(CHANNELS_NUMBER, dtype=np.uint32)
    # 9 in 10 other channels' URLs name the channel: Java's abs(Integer.reverse(i)).
    reversed_bits = np.zeros_like(numbers)
    for bit in range(32):
        reversed_bits |= ((numbers >> np.uint32(bit)) & np.uint32(1)) << np.uint32(31 - bit)
    channel_ids = np.abs(reversed_bits.view(np.int32).astype(np.int64))
    suffix = pc.binary_join_element_wise(
        "&channel_id=", pc.cast(pa.array(channel_ids), pa.string()), "")
    with_id = rng.integers(10, size=CHANNELS_NUMBER) > 0
    tail = pc.if_else(pa.array(with_id), suffix, "")
    others = pc.binary_join_element_wise(urls.slice(len(HOT_CHANNELS)), tail, "")
    names = [*HOT_CHANNELS, *(f"channel-{i}" for i in range(CHANNELS_NUMBER))]
    return (pa.array(names, pa.string()),
            pa.concat_arrays([urls.slice(0, len(HOT_CHANNELS)), others]))


# -- the three streams ------------------------------------------------------------------------


def _of_kind(numbers: np.ndarray, low: int, high: int) -> np.ndarray:
    numbers = np.asarray(numbers, dtype=np.int64)
    offset = numbers % TOTAL_PROPORTION
    return numbers[(offset >= low) & (offset < high)]


def persons(numbers: np.ndarray, config: GeneratorConfig = DEFAULT) -> pa.RecordBatch:
    """The Person events among ``numbers`` (event numbers), in their order."""
    n = _of_kind(numbers, 0, PERSON_PROPORTION)
    d = _Draws(n, config.seed)
    names = pa.array([f"{f} {s}" for f in FIRST_NAMES for s in LAST_NAMES], pa.string())
    name = names.take(pa.array(d.below(1, len(names))))
    email = pc.binary_join_element_wise(_next_strings(d, 2, 7, config.seed),
                                        _next_strings(d, 4, 5, config.seed), "@")
    email = pc.binary_join_element_wise(email, pa.scalar(".com"), "")
    groups = [pc.utf8_lpad(pc.cast(pa.array(d.below(6 + i, 10_000)), pa.string()), 4, "0")
              for i in range(4)]
    card = pc.binary_join_element_wise(*groups, " ")
    city = pa.array(US_CITIES).take(pa.array(d.below(10, len(US_CITIES))))
    state = pa.array(US_STATES).take(pa.array(d.below(11, len(US_STATES))))
    size = (8 + pc.utf8_length(name).to_numpy() + pc.utf8_length(email).to_numpy() + 19
            + pc.utf8_length(city).to_numpy() + 2)
    extra = _extras(d, 12, size, AVG_PERSON_BYTES, config.seed)
    return pa.RecordBatch.from_arrays(
        [pa.array(last_person(n) + FIRST_PERSON_ID), name, email, card, city, state,
         pa.array(event_times(n, config)), extra], schema=PERSON_SCHEMA)


def auctions(numbers: np.ndarray, config: GeneratorConfig = DEFAULT) -> pa.RecordBatch:
    """The Auction events among ``numbers`` (event numbers), in their order."""
    n = _of_kind(numbers, PERSON_PROPORTION, PERSON_PROPORTION + AUCTION_PROPORTION)
    d = _Draws(n, config.seed)
    times = event_times(n, config)
    hot = d.below(1, HOT_SELLERS_RATIO) > 0
    seller = np.where(hot, last_person(n) // HOT_BATCH * HOT_BATCH, _random_person(n, d, 2))
    category = FIRST_CATEGORY_ID + d.below(3, NUM_CATEGORIES)
    initial = _prices(d.uniform(4))
    reserve = initial + _prices(d.uniform(5))
    # Auctions last up to twice the time in which NUM_IN_FLIGHT_AUCTIONS more are created.
    ahead = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
    horizon = event_times(n + ahead, config) - times
    expires = times + 1 + d.below(6, np.maximum(horizon * 2, 1))
    item = _next_strings(d, 7, 20, config.seed)
    description = _next_strings(d, 9, 100, config.seed)
    size = (8 + pc.utf8_length(item).to_numpy() + pc.utf8_length(description).to_numpy()
            + 40)
    extra = _extras(d, 11, size, AVG_AUCTION_BYTES, config.seed)
    return pa.RecordBatch.from_arrays(
        [pa.array(last_auction(n) + FIRST_AUCTION_ID), item, description, pa.array(initial),
         pa.array(reserve), pa.array(times), pa.array(expires),
         pa.array(seller + FIRST_PERSON_ID), pa.array(category), extra],
        schema=AUCTION_SCHEMA)


def bids(numbers: np.ndarray, config: GeneratorConfig = DEFAULT) -> pa.RecordBatch:
    """The Bid events among ``numbers`` (event numbers), in their order."""
    n = _of_kind(numbers, PERSON_PROPORTION + AUCTION_PROPORTION, TOTAL_PROPORTION)
    d = _Draws(n, config.seed)
    hot_auction = d.below(1, HOT_AUCTION_RATIO) > 0
    auction = np.where(hot_auction, last_auction(n) // HOT_BATCH * HOT_BATCH,
                       _random_auction(n, d, 2))
    hot_bidder = d.below(3, HOT_BIDDERS_RATIO) > 0
    bidder = np.where(hot_bidder, last_person(n) // HOT_BATCH * HOT_BATCH + 1,
                      _random_person(n, d, 4))
    price = _prices(d.uniform(5))
    hot_channel = d.below(6, HOT_CHANNELS_RATIO) > 0
    channel_index = np.where(hot_channel, d.below(7, len(HOT_CHANNELS)),
                             len(HOT_CHANNELS) + d.below(8, CHANNELS_NUMBER))
    channels, urls = _channels(config.seed)
    indices = pa.array(channel_index)
    extra = _extras(d, 9, 32, AVG_BID_BYTES, config.seed)
    return pa.RecordBatch.from_arrays(
        [pa.array(auction + FIRST_AUCTION_ID), pa.array(bidder + FIRST_PERSON_ID),
         pa.array(price), channels.take(indices), urls.take(indices),
         pa.array(event_times(n, config)), extra], schema=BID_SCHEMA)
