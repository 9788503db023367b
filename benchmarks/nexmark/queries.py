"""Nexmark queries q0-q5, q7, q8 and q12 with weir's DataStream API.

Semantics follow the Flink SQL of https://github.com/nexmark/nexmark
(``nexmark-flink/src/main/resources/queries/q*.sql``); each function takes an environment
and the number of events and returns the query's result stream.

Sources: each of the three streams is ``env.from_sequence(0, events - 1)`` (event numbers,
split across the source's subtasks) mapped batch by batch to the events of that kind
(:mod:`.generator`), with Flink's watermark ``dateTime - 4 s`` taken from the
``date_time`` column. A query over bids alone reads one such stream: it walks all
``events`` event numbers, as Flink's source does, but makes only the bids (Flink's makes
every event and its ``bid`` view drops the others).

Where a step is column-wise (projections, filters, windowed counts) it runs on Arrow
batches (``map_batches``, ``filter_batches``, ``key_by("column").window(...).count()``);
joins and per-key logic run per record in keyed (co-)process functions with keyed state
and timers, as a PyFlink user writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from weir import (
    AggregateFunction,
    Duration,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    SlidingEventTimeWindows,
    Time,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    ValueStateDescriptor,
    WatermarkStrategy,
)

from . import generator
from .generator import DEFAULT, GeneratorConfig

#: Flink's Nexmark DDL: ``WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND``.
OUT_OF_ORDERNESS_S = 4
WINDOW_MS = 10_000  #: q5, q7, q8 and q12: 10-second windows
SLIDE_MS = 2_000  #: q5's hop
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
Q2_MODULUS = 123
DOLLAR_TO_EURO = 0.908


def _watermarks() -> WatermarkStrategy:
    return (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(OUT_OF_ORDERNESS_S))
            .with_timestamp_column("date_time"))


def _generate(make: Callable[[np.ndarray, GeneratorConfig], pa.RecordBatch],
              config: GeneratorConfig, numbers: pa.RecordBatch) -> pa.RecordBatch:
    return make(numbers.column(0).to_numpy(), config)


def _stream(env: Any, events: int, make: Callable[[np.ndarray, GeneratorConfig],
                                                  pa.RecordBatch],
            config: GeneratorConfig, name: str) -> Any:
    return (env.from_sequence(0, events - 1).name(f"{name} numbers")
            .map_batches(partial(_generate, make, config)).name(name)
            .assign_timestamps_and_watermarks(_watermarks()))


def bids(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """The Bid events among event numbers ``0..events-1``, with timestamps and watermarks."""
    return _stream(env, events, generator.bids, config, "Bids")


def auctions(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    return _stream(env, events, generator.auctions, config, "Auctions")


def persons(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    return _stream(env, events, generator.persons, config, "Persons")


# -- q0, q1, q2: per-batch transformations ----------------------------------------------------


def _q0_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.select(["auction", "bidder", "price", "date_time", "extra"])


def q0(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Pass-through: ``SELECT auction, bidder, price, dateTime, extra FROM bid``."""
    return bids(env, events, config).map_batches(_q0_columns).name("q0 project")


def _q1_convert(batch: pa.RecordBatch) -> pa.RecordBatch:
    euros = pc.multiply(pc.cast(batch.column("price"), pa.float64()), DOLLAR_TO_EURO)
    return pa.RecordBatch.from_arrays(
        [batch.column("auction"), batch.column("bidder"), euros, batch.column("date_time"),
         batch.column("extra")], names=["auction", "bidder", "price", "date_time", "extra"])


