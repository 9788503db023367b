"""PyFlink names and call shapes that programs use as they are: TriggerResult's methods,
generic-looking classes, the window classes and factories, window functions on
``window_all(...).reduce/aggregate``, dict-like and iterable state, descriptor keywords,
chained CheckpointConfig setters and the string-key Configuration API."""

from __future__ import annotations

from collections import defaultdict

import pytest

from weir import (
    AggregateFunction,
    AggregatingStateDescriptor,
    AllWindowFunction,
    BroadcastState,
    CheckpointingMode,
    ConfigError,
    Configuration,
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    CountWindow,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EmbeddedRocksDBStateBackend,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    KeyedProcessFunction,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    MemoryStateBackend,
    NeverTrigger,
    ProcessAllWindowFunction,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    ProcessWindowFunction,
    ReadOnlyBroadcastState,
    ReducingStateDescriptor,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    Time,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    Types,
    ValueState,
    ValueStateDescriptor,
    WatermarkStrategy,
    Window,
    WindowAssigner,
    WindowFunction,
)
from weir.core import options
from weir.state import options as state_options


def _env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def _stamped(env: StreamExecutionEnvironment, records: list) -> object:
    """Records whose last field is their event timestamp."""
    return env.from_collection(records).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner(lambda record, _: record[-1]))


# -- 1. TriggerResult ---------------------------------------------------------------------


def test_trigger_result_is_fire_and_is_purge_are_methods() -> None:
    flags = {r.name: (r.is_fire(), r.is_purge()) for r in TriggerResult}
    assert flags == {"CONTINUE": (False, False), "FIRE": (True, False),
                     "PURGE": (False, True), "FIRE_AND_PURGE": (True, True)}


class EventTimeOrBig(Trigger[tuple, TimeWindow]):
    """A trigger as PyFlink code writes one: fires early for a big value, else as the
    event-time trigger does, reading the clock by PyFlink's context name."""

    def on_element(self, element, timestamp, window, ctx):
        if element[1] >= 100:
            return TriggerResult.FIRE
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        result = EventTimeTrigger.create().on_event_time(time, window, ctx)
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def clear(self, window, ctx):
        ctx.delete_event_time_timer(window.max_timestamp())


@pytest.mark.usefixtures("runs_on")
def test_a_pyflink_style_trigger_runs() -> None:
    records = [("a", 1, 0), ("a", 100, 1), ("a", 2, 2), ("b", 4, 3), ("a", 3, 12)]
    got = (_stamped(_env(1), records).key_by(lambda r: r[0])
           .window(TumblingEventTimeWindows.of(Time.milliseconds(10), None))
           .trigger(EventTimeOrBig())
           .reduce(lambda x, y: (x[0], x[1] + y[1], max(x[2], y[2]))))
    # a's first window fires early at 100 (1 + 100), then at its end with every record
    # (the early fire does not purge): 1 + 100 + 2. The others fire at their end.
    assert sorted(got.execute_and_collect()) == [
        ("a", 3, 12), ("a", 101, 1), ("a", 103, 2), ("b", 4, 3)]


# -- 2. classes written with type parameters ----------------------------------------------


def test_pyflink_generic_classes_take_parameters() -> None:
    generic = [ProcessWindowFunction.Context, ProcessAllWindowFunction.Context, Trigger,
               WindowAssigner, Window, ValueState, ListState, MapState, BroadcastState,
               ReadOnlyBroadcastState, ValueStateDescriptor, MapStateDescriptor]
    assert [cls[int] for cls in generic] == generic
    assert MapState[str, int] is MapState
    assert ProcessWindowFunction.Context[TimeWindow] is ProcessWindowFunction.Context


class Values(ProcessAllWindowFunction):
    def process(self, context: ProcessAllWindowFunction.Context, elements):
        yield from elements


def test_process_all_window_function_has_a_context_class_and_a_clear_hook() -> None:
    assert {"window", "window_state", "global_state"} <= \
        ProcessAllWindowFunction.Context.__abstractmethods__
    assert Values().clear(None) is None  # the default hook does nothing


# -- 3. window names and factories --------------------------------------------------------


