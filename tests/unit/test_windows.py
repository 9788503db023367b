"""Windows against a brute-force reference: tumbling, sliding and session windows, event and
processing time, late data and allowed lateness, per-record and vectorised, both backends."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.operators import OperatorHarness
from weir import (
    AggregateFunction,
    CountTrigger,
    EventTimeSessionWindows,
    ProcessingTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    Time,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from weir.core.errors import UserError
from weir.core.records import MAX_WATERMARK, MIN_WATERMARK, Elements
from weir.operators.keys import FunctionKeySpec
from weir.operators.window.operator import AGGREGATE, PROCESS, REDUCE, WindowOperator
from weir.operators.window.vectorized import VectorizedWindowAggregateOperator

FAST = settings(max_examples=25, deadline=None)
BACKENDS = ({"state.backend.type": "hashmap"}, {"state.backend.type": "rocksdb"})


# --- the reference -------------------------------------------------------------------------


def reference_windows(ts: int, size: int, slide: int) -> list[tuple[int, int]]:
    """Every [start, end) with start a multiple of slide and start <= ts < start + size."""
    first = (ts - size) // slide * slide
    return [(s, s + size) for s in range(first, ts + 1, slide) if s <= ts < s + size]


def reference_run(script: list[tuple[str, Any]], size: int, slide: int, lateness: int,
                  late_firing_per_batch: bool = False) -> list[list[tuple[Any, int, int, int]]]:
    """Outputs (key, start, end, sum) after each step of the script, computed by brute
    force: a window fires when the watermark passes its end, and again for every late
    record within the allowed lateness (or once per batch, for the vectorised operator);
    records later than that are dropped."""
    contents: dict[tuple[Any, int, int], list[int]] = defaultdict(list)
    fired: set[tuple[Any, int, int]] = set()
    watermark = MIN_WATERMARK
    steps = []
    for kind, payload in script:
        out = []
        if kind == "records":
            for key, value, ts in payload:
                for start, end in reference_windows(ts, size, slide):
                    if end - 1 + lateness <= watermark:
                        continue
                    contents[(key, start, end)].append(value)
                    if end - 1 <= watermark:
                        fired.add((key, start, end))
                        out.append((key, start, end, sum(contents[(key, start, end)])))
            if late_firing_per_batch:  # only the last result of each window in the batch
                out = list({(k, s, e): (k, s, e, v) for k, s, e, v in out}.values())
        else:
            watermark = payload
            for (key, start, end), values in contents.items():
                if (key, start, end) not in fired and end - 1 <= watermark:
                    fired.add((key, start, end))
                    out.append((key, start, end, sum(values)))
            for window in [w for w in contents if w[2] - 1 + lateness <= watermark]:
                del contents[window]
        steps.append(sorted(out))
    return steps


@st.composite
def scripts(draw: Any) -> list[tuple[str, Any]]:
    """Batches of (key, value, timestamp) records interleaved with rising watermarks; the
    timestamps wander so that some records are late, some very late."""
    script: list[tuple[str, Any]] = []
    watermark = 0
    for _ in range(draw(st.integers(1, 8))):
        batch = draw(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 9),
                                        st.integers(max(0, watermark - 60), watermark + 80)),
                              max_size=12))
        script.append(("records", batch))
        watermark += draw(st.integers(0, 50))
        script.append(("watermark", watermark))
    script.append(("watermark", MAX_WATERMARK))
    return script


class SumWithWindow(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> list:
        window = context.window()
        return [(key, window.start, window.end, sum(v for _, v in elements))]


class SumAggregate(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: tuple, accumulator: int) -> int:
        return accumulator + value[1]

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class WithWindow(ProcessWindowFunction):
    """Turns a pre-aggregated value into (key, start, end, value)."""

    def process(self, key: Any, context: Any, elements: Any) -> list:
        (value,) = list(elements)
        if isinstance(value, tuple):
            value = value[1]
        return [(key, context.window().start, context.window().end, value)]


def _window_operator(kind: str, assigner: Any, lateness: int) -> WindowOperator:
    key = FunctionKeySpec(lambda r: r[0])
    if kind == REDUCE:
        return WindowOperator("w", key, assigner, REDUCE, lambda a, b: (a[0], a[1] + b[1]),
                              WithWindow(), allowed_lateness_ms=lateness)
    if kind == AGGREGATE:
        return WindowOperator("w", key, assigner, AGGREGATE, SumAggregate(), WithWindow(),
                              allowed_lateness_ms=lateness)
    return WindowOperator("w", key, assigner, PROCESS, SumWithWindow(),
                          allowed_lateness_ms=lateness)


def _drive(harness: OperatorHarness, script: list[tuple[str, Any]],
           vectorised: bool = False) -> list[list[tuple]]:
    steps = []
    for kind, payload in script:
        harness.output.clear()
        if kind == "records":
            if payload:
                records = [(k, v) for k, v, _ in payload]
                stamps = np.array([t for _, _, t in payload], dtype=np.int64)
                if vectorised:
                    batch = pa.record_batch({"k": [r[0] for r in records],
                                             "v": [r[1] for r in records]})
                    harness.process_elements(Elements.from_arrow(batch, stamps))
                else:
                    harness.process_elements(Elements.from_records(records, None, stamps))
        else:
            harness.watermark(payload)
        out = harness.output.records
        if vectorised:
            out = [(r["k"], r["window_start"], r["window_end"], r["v"]) for r in out]
        for record, stamp in zip(out, harness.output.timestamps, strict=True):
            assert stamp == record[2] - 1  # a result carries the window's max timestamp
        steps.append(sorted(out))
    return steps


@pytest.mark.parametrize("kind", [REDUCE, AGGREGATE, PROCESS])
@pytest.mark.parametrize(("size", "slide"), [(30, 30), (30, 10), (20, 30)])
@FAST
@given(script=scripts(), lateness=st.sampled_from([0, 25]))
def test_event_time_windows_match_the_reference(kind: str, size: int, slide: int,
                                                script: list, lateness: int) -> None:
    assigner = TumblingEventTimeWindows.of(size) if size == slide else \
        SlidingEventTimeWindows.of(size, slide)
    harness = OperatorHarness(_window_operator(kind, assigner, lateness))
    try:
        assert _drive(harness, script) == reference_run(script, size, slide, lateness)
    finally:
        harness.close()


@pytest.mark.parametrize(("size", "slide"), [(30, 30), (30, 10)])
@FAST
@given(script=scripts(), lateness=st.sampled_from([0, 25]))
def test_vectorised_window_sums_match_the_reference(size: int, slide: int, script: list,
                                                    lateness: int) -> None:
    assigner = TumblingEventTimeWindows.of(size) if size == slide else \
        SlidingEventTimeWindows.of(size, slide)
    harness = OperatorHarness(VectorizedWindowAggregateOperator(
        "w", "k", assigner, "sum", "v", lateness))
    try:
        assert _drive(harness, script, vectorised=True) == \
            reference_run(script, size, slide, lateness, late_firing_per_batch=True)
    finally:
        harness.close()


@pytest.mark.parametrize("config", BACKENDS, ids=["hashmap", "rocksdb"])
def test_vectorised_count_min_max_run_python_per_group_not_per_record(
        config: dict[str, str]) -> None:
    rng = np.random.default_rng(7)
    n = 50_000
    keys = rng.choice(np.array(["a", "b", "c", "d"]), n)
    values = rng.integers(-1_000, 1_000, n)
    stamps = rng.integers(0, 100_000, n)
    batch = pa.record_batch({"k": keys, "v": values})
    expected: dict[tuple[str, int], list[int]] = defaultdict(list)
    for k, v, t in zip(keys.tolist(), values.tolist(), stamps.tolist(), strict=True):
        expected[(k, t - t % 10_000)].append(v)
    for kind, reduce in (("count", len), ("min", min), ("max", max)):
        operator = VectorizedWindowAggregateOperator(
            "w", "k", TumblingEventTimeWindows.of(Time.seconds(10)), kind,
            None if kind == "count" else "v")
        harness = OperatorHarness(operator, config=config)
        calls = {"set_current_key": 0, "get_many": 0, "keys_read": 0}
        backend = operator.backend
        original_set, original_get = backend.set_current_key, backend.get_many

        def counting_set(*args: Any, original: Any = original_set) -> None:
            calls["set_current_key"] += 1
            original(*args)

        def counting_get(state: str, groups: Any, keys: Any, *rest: Any,
                         original: Any = original_get) -> Any:
            calls["get_many"] += 1
            calls["keys_read"] += len(keys)
            return original(state, groups, keys, *rest)
        backend.set_current_key = counting_set  # type: ignore[method-assign]
        backend.get_many = counting_get  # type: ignore[method-assign]
        harness.process_elements(Elements.from_arrow(batch, stamps))
        # Python per (key, window), state read in one batch per window: never per record.
        assert calls["set_current_key"] == 0
        assert calls["keys_read"] == len(expected)
        assert calls["get_many"] == len({start for _, start in expected})
        harness.watermark(MAX_WATERMARK)
        column = "count" if kind == "count" else "v"
        got = {(r["k"], r["window_start"]): r[column] for r in harness.output.records}
        assert got == {w: reduce(vs) for w, vs in expected.items()}
        harness.close()


def test_late_records_beyond_the_allowed_lateness_are_dropped_and_counted() -> None:
    operator = _window_operator(REDUCE, TumblingEventTimeWindows.of(10), 5)
    harness = OperatorHarness(operator)
    harness.process([("a", 1)], timestamps=[3])
    harness.watermark(9)
    assert harness.output.records == [("a", 0, 10, 1)]
    harness.process([("a", 2)], timestamps=[4])  # late, within lateness: fires again
    assert harness.output.records[-1] == ("a", 0, 10, 3)
    harness.watermark(14)  # the window's state is gone now
    harness.process([("a", 4)], timestamps=[5])
    assert harness.output.records[-1] == ("a", 0, 10, 3)
    assert operator.num_late_records_dropped == 1


def test_event_time_windows_without_timestamps_fail_with_a_clear_message() -> None:
    harness = OperatorHarness(_window_operator(REDUCE, TumblingEventTimeWindows.of(10), 0))
    with pytest.raises(UserError, match="assign_timestamps_and_watermarks"):
        harness.process([("a", 1)])


# --- sessions --------------------------------------------------------------------------------


def reference_sessions(records: list[tuple[str, int, int]], gap: int
                       ) -> list[tuple[str, int, int, int]]:
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for key, value, ts in records:
        by_key[key].append((ts, value))
    out = []
    for key, items in by_key.items():
        items.sort()
        start, end, total = items[0][0], items[0][0] + gap, items[0][1]
        for ts, value in items[1:]:
            if ts <= end:  # windows [t, t + gap) that touch merge, as Flink's
                end, total = max(end, ts + gap), total + value
            else:
                out.append((key, start, end, total))
                start, end, total = ts, ts + gap, value
        out.append((key, start, end, total))
    return sorted(out)


@pytest.mark.parametrize("kind", [REDUCE, AGGREGATE, PROCESS])
@pytest.mark.parametrize("config", BACKENDS, ids=["hashmap", "rocksdb"])
@FAST
@given(records=st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 9),
                                  st.integers(0, 300)), max_size=40),
       chunks=st.integers(1, 5))
def test_session_windows_merge_like_the_reference(kind: str, config: dict[str, str],
                                                  records: list, chunks: int) -> None:
    harness = OperatorHarness(_window_operator(kind, EventTimeSessionWindows.with_gap(20), 0),
                              config=config)
    try:
        out = []
        size = max(1, len(records) // chunks)
        for i in range(0, len(records), size):  # arrival order is the generated order
            part = records[i:i + size]
            harness.process([(k, v) for k, v, _ in part], [t for _, _, t in part])
        harness.watermark(MAX_WATERMARK)
        out = harness.output.records
        assert sorted(out) == reference_sessions(records, 20)
        assert harness.operator.timers.num_event_time_timers() == 0
    finally:
        harness.close()


def test_a_late_record_within_lateness_can_bridge_two_fired_sessions() -> None:
    operator = _window_operator(REDUCE, EventTimeSessionWindows.with_gap(10), 100)
    harness = OperatorHarness(operator)
    harness.process([("a", 1), ("a", 2)], [0, 30])
    harness.watermark(50)
    assert sorted(harness.output.records) == [("a", 0, 10, 1), ("a", 30, 40, 2)]
    harness.output.clear()
    harness.process([("a", 4), ("a", 8)], [10, 20])  # bridges [0, 10) and [30, 40)
    assert harness.output.records[-1] == ("a", 0, 40, 15)
    harness.watermark(MAX_WATERMARK)
    assert operator.timers.num_event_time_timers() == 0


def test_session_aggregates_need_merge() -> None:
    class NoMerge(AggregateFunction):
        def create_accumulator(self) -> int:
            return 0

        def add(self, value: Any, accumulator: int) -> int:
            return accumulator + 1

        def get_result(self, accumulator: int) -> int:
            return accumulator

    with pytest.raises(TypeError, match="merge"):
        WindowOperator("w", FunctionKeySpec(lambda r: r), EventTimeSessionWindows.with_gap(5),
                       AGGREGATE, NoMerge())


# --- processing time -------------------------------------------------------------------------


@pytest.mark.parametrize("config", BACKENDS, ids=["hashmap", "rocksdb"])
def test_processing_time_windows_fire_by_the_wall_clock_and_at_end_of_input(
        config: dict[str, str]) -> None:
    operator = _window_operator(REDUCE, TumblingProcessingTimeWindows.of(Time.seconds(1)), 0)
    harness = OperatorHarness(operator, config=config, start_ms=10_100)
    harness.process([("a", 1), ("b", 2)])
    harness.advance_time(10_500)
    harness.process([("a", 3)])
    assert harness.output.records == []
    harness.advance_time(10_999)
    assert sorted(harness.output.records) == [("a", 10_000, 11_000, 4),
                                              ("b", 10_000, 11_000, 2)]
    assert len(harness.output.batches) == 1  # one batch per wall-clock wake-up
    harness.advance_time(11_200)
    harness.process([("a", 5)])
    harness.finish()
    assert harness.output.records[-1] == ("a", 11_000, 12_000, 5)
    harness.close()


def test_sliding_and_session_processing_time_windows() -> None:
    sliding = OperatorHarness(_window_operator(
        PROCESS, SlidingProcessingTimeWindows.of(Time.seconds(2), Time.seconds(1)), 0),
        start_ms=1_500)
    sliding.process([("a", 1)])
    sliding.advance_time(3_000)
    assert sorted(sliding.output.records) == [("a", 0, 2_000, 1), ("a", 1_000, 3_000, 1)]
    sessions = OperatorHarness(_window_operator(
        REDUCE, ProcessingTimeSessionWindows.with_gap(Time.milliseconds(100)), 0))
    sessions.process([("a", 1)])
    sessions.advance_time(50)
    sessions.process([("a", 2)])
    sessions.advance_time(148)
    assert sessions.output.records == []
    sessions.advance_time(149)  # [0, 150) fires at its max timestamp
    assert sessions.output.records == [("a", 0, 150, 3)]


# --- triggers and window state ---------------------------------------------------------------


def test_a_count_trigger_fires_every_n_records_of_a_window() -> None:
    operator = WindowOperator("w", FunctionKeySpec(lambda r: r[0]),
                              TumblingEventTimeWindows.of(100), REDUCE,
                              lambda a, b: (a[0], a[1] + b[1]), trigger=CountTrigger.of(2))
    harness = OperatorHarness(operator)
    harness.process([("a", 1), ("a", 2), ("b", 5), ("a", 3), ("a", 4)], [1, 2, 3, 4, 5])
    assert harness.output.records == [("a", 3), ("a", 10)]
    harness.watermark(MAX_WATERMARK)  # the count trigger ignores time
    assert harness.output.records == [("a", 3), ("a", 10)]


class CountFirings(ProcessWindowFunction):
    """Counts its firings per window (window state) and per key (global state)."""

    def process(self, key: Any, context: Any, elements: Any) -> list:
        from weir import ValueStateDescriptor

        per_window = context.window_state().get_state(ValueStateDescriptor("fired"))
        per_window.update((per_window.value() or 0) + 1)
        per_key = context.global_state().get_state(ValueStateDescriptor("total"))
        per_key.update((per_key.value() or 0) + 1)
        return [(key, context.window().start, per_window.value(), per_key.value())]


def test_window_state_is_per_window_and_global_state_per_key() -> None:
    operator = WindowOperator("w", FunctionKeySpec(lambda r: r[0]),
                              TumblingEventTimeWindows.of(10), PROCESS, CountFirings(),
                              allowed_lateness_ms=50)
    harness = OperatorHarness(operator)
    harness.process([("a", 1), ("a", 1)], [1, 12])
    harness.watermark(25)
    harness.process([("a", 1)], [3])  # late: window [0, 10) fires a second time
    assert sorted(harness.output.records) == [("a", 0, 1, 1), ("a", 0, 2, 3), ("a", 10, 1, 2)]


def test_time_window_geometry() -> None:
    assert TimeWindow(0, 10).max_timestamp() == 9
    assert TimeWindow(0, 10).intersects(TimeWindow(10, 20))
    assert not TimeWindow(0, 10).intersects(TimeWindow(11, 20))
    assert TumblingEventTimeWindows.of(Time.seconds(10), Time.seconds(3)).assign_windows(
        None, 2_000) == [TimeWindow(-7_000, 3_000)]
    assert TumblingEventTimeWindows.of(10).assign_windows(None, -1) == [TimeWindow(-10, 0)]
    with pytest.raises(ValueError, match="positive"):
        TumblingEventTimeWindows.of(0)


# --- many windows at one watermark: fired over several turns of the task -------------------


class EveryCallExpires:
    """A time-slice clock on which every check finds the slice over (one timer a turn)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.mark.parametrize("vectorised", [False, True])
