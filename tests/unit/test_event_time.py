"""Event time: timestamps through operators and the wire, watermark generation and the valve,
and keyed timers (including across a snapshot and a rescaled restore)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.support.operators import OperatorHarness
from weir import (
    Duration,
    FilterFunction,
    KeyedProcessFunction,
    MapFunction,
    TimeDomain,
    TimestampAssigner,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from weir.core.clock import ManualClock
from weir.core.config import Configuration
from weir.core.errors import StateError, UserError
from weir.core.processing_time import ProcessingTimeService
from weir.core.records import MAX_WATERMARK, MIN_WATERMARK, TIMESTAMP_COLUMN, Elements
from weir.operators.basic import (
    FilterBatchesOperator,
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    ProcessOperator,
)
from weir.operators.event_time import TimestampsAndWatermarksOperator
from weir.operators.keyed import KeyedProcessOperator, ReduceOperator
from weir.operators.keys import FunctionKeySpec
from weir.state.canonical import write_canonical
from weir.state.factory import create_keyed_state_backend
from weir.state.key_groups import KeyGroupRange
from weir.state.restore import restore_canonical
from weir.state.timers import InternalTimerService, Timer
from weir.taskexecutor.record_writer import split_by_target
from weir.taskexecutor.watermark_valve import StatusWatermarkValve

# --- timestamps through operators and the wire ------------------------------------------------


def test_timestamps_cross_the_wire_in_a_trailing_column_and_come_back_out() -> None:
    elements = Elements.from_records([("a", 1), ("b", 2)], None, np.array([5, 7]))
    wire = elements.wire_batch()
    assert wire.schema.names[-1] == TIMESTAMP_COLUMN
    back = Elements.from_wire(wire)
    assert back.records() == [("a", 1), ("b", 2)]
    assert back.timestamps.tolist() == [5, 7]
    assert TIMESTAMP_COLUMN not in back.arrow().schema.names
    plain = Elements.from_records([1, 2])
    assert Elements.from_wire(plain.wire_batch()).timestamps is None


def test_split_by_target_and_slices_keep_each_records_timestamp() -> None:
    records = list(range(10))
    elements = Elements.from_records(records, None, np.arange(100, 110))
    parts = split_by_target(elements, np.array([r % 3 for r in records]), 3)
    for _target, part in parts:
        assert part.timestamps.tolist() == [100 + r for r in part.records()]
    arrow = Elements.from_arrow(elements.arrow(), elements.timestamps)
    for part in arrow.slices(4):
        assert part.timestamps.tolist() == [100 + r for r in part.records()]


class _Twice:
    def flat_map(self, value: int) -> list[int]:
        return [value] * (value % 3)


@pytest.mark.parametrize(("operator", "expected"), [
    (MapOperator("m", lambda v: v * 10), [(0, 100), (10, 101), (20, 102), (30, 103)]),
    (FilterOperator("f", lambda v: v % 2 == 1), [(1, 101), (3, 103)]),
    (FlatMapOperator("fm", lambda v: [v] * v), [(1, 101), (2, 102), (2, 102), (3, 103),
                                                (3, 103), (3, 103)]),
    (ProcessOperator("p", lambda v, ctx: [(v, ctx.timestamp())]),
     [((0, 100), 100), ((1, 101), 101), ((2, 102), 102), ((3, 103), 103)]),
])
def test_per_record_operators_keep_the_timestamp_of_the_record_an_output_came_from(
        operator: object, expected: list) -> None:
    harness = OperatorHarness(operator)  # type: ignore[arg-type]
    harness.process([0, 1, 2, 3], timestamps=[100, 101, 102, 103])
    assert list(zip(harness.output.records, harness.output.timestamps, strict=True)) == expected


def test_batch_operators_keep_timestamps_when_rows_map_one_to_one() -> None:
    batch = pa.record_batch({"v": [1, 2, 3]})
    keep = OperatorHarness(MapBatchesOperator("mb", lambda b: b))
    keep.process_elements(Elements.from_arrow(batch, np.array([7, 8, 9])))
    assert keep.output.timestamps == [7, 8, 9]
    shrink = OperatorHarness(MapBatchesOperator("mb", lambda b: b.slice(1)))
    shrink.process_elements(Elements.from_arrow(batch, np.array([7, 8, 9])))
    assert shrink.output.timestamps == [None, None]
    filtered = OperatorHarness(FilterBatchesOperator(
        "fb", lambda b: pa.array([True, False, True])))
    filtered.process_elements(Elements.from_arrow(batch, np.array([7, 8, 9])))
    assert filtered.output.timestamps == [7, 9]


# --- watermark generation ------------------------------------------------------------------


class _SecondField(TimestampAssigner):
    def extract_timestamp(self, value: tuple, record_timestamp: int) -> int:
        return value[1]


def _assigner_harness(strategy: WatermarkStrategy) -> OperatorHarness:
    return OperatorHarness(TimestampsAndWatermarksOperator("ts", strategy),
                           config={"pipeline.auto-watermark-interval": "100 ms"})


def test_bounded_out_of_orderness_emits_max_minus_bound_minus_one_periodically() -> None:
    harness = _assigner_harness(WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(50)).with_timestamp_assigner(_SecondField()))
    harness.process([("a", 1_000), ("b", 900), ("c", 1_200)])
    assert harness.output.timestamps == [1_000, 900, 1_200]
    assert harness.output.watermarks == []  # only on the periodic callback
    harness.advance_time(100)
    assert harness.output.watermarks == [1_149]
    harness.process([("d", 1_100)])  # out of order: the watermark does not go back
    harness.advance_time(200)
    assert harness.output.watermarks == [1_149]
    harness.process([("e", 2_000)])
    harness.advance_time(300)
    assert harness.output.watermarks == [1_149, 1_949]


def test_timestamps_from_a_column_are_vectorised_and_accept_arrow_timestamps() -> None:
    harness = _assigner_harness(WatermarkStrategy.for_monotonous_timestamps()
                                .with_timestamp_column("ts"))
    batch = pa.record_batch({"ts": pa.array([1_000, 2_000], pa.timestamp("ms")),
                             "v": [1, 2]})
    harness.process_elements(Elements.from_arrow(batch))
    harness.advance_time(100)
    assert harness.output.timestamps == [1_000, 2_000]
    assert harness.output.watermarks == [1_999]


def test_records_without_timestamps_or_assigner_pass_unstamped_as_in_flink(
        caplog: pytest.LogCaptureFixture) -> None:
    no_assigner = _assigner_harness(WatermarkStrategy.for_monotonous_timestamps())
    no_assigner.process([1, 2])
    no_assigner.process([3])
    no_assigner.advance_time(100)
    assert no_assigner.output.records == [1, 2, 3]
    assert no_assigner.output.timestamps == [None, None, None]
    assert no_assigner.output.watermarks == []  # held back until the end of input
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records if "no timestamp assigner" in r.message)) == 1


def test_a_bad_timestamp_column_is_a_clear_user_error() -> None:
    bad_column = _assigner_harness(WatermarkStrategy.for_monotonous_timestamps()
                                   .with_timestamp_column("when"))
    with pytest.raises(UserError, match="'when' is not a column"):
        bad_column.process_elements(Elements.from_arrow(pa.record_batch({"v": [1]})))


def test_idleness_marks_the_output_idle_and_a_record_makes_it_active_again() -> None:
    harness = _assigner_harness(WatermarkStrategy.for_monotonous_timestamps()
                                .with_timestamp_assigner(_SecondField())
                                .with_idleness(Duration.of_millis(250)))
    harness.process([("a", 10)])
    harness.advance_time(100)
    harness.advance_time(200)
    assert harness.output.statuses == []
    harness.advance_time(300)
    assert harness.output.statuses == [True]
    harness.process([("b", 20)])
    assert harness.output.statuses == [True, False]
    assert harness.output.events[-2:] == [("idle", False), ("records", 1)]


def test_only_the_final_upstream_watermark_passes_the_assigner() -> None:
    harness = _assigner_harness(WatermarkStrategy.no_watermarks()
                                .with_timestamp_assigner(_SecondField()))
    harness.watermark(5_000)
    assert harness.output.watermarks == []
    harness.watermark(MAX_WATERMARK)
    assert harness.output.watermarks == [MAX_WATERMARK]


# --- the valve -----------------------------------------------------------------------------


def test_valve_takes_the_minimum_over_active_channels_and_never_goes_back() -> None:
    valve = StatusWatermarkValve(3)
    assert valve.input_watermark(0, 10) is None
    assert valve.input_watermark(1, 20) is None
    assert valve.input_watermark(2, 5) == 5
    assert valve.input_watermark(2, 30) == 10
    assert valve.input_watermark(0, 8) is None  # a channel never goes back
    assert valve.input_watermark(0, 25) == 20


def test_valve_ignores_idle_channels_and_rejoins_them_once_they_catch_up() -> None:
    valve = StatusWatermarkValve(2)
    valve.input_watermark(0, 100)
    valve.input_watermark(1, 50)
    assert valve.watermark == 50
    assert valve.input_status(1, idle=True) == (100, None)
    assert valve.input_watermark(0, 150) == 150
    assert valve.input_status(1, idle=False) == (None, None)
    assert valve.input_watermark(1, 120) is None  # still behind: does not hold back
    assert valve.input_watermark(0, 200) == 200
    assert valve.input_watermark(1, 210) is None  # caught up: counts again
    assert valve.input_watermark(0, 300) == 210


def test_valve_goes_idle_when_every_channel_is_idle_and_finished_channels_do_not_block() -> None:
    valve = StatusWatermarkValve(2)
    assert valve.input_status(0, idle=True) == (None, None)
    assert valve.input_status(1, idle=True) == (None, True)
    assert valve.input_status(0, idle=False) == (None, False)
    assert valve.input_watermark(0, 40) == 40
    other = StatusWatermarkValve(2)
    other.input_watermark(0, 70)
    assert other.channel_finished(1) == 70
    assert other.channel_finished(0) == MAX_WATERMARK


# --- keyed timers ----------------------------------------------------------------------------


class _Alarm(KeyedProcessFunction):
    """Per key: counts records; an event-time timer 10 after the first record reports the
    count; a processing-time timer at 1000 reports the key; a record ``"cancel"`` deletes
    the event-time timer."""

    def open(self, runtime_context: object) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))  # type: ignore[attr-defined]
        self.due = runtime_context.get_state(ValueStateDescriptor("due"))  # type: ignore[attr-defined]

    def process_element(self, value: tuple, ctx: KeyedProcessFunction.Context) -> None:
        timers = ctx.timer_service()
        if value[1] == "cancel":
            timers.delete_event_time_timer(self.due.value())
            return
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        if count == 1:
            self.due.update(ctx.timestamp() + 10)
            timers.register_event_time_timer(ctx.timestamp() + 10)
            timers.register_event_time_timer(ctx.timestamp() + 10)  # twice = once
            timers.register_processing_time_timer(1_000)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> list:
        if ctx.time_domain() is TimeDomain.EVENT_TIME:
            return [("event", ctx.get_current_key(), timestamp, self.count.value())]
        return [("processing", ctx.get_current_key(), timestamp)]


def _alarm_harness() -> OperatorHarness:
    return OperatorHarness(KeyedProcessOperator("alarm", FunctionKeySpec(lambda v: v[0]),
                                                _Alarm()))


def test_event_time_timers_fire_in_order_once_with_the_key_and_its_state() -> None:
    harness = _alarm_harness()
    harness.process([("a", 1), ("b", 2), ("a", 3)], timestamps=[100, 95, 120])
    harness.output.clear()
    harness.watermark(104)
    assert harness.output.records == []
    harness.watermark(110)
    assert harness.output.records == [("event", "b", 105, 1), ("event", "a", 110, 2)]
    assert harness.output.timestamps == [105, 110]
    assert harness.output.watermarks == [104, 110]
    harness.watermark(500)
    assert harness.output.records[2:] == []


def test_deleted_timers_do_not_fire_and_processing_time_timers_follow_the_clock() -> None:
    harness = _alarm_harness()
    harness.process([("a", 1), ("a", "cancel"), ("b", 1)], timestamps=[100, 101, 100])
    harness.output.clear()
    harness.watermark(1_000)
    assert harness.output.records == [("event", "b", 110, 1)]
    harness.advance_time(999)
    assert harness.output.records == [("event", "b", 110, 1)]
    harness.advance_time(1_000)
    assert sorted(harness.output.records[1:]) == [("processing", "a", 1_000),
                                                  ("processing", "b", 1_000)]


class _Recorder:
    def __init__(self) -> None:
        self.fired: list[tuple[str, object, int]] = []

    def on_event_time(self, timer: Timer) -> None:
        self.fired.append(("event", timer.key, timer.timestamp))

    def on_processing_time(self, timer: Timer) -> None:
        self.fired.append(("processing", timer.key, timer.timestamp))


def _backend(kind: str, key_groups: KeyGroupRange, directory: Path) -> Any:
    config = Configuration.from_pairs({"state.backend.type": kind,
                                       "state.backend.rocksdb.localdir": str(directory)})
    return create_keyed_state_backend(config, 128, key_groups, f"op-{key_groups}")


@pytest.mark.parametrize("kind", ["hashmap", "rocksdb"])
def test_timers_survive_a_snapshot_and_a_rescaled_restore_each_firing_exactly_once(
        kind: str, tmp_path: Path) -> None:
    clock = ManualClock(0)
    source = _backend(kind, KeyGroupRange(0, 127), tmp_path)
    timers = InternalTimerService("op", source, ProcessingTimeService(clock),
                                  _Recorder())
    keys = [f"user-{i}" for i in range(200)]
    for i, key in enumerate(keys):
        source.set_current_key(key)
        timers.register_event_time_timer(None, 1_000 + i)
        timers.register_processing_time_timer("ns", 5_000 + i)
    timers.delete_event_time_timer(None, 1_000 + 199)  # key 199's current key is set
    out = io.BytesIO()
    write_canonical(source.snapshot().entries(), out)
    source.dispose()

    fired: list[tuple[str, object, int]] = []
    for key_groups in (KeyGroupRange(0, 63), KeyGroupRange(64, 127)):
        backend = _backend(kind, key_groups, tmp_path)
        restore_canonical(backend, [out.getvalue()])
        recorder = _Recorder()
        restored = InternalTimerService("op", backend, ProcessingTimeService(clock),
                                        recorder)
        restored.restore()
        restored.advance_watermark(MAX_WATERMARK)
        restored.fire_processing_time(10_000)
        assert restored.num_event_time_timers() == 0
        assert restored.num_processing_time_timers() == 0
        for _, key, _ in recorder.fired:
            assert _key_group(key) in key_groups
        fired.extend(recorder.fired)
        backend.dispose()
    expected = [("event", k, 1_000 + i) for i, k in enumerate(keys) if i != 199] + \
               [("processing", k, 5_000 + i) for i, k in enumerate(keys)]
    assert sorted(fired, key=str) == sorted(expected, key=str)


@pytest.mark.parametrize("kind", ["hashmap", "rocksdb"])
def test_restoring_timers_reads_only_the_timer_states_not_the_whole_backend(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from weir.state.descriptors import ValueStateDescriptor

    backend = _backend(kind, KeyGroupRange(0, 127), tmp_path)
    timers = InternalTimerService("op", backend, ProcessingTimeService(lambda: 0), _Recorder())
    counts = backend.get_state(ValueStateDescriptor("counts"))
    for i in range(500):
        backend.set_current_key(i)
        counts.update(i)
        if i % 100 == 0:
            timers.register_event_time_timer(None, i)
    # A full scan (what a snapshot does) would read the 500 values of "counts" too.
    monkeypatch.setattr(type(backend), "entries",
                        lambda self: pytest.fail("timer restore scanned every state"))
    recorder = _Recorder()
    restored = InternalTimerService("op", backend, ProcessingTimeService(lambda: 0), recorder)
    assert restored.restore() == (5, 0)  # (event-time, processing-time) timers
    restored.advance_watermark(MAX_WATERMARK)
    assert recorder.fired == [("event", i, i) for i in range(0, 500, 100)]
    backend.dispose()


def _key_group(key: object) -> int:
    from weir.state.key_groups import assign_to_key_group

    return assign_to_key_group(key, 128)


def test_reduce_keeps_its_running_value_in_the_keyed_backend() -> None:
    operator = ReduceOperator("r", FunctionKeySpec(lambda v: v[0]), lambda a, b: (a[0],
                                                                                   a[1] + b[1]))
    harness = OperatorHarness(operator)
    harness.process([("a", 1), ("b", 2), ("a", 3)], timestamps=[1, 2, 3])
    assert harness.output.records == [("a", 1), ("b", 2), ("a", 4)]
    assert harness.output.timestamps == [1, 2, 3]
    harness.finish()  # totals are written back to the backend by the end of the input
    names = {entry[0] for entry in operator.backend.entries()}
    assert names == {"reduce"}


def test_watermark_constants_bracket_every_timestamp() -> None:
    assert MIN_WATERMARK < -(10**18) and MAX_WATERMARK > 10**18


class _RunningTotal(MapFunction):
    def open(self, runtime_context: object) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))  # type: ignore[attr-defined]

    def map(self, value: tuple) -> tuple:
        total = (self.total.value() or 0) + value[1]
        self.total.update(total)
        return (value[0], total)


class _FirstOnly(FilterFunction):
    def open(self, runtime_context: object) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))  # type: ignore[attr-defined]

    def filter(self, value: tuple) -> bool:
        first = self.seen.value() is None
        self.seen.update(True)
        return first


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_rich_functions_on_a_keyed_stream_get_state_scoped_to_each_records_key(
        backend: str) -> None:
    key = FunctionKeySpec(lambda v: v[0])
    config = {"state.backend.type": backend}
    mapped = OperatorHarness(MapOperator("m", _RunningTotal(), key=key), config=config)
    mapped.process([("a", 1), ("b", 10), ("a", 2), ("b", 20)])
    assert mapped.output.records == [("a", 1), ("b", 10), ("a", 3), ("b", 30)]
    mapped.close()
    first = OperatorHarness(FilterOperator("f", _FirstOnly(), key=key), config=config)
    first.process([("a", 1), ("b", 2), ("a", 3), ("c", 4)], timestamps=[1, 2, 3, 4])
    assert first.output.records == [("a", 1), ("b", 2), ("c", 4)]
    assert first.output.timestamps == [1, 2, 4]
    first.close()


def test_keyed_state_outside_a_keyed_stream_is_a_clear_error() -> None:
    with pytest.raises(StateError, match="key_by"):
        OperatorHarness(MapOperator("m", _RunningTotal()))  # open() asks for state


def test_processing_time_callbacks_yield_when_the_time_slice_is_over() -> None:
    """Due callbacks run within the task's time slice (at least one a turn); the rest stay
    due and run on the next turns, in time order."""
    from weir.core.processing_time import TimeSlice

    now = [0.0]
    service = ProcessingTimeService(clock_ms=lambda: 1_000)
    service.time_slice = TimeSlice(0.010, clock=lambda: now[0])
    fired: list[int] = []

    def slow(timestamp: int) -> None:
        fired.append(timestamp)
        now[0] += 0.004                       # each callback takes 4 ms

    for timestamp in (500, 100, 300, 200, 400):
        service.register_timer(timestamp, slow)
    turns = []
    while service.seconds_until_next() is not None:
        service.time_slice.start()
        turns.append(service.fire_due())
    assert fired == [100, 200, 300, 400, 500]
    assert turns == [3, 2]                    # 3 times 4 ms passes the 10 ms slice
    service.time_slice.unlimited = True       # the task ends its input: no yielding
    for timestamp in (600, 700, 800):
        service.register_timer(min(timestamp, 1_000), slow)
    service.time_slice.start()
    assert service.fire_due() == 3