def test_window_classes_and_factories_have_pyflink_names() -> None:
    assert isinstance(TimeWindow(0, 10), Window)
    assert isinstance(CountWindow(3), Window) and CountWindow(3) == CountWindow(3)
    assert GlobalWindow.get() == GlobalWindow() and isinstance(GlobalWindow(), Window)
    assert CountWindow(0).max_timestamp() == GlobalWindow().max_timestamp() == (1 << 63) - 1
    assert isinstance(EventTimeTrigger.create(), EventTimeTrigger)
    assert isinstance(ProcessingTimeTrigger.create(), ProcessingTimeTrigger)
    assert NeverTrigger().on_element(None, 0, TimeWindow(0, 1), None) is \
        TriggerResult.CONTINUE
    # PyFlink's of(size, offset=None): no offset.
    assert TumblingEventTimeWindows.of(Time.seconds(5), None).assign_windows(None, 7000) \
        == [TimeWindow(5000, 10000)]
    assert SlidingEventTimeWindows.of(Time.seconds(4), Time.seconds(2), None) \
        .assign_windows(None, 5000) == [TimeWindow(4000, 8000), TimeWindow(2000, 6000)]
    extract = lambda element: 5  # noqa: E731 - a gap extractor may be a function
    assert isinstance(DynamicEventTimeSessionWindows.with_dynamic_gap(extract),
                      EventTimeSessionWindows)
    processing = DynamicProcessingTimeSessionWindows.with_dynamic_gap(extract)
    assert isinstance(processing, ProcessingTimeSessionWindows)
    assert processing.assign_windows("x", 100) == [TimeWindow(100, 105)]
    with pytest.raises(ValueError, match="positive"):
        CountTumblingWindowAssigner.of(0)


def _chunk_sums(records: list, size: int) -> list:
    """Sums of each key's full chunks of ``size`` records, in arrival order."""
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, value in records:
        by_key[key].append(value)
    return sorted((key, sum(values[i:i + size])) for key, values in by_key.items()
                  for i in range(0, len(values) - size + 1, size))


@pytest.mark.usefixtures("runs_on")
def test_count_window_with_slide_zero_and_the_count_assigners() -> None:
    records = [(key, value) for value in range(11) for key in ("a", "b")]

    def run(windowed_of) -> list:
        keyed = _env().from_collection(records).key_by(lambda r: r[0])
        return sorted(windowed_of(keyed).reduce(lambda x, y: (x[0], x[1] + y[1]))
                      .execute_and_collect())

    expected = _chunk_sums(records, 3)
    assert run(lambda keyed: keyed.count_window(3, 0)) == expected
    assert run(lambda keyed: keyed.window(CountTumblingWindowAssigner.of(3))) == expected
    # Sliding: a window of 3 records of a key starts every 2; full ones are evaluated.
    sliding = sorted((key, sum(range(start, start + 3))) for key in ("a", "b")
                     for start in range(0, 9, 2))
    assert run(lambda keyed: keyed.window(CountSlidingWindowAssigner.of(3, 2))) == sliding


class GapFromRecord(SessionWindowTimeGapExtractor):
    def extract(self, element):
        return element[2]


@pytest.mark.usefixtures("runs_on")
def test_dynamic_event_time_session_windows_by_pyflink_name() -> None:
    # (key, value, gap after it, timestamp): sessions [0, 3), [5, 8) and [20, 21).
    records = [("k", 1, 3, 0), ("k", 1, 1, 2), ("k", 1, 2, 5), ("k", 1, 2, 6),
               ("k", 1, 1, 20)]
    sessions = (_stamped(_env(1), records).key_by(lambda r: r[0])
                .window(DynamicEventTimeSessionWindows.with_dynamic_gap(GapFromRecord()))
                .reduce(lambda a, b: (a[0], a[1] + b[1], a[2], a[3])))
    assert sorted(r[1] for r in sessions.execute_and_collect()) == [1, 2, 2]


# -- 4. window functions on window_all(...).reduce / aggregate ------------------------------


class StartAndValue(ProcessAllWindowFunction):
    def process(self, context, elements):
        assert isinstance(context, ProcessAllWindowFunction.Context)
        for value in elements:
            yield "process", context.window().start, value


class EndAndValue(AllWindowFunction):
    def apply(self, window, inputs):
        for value in inputs:
            yield "apply", window.end, value