def q1(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Currency conversion: every bid with ``0.908 * price``."""
    return bids(env, events, config).map_batches(_q1_convert).name("q1 convert")


def _q2_selected(batch: pa.RecordBatch) -> pa.Array:
    return pa.array(batch.column("auction").to_numpy() % Q2_MODULUS == 0)


def _q2_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.select(["auction", "price"])


def q2(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Selection: ``SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0``."""
    return (bids(env, events, config).filter_batches(_q2_selected).name("q2 filter")
            .map_batches(_q2_columns).name("q2 project"))


# -- q3: person/auction join ------------------------------------------------------------------


def _q3_sellers(batch: pa.RecordBatch) -> pa.Array:
    return pc.is_in(batch.column("state"), pa.array(Q3_STATES))


def _q3_auctions(batch: pa.RecordBatch) -> pa.Array:
    return pc.equal(batch.column("category"), Q3_CATEGORY)


class LocalItemSuggestion(KeyedCoProcessFunction):
    """q3's incremental inner join of auctions (input 1) and persons (input 2) on
    ``seller = id``: a person is kept for the auctions to come, auctions that arrive
    before their seller wait in a list."""

    def open(self, runtime_context: Any) -> None:
        self.person = runtime_context.get_state(ValueStateDescriptor("person"))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting-auctions"))

    def process_element1(self, auction: Any, ctx: Any) -> Iterable[Any] | None:
        person = self.person.value()
        if person is None:
            self.waiting.add(auction.id)
            return None
        return [(person[0], person[1], person[2], auction.id)]

    def process_element2(self, person: Any, ctx: Any) -> Iterable[Any] | None:
        self.person.update((person.name, person.city, person.state))
        waiting = list(self.waiting.get() or [])
        if not waiting:
            return None
        self.waiting.clear()
        return [(person.name, person.city, person.state, auction) for auction in waiting]


def q3(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Local item suggestion: (name, city, state, auction id) of sellers in OR, ID or CA
    with auctions in category 10."""
    sold = auctions(env, events, config).filter_batches(_q3_auctions).name("q3 category")
    sellers = persons(env, events, config).filter_batches(_q3_sellers).name("q3 state")
    return (sold.connect(sellers).key_by("seller", "id")
            .process(LocalItemSuggestion()).name("q3 join"))


# -- q4: winning bids, average per category ---------------------------------------------------


class WinningBid(KeyedCoProcessFunction):
    """Per auction (input 1) the highest price of its bids (input 2) made between its
    start and its expiry, emitted as ``(category, price)`` when event time passes the
    expiry (nothing for an auction without such a bid). Bids that arrive before their
    auction wait in a list."""

    def open(self, runtime_context: Any) -> None:
        self.auction = runtime_context.get_state(ValueStateDescriptor("auction"))
        self.best = runtime_context.get_state(ValueStateDescriptor("best-price"))
        self.early = runtime_context.get_list_state(ListStateDescriptor("early-bids"))

    def process_element1(self, auction: Any, ctx: Any) -> None:
        self.auction.update((auction.date_time, auction.expires, auction.category))
        best = None
        for price, when in self.early.get() or []:
            if auction.date_time <= when <= auction.expires and (best is None or price > best):
                best = price
        self.early.clear()
        if best is not None:
            self.best.update(best)
        ctx.timer_service().register_event_time_timer(auction.expires)

    def process_element2(self, bid: Any, ctx: Any) -> None:
        auction = self.auction.value()
        if auction is None:
            self.early.add((bid.price, bid.date_time))
            return
        if auction[0] <= bid.date_time <= auction[1]:
            best = self.best.value()
            if best is None or bid.price > best:
                self.best.update(bid.price)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        best = self.best.value()
        if best is None:
            return None
        self.best.clear()
        return [(self.auction.value()[2], best)]


def _q4_count(winner: tuple[int, int]) -> tuple[int, int, int]:
    return winner[0], winner[1], 1


def _q4_add(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    return a[0], a[1] + b[1], a[2] + b[2]


def _q4_average(total: tuple[int, int, int]) -> tuple[int, float]:
    return total[0], total[1] / total[2]


def _first(record: Any) -> Any:
    return record[0]


def q4(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Average winning price per category: ``(category, average)`` updated with every
    auction that closes with a bid."""
    winners = (auctions(env, events, config).connect(bids(env, events, config))
               .key_by("id", "auction").process(WinningBid()).name("q4 winning bids"))
    return (winners.map(_q4_count).key_by(_first).reduce(_q4_add).name("q4 per category")
            .map(_q4_average).name("q4 average"))


# -- q5: hot items ----------------------------------------------------------------------------


def _window_end(row: Any) -> Any:
    return row.window_end


class HottestAuctions(KeyedProcessFunction):
    """Per window (the key), the auctions with the most bids: ``(auction, count,
    window_end)``, emitted once event time has passed the window's end."""

    def open(self, runtime_context: Any) -> None:
        self.most = runtime_context.get_state(ValueStateDescriptor("most"))
        self.auctions = runtime_context.get_list_state(ListStateDescriptor("hottest"))

    def process_element(self, row: Any, ctx: Any) -> None:
        most = self.most.value()
        count = row["count"]
        if most is None:
            ctx.timer_service().register_event_time_timer(row.window_end - 1)
        if most is None or count > most:
            self.most.update(count)
            self.auctions.update([row.auction])
        elif count == most:
            self.auctions.add(row.auction)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any]:
        most = self.most.value()
        end = ctx.get_current_key()
        out = [(auction, most, end) for auction in self.auctions.get() or []]
        self.most.clear()
        self.auctions.clear()
        return out


def q5(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Hot items: per 10 s window sliding by 2 s, the auctions with the most bids."""
    counts = (bids(env, events, config).key_by("auction")
              .window(SlidingEventTimeWindows.of(Time.milliseconds(WINDOW_MS),
                                                 Time.milliseconds(SLIDE_MS)))
              .count().name("q5 bids per auction"))
    return counts.key_by(_window_end).process(HottestAuctions()).name("q5 hottest")


# -- q7: highest bid --------------------------------------------------------------------------


def _q7_batch_maxima(batch: pa.RecordBatch) -> pa.Array:
    """Rows holding their 10 s window's highest price within this batch: only they can
    hold the window's highest price overall."""
    windows = batch.column("date_time").to_numpy() // WINDOW_MS
    prices = batch.column("price").to_numpy()
    keep = np.zeros(len(prices), dtype=bool)
    for window in np.unique(windows):
        rows = windows == window
        keep |= rows & (prices == prices[rows].max())
    return pa.array(keep)


class HighestBids(AggregateFunction):
    """The bids with the highest price: (price, [bids])."""

    def create_accumulator(self) -> tuple[int, list[Any]]:
        return -1, []

    def add(self, bid: Any, acc: tuple[int, list[Any]]) -> tuple[int, list[Any]]:
        price = bid.price
        if price > acc[0]:
            return price, [(bid.auction, bid.bidder, price, bid.date_time, bid.extra)]
        if price == acc[0]:
            acc[1].append((bid.auction, bid.bidder, price, bid.date_time, bid.extra))
        return acc

    def get_result(self, acc: tuple[int, list[Any]]) -> list[Any]:
        return acc[1]

    def merge(self, a: tuple[int, list[Any]], b: tuple[int, list[Any]]
              ) -> tuple[int, list[Any]]:
        if a[0] != b[0]:
            return a if a[0] > b[0] else b
        return a[0], a[1] + b[1]


def _each(items: list[Any]) -> list[Any]:
    return items


def q7(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Highest bid: the bids with the highest price of each 10 s tumbling window,
    ``(auction, bidder, price, date_time, extra)``."""
    return (bids(env, events, config).filter_batches(_q7_batch_maxima).name("q7 batch maxima")
            .window_all(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
            .aggregate(HighestBids()).name("q7 highest").flat_map(_each).name("q7 bids"))


# -- q8: new users ----------------------------------------------------------------------------


class NewUsers(KeyedCoProcessFunction):
    """Persons (input 1) who created an auction (input 2) in the 10 s tumbling window in
    which they entered: ``(id, name, window_start)``, once per person and window."""

    def open(self, runtime_context: Any) -> None:
        self.names = runtime_context.get_map_state(MapStateDescriptor("person-windows"))
        self.sold = runtime_context.get_map_state(MapStateDescriptor("seller-windows"))

    def _window(self, ctx: Any) -> int:
        start: int = ctx.timestamp() // WINDOW_MS * WINDOW_MS
        ctx.timer_service().register_event_time_timer(start + WINDOW_MS - 1)
        return start

    def process_element1(self, person: Any, ctx: Any) -> Iterable[Any] | None:
        start = self._window(ctx)
        if self.names.contains(start):
            return None
        self.names.put(start, person.name)
        return [(person.id, person.name, start)] if self.sold.contains(start) else None

    def process_element2(self, auction: Any, ctx: Any) -> Iterable[Any] | None:
        start = self._window(ctx)
        if self.sold.contains(start):
            return None
        self.sold.put(start, True)
        if self.names.contains(start):
            return [(auction.seller, self.names.get(start), start)]
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        start = timestamp + 1 - WINDOW_MS
        self.names.remove(start)
        self.sold.remove(start)


def q8(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Monitor new users: persons with an auction in the 10 s window they entered in."""
    return (persons(env, events, config).connect(auctions(env, events, config))
            .key_by("id", "seller").process(NewUsers()).name("q8 join"))


# -- q12: processing-time windows -------------------------------------------------------------


def q12(env: Any, events: int, config: GeneratorConfig = DEFAULT) -> Any:
    """Bids per bidder in 10 s tumbling processing-time windows:
    ``(bidder, window_start, window_end, count)``."""
    return (bids(env, events, config).key_by("bidder")
            .window(TumblingProcessingTimeWindows.of(Time.milliseconds(WINDOW_MS)))
            .count().name("q12 bids per bidder"))


QUERIES: dict[str, Callable[..., Any]] = {
    "q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q7": q7, "q8": q8,
    "q12": q12,
}
