"""Each query's result computed in plain Python from the generated events, without weir.

The results are what the queries' Flink SQL (nexmark/nexmark ``queries/q*.sql``) gives on
a bounded input once all of it has been read: sets or sorted lists of tuples, comparable
with what the weir jobs of :mod:`.queries` produce (their last update per key where they
emit updates).

Example:
    >>> events = Events.generate(1000)
    >>> len(events.bids), len(events.auctions), len(events.persons)
    (920, 60, 20)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import generator
from .generator import DEFAULT, GeneratorConfig
from .queries import DOLLAR_TO_EURO, Q2_MODULUS, Q3_CATEGORY, Q3_STATES, SLIDE_MS, WINDOW_MS


@dataclass
class Events:
    """The three streams as lists of dicts (one per event, in event order)."""

    persons: list[dict[str, Any]]
    auctions: list[dict[str, Any]]
    bids: list[dict[str, Any]]

    @classmethod
    def generate(cls, events: int, config: GeneratorConfig = DEFAULT) -> Events:
        numbers = np.arange(events, dtype=np.int64)
        return cls(generator.persons(numbers, config).to_pylist(),
                   generator.auctions(numbers, config).to_pylist(),
                   generator.bids(numbers, config).to_pylist())


def q0(ev: Events) -> list[tuple[Any, ...]]:
    return sorted((b["auction"], b["bidder"], b["price"], b["date_time"], b["extra"])
                  for b in ev.bids)


def q1(ev: Events) -> list[tuple[Any, ...]]:
    return sorted((b["auction"], b["bidder"], round(b["price"] * DOLLAR_TO_EURO, 6),
                   b["date_time"], b["extra"]) for b in ev.bids)


def q2(ev: Events) -> list[tuple[int, int]]:
    return sorted((b["auction"], b["price"]) for b in ev.bids
                  if b["auction"] % Q2_MODULUS == 0)


def q3(ev: Events) -> list[tuple[str, str, str, int]]:
    people = {p["id"]: p for p in ev.persons if p["state"] in Q3_STATES}
    return sorted((people[a["seller"]]["name"], people[a["seller"]]["city"],
                   people[a["seller"]]["state"], a["id"])
                  for a in ev.auctions
                  if a["category"] == Q3_CATEGORY and a["seller"] in people)


def q4(ev: Events) -> dict[int, float]:
    """category -> average over its auctions of the highest price of the auction's bids
    made between its start and its expiry (auctions without such bids left out)."""
    by_auction: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for b in ev.bids:
        by_auction[b["auction"]].append(b)
    finals: dict[int, list[int]] = defaultdict(list)
    for a in ev.auctions:
        prices = [b["price"] for b in by_auction.get(a["id"], [])
                  if a["date_time"] <= b["date_time"] <= a["expires"]]
        if prices:
            finals[a["category"]].append(max(prices))
    return {category: sum(p) / len(p) for category, p in finals.items()}


def q5(ev: Events) -> list[tuple[int, int, int]]:
    """(auction, bids, window_end) of the auctions with the most bids per sliding window."""
    counts: dict[int, Counter[int]] = defaultdict(Counter)
    for b in ev.bids:
        ts = b["date_time"]
        start = ts - ts % SLIDE_MS
        while start > ts - WINDOW_MS:
            counts[start + WINDOW_MS][b["auction"]] += 1
            start -= SLIDE_MS
    out = []
    for end, per_auction in counts.items():
        most = max(per_auction.values())
        out.extend((auction, n, end) for auction, n in per_auction.items() if n == most)
    return sorted(out)


def q7(ev: Events) -> list[tuple[Any, ...]]:
    """The bids with the highest price of their 10 s tumbling window."""
    windows: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for b in ev.bids:
        windows[b["date_time"] // WINDOW_MS].append(b)
    out = []
    for members in windows.values():
        top = max(b["price"] for b in members)
        out.extend((b["auction"], b["bidder"], b["price"], b["date_time"], b["extra"])
                   for b in members if b["price"] == top)
    return sorted(out)


def q8(ev: Events) -> list[tuple[int, str, int]]:
    """(id, name, window_start) of persons who created an auction in the 10 s tumbling
    window in which they entered."""
    sellers = {(a["seller"], a["date_time"] // WINDOW_MS * WINDOW_MS) for a in ev.auctions}
    return sorted({(p["id"], p["name"], p["date_time"] // WINDOW_MS * WINDOW_MS)
                   for p in ev.persons
                   if (p["id"], p["date_time"] // WINDOW_MS * WINDOW_MS) in sellers})


def q12_bids_per_bidder(ev: Events) -> dict[int, int]:
    """q12 runs in processing time: only each bidder's total over all windows is known."""
    return dict(Counter(b["bidder"] for b in ev.bids))


def check(query: str, rows: list[Any], ev: Events) -> str | None:
    """What is wrong with a query's collected output ``rows`` on the events ``ev``, or None.

    q4 emits an updated average per category: its last update per category counts. q12
    runs in processing time: only each bidder's total over its windows is checked.
    """
    if query == "q4":
        last = {row[0]: row[1] for row in rows}
        expected4 = q4(ev)
        wrong = {c: (last.get(c), avg) for c, avg in expected4.items()
                 if last.get(c) is None or abs(last[c] - avg) > 1e-6 * abs(avg)}
        if wrong or set(last) != set(expected4):
            return f"last average per category (got, expected): {wrong or last}"
        return None
    if query == "q12":
        totals: Counter[int] = Counter()
        for row in rows:
            totals[row.bidder] += row["count"]
        expected12 = q12_bids_per_bidder(ev)
        if dict(totals) != expected12:
            wrong12 = {b: (totals.get(b), n) for b, n in expected12.items() if totals.get(b) != n}
            return f"{len(wrong12)} bidders counted wrong, e.g. {list(wrong12.items())[:3]}"
        return None
    got = sorted(tuple(row) for row in rows)
    if query == "q1":
        got = sorted((r[0], r[1], round(r[2], 6), r[3], r[4]) for r in got)
    expected = {"q0": q0, "q1": q1, "q2": q2, "q3": q3, "q5": q5, "q7": q7, "q8": q8}[query](ev)
    if got != expected:
        missing = len(set(expected) - set(got))
        extra = len(set(got) - set(expected))
        return (f"{len(got):,} results, expected {len(expected):,} ({missing:,} missing, "
                f"{extra:,} not expected)")
    return None
