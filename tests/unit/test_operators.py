"""Operators driven directly: an OperatorContext and an Output that collects what is emitted."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.operators import CollectingOutput, running_aggregate_reference
from weir.core.errors import StateError
from weir.core.records import Elements, records_to_arrow
from weir.core.row import Row
from weir.core.types import Types
from weir.datastream.functions import (
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
)
from weir.datastream.state import ValueStateDescriptor
from weir.operators.basic import (
    FilterBatchesOperator,
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    ProcessOperator,
)
from weir.operators.keyed import (
    FieldAggregateOperator,
    KeyedProcessOperator,
    ReduceOperator,
    replace_field,
)
from weir.operators.keys import FieldKeySpec, FunctionKeySpec
from weir.operators.vectorized import VectorizedAggregateOperator, running_aggregate
from weir.taskexecutor.operator import OperatorContext, StreamOperator

FAST = settings(max_examples=50, deadline=None)


def opened(operator: StreamOperator, subtask_index: int = 0,
           parallelism: int = 1) -> CollectingOutput:
    out = CollectingOutput()
    operator.setup(OperatorContext("task", subtask_index, parallelism, 128), out)
    operator.open()
    return out


def run(operator: StreamOperator, *batches: list) -> list:
    out = opened(operator)
    for batch in batches:
        operator.process(Elements.from_records(batch))
    operator.finish()
    operator.close()
    return out.records


# --- stateless per-record operators --------------------------------------------------------


def test_map() -> None:
    assert run(MapOperator("Map", lambda x: x * 2), [1, 2], [3]) == [2, 4, 6]


def test_map_with_declared_output_type() -> None:
    op = MapOperator("Map", lambda x: (str(x), x), Types.TUPLE([Types.STRING(), Types.INT()]))
    out = opened(op)
    op.process(Elements.from_records([1, 2]))
    (batch,) = out.batches
    assert batch.arrow().schema.types == [pa.string(), pa.int32()]
    assert batch.records() == [("1", 1), ("2", 2)]


def test_rich_functions_are_opened_and_closed() -> None:
    events = []

    class Scale(MapFunction):
        def open(self, runtime_context):
            events.append(("open", runtime_context.get_index_of_this_subtask(),
                           runtime_context.get_number_of_parallel_subtasks(),
                           runtime_context.get_max_number_of_parallel_subtasks(),
                           runtime_context.get_task_name()))
            self.factor = 10

        def map(self, value):
            return value * self.factor

        def close(self):
            events.append(("close",))

    op = MapOperator("Map", Scale())
    out = opened(op, subtask_index=2, parallelism=3)
    op.process(Elements.from_records([1, 2]))
    op.close()
    assert out.records == [10, 20]
    assert events == [("open", 2, 3, 128, "task"), ("close",)]


def test_flat_map() -> None:
    def split(line):
        if line:
            yield from line.split()

    assert run(FlatMapOperator("Flat Map", split), ["a b", ""], ["c"]) == ["a", "b", "c"]


def test_flat_map_function_returning_none_emits_nothing() -> None:
    class Nothing(FlatMapFunction):
        def flat_map(self, value):
            return None

    op = FlatMapOperator("Flat Map", Nothing())
    out = opened(op)
    op.process(Elements.from_records([1, 2]))
    assert out.batches == []


def test_filter() -> None:
    assert run(FilterOperator("Filter", lambda x: x % 2), [1, 2, 3, 4], [6]) == [1, 3]


def test_filter_keeping_everything_passes_the_batch_on_unchanged() -> None:
    class Positive(FilterFunction):
        def filter(self, value):
            return value > 0

    op = FilterOperator("Filter", Positive())
    out = opened(op)
    batch = Elements.from_arrow(records_to_arrow([1, 2, 3]))
    op.process(batch)
    op.process(Elements.from_records([-1, -2]))
    assert len(out.batches) == 1
    assert out.batches[0] is batch


def test_process_function() -> None:
    class Repeat(ProcessFunction):
        def process_element(self, value, ctx):
            return [value] * value

    assert run(ProcessOperator("Process", Repeat()), [1, 2, 0]) == [1, 2, 2]
    assert run(ProcessOperator("Process", lambda v, ctx: [v, -v]), [3]) == [3, -3]


def test_non_callables_are_rejected_when_the_operator_is_built() -> None:
    for cls in (MapOperator, FlatMapOperator, FilterOperator, ProcessOperator):
        with pytest.raises(TypeError, match=r"expected a callable"):
            cls("op", "not a function")


# --- keyed per-record operators ------------------------------------------------------------


def test_reduce_emits_the_running_value_per_key() -> None:
    records = [("a", 1), ("b", 10), ("a", 2), ("c", 5)]
    more = [("b", 20), ("a", 3)]
    op = ReduceOperator("Reduce", FunctionKeySpec(lambda r: r[0]),
                        lambda x, y: (x[0], x[1] + y[1]))
    assert run(op, records, more) == [("a", 1), ("b", 10), ("a", 3), ("c", 5),
                                      ("b", 30), ("a", 6)]


def test_reduce_function_object() -> None:
    class Longest(ReduceFunction):
        def reduce(self, value1, value2):
            return value1 if len(value1) >= len(value2) else value2

    op = ReduceOperator("Reduce", FunctionKeySpec(lambda s: s[0]), Longest())
    assert run(op, ["ab", "abc", "b", "a"], ["bcd"]) == ["ab", "abc", "b", "abc", "bcd"]


def reference_field_aggregate(records, key, field, kind):
    """Flink's sum/min/max by position/name: only the field changes, the rest is the first."""
    first, total, out = {}, {}, []
    fn = {"sum": lambda a, b: a + b, "min": min, "max": max}[kind]
    for r in records:
        k = key(r)
        total[k] = r[field] if k not in total else fn(total[k], r[field])
        first.setdefault(k, r)
        out.append((k, total[k], first[k]))
    return out