def test_a_watermark_firing_many_windows_yields_between_them(vectorised: bool) -> None:
    """The timers of a watermark fire within the task's time slices: the operator hands
    the rest over (CONTINUATION_SERVICE) and passes the watermark on only after the last
    one; the results are those of firing them all at once."""
    from weir.core.processing_time import TimeSlice
    from weir.taskexecutor.operator import CONTINUATION_SERVICE

    records = [(f"k{i}", i, 5 + i % 3) for i in range(40)]

    def run(sliced: bool) -> tuple[list[tuple], list[tuple[str, Any]], int]:
        assigner = TumblingEventTimeWindows.of(10)
        operator = VectorizedWindowAggregateOperator(
            "w", "k", assigner, "sum", "v") if vectorised else \
            _window_operator(REDUCE, assigner, 0)
        harness = OperatorHarness(operator)
        continuations: list[Any] = []
        if sliced:
            harness.ctx.services[CONTINUATION_SERVICE] = continuations.append
            harness.processing_time.time_slice = TimeSlice(0.0, clock=EveryCallExpires())
        steps = _drive(harness, [("records", records)], vectorised=vectorised)
        assert steps == [[]]
        harness.output.clear()
        harness.processing_time.time_slice.start()
        harness.watermark(100)
        turns = 0
        while continuations:
            assert harness.output.watermarks == []     # not before the last timer fired
            turns += 1
            harness.processing_time.time_slice.start()
            continuations.pop(0)()
        out = harness.output.records
        if vectorised:
            out = [(r["k"], r["window_start"], r["window_end"], r["v"]) for r in out]
        return sorted(out), harness.output.events, turns

    whole, whole_events, no_turns = run(sliced=False)
    sliced, sliced_events, turns = run(sliced=True)
    assert no_turns == 0 and turns >= 2
    assert sliced == whole and len(whole) == 40
    assert sliced_events[-1] == ("watermark", 100) and whole_events[-1] == ("watermark", 100)
    assert [e for e in sliced_events if e[0] == "watermark"] == [("watermark", 100)]