class KeyStartAndValue(WindowFunction):
    def apply(self, key, window, inputs):
        for value in inputs:
            yield key, window.start, value


class Average(AggregateFunction):
    def create_accumulator(self):
        return 0, 0

    def add(self, value, accumulator):
        return accumulator[0] + value[0], accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


RECORDS = [(value, value * 3) for value in range(1, 13)]  # (value, timestamp)


def _per_window(size: int) -> dict[int, list[int]]:
    windows: dict[int, list[int]] = defaultdict(list)
    for value, stamp in RECORDS:
        windows[stamp - stamp % size].append(value)
    return windows


@pytest.mark.usefixtures("runs_on")
def test_window_all_reduce_and_aggregate_take_a_window_function() -> None:
    windows = _per_window(10)
    assigner = TumblingEventTimeWindows.of(Time.milliseconds(10))
    reduced = (_stamped(_env(), RECORDS).window_all(assigner)
               .reduce(lambda a, b: (a[0] + b[0], max(a[1], b[1])), StartAndValue()))
    assert sorted(reduced.execute_and_collect()) == sorted(
        ("process", start, (sum(values), max(values) * 3))
        for start, values in windows.items())
    applied = (_stamped(_env(), RECORDS).window_all(assigner)
               .reduce(lambda a, b: (a[0] + b[0], 0), window_function=EndAndValue()))
    assert sorted(r[1:] for r in applied.execute_and_collect()) == sorted(
        (start + 10, (sum(values), 0)) for start, values in windows.items())
    averaged = (_stamped(_env(), RECORDS).window_all(assigner)
                .aggregate(Average(), StartAndValue(), accumulator_type=None,
                           output_type=None))
    assert sorted(averaged.execute_and_collect()) == sorted(
        ("process", start, sum(values) / len(values)) for start, values in windows.items())


@pytest.mark.usefixtures("runs_on")
def test_keyed_reduce_takes_a_window_function() -> None:
    records = [("a" if value % 2 else "b", value, value * 3) for value in range(1, 13)]
    got = (_stamped(_env(), records).key_by(lambda r: r[0])
           .window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
           .reduce(lambda x, y: (x[0], x[1] + y[1], 0), KeyStartAndValue()))
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for key, value, stamp in records:
        expected[(key, stamp - stamp % 10)] += value
    assert sorted((k, start, v[1]) for k, start, v in got.execute_and_collect()) == sorted(
        (key, start, total) for (key, start), total in expected.items())


def test_window_all_refuses_a_keyed_window_function() -> None:
    windowed = _env().from_collection([1]).window_all(
        TumblingEventTimeWindows.of(Time.milliseconds(10)))
    with pytest.raises(TypeError, match="AllWindowFunction or a ProcessAllWindowFunction"):
        windowed.reduce(lambda a, b: a, lambda key, ctx, elements: elements)


# -- 5. state ---------------------------------------------------------------------------


