"""Windows as PyFlink programs write them (imports aside): count windows, windows over a
whole stream, WindowFunction/AllWindowFunction/ProcessAllWindowFunction, dynamic session
gaps, and the purging and continuous triggers."""

from __future__ import annotations

import pytest

from tests.support.operators import OperatorHarness
from weir import (
    AllWindowFunction,
    ContinuousEventTimeTrigger,
    CountEvictor,
    CountSlidingWindowAssigner,
    EventTimeSessionWindows,
    KeyedProcessFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    StreamExecutionEnvironment,
    Time,
    TimeEvictor,
    TimeWindow,
    TumblingEventTimeWindows,
    WatermarkStrategy,
    WindowFunction,
)
from weir.datastream.window.triggers import CountTrigger
from weir.operators.keys import FunctionKeySpec
from weir.operators.window.operator import REDUCE, WindowOperator

pytestmark = pytest.mark.usefixtures("runs_on")


class KeySum(WindowFunction):
    def apply(self, key, window, inputs):
        yield key, window.start, sum(value for _, value, _ in inputs)


class Total(AllWindowFunction):
    def apply(self, window, inputs):
        yield sum(inputs)


class Span(ProcessAllWindowFunction):
    def process(self, context, elements):
        values = [v for _, v, _ in elements]
        yield context.window().start, min(values), max(values)


class GapFromRecord(SessionWindowTimeGapExtractor):
    def extract(self, element):
        return element[3]


def _env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def _stamped(env: StreamExecutionEnvironment, records: list) -> object:
    return env.from_collection(records).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner(lambda record, _: record[2] if len(record) > 2 else 0))


def test_count_windows_fire_every_n_records_of_a_key() -> None:
    env = _env()
    records = [(key, value) for value in range(11) for key in ("a", "b")]
    got = (env.from_collection(records).key_by(lambda r: r[0]).count_window(3)
           .reduce(lambda x, y: (x[0], x[1] + y[1])))
    expected = [(key, sum(range(start, start + 3))) for key in ("a", "b")
                for start in (0, 3, 6)]  # 9 and 10 never make a full window
    assert sorted(got.execute_and_collect()) == sorted(expected)


def test_sliding_count_windows_sum_each_full_window() -> None:
    env = _env(1)
    records = [("k", value) for value in range(10)]
    got = (env.from_collection(records).key_by(lambda r: r[0]).count_window(3, 2)
           .reduce(lambda x, y: (x[0], x[1] + y[1])))
    # A window of three records starts every second record; only full ones are evaluated.
    expected = [("k", sum(range(start, start + 3))) for start in range(0, 8, 2)]
    assert list(got.execute_and_collect()) == expected


class SumWindow(WindowFunction):
    def apply(self, key, window, inputs):
        return [(key, sum(value for value, _ in inputs))]


def test_sliding_count_windows_as_pyflinks_test_counts_them() -> None:
    env = _env()
    ds = env.from_collection([(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"),
                              (6, "hello")])
    got = (ds.key_by(lambda x: x[1]).window(CountSlidingWindowAssigner(2, 1))
           .apply(SumWindow()))
    assert sorted(got.execute_and_collect()) == [("hello", 6), ("hello", 10), ("hi", 4),
                                                 ("hi", 8)]


def test_count_windows_over_the_whole_stream() -> None:
    env = _env()
    got = env.from_collection(list(range(10))).count_window_all(4).apply(Total())
    assert sorted(got.execute_and_collect()) == [sum(range(4)), sum(range(4, 8))]


def test_window_function_and_window_all_with_a_process_function() -> None:
    env = _env()
    records = [(k, v, t) for t, (k, v) in enumerate(
        [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5), ("b", 6)] * 3)]
    by_key = (_stamped(env, records).key_by(lambda r: r[0])
              .window(TumblingEventTimeWindows.of(Time.milliseconds(6))).apply(KeySum()))
    expected = {}
    for key, value, t in records:
        start = t - t % 6
        expected[(key, start)] = expected.get((key, start), 0) + value
    assert sorted(by_key.execute_and_collect()) == sorted(
        (key, start, total) for (key, start), total in expected.items())
    spans = (_stamped(_env(), records)
             .window_all(TumblingEventTimeWindows.of(Time.milliseconds(6))).process(Span()))
    assert sorted(spans.execute_and_collect()) == [(0, 1, 6), (6, 1, 6), (12, 1, 6)]


def test_dynamic_session_gaps_come_from_each_record() -> None:
    env = _env(1)
    # (key, value, timestamp, gap after it): sessions [0, 3), [5, 8) and [20, 21).
    records = [("k", 1, 0, 3), ("k", 1, 2, 1), ("k", 1, 5, 2), ("k", 1, 6, 2),
               ("k", 1, 20, 1)]
    stamped = env.from_collection(records).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner(lambda record, _: record[2]))
    sessions = (stamped.key_by(lambda r: r[0])
                .window(EventTimeSessionWindows.with_dynamic_gap(GapFromRecord()))
                .reduce(lambda a, b: (a[0], a[1] + b[1], a[2], a[3])))
    assert sorted(r[1] for r in sessions.execute_and_collect()) == [1, 2, 2]