@pytest.mark.parametrize("kind", ["sum", "min", "max"])
def test_field_aggregation_on_tuples(kind) -> None:
    records = [("a", 3, "x"), ("b", 1, "y"), ("a", 5, "z"), ("a", 1, "w"), ("b", 4, "v")]
    op = FieldAggregateOperator("Agg", FieldKeySpec(0), kind, 1)
    got = run(op, records[:3], records[3:])
    expected = reference_field_aggregate(records, lambda r: r[0], 1, kind)
    assert got == [(k, total, first[2]) for k, total, first in expected]
    assert all(type(r) is tuple for r in got)


@pytest.mark.parametrize("kind", ["sum", "min", "max"])
def test_field_aggregation_on_rows(kind) -> None:
    records = [Row(user="u", amount=2.5, tag="first"), Row(user="v", amount=1.0, tag="v"),
               Row(user="u", amount=-1.0, tag="second"), Row(user="u", amount=4.0, tag="x")]
    op = FieldAggregateOperator("Agg", FieldKeySpec("user"), kind, "amount")
    got = run(op, records)
    expected = reference_field_aggregate(records, lambda r: r.user, "amount", kind)
    assert [(r.user, r.amount, r.tag) for r in got] == [
        (k, total, first.tag) for k, total, first in expected]
    assert all(r._fields == ("user", "amount", "tag") for r in got)


def test_field_aggregation_on_dicts_and_scalars() -> None:
    dicts = [{"k": "a", "n": 1}, {"k": "a", "n": 2}]
    op = FieldAggregateOperator("Agg", FieldKeySpec("k"), "sum", "n")
    assert run(op, dicts) == [{"k": "a", "n": 1}, {"k": "a", "n": 3}]
    op = FieldAggregateOperator("Agg", FunctionKeySpec(lambda x: x % 2), "max", 0)
    assert run(op, [3, 4, 1, 9, 2]) == [3, 4, 3, 9, 4]


def test_field_aggregation_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match=r"unknown aggregation"):
        FieldAggregateOperator("Agg", FieldKeySpec(0), "avg", 1)