class History(KeyedProcessFunction):
    """Per key: the values seen (list state, iterated), word counts (map state through
    its dunders) and a running total (reducing state), descriptors by PyFlink keywords."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_list_state(
            ListStateDescriptor("seen", elem_type_info=Types.INT()))
        self.words = runtime_context.get_map_state(MapStateDescriptor(
            "words", key_type_info=Types.STRING(), value_type_info=Types.INT()))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor(
            "total", reduce_function=lambda a, b: a + b, type_info=Types.INT()))

    def process_element(self, value, ctx):
        _, word, n = value
        self.seen.add(n)
        self.total.add(n)
        if word == "drop":
            del self.words["drop"]  # absent: nothing to delete, as PyFlink's remove
        elif word in self.words:
            self.words[word] = self.words[word] + 1
        else:
            self.words[word] = 1
        yield (ctx.get_current_key(), [v for v in self.seen], sorted(self.words),
               self.words["a"], self.total.get())


@pytest.mark.usefixtures("runs_on")
def test_list_state_iterates_and_map_state_is_dict_like() -> None:
    records = [("x", "a", 1), ("y", "b", 2), ("x", "a", 3), ("x", "c", 4), ("y", "drop", 5),
               ("y", "a", 6)]
    got = (_env().from_collection(records).key_by(lambda r: r[0]).process(History())
           .execute_and_collect())
    expected = []
    seen: dict[str, list[int]] = defaultdict(list)
    words: dict[str, dict[str, int]] = defaultdict(dict)
    for key, word, n in records:
        seen[key].append(n)
        if word != "drop":
            words[key][word] = words[key].get(word, 0) + 1
        expected.append((key, list(seen[key]), sorted(words[key]), words[key].get("a"),
                         sum(seen[key])))
    assert sorted(got) == sorted(expected)


def test_broadcast_state_is_dict_like_and_its_view_read_only() -> None:
    rules = BroadcastState("rules")
    rules["max"] = 10
    rules["min"] = 1
    del rules["min"]
    del rules["absent"]
    view = ReadOnlyBroadcastState(rules)
    assert (rules["max"], view["max"], view["min"]) == (10, 10, None)
    assert "max" in view and "min" not in view and list(view) == ["max"] == list(rules)
    with pytest.raises(TypeError):
        view["max"] = 3  # type: ignore[index]


class Sum(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + value

    def get_result(self, accumulator):
        return accumulator


def test_state_descriptors_take_pyflink_and_weir_keywords() -> None:
    assert ValueStateDescriptor("v", value_type_info=Types.INT()) == \
        ValueStateDescriptor("v", type_info=Types.INT()) == ValueStateDescriptor("v", Types.INT())
    assert ListStateDescriptor("l", elem_type_info=Types.INT()).type_info == Types.INT()
    by_pyflink = MapStateDescriptor("m", key_type_info=Types.STRING(),
                                    value_type_info=Types.INT())
    assert by_pyflink == MapStateDescriptor("m", type_info=Types.STRING(),
                                            value_type_info=Types.INT())
    assert by_pyflink.key_type_info == Types.STRING()
    add = lambda a, b: a + b  # noqa: E731
    reducing = ReducingStateDescriptor(name="r", reduce_function=add, type_info=Types.INT())
    assert reducing.get_reduce_function() is add
    function = Sum()
    aggregating = AggregatingStateDescriptor("s", agg_function=function,
                                             state_type_info=Types.LONG())
    assert aggregating.get_agg_function() is function
    assert aggregating.type_info == Types.LONG()
    assert AggregatingStateDescriptor("s", function, type_info=Types.LONG()) == aggregating
    with pytest.raises(TypeError, match="not both"):
        ValueStateDescriptor("v", value_type_info=Types.INT(), type_info=Types.INT())


# -- 6. CheckpointConfig ------------------------------------------------------------------


def test_checkpoint_config_setters_chain() -> None:
    config = _env().get_checkpoint_config()
    same = (config.set_checkpoint_interval(2000)
            .set_checkpointing_mode(checkpointing_mode=CheckpointingMode.AT_LEAST_ONCE)
            .set_checkpoint_timeout(60_000)
            .set_min_pause_between_checkpoints(min_pause_between_checkpoints=500)
            .set_max_concurrent_checkpoints(2)
            .set_tolerable_checkpoint_failure_number(tolerable_checkpoint_failure_number=3)
            .enable_unaligned_checkpoints()
            .disable_unaligned_checkpoints())
    assert same is config
    assert (config.get_checkpoint_interval(), config.get_checkpointing_mode(),
            config.get_checkpoint_timeout(), config.get_min_pause_between_checkpoints(),
            config.get_max_concurrent_checkpoints(),
            config.get_tolerable_checkpoint_failure_number(),
            config.is_unaligned_checkpoints_enabled()) == (
        2000, CheckpointingMode.AT_LEAST_ONCE, 60_000, 500, 2, 3, False)


# -- 7. Configuration -------------------------------------------------------------------


def test_configuration_string_key_api() -> None:
    conf = (Configuration()
            .set_string("state.backend.type", "rocksdb")
            .set_integer("parallelism.default", 3)
            .set_boolean("state.backend.incremental", True)
            .set_float("restart-strategy.exponential-delay.backoff-multiplier", 1.5))
    assert conf.get_string("state.backend.type", "hashmap") == "rocksdb"
    assert conf.get_integer("parallelism.default", 1) == 3
    assert conf.get_boolean("state.backend.incremental", False) is True
    assert conf.get_float("restart-strategy.exponential-delay.backoff-multiplier", 2) == 1.5
    # Not set here: the default given, not the option's default.
    assert conf.get_integer("pipeline.batch-size", 7) == 7
    assert conf.get_string("no.such.key", "d") == "d"
    assert conf.key_set() == {"state.backend.type", "parallelism.default",
                              "state.backend.incremental",
                              "restart-strategy.exponential-delay.backoff-multiplier"}
    assert conf.contains_key("parallelism.default")
    assert not conf.contains_key("pipeline.batch-size")
    assert conf.remove_config("parallelism.default") is True
    assert conf.remove_config("parallelism.default") is False
    assert not conf.contains_key("parallelism.default")
    assert "parallelism.default" not in conf.to_dict()
    copy = Configuration().add_all(conf)
    assert copy.to_dict() == conf.to_dict() and copy.to_dict()["state.backend.incremental"] \
        == "true"
    # As in PyFlink, keys of no weir option are stored and read back, typed as given.
    prefixed = Configuration().add_all(conf, prefix="my.")
    assert prefixed.get_string("my.state.backend.type", "") == "rocksdb"
    other = (Configuration().set_string("k1", "v1").set_integer("k2", 1)
             .set_bytearray("k3", b"\x01"))
    assert other.get_integer("k2", 0) == 1 and other.get_string("k2", "") == "1"
    assert other.get_bytearray("k3", b"") == bytearray(b"\x01")
    assert str(Configuration().set_string("k1", "v1").set_integer("k2", 1)) == "{k1=v1, k2=1}"
    into: dict = {}
    other.add_all_to_dict(into)
    assert into == {"k1": "v1", "k2": 1, "k3": b"\x01"}
    assert Configuration(other) == other and hash(Configuration(other)) == hash(other)
    assert other != Configuration(other).set_string("k1", "v2")
    # A weir option's value is still validated, and so is every key weir reads itself.
    with pytest.raises(ConfigError, match=r"invalid value for 'parallelism\.default'"):
        Configuration().set_string("parallelism.default", "many")
    with pytest.raises(ConfigError, match="unknown configuration key"):
        Configuration.from_pairs({"no.such.key": "x"})
    # The typed API is unchanged.
    assert Configuration().set(options.PARALLELISM, 5).get(options.PARALLELISM) == 5


def test_environment_takes_a_configuration_or_a_dict() -> None:
    conf = Configuration().set_integer("pipeline.batch-size", 123)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    assert env.get_configuration().get_integer("pipeline.batch-size", 0) == 123
    env = StreamExecutionEnvironment.get_execution_environment({"pipeline.batch-size": 77})
    assert env.get_configuration().get_integer("pipeline.batch-size", 0) == 77
    same = env.configure(Configuration().set_string("pipeline.batch-size", "99"))
    assert same is env
    assert env.get_configuration().get_integer("pipeline.batch-size", 0) == 99
    env.configure({"pipeline.batch-size": 5})
    assert env.get_configuration().get_integer("pipeline.batch-size", 0) == 5
    # PyFlink's keys weir has under the same or an older name; others are ignored, named.
    env.configure(Configuration().set_boolean("pipeline.operator-chaining", False)
                  .set_string("state.backend", "rocksdb")
                  .set_string("pipeline.time-characteristic", "ProcessingTime"))
    assert not env.is_chaining_enabled()
    assert env.get_configuration().to_dict()["state.backend.type"] == "rocksdb"
    assert env.get_stream_time_characteristic().name == "ProcessingTime"
    env.configure(Configuration().set_string("state.backend", "jobmanager"))
    assert env.get_configuration().get(state_options.BACKEND_TYPE) == "hashmap"
    assert isinstance(env.get_state_backend(), MemoryStateBackend)
    env.set_state_backend(EmbeddedRocksDBStateBackend(True))
    assert env.get_state_backend().is_incremental_checkpoints_enabled()
    ignored = r"weir has no option 'python\.fn-execution\.bundle\.size'"
    with pytest.warns(UserWarning, match=ignored):
        env.configure(Configuration().set_integer("python.fn-execution.bundle.size", 1))
    with pytest.raises(ConfigError, match=r"unknown configuration key 'no\.such\.key'"):
        env.configure({"no.such.key": 1})
    with pytest.raises(TypeError, match="Configuration or a dict"):
        env.configure([("pipeline.batch-size", 5)])  # type: ignore[arg-type]