def test_a_purging_trigger_starts_each_window_anew() -> None:
    operator = WindowOperator("Window", FunctionKeySpec(lambda r: r[0]),
                              TumblingEventTimeWindows.of(Time.milliseconds(100)), REDUCE,
                              lambda a, b: (a[0], a[1] + b[1]),
                              trigger=PurgingTrigger.of(CountTrigger.of(2)))
    harness = OperatorHarness(operator)
    harness.process([("a", 1), ("a", 2), ("a", 3), ("a", 4), ("a", 5)],
                    timestamps=[1, 2, 3, 4, 5])
    assert harness.output.records == [("a", 3), ("a", 7)]  # CountTrigger alone: 3, 10


def test_a_continuous_event_time_trigger_fires_within_the_window() -> None:
    operator = WindowOperator("Window", FunctionKeySpec(lambda r: r[0]),
                              TumblingEventTimeWindows.of(Time.milliseconds(100)), REDUCE,
                              lambda a, b: (a[0], a[1] + b[1]),
                              trigger=ContinuousEventTimeTrigger.of(Time.milliseconds(30)))
    harness = OperatorHarness(operator)
    harness.process([("a", 1), ("a", 2)], timestamps=[5, 10])
    harness.watermark(29)
    assert harness.output.records == []
    harness.watermark(30)                       # the first interval ends
    harness.process([("a", 4)], timestamps=[40])
    harness.watermark(60)                       # the second
    harness.watermark(99)                       # the third (90), and the window's end
    assert harness.output.records == [("a", 3), ("a", 7), ("a", 7), ("a", 7)]


class Describe(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    """Written with type parameters and an annotated Context, as PyFlink code is."""

    def process(self, key: str, context: ProcessWindowFunction.Context, elements):
        yield key, context.window().start, len(list(elements))


def test_function_classes_take_type_parameters_as_in_pyflink() -> None:
    env = _env()
    records = [("a", 1, t) for t in range(10)]
    got = (_stamped(env, records).key_by(lambda r: r[0])
           .window(TumblingEventTimeWindows.of(Time.milliseconds(5))).process(Describe()))
    assert sorted(got.execute_and_collect()) == [("a", 0, 5), ("a", 5, 5)]
    assert KeyedProcessFunction[str, int, int] is KeyedProcessFunction



def test_evictors_remove_records_before_or_after_the_function() -> None:
    def window(evictor):
        return WindowOperator("Window", FunctionKeySpec(lambda r: r[0]),
                              TumblingEventTimeWindows.of(Time.milliseconds(100)), REDUCE,
                              lambda a, b: (a[0], a[1] + b[1]),
                              trigger=CountTrigger.of(2), evictor=evictor)

    by_time = OperatorHarness(window(TimeEvictor.of(Time.milliseconds(10))))
    by_time.process([("a", 1), ("a", 2)], timestamps=[1, 30])   # 1 is 29 ms older
    by_time.process([("a", 4), ("a", 8)], timestamps=[35, 38])
    assert by_time.output.records == [("a", 2), ("a", 14)]      # 2 | 2 + 4 + 8
    after = OperatorHarness(window(CountEvictor.of(1, do_evict_after=True)))
    after.process([("a", 1), ("a", 2), ("a", 4), ("a", 8)], timestamps=[1, 2, 3, 4])
    # Fires on 2 records (sum 3), keeps the newest (2); then 2 + 4 + 8.
    assert after.output.records == [("a", 3), ("a", 14)]


@pytest.mark.parametrize("aggregation", ["sum", "min", "max"])
def test_field_aggregations_of_windows_keyed_by_a_function(aggregation: str) -> None:
    """``key_by(lambda)`` then ``window(...).sum/min/max(field)``: the aggregated field of
    each window, the other fields from its first record (Flink's semantics)."""
    env = _env(1)
    records = [("a", 4, 1_000), ("b", 7, 1_500), ("a", 2, 2_000), ("a", 9, 3_000),
               ("b", 1, 12_000), ("a", 5, 14_000), ("b", 3, 15_000)]
    windowed = (_stamped(env, records).key_by(lambda r: r[0])
                .window(TumblingEventTimeWindows.of(Time.seconds(10))))
    got = getattr(windowed, aggregation)(1)
    combine = {"sum": sum, "min": min, "max": max}[aggregation]
    expected = []
    for key in ("a", "b"):
        for start in (0, 10_000):
            inside = [r for r in records if r[0] == key and start <= r[2] < start + 10_000]
            first = inside[0]
            expected.append((first[0], combine(r[1] for r in inside), first[2]))
    assert sorted(got.execute_and_collect()) == sorted(expected)
