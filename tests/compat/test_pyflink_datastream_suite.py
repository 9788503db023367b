"""Programs of PyFlink's own DataStream tests (``pyflink/datastream/tests/test_data_stream.py``)
with weir's imports, checked against the results PyFlink's tests expect. PyFlink's tests
write to a test sink; here each program's streams are collected, tagged by the sink they
fed, and typed records are compared as PyFlink prints them (Java's ``toString``).

Several programs share one test, so that the cluster runs stay few."""

from __future__ import annotations

import datetime
import decimal
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import pytest

from weir import (
    AggregateFunction,
    AggregatingStateDescriptor,
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    CountSlidingWindowAssigner,
    CountWindow,
    DataStream,
    EventTimeSessionWindows,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    ListStateDescriptor,
    MapFunction,
    MapStateDescriptor,
    OutputTag,
    ProcessFunction,
    ProcessWindowFunction,
    ReduceFunction,
    ReducingStateDescriptor,
    Row,
    RuntimeContext,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    StateTtlConfig,
    StreamExecutionEnvironment,
    Time,
    TimestampAssigner,
    TumblingEventTimeWindows,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
    WindowFunction,
)
from weir.core.types import TypeInformation
from weir.operators.sinks.printing import flink_string

pytestmark = pytest.mark.usefixtures("runs_on")

D = decimal.Decimal
PAIRS = Types.ROW([Types.STRING(), Types.INT()])


def _env(parallelism: int = 1) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def _collect(**sinks: DataStream) -> dict[str, list[Any]]:
    """Run the job once, with one collected stream standing for each of PyFlink's sinks."""
    tagged = [stream.map(lambda v, sink=name: (sink, v)) for name, stream in sinks.items()]
    results: dict[str, list[Any]] = {name: [] for name in sinks}
    for sink, value in tagged[0].union(*tagged[1:]).execute_and_collect():
        results[sink].append(value)
    return results


def _printed(values: list[Any], type_info: TypeInformation | None = None) -> list[str]:
    """Sorted, as PyFlink's test sink stringifies them: Java's toString for typed records."""
    return sorted(flink_string(v, type_info) if type_info is not None else str(v)
                  for v in values)


class SecondColumnTimestamp(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1])


def _by_second_column() -> WatermarkStrategy:
    return WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        SecondColumnTimestamp())


class SecondField(KeySelector):
    def get_key(self, value: Any) -> Any:
        return value[1]


# -- side outputs ------------------------------------------------------------------------------

SIDE = OutputTag("side", Types.INT())


class NameMainValueSide(ProcessFunction):
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
        yield value[0]
        yield SIDE, value[1]


class ValueMainDoubleSide(ProcessFunction):
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
        yield value
        yield SIDE, value * 2


