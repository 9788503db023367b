"""The Nexmark queries of the benchmark (benchmarks/nexmark) run in process on a small
event count and agree with results computed in plain Python from the same events.

Two event rates: the published runs' 10 M events/s (the whole input is one second of
event time, inside one window) and 1,000 events/s (20 s of event time: several windows,
auctions that stay open for seconds)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from benchmarks.nexmark import generator, queries, reference
from benchmarks.nexmark.generator import GeneratorConfig
from weir import StreamExecutionEnvironment

EVENTS = 20_000
CONFIGS = {"10M-per-s": GeneratorConfig(), "1k-per-s": GeneratorConfig(rate=1000)}


@pytest.fixture(scope="module", params=list(CONFIGS))
def case(request: pytest.FixtureRequest) -> tuple[GeneratorConfig, reference.Events]:
    config = CONFIGS[request.param]
    return config, reference.Events.generate(EVENTS, config)


def run(query: str, config: GeneratorConfig) -> list[Any]:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    return list(queries.QUERIES[query](env, EVENTS, config).execute_and_collect())


def tuples(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in rows)


def test_the_mix_ids_and_times_follow_the_generator() -> None:
    numbers = np.arange(5000, dtype=np.int64)
    bids = generator.bids(numbers)
    auctions = generator.auctions(numbers)
    persons = generator.persons(numbers)
    assert (bids.num_rows, auctions.num_rows, persons.num_rows) == (4600, 300, 100)
    assert persons.column("id").to_pylist() == list(range(1000, 1100))
    assert auctions.column("id").to_pylist() == list(range(1000, 1300))
    assert set(auctions.column("category").to_pylist()) == set(range(10, 15))
    # 10 M events/s: event n happens n/10 microseconds after the base time.
    assert generator.event_times(np.array([0, 9_999, 10_000, 10_000_000])).tolist() == [
        generator.BASE_TIME_MS, generator.BASE_TIME_MS, generator.BASE_TIME_MS + 1,
        generator.BASE_TIME_MS + 1000]
    # Half the bids go to the hot auction of their time, 3/4 to the hot bidder.
    hot = np.array(bids.column("auction").to_pylist()) % 100 == 0
    assert 0.45 < hot.mean() < 0.6
    extra = np.array([len(s) for s in bids.column("extra").to_pylist()])
    assert extra.min() >= 54 and extra.max() <= 81


def test_a_range_of_event_numbers_generates_its_part_alone() -> None:
    whole = generator.bids(np.arange(0, 3000, dtype=np.int64))
    part = generator.bids(np.arange(1000, 3000, dtype=np.int64))
    assert whole.slice(whole.num_rows - part.num_rows).equals(part)
    assert generator.persons(np.arange(0, 100)).equals(generator.persons(np.arange(0, 100)))


@pytest.mark.parametrize("query", ["q0", "q2", "q3", "q7", "q8"])
def test_query_matches_the_reference(query: str,
                                     case: tuple[GeneratorConfig, reference.Events]) -> None:
    config, events = case
    expected = getattr(reference, query)(events)
    got = tuples(run(query, config))
    assert expected, f"{query}: the reference is empty, the check would be vacuous"
    assert got == expected


def test_q1_converts_every_price(case: tuple[GeneratorConfig, reference.Events]) -> None:
    config, events = case
    got = sorted((r[0], r[1], round(r[2], 6), r[3], r[4]) for r in run("q1", config))
    assert got == reference.q1(events)


def test_q4_ends_with_the_average_winning_price_per_category(
        case: tuple[GeneratorConfig, reference.Events]) -> None:
    config, events = case
    last: dict[int, float] = {}
    for category, average in run("q4", config):
        last[category] = average
    expected = reference.q4(events)
    assert len(expected) == 5
    assert last == pytest.approx(expected)


def test_q5_finds_the_hottest_auctions_per_window(
        case: tuple[GeneratorConfig, reference.Events]) -> None:
    config, events = case
    expected = reference.q5(events)
    assert tuples(run("q5", config)) == expected
    if config.rate == 1000:
        assert len({end for _, _, end in expected}) > 5


def test_q12_counts_every_bid_of_every_bidder_once(
        case: tuple[GeneratorConfig, reference.Events]) -> None:
    config, events = case
    totals: dict[int, int] = {}
    for row in run("q12", config):
        assert row.window_end - row.window_start == queries.WINDOW_MS
        totals[row.bidder] = totals.get(row.bidder, 0) + row["count"]
    assert totals == reference.q12_bids_per_bidder(events)