def test_replace_field() -> None:
    assert replace_field((1, 2, 3), 1, 9) == (1, 9, 3)
    row = replace_field(Row(a=1, b=2), "b", 5)
    assert (row.a, row.b) == (1, 5)
    assert replace_field(Row(1, 2), 0, 7) == Row(7, 2)
    assert replace_field({"a": 1}, "a", 2) == {"a": 2}
    assert replace_field(5, 0, 6) == 6
    with pytest.raises(TypeError, match=r"cannot aggregate field 'x'"):
        replace_field(5, "x", 6)


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.last = runtime_context.get_state(ValueStateDescriptor("last"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        previous = self.last.value()
        if value == "reset":
            self.last.clear()
        else:
            self.last.update(value)
        yield ctx.get_current_key(), n, previous


def test_keyed_process_function_with_value_state() -> None:
    records = [("a", "x"), ("b", "y"), ("a", "z")]
    more = [("a", "reset"), ("a", "q"), ("b", "w")]
    op = KeyedProcessOperator("Process", FieldKeySpec(0), _Adapter(CountPerKey()))
    assert run(op, records, more) == [
        ("a", 1, None), ("b", 1, None), ("a", 2, "x"),
        ("a", 3, "z"), ("a", 4, None), ("b", 2, "y")]


class _Adapter(KeyedProcessFunction):
    """Feeds the second field of each (key, value) record to the wrapped function."""

    def __init__(self, inner):
        self.inner = inner

    def open(self, runtime_context):
        self.inner.open(runtime_context)

    def process_element(self, value, ctx):
        return self.inner.process_element(value[1], ctx)


def test_keyed_process_accepts_a_plain_function() -> None:
    op = KeyedProcessOperator("Process", FunctionKeySpec(lambda x: x % 3),
                              lambda value, ctx: [(ctx.get_current_key(), value)])
    assert run(op, [4, 5, 6]) == [(1, 4), (2, 5), (0, 6)]


def test_state_needs_a_keyed_stream() -> None:
    class Stateful(MapFunction):
        def open(self, runtime_context):
            runtime_context.get_state(ValueStateDescriptor("s"))

        def map(self, value):
            return value

    with pytest.raises(StateError, match=r"key_by"):
        opened(MapOperator("Map", Stateful()))


# --- vectorised operators -------------------------------------------------------------------


def test_map_batches() -> None:
    def double(batch):
        return pa.record_batch({"x": pc.multiply(batch.column("x"), 2)})

    op = MapBatchesOperator("Map Batches", double)
    out = opened(op)
    op.process(Elements.from_arrow(pa.record_batch({"x": [1, 2]})))
    op.process(Elements.from_records([Row(x=5)]))
    assert [r.x for r in out.records] == [2, 4, 10]
    assert all(b.is_arrow for b in out.batches)


def test_map_batches_returning_tables_and_nothing() -> None:
    table = pa.Table.from_batches([pa.record_batch({"y": [1]}), pa.record_batch({"y": [2, 3]}),
                                   pa.record_batch({"y": pa.array([], pa.int64())})])
    results = iter([table, None])
    op = MapBatchesOperator("Map Batches", lambda batch: next(results))
    out = opened(op)
    op.process(Elements.from_records([1]))
    op.process(Elements.from_records([1]))
    assert [len(b) for b in out.batches] == [1, 2]  # empty batches are not passed on


def test_map_batches_must_return_arrow() -> None:
    op = MapBatchesOperator("Bad Batches", lambda batch: [1, 2])
    opened(op)
    with pytest.raises(TypeError, match=r"'Bad Batches' must return a pyarrow.*got list"):
        op.process(Elements.from_records([1]))


def test_filter_batches() -> None:
    op = FilterBatchesOperator("Filter Batches", lambda b: pc.greater(b.column("f0"), 2))
    out = opened(op)
    op.process(Elements.from_records([1, 5, 2, 7]))
    op.process(Elements.from_records([0]))
    assert out.records == [5, 7]
    assert len(out.batches) == 1
    op2 = FilterBatchesOperator("Filter Batches", lambda b: [True, False, True])
    out2 = opened(op2)
    op2.process(Elements.from_records(["a", "b", "c"]))
    assert out2.records == ["a", "c"]


# --- running_aggregate against a per-record reference ------------------------------------




keys = st.sampled_from(["a", "b", "c", "dd", "", None])
ints = st.one_of(st.none(), st.integers(-(2**40), 2**40))
floats = st.one_of(st.none(), st.floats(-1e300, 1e300, allow_nan=False))


def batches_of(values):
    return st.lists(st.lists(st.tuples(keys, values), min_size=1, max_size=25),
                    min_size=1, max_size=4)


@FAST
@given(st.sampled_from(["count", "sum", "min", "max"]),
       st.one_of(batches_of(ints).map(lambda b: (pa.int64(), b)),
                 batches_of(floats).map(lambda b: (pa.float64(), b))))
def test_running_aggregate_matches_record_by_record(kind, typed_batches) -> None:
    value_type, batches = typed_batches
    state: dict = {}
    expected_state: dict = {}
    for rows in batches:
        batch = pa.record_batch({
            "k": pa.array([k for k, _ in rows], pa.string()),
            "v": pa.array([v for _, v in rows], value_type)})
        result = running_aggregate(batch, "k", kind, None if kind == "count" else "v", state)
        out_name = "count" if kind == "count" else "v"
        assert result.schema.names == ["k", out_name]
        got = list(zip(result.column(0).to_pylist(), result.column(1).to_pylist(),
                       strict=True))
        assert got == running_aggregate_reference(rows, kind, expected_state)
        assert state == expected_state


def test_running_aggregate_of_floats_is_exact_per_key() -> None:
    # Each key's sum must not depend on the other keys' values in the batch.
    state: dict = {}
    batch = pa.record_batch({"k": ["big", "small", "small"], "v": [1e17, 1.0, 2.0]})
    result = running_aggregate(batch, "k", "sum", "v", state)
    assert result.column(1).to_pylist() == [1e17, 1.0, 3.0]


def test_running_min_with_nulls_never_borrows_other_keys_values() -> None:
    state = {"b": 100}
    batch = pa.record_batch({"k": ["a", "b", "c"], "v": [5, None, None]})
    result = running_aggregate(batch, "k", "min", "v", state)
    assert result.column(1).to_pylist() == [5, 100, None]
    assert state == {"a": 5, "b": 100}
    assert result.column(1).type == pa.int64()


def test_vectorized_aggregate_operator_carries_state_across_batches() -> None:
    op = VectorizedAggregateOperator("Keyed Sum", "user", "sum", "amount")
    out = opened(op)
    op.process(Elements.from_records([Row(user="a", amount=1), Row(user="b", amount=2)]))
    op.process(Elements.from_arrow(pa.record_batch({"user": pa.array([], pa.string()),
                                                    "amount": pa.array([], pa.int64())})))
    op.process(Elements.from_records([{"user": "a", "amount": 10}]))
    assert [(r.user, r.amount) for r in out.records] == [("a", 1), ("b", 2), ("a", 11)]
    assert len(out.batches) == 2


def test_vectorized_count() -> None:
    op = VectorizedAggregateOperator("Keyed Count", "w", "count", None)
    out = opened(op)
    op.process(Elements.from_records([Row(w="x"), Row(w="y"), Row(w="x")]))
    op.process(Elements.from_records([Row(w="x")]))
    assert [(r.w, r.count) for r in out.records] == [("x", 1), ("y", 1), ("x", 2), ("x", 3)]


def test_vectorized_aggregate_of_pickled_records() -> None:
    # Mixed int/float amounts travel pickled (to keep their types); the sum still works.
    records = [{"user": "a", "amount": 1}, {"user": "a", "amount": 2.5},
               {"user": "b", "amount": 4}]
    batch = records_to_arrow(records)
    assert batch.schema.names == ["_pickled"]
    op = VectorizedAggregateOperator("Keyed Sum", "user", "sum", "amount")
    out = opened(op)
    op.process(Elements.from_arrow(batch))
    assert [(r.user, r.amount) for r in out.records] == [("a", 1.0), ("a", 3.5), ("b", 4.0)]


def test_vectorized_aggregate_with_a_missing_column() -> None:
    op = VectorizedAggregateOperator("Keyed Sum", "user", "sum", "nope")
    opened(op)
    with pytest.raises(KeyError, match=r"'Keyed Sum'.*nope.*columns: user, amount"):
        op.process(Elements.from_records([Row(user="a", amount=1)]))
    with pytest.raises(ValueError, match=r"unknown aggregation"):
        VectorizedAggregateOperator("x", "user", "avg", "amount")