def test_side_outputs_of_pyflinks_tests() -> None:
    records = [("a", 0), ("b", 1), ("c", 2)]

    # test_process_side_output and test_side_output_chained_with_upstream_operator
    env = _env()
    direct = env.from_collection(records, type_info=PAIRS).process(
        NameMainValueSide(), output_type=Types.STRING())
    chained = env.from_collection(records, type_info=PAIRS).map(
        lambda e: (e[0], e[1] + 1)).process(NameMainValueSide(), output_type=Types.STRING())
    got = _collect(main=direct, side=direct.get_side_output(SIDE),
                   chained_main=chained, chained_side=chained.get_side_output(SIDE))
    assert sorted(got["main"]) == sorted(got["chained_main"]) == ["a", "b", "c"]
    assert sorted(got["side"]) == [0, 1, 2]
    assert sorted(got["chained_side"]) == [1, 2, 3]

    # test_process_multiple_side_output
    side1, side2 = OutputTag("side1", Types.INT()), OutputTag("side2", Types.STRING())

    class TwoSides(ProcessFunction):
        def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
            yield value[0]
            yield side1, value[1]
            yield side2, value[0] + str(value[1])

    stream = _env().from_collection(records, type_info=PAIRS).process(
        TwoSides(), output_type=Types.STRING())
    got = _collect(main=stream, one=stream.get_side_output(side1),
                   two=stream.get_side_output(side2))
    assert (sorted(got["main"]), sorted(got["one"]), sorted(got["two"])) == (
        ["a", "b", "c"], [0, 1, 2], ["a0", "b1", "c2"])

    # test_side_output_tag_reusing: two process functions emit to one tag; each
    # get_side_output reads its own operator's records only.
    env = _env()
    first = env.from_collection([1, 2, 3], Types.INT()).process(ValueMainDoubleSide())
    second = first.map(lambda i: i * 2).process(ValueMainDoubleSide())
    got = _collect(first=first.get_side_output(SIDE), second=second.get_side_output(SIDE))
    assert (sorted(got["first"]), sorted(got["second"])) == ([2, 4, 6], [4, 8, 12])

    # The same two functions in one chain (nothing reads the first one's side output).
    for chaining in (True, False):
        env = _env()
        if not chaining:
            env.disable_operator_chaining()
        last = (env.from_collection([1, 2, 3], Types.INT()).process(ValueMainDoubleSide())
                .map(lambda i: i * 2).process(ValueMainDoubleSide()))
        assert sorted(last.get_side_output(SIDE).execute_and_collect()) == [4, 8, 12]

    # test_side_output_stream_execute_and_collect
    stream = _env().from_collection([1, 2, 3], Types.INT()).process(ValueMainDoubleSide())
    assert sorted(stream.get_side_output(SIDE).execute_and_collect()) == [2, 4, 6]


def test_side_outputs_of_keyed_and_connected_functions_of_pyflinks_tests() -> None:
    # test_keyed_process_side_output
    class RunningSum(KeyedProcessFunction):
        def open(self, context: RuntimeContext) -> None:
            self.sum = context.get_reducing_state(
                ReducingStateDescriptor("reduce", lambda i, j: i + j, Types.INT()))

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
            yield value[1]
            self.sum.add(value[1])
            yield SIDE, self.sum.get()

    stream = _env().from_collection([("a", 1), ("b", 2), ("a", 3), ("b", 4)],
                                    type_info=PAIRS).key_by(lambda e: e[0]).process(
        RunningSum(), output_type=Types.INT())
    got = _collect(main=stream, side=stream.get_side_output(SIDE))
    assert (sorted(got["main"]), sorted(got["side"])) == ([1, 2, 3, 4], [1, 2, 4, 6])

    # test_co_process_side_output
    class BothSides(CoProcessFunction):
        def process_element1(self, value: Any, ctx: CoProcessFunction.Context) -> Any:
            yield value[0]
            yield SIDE, value[1]

        def process_element2(self, value: Any, ctx: CoProcessFunction.Context) -> Any:
            yield value[1]
            yield SIDE, value[0]

    env = _env()
    left = env.from_collection([("a", 0), ("b", 1), ("c", 2)], type_info=PAIRS)
    right = env.from_collection([(3, "c"), (1, "a"), (0, "d")],
                                type_info=Types.ROW([Types.INT(), Types.STRING()]))
    stream = left.connect(right).process(BothSides(), output_type=Types.STRING())
    got = _collect(main=stream, side=stream.get_side_output(SIDE))
    assert sorted(got["main"]) == ["a", "a", "b", "c", "c", "d"]
    assert sorted(got["side"]) == [0, 0, 1, 1, 2, 3]

    # test_keyed_co_process_side_output
    class CountBoth(KeyedCoProcessFunction):
        def open(self, context: RuntimeContext) -> None:
            self.count = context.get_reducing_state(
                ReducingStateDescriptor("reduce", lambda i, j: i + j, Types.INT()))

        def process_element1(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Any:
            yield ctx.get_current_key(), value[1]
            self.count.add(1)
            yield SIDE, self.count.get()

        def process_element2(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Any:
            yield ctx.get_current_key(), value[0]
            self.count.add(1)
            yield SIDE, self.count.get()

    env = _env()
    left = env.from_collection([("a", 1), ("b", 2), ("a", 3), ("b", 4)], type_info=PAIRS)
    right = env.from_collection([(8, "a"), (7, "b"), (6, "a"), (5, "b")],
                                type_info=Types.ROW([Types.INT(), Types.STRING()]))
    out_type = Types.TUPLE([Types.STRING(), Types.INT()])
    stream = left.key_by(lambda e: e[0]).connect(right.key_by(lambda e: e[1])).process(
        CountBoth(), output_type=out_type)
    got = _collect(main=stream, side=stream.get_side_output(SIDE))
    assert _printed(got["main"], out_type) == sorted(
        ["(a,1)", "(b,2)", "(a,3)", "(b,4)", "(b,5)", "(a,6)", "(b,7)", "(a,8)"])
    assert sorted(got["side"]) == [1, 1, 2, 2, 3, 3, 4, 4]

    # test_co_broadcast_side_output: each of the 2 subtasks sees every broadcast record.
    class Broadcasting(BroadcastProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            yield value[0]
            yield SIDE, value[1]

        def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
            yield value[1]
            yield SIDE, value[0]

    env = _env(2)
    descriptor = MapStateDescriptor("dummy", key_type_info=Types.INT(),
                                    value_type_info=Types.STRING())
    rules = env.from_collection([(3, "d"), (4, "f")],
                                type_info=Types.ROW([Types.INT(), Types.STRING()]))
    stream = env.from_collection([("a", 0), ("b", 1), ("c", 2)], type_info=PAIRS).connect(
        rules.broadcast(descriptor)).process(Broadcasting(), output_type=Types.STRING())
    got = _collect(main=stream, side=stream.get_side_output(SIDE))
    assert sorted(got["main"]) == ["a", "b", "c", "d", "d", "f", "f"]
    assert sorted(got["side"]) == [0, 1, 2, 3, 3, 4, 4]

    # test_keyed_co_broadcast_side_output
    class KeyedBroadcasting(KeyedBroadcastProcessFunction):
        def open(self, context: RuntimeContext) -> None:
            self.sum = context.get_reducing_state(
                ReducingStateDescriptor("reduce", lambda i, j: i + j, Types.INT()))

        def process_element(self, value: Any, ctx: Any) -> Any:
            self.sum.add(value[1])
            yield value[0]
            yield SIDE, self.sum.get()

        def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
            yield value[1]
            yield SIDE, value[0]

    env = _env(2)
    rules = env.from_collection([(5, "c"), (6, "d")],
                                type_info=Types.ROW([Types.INT(), Types.STRING()]))
    stream = env.from_collection([("a", 0), ("b", 1), ("a", 2), ("b", 3)], type_info=PAIRS) \
        .key_by(lambda e: e[0]).connect(rules.broadcast(descriptor)).process(
            KeyedBroadcasting(), output_type=Types.STRING())
    got = _collect(main=stream, side=stream.get_side_output(SIDE))
    assert sorted(got["main"]) == ["a", "a", "b", "b", "c", "c", "d", "d"]
    assert sorted(got["side"]) == [0, 1, 2, 4, 5, 5, 6, 6]


# -- declared types ----------------------------------------------------------------------------

def test_declared_types_of_pyflinks_tests() -> None:
    # test_from_collection_with_data_types: Java stores 43878 as a short (-21658) and
    # 9147483648 as an int (557549056); a BigDecimal keeps its digits and its scale.
    row_type = Types.ROW([Types.LONG(), Types.LONG(), Types.SHORT(), Types.BOOLEAN(),
                          Types.SHORT(), Types.INT(), Types.FLOAT(), Types.DOUBLE(),
                          Types.STRING(), Types.SQL_DATE(), Types.SQL_TIME(),
                          Types.SQL_TIMESTAMP(), Types.BIG_DEC(), Types.BIG_DEC()])
    records = [(1, None, 1, True, 32767, -2147483648, 1.23, 1.98932, "pyflink",
                datetime.date(2014, 9, 13), datetime.time(12, 0, 0, 123000),
                datetime.datetime(2018, 3, 11, 3, 0, 0, 123000), D("1000000000000000000.05"),
                D("1000000000000000000.05999999999999999899999999999")),
               (2, None, 2, True, 43878, 9147483648, 9.87, 2.98936, "pyflink",
                datetime.date(2015, 10, 14), datetime.time(11, 2, 2, 234500),
                datetime.datetime(2020, 4, 15, 8, 2, 6, 235000), D("2000000000000000000.74"),
                D("2000000000000000000.06111111111111111111111111111"))]
    env = _env(2)
    declared = env.from_collection(records, type_info=row_type)
    got = _collect(chained=declared.map(lambda r: r, output_type=row_type),
                   exchanged=declared.rebalance().map(lambda r: r, output_type=row_type))
    expected = sorted([
        "+I[1, null, 1, true, 32767, -2147483648, 1.23, 1.98932, pyflink, 2014-09-13, "
        "12:00:00, 2018-03-11 03:00:00.123, "
        "1000000000000000000.05, 1000000000000000000.05999999999999999899999999999]",
        "+I[2, null, 2, true, -21658, 557549056, 9.87, 2.98936, pyflink, 2015-10-14, "
        "11:02:02, 2020-04-15 08:02:06.235, "
        "2000000000000000000.74, 2000000000000000000.06111111111111111111111111111]"])
    assert _printed(got["chained"], row_type) == _printed(got["exchanged"], row_type) == expected
    # The values a function sees: a FLOAT is the 32-bit float Java stores.
    second = next(r for r in got["chained"] if r[0] == 2)
    assert (second[4], second[5], second[6]) == (-21658, 557549056, 9.869999885559082)

    # test_basic_operations: a BIG_DEC nested in a tuple, then in a declared row.
    source_type = Types.TUPLE([Types.STRING(), Types.ROW([Types.STRING(), Types.BIG_DEC()])])
    three = Types.TUPLE([Types.STRING(), Types.INT(), Types.BIG_DEC()])
    out_type = Types.ROW([Types.STRING(), Types.INT(), Types.BIG_DEC()])

    class Bump(MapFunction):
        def map(self, value: Any) -> Any:
            return Row(value[0], value[1] + 1, value[2])

    class Even(FlatMapFunction):
        def flat_map(self, value: Any) -> Any:
            if value[1] % 2 == 0:
                yield value

    class Long(FilterFunction):
        def filter(self, value: Any) -> bool:
            return bool(value[1] > 2)

    stream = (_env(2).from_collection(
        [("ab", Row("a", D(1))), ("bdc", Row("b", D(2))), ("cfgs", Row("c", D(3))),
         ("deeefg", Row("d", D(4)))], type_info=source_type)
        .map(lambda i: (i[0], len(i[0]), i[1][1]), output_type=three)
        .flat_map(Even(), output_type=three).filter(Long())
        .map(Bump(), output_type=out_type))
    assert _printed(list(stream.execute_and_collect()), out_type) == [
        "+I[cfgs, 5, 3]", "+I[deeefg, 7, 4]"]

    # test_collection_type_info
    collection_type = Types.ROW([Types.INT(), Types.PRIMITIVE_ARRAY(Types.FLOAT()),
                                 Types.BASIC_ARRAY(Types.STRING()), Types.SQL_DATE(),
                                 Types.SQL_TIME(), Types.SQL_TIMESTAMP(),
                                 Types.LIST(Types.INT())])
    stream = _env().from_collection(
        [(1, [1.1, 1.2, 1.30], [None, "hi", "flink"], datetime.date(2021, 1, 9),
          datetime.time(12, 0, 0), datetime.datetime(2021, 1, 9, 12, 0, 0, 11000), [1, 2, 3])],
        type_info=collection_type).map(lambda x: x, output_type=collection_type)
    assert _printed(list(stream.execute_and_collect()), collection_type) == [
        "+I[1, [1.1, 1.2, 1.3], [null, hi, flink], 2021-01-09, 12:00:00, "
        "2021-01-09 12:00:00.011, [1, 2, 3]]"]


# -- keyed functions and state -----------------------------------------------------------------

def test_keyed_functions_and_state_of_pyflinks_tests() -> None:
    words = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello")]
    pair = Types.TUPLE([Types.INT(), Types.STRING()])
    expected_sums = sorted(["(1,hi)", "(2,hello)", "(4,hi)", "(6,hello)", "(9,hi)",
                            "(12,hello)"])

    # test_reducing_state
    class Reducing(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.state = runtime_context.get_reducing_state(
                ReducingStateDescriptor("reducing_state", lambda i, i2: i + i2, Types.INT()))

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
            self.state.add(value[0])
            yield self.state.get(), value[1]

    # test_aggregating_state, with a TTL
    class Adding(AggregateFunction):
        def create_accumulator(self) -> int:
            return 0

        def add(self, value: int, accumulator: int) -> int:
            return value + accumulator

        def get_result(self, accumulator: int) -> int:
            return accumulator

        def merge(self, acc_a: int, acc_b: int) -> int:
            return acc_a + acc_b

    class Aggregating(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            descriptor = AggregatingStateDescriptor("aggregating_state", Adding(), Types.INT())
            descriptor.enable_time_to_live(
                StateTtlConfig.new_builder(Time.seconds(1))
                .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
                .disable_cleanup_in_background().build())
            self.state = runtime_context.get_aggregating_state(descriptor)

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
            self.state.add(value[0])
            yield self.state.get(), value[1]

    env = _env(2)
    source = env.from_collection(words, type_info=pair)
    got = _collect(
        reducing=source.key_by(lambda x: x[1], key_type=Types.STRING()).process(
            Reducing(), output_type=pair),
        aggregating=source.key_by(lambda x: x[1], key_type=Types.STRING()).process(
            Aggregating(), output_type=pair))
    assert _printed(got["reducing"], pair) == _printed(got["aggregating"], pair) == expected_sums

    # test_keyed_process_function_with_state: value, list and map state (with a TTL)
    class Stateful(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.value_state = runtime_context.get_state(
                ValueStateDescriptor("value_state", Types.INT()))
            self.list_state = runtime_context.get_list_state(
                ListStateDescriptor("list_state", Types.INT()))
            descriptor = MapStateDescriptor("map_state", Types.INT(), Types.STRING())
            descriptor.enable_time_to_live(
                StateTtlConfig.new_builder(Time.seconds(1))
                .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
                .set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
                .disable_cleanup_in_background().build())
            self.map_state = runtime_context.get_map_state(descriptor)

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
            current_value = self.value_state.value()
            self.value_state.update(value[0])
            current_list = list(self.list_state.get())
            self.list_state.add(value[0])
            entries = dict(self.map_state.items())
            shown = "{" + ", ".join(f"{k}: {entries[k]}" for k in sorted(entries)) + "}"
            self.map_state.put(value[0], value[1])
            yield (f"current key: {ctx.get_current_key()}, current value state: "
                   f"{current_value}, current list state: {current_list}, current map "
                   f"state: {shown}, current value: {value}")

    timed = [(1, "hi", "1603708211000"), (2, "hello", "1603708224000"),
             (3, "hi", "1603708226000"), (4, "hello", "1603708289000"),
             (5, "hi", "1603708291000"), (6, "hello", "1603708293000")]

    class ThirdColumn(TimestampAssigner):
        def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
            return int(value[2])

    env = _env()
    env.get_config().set_auto_watermark_interval(2000)
    stream = env.from_collection(timed, type_info=Types.ROW(
        [Types.INT(), Types.STRING(), Types.STRING()])).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ThirdColumn())) \
        .key_by(lambda x: x[1], key_type=Types.STRING()) \
        .process(Stateful(), output_type=Types.STRING())
    expected = []
    seen: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for n, word, ts in timed:
        before = seen[word]
        last = before[-1][0] if before else None
        shown = "{" + ", ".join(f"{k}: {w}" for k, w in before) + "}"
        expected.append(f"current key: {word}, current value state: {last}, current list "
                        f"state: {[k for k, _ in before]}, current map state: {shown}, "
                        f"current value: Row(f0={n}, f1='{word}', f2='{ts}')")
        before.append((n, word))
    assert sorted(stream.execute_and_collect()) == sorted(expected)
    assert "current value: Row(f0=1, f1='hi', f2='1603708211000')" in expected[0]

    # test_process_function: ctx.timestamp() of each record
    class WithTimestamp(ProcessFunction):
        def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
            yield f"current timestamp: {ctx.timestamp()}, current_value: {value}"

    rows = [(1, "1603708211000"), (2, "1603708224000"), (3, "1603708226000"),
            (4, "1603708289000")]
    stream = _env().from_collection(rows, type_info=PAIRS_BY_TIME) \
        .assign_timestamps_and_watermarks(_by_second_column()) \
        .process(WithTimestamp(), output_type=Types.STRING())
    assert sorted(stream.execute_and_collect()) == sorted(
        f"current timestamp: {ts}, current_value: Row(f0={n}, f1='{ts}')" for n, ts in rows)


PAIRS_BY_TIME = Types.ROW([Types.INT(), Types.STRING()])


def test_keyed_aggregations_and_connected_streams_of_pyflinks_tests() -> None:
    env = _env()
    # test_keyed_sum (streaming)
    sums = env.from_collection(
        [(1, 1), (1, 2), (1, 3), (2, 5), (2, 1)],
        type_info=Types.ROW_NAMED(["v1", "v2"], [Types.INT(), Types.INT()])) \
        .key_by(lambda x: x[0]).sum("v2").key_by(lambda x: x[0]).sum(1) \
        .map(lambda x: (x[1], x[0]), output_type=Types.TUPLE([Types.INT(), Types.INT()])) \
        .key_by(lambda x: x[1]).sum()
    # test_keyed_min_by_and_max (streaming)
    extremes = env.from_collection(
        [("a", 3, 0), ("a", 1, 1), ("b", 5, 0), ("b", 3, 1)],
        type_info=Types.ROW_NAMED(["v1", "v2", "v3"],
                                  [Types.STRING(), Types.INT(), Types.INT()])) \
        .key_by(lambda x: x[0]).min_by("v2") \
        .map(lambda x: (x[0], x[1], x[2]),
             output_type=Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()])) \
        .key_by(lambda x: x[2]).max(1).key_by(lambda x: x[2]).min() \
        .map(lambda x: x[0], output_type=Types.STRING()).key_by(lambda x: x).max_by()

    # test_reduce_with_state: a ReduceFunction with keyed state of its own
    class Concat(ReduceFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.state = runtime_context.get_state(
                ValueStateDescriptor("test_state", Types.INT()))

        def reduce(self, value1: Any, value2: Any) -> Any:
            count = self.state.value()
            count = 2 if count is None else count + 1
            result = Row(value1[0] + value2[0], value1[1])
            assert result[0] != "ab" or count == 2
            assert result[0] != "cde" or count == 3
            self.state.update(count)
            return result

    reduced = env.from_collection([("a", 0), ("c", 1), ("d", 1), ("b", 0), ("e", 1)],
                                  type_info=PAIRS).key_by(SecondField(), key_type=Types.INT()) \
        .reduce(Concat())

    # test_keyed_co_process: event-time timer at 3 from the first input
    class Counting(KeyedCoProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.timer_registered = False
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

        def _next(self, key: str) -> list[Row]:
            count = (self.count.value() or 0) + 1
            self.count.update(count)
            return [Row(key, count)]

        def process_element1(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Any:
            if not self.timer_registered:
                ctx.timer_service().register_event_time_timer(3)
                self.timer_registered = True
            return self._next(value[0])

        def process_element2(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Any:
            return self._next(value[0])

        def on_timer(self, timestamp: int, ctx: Any) -> Any:
            return [Row("on_timer", timestamp)]

    left = env.from_collection([("a", 1), ("b", 2), ("c", 3)], type_info=PAIRS) \
        .assign_timestamps_and_watermarks(_by_second_column())
    right = env.from_collection([("b", 2), ("c", 3), ("d", 4)], type_info=PAIRS) \
        .assign_timestamps_and_watermarks(_by_second_column())
    co_processed = left.connect(right).key_by(lambda x: x[0], lambda x: x[0]) \
        .process(Counting()).map(lambda x: Row(x[0], x[1] + 1))

    # test_basic_co_operations (without the python file)
    class PlusMinus(CoFlatMapFunction):
        def flat_map1(self, value: int) -> Any:
            yield value + 1

        def flat_map2(self, value: int) -> Any:
            yield value - 1

    class PlusTwoPlusOne(CoMapFunction):
        def map1(self, value: int) -> int:
            return value + 2

        def map2(self, value: int) -> int:
            return value + 1

    ones = env.from_collection([1, 2, 3, 4, 5])
    doubled = ones.map(lambda x: x * 2)
    co_mapped = ones.connect(doubled).flat_map(PlusMinus()).connect(doubled).map(
        PlusTwoPlusOne())

    got = _collect(sums=sums, extremes=extremes, reduced=reduced, co_processed=co_processed,
                   co_mapped=co_mapped)
    assert _printed(got["sums"], Types.TUPLE([Types.INT(), Types.INT()])) == sorted(
        ["(1,1)", "(5,1)", "(15,1)", "(5,2)", "(16,2)"])
    assert got["extremes"] == ["a", "a", "a", "a"]
    assert _printed(got["reduced"], PAIRS) == sorted(
        ["+I[a, 0]", "+I[ab, 0]", "+I[c, 1]", "+I[cd, 1]", "+I[cde, 1]"])
    assert sorted(tuple(r) for r in got["co_processed"]) == sorted(
        [("a", 2), ("b", 2), ("b", 3), ("c", 2), ("c", 3), ("d", 2), ("on_timer", 4)])
    assert sorted(got["co_mapped"]) == sorted(
        [4, 5, 6, 7, 8, 3, 5, 7, 9, 11, 3, 5, 7, 9, 11])

    # test_co_broadcast_process: records wait for their rule
    class Rules(BroadcastProcessFunction):
        def __init__(self, descriptor: MapStateDescriptor) -> None:
            self.descriptor = descriptor
            self.waiting: dict[int, list[int]] = defaultdict(list)

        def process_element(self, value: int, ctx: Any) -> Any:
            rules = ctx.get_broadcast_state(self.descriptor)
            key = value % 2
            if rules.contains(key):
                for v in self.waiting.pop(key, []):
                    yield rules.get(key) + str(v)
                yield rules.get(key) + str(value)
            else:
                self.waiting[key].append(value)

        def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
            key = value[0]
            yield str(key) + value[1]
            ctx.get_broadcast_state(self.descriptor).put(key, value[1])
            for v in self.waiting.pop(key, []):
                yield value[1] + str(v)

    env = _env(2)
    descriptor = MapStateDescriptor("mapping", key_type_info=Types.INT(),
                                    value_type_info=Types.STRING())
    rules = env.from_collection([(0, "a"), (1, "b")],
                                type_info=Types.TUPLE([Types.INT(), Types.STRING()]))
    stream = env.from_collection([1, 2, 3, 4, 5], type_info=Types.INT()).connect(
        rules.broadcast(descriptor)).process(Rules(descriptor), output_type=Types.STRING())
    assert sorted(stream.execute_and_collect()) == [
        "0a", "0a", "1b", "1b", "a2", "a4", "b1", "b3", "b5"]


# -- windows (pyflink/datastream/tests/test_window.py) -----------------------------------------

class CountPerWindow(ProcessWindowFunction[tuple, tuple, str, CountWindow]):
    def process(self, key: str, context: ProcessWindowFunction.Context,
                elements: Iterable[tuple]) -> Iterable[tuple]:
        return [(key, len(list(elements)))]

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        pass


class SumFirstField(WindowFunction[tuple, tuple, str, CountWindow]):
    def apply(self, key: str, window: CountWindow, inputs: Iterable[tuple]) -> Iterable[tuple]:
        return [(key, sum(i[0] for i in inputs))]


class GapFromRecord(SessionWindowTimeGapExtractor):
    def extract(self, element: tuple) -> int:
        return int(element[1])


def test_windows_of_pyflinks_tests() -> None:
    env = _env()
    by_time = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 5), ("hi", 8), ("hi", 9),
               ("hi", 15)]
    word_int = Types.TUPLE([Types.STRING(), Types.INT()])
    int_word = Types.TUPLE([Types.INT(), Types.STRING()])

    def keyed_by_time(records: list[tuple[str, int]]) -> Any:
        return env.from_collection(records, type_info=word_int) \
            .assign_timestamps_and_watermarks(_by_second_column()) \
            .key_by(lambda x: x[0], key_type=Types.STRING())

    counted = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello")]
    session_records = [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 8), ("hi", 9),
                       ("hi", 15)]
    got = _collect(
        tumbling=keyed_by_time(by_time).window(TumblingEventTimeWindows.of(
            Time.milliseconds(5))).process(CountPerWindow(), word_int),
        sliding=keyed_by_time(by_time).window(SlidingEventTimeWindows.of(
            Time.milliseconds(5), Time.milliseconds(2))).process(CountPerWindow(), word_int),
        session=keyed_by_time(session_records).window(EventTimeSessionWindows.with_gap(
            Time.milliseconds(5))).process(CountPerWindow(), word_int),
        dynamic=keyed_by_time([("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 9),
                               ("hi", 9), ("hi", 15)]).window(
            EventTimeSessionWindows.with_dynamic_gap(GapFromRecord())).process(
            CountPerWindow(), word_int),
        count_tumbling=env.from_collection([*counted, (6, "hello")], type_info=int_word)
        .key_by(lambda x: x[1], key_type=Types.STRING()).count_window(3)
        .apply(SumFirstField(), word_int),
        count_sliding=env.from_collection(counted, type_info=int_word)
        .key_by(lambda x: x[1], key_type=Types.STRING())
        .window(CountSlidingWindowAssigner(2, 1)).apply(SumFirstField(), word_int))
    expected = {
        "tumbling": ["(hi,4)", "(hi,3)", "(hi,1)"],
        "sliding": ["(hi,2)", "(hi,4)", "(hi,4)", "(hi,3)", "(hi,2)", "(hi,2)", "(hi,1)",
                    "(hi,1)"],
        "session": ["(hi,1)", "(hi,6)"],
        "dynamic": ["(hi,3)", "(hi,4)"],
        "count_tumbling": ["(hi,9)", "(hello,12)"],
        "count_sliding": ["(hello,6)", "(hi,8)", "(hi,4)", "(hello,10)"],
    }
    assert {name: _printed(values, word_int) for name, values in got.items()} == {
        name: sorted(values) for name, values in expected.items()}
