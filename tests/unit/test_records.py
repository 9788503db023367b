"""Elements and the Python <-> Arrow record encoding (weir.core.records)."""

from __future__ import annotations

import datetime
import enum
import pickle
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.core.records import ESTIMATED_RECORD_BYTES, Elements, arrow_to_records, records_to_arrow
from weir.core.row import Row
from weir.core.types import (
    KIND_DICT,
    KIND_KEY,
    KIND_PICKLE,
    KIND_ROW,
    KIND_SCALAR,
    KIND_TUPLE,
    Types,
)

FAST = settings(max_examples=60, deadline=None)

Point = namedtuple("Point", "x y")


@dataclass(frozen=True)
class Money:
    amount: int
    currency: str


class Color(enum.IntEnum):
    RED = 1
    GREEN = 2


def kind_of(batch: pa.RecordBatch) -> bytes:
    return (batch.schema.metadata or {}).get(KIND_KEY)


def round_trip(records: list) -> tuple[pa.RecordBatch, list]:
    batch = records_to_arrow(records)
    # Through IPC, as between tasks: only the schema metadata tells the kind of record.
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    received = next(iter(pa.ipc.open_stream(sink.getvalue())))
    return batch, arrow_to_records(received)


def assert_exact(got: list, expected: list) -> None:
    """Equal values *and* equal types, recursively (1 == 1.0 == True in Python)."""
    assert got == expected
    for g, e in zip(got, expected, strict=True):
        assert type(g) is type(e), (g, e)
        if isinstance(e, tuple | list):
            assert_exact(list(g), list(e))
        elif isinstance(e, dict):
            assert list(g) == list(e)
            assert_exact(list(g.values()), list(e.values()))


# --- columnar kinds -----------------------------------------------------------------------


@pytest.mark.parametrize(("records", "kind", "names"), [
    ([1, 2, 3], KIND_SCALAR, ["f0"]),
    ([1.5, -2.0], KIND_SCALAR, ["f0"]),
    (["a", "", "ü"], KIND_SCALAR, ["f0"]),
    ([b"x", b"\x00"], KIND_SCALAR, ["f0"]),
    ([True, False], KIND_SCALAR, ["f0"]),
    ([("a", 1), ("b", 2)], KIND_TUPLE, ["f0", "f1"]),
    ([("a", 1, 2.5, True)], KIND_TUPLE, ["f0", "f1", "f2", "f3"]),
    ([Row(user="u", n=1), Row(user="v", n=2)], KIND_ROW, ["user", "n"]),
    ([{"k": "a", "v": 1}, {"k": "b", "v": 2}], KIND_DICT, ["k", "v"]),
])
def test_uniform_records_become_columns(records, kind, names) -> None:
    batch, back = round_trip(records)
    assert kind_of(batch) == kind
    assert batch.schema.names == names
    assert batch.num_rows == len(records)
    assert_exact(back, records)


def test_scalar_column_has_the_arrow_type() -> None:
    assert records_to_arrow([1, 2]).schema.field("f0").type == pa.int64()
    assert records_to_arrow(["a"]).schema.field("f0").type == pa.string()
    assert records_to_arrow([1.0]).schema.field("f0").type == pa.float64()


def test_rows_come_back_named() -> None:
    _, back = round_trip([Row(user="u1", clicks=3)])
    assert back[0].user == "u1"
    assert back[0]["clicks"] == 3
    assert back[0].get_fields_by_names() == ["user", "clicks"]


def test_none_inside_a_column_survives() -> None:
    records = [("a", None), ("b", 2), (None, 3)]
    batch, back = round_trip(records)
    assert kind_of(batch) == KIND_TUPLE
    assert_exact(back, records)


def test_dict_key_order_is_kept() -> None:
    records = [{"z": 1, "a": "x"}, {"z": 2, "a": "y"}]
    _, back = round_trip(records)
    assert [list(r) for r in back] == [["z", "a"], ["z", "a"]]


def test_numpy_scalars_stay_columnar_as_python_values() -> None:
    records = [("a", np.float64(1.5), np.int64(3), np.bool_(True)), ("b", 2.0, 4, False)]
    batch, back = round_trip(records)
    assert kind_of(batch) == KIND_TUPLE
    assert batch.schema.types == [pa.string(), pa.float64(), pa.int64(), pa.bool_()]
    assert_exact(back, [("a", 1.5, 3, True), ("b", 2.0, 4, False)])


def test_timestamps_round_trip() -> None:
    when = datetime.datetime(2024, 5, 1, 12, 30, 15, 123456)
    _, back = round_trip([(when, 1)])
    assert_exact(back, [(when, 1)])


# --- pickled fallback ----------------------------------------------------------------------


@pytest.mark.parametrize("records", [
    pytest.param([None, None], id="all-none"),
    pytest.param([1, None, 3], id="scalar-with-none"),
    pytest.param([1, "a", 2.5], id="mixed-scalars"),
    pytest.param([1, True], id="int-and-bool"),
    pytest.param([(1,), (1.5,)], id="int-and-float-in-a-column"),
    pytest.param([("a",), (b"b",)], id="str-and-bytes-in-a-column"),
    pytest.param([Row(a=1, b=2.0), Row(a=2.5, b=1)], id="row-mixed-column"),
    pytest.param([{"a": 1}, {"b": 2}], id="dicts-different-keys"),
    pytest.param([{"a": 1, "b": 2}, {"b": 3, "a": 4}], id="dicts-different-order"),
    pytest.param([{"a": 1}, {"a": 2.5}], id="dicts-mixed-values"),
    pytest.param([{1: "a"}, {2: "b"}], id="dicts-int-keys"),
    pytest.param([("a", 1), ("b", 2, 3)], id="tuples-different-lengths"),
    pytest.param([(), ()], id="empty-tuples"),
    pytest.param([(1, [1, 2]), (2, [3])], id="nested-list"),
    pytest.param([(1, (2, 3))], id="nested-tuple"),
    pytest.param([{"k": {"x": 1}}], id="nested-dict"),
    pytest.param([[1, 2], [3]], id="lists"),
    pytest.param([Row(1, 2), Row(3, 4)], id="positional-rows"),
    pytest.param([Row(a=1), Row(b=1)], id="rows-different-fields"),
    pytest.param([("a", None), ("b", None)], id="column-all-none"),
    pytest.param([2**70, 1], id="int-beyond-64-bits"),
    pytest.param([Point(1, 2), Point(3, 4)], id="namedtuples"),
    pytest.param([Color.RED, Color.GREEN], id="int-enums"),
    pytest.param([(Color.RED, 1)], id="int-enum-in-a-tuple"),
    pytest.param([frozenset({1}), Money(3, "EUR")], id="objects"),
])
def test_values_arrow_cannot_keep_exactly_are_pickled(records) -> None:
    batch, back = round_trip(records)
    assert kind_of(batch) == KIND_PICKLE
    assert batch.schema.names == ["_pickled"]
    assert_exact(back, records)


def test_namedtuples_keep_their_type() -> None:
    _, back = round_trip([Point(1, 2)])
    assert back[0].x == 1
    assert type(back[0]) is Point


def test_pickled_values_are_cloudpickled() -> None:
    # Lambdas are not picklable with the standard pickler; cloudpickle handles them.
    batch = records_to_arrow([lambda x: x + 1])
    fn = arrow_to_records(batch)[0]
    assert fn(1) == 2


def test_empty_list_round_trips() -> None:
    batch, back = round_trip([])
    assert batch.num_rows == 0
    assert back == []


def test_batch_without_metadata_reads_as_rows() -> None:
    batch = pa.record_batch({"user": ["a", "b"], "n": [1, 2]})
    back = arrow_to_records(batch)
    assert all(type(r) is Row for r in back)
    assert [r.as_dict() for r in back] == [{"user": "a", "n": 1}, {"user": "b", "n": 2}]


def test_batch_without_columns_reads_as_empty_rows() -> None:
    batch = pa.RecordBatch.from_pydict({"x": [1, 2, 3]}).select([])
    assert arrow_to_records(batch) == [(), (), ()]


scalars = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False),
                    st.text(max_size=5), st.binary(max_size=5), st.booleans(), st.none())
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=6)


@FAST
@given(st.one_of(
    st.lists(values, max_size=6),
    st.lists(st.tuples(scalars, scalars), max_size=6),
    st.lists(st.fixed_dictionaries({"a": scalars, "b": scalars}), max_size=6),
    st.lists(st.builds(lambda a, b: Row(a=a, b=b), scalars, scalars), max_size=6),
))
def test_any_records_round_trip_exactly(records) -> None:
    _, back = round_trip(records)
    assert_exact(back, records)


# --- Elements ------------------------------------------------------------------------------


def test_elements_convert_lazily_and_cache() -> None:
    records = [("a", 1), ("b", 2)]
    e = Elements.from_records(records)
    assert not e.is_arrow
    assert len(e) == 2
    assert e.estimated_bytes() == 2 * ESTIMATED_RECORD_BYTES
    batch = e.arrow()
    assert e.is_arrow
    assert e.arrow() is batch
    assert e.records() is records  # the Python form is kept, not rebuilt
    assert e.estimated_bytes() == batch.nbytes


def test_elements_from_arrow_decode_once() -> None:
    batch = records_to_arrow([1, 2, 3])
    e = Elements.from_arrow(batch)
    assert e.is_arrow
    assert len(e) == 3
    first = e.records()
    assert first == [1, 2, 3]
    assert e.records() is first
    assert e.arrow() is batch
    assert "3 arrow" in repr(e)
    assert "2 records" in repr(Elements.from_records([1, 2]))


# --- declared types ------------------------------------------------------------------------


def test_declared_scalar_type_is_used() -> None:
    batch = Elements.from_records([1, 2], Types.INT()).arrow()
    assert batch.schema.field("f0").type == pa.int32()
    assert arrow_to_records(batch) == [1, 2]


def test_declared_double_widens_ints() -> None:
    batch = records_to_arrow([1, 2], Types.DOUBLE())
    assert_exact(arrow_to_records(batch), [1.0, 2.0])


def test_declared_tuple_type() -> None:
    t = Types.TUPLE([Types.STRING(), Types.LONG()])
    batch = records_to_arrow([("a", 1), ("b", None)], t)
    assert batch.schema.types == [pa.string(), pa.int64()]
    assert kind_of(batch) == KIND_TUPLE
    assert_exact(arrow_to_records(batch), [("a", 1), ("b", None)])


def test_declared_tuple_type_keeps_an_all_none_column() -> None:
    # Undeclared, a column of Nones has no Arrow type and the batch is pickled.
    t = Types.TUPLE([Types.STRING(), Types.DOUBLE()])
    batch = records_to_arrow([("a", None), ("b", None)], t)
    assert batch.schema.types == [pa.string(), pa.float64()]
    assert arrow_to_records(batch) == [("a", None), ("b", None)]


def test_declared_named_row_type() -> None:
    t = Types.ROW_NAMED(["user", "ts"], [Types.STRING(), Types.SQL_TIMESTAMP()])
    when = datetime.datetime(2024, 1, 2, 3, 4, 5)
    batch = records_to_arrow([Row(user="u", ts=when)], t)
    assert batch.schema.names == ["user", "ts"]
    assert batch.schema.field("ts").type == pa.timestamp("us")
    back = arrow_to_records(batch)
    assert back[0].user == "u"
    assert back[0].ts == when


def test_declared_map_record_type() -> None:
    t = Types.MAP_RECORD(["k", "v"], [Types.STRING(), Types.LONG()])
    records = [{"v": 1, "k": "a"}, {"k": "b", "v": 2, "ignored": True}]
    batch = records_to_arrow(records, t)
    assert kind_of(batch) == KIND_DICT
    assert arrow_to_records(batch) == [{"k": "a", "v": 1}, {"k": "b", "v": 2}]


def test_declared_pickled_type() -> None:
    batch = records_to_arrow([1, "a"], Types.PICKLED_BYTE_ARRAY())
    assert kind_of(batch) == KIND_PICKLE
    assert arrow_to_records(batch) == [1, "a"]


def test_declared_type_with_no_records() -> None:
    t = Types.TUPLE([Types.STRING(), Types.LONG()])
    batch = records_to_arrow([], t)
    assert batch.num_rows == 0
    assert batch.schema.types == [pa.string(), pa.int64()]
    assert arrow_to_records(batch) == []
    assert records_to_arrow([], Types.LONG()).num_rows == 0


@pytest.mark.parametrize(("records", "type_info"), [
    pytest.param(["a"], Types.LONG(), id="string-as-long"),
    pytest.param([2**40], Types.INT(), id="int-overflow"),
    pytest.param([("a", 1, 2)], Types.TUPLE([Types.STRING(), Types.LONG()]), id="too-long"),
    pytest.param([("a", 1), ("b",)], Types.TUPLE([Types.STRING(), Types.LONG()]),
                 id="ragged"),
    pytest.param([1, 2], Types.TUPLE([Types.LONG()]), id="scalars-for-a-tuple"),
    pytest.param([{"k": "a"}], Types.MAP_RECORD(["k", "v"], [Types.STRING(), Types.LONG()]),
                 id="missing-key"),
    pytest.param([Row(user=1)], Types.ROW_NAMED(["user"], [Types.STRING()]), id="row"),
])
def test_records_not_matching_the_declared_type_raise(records, type_info) -> None:
    with pytest.raises(TypeError, match=r"do not match the declared output_type") as info:
        records_to_arrow(records, type_info)
    assert repr(records[0])[:20] in str(info.value)


def test_row_named_needs_as_many_names_as_types() -> None:
    with pytest.raises(ValueError, match=r"as many names as types"):
        Types.ROW_NAMED(["a", "b"], [Types.STRING()])


def test_type_information_schema() -> None:
    assert Types.TUPLE([Types.STRING(), Types.LONG()]).arrow_schema().names == ["f0", "f1"]
    schema = Types.ROW_NAMED(["x"], [Types.BOOLEAN()]).arrow_schema()
    assert schema.field("x").type == pa.bool_()
    assert schema.metadata[KIND_KEY] == KIND_ROW
    assert Types.BYTES().arrow_schema().field("f0").type == pa.binary()
    assert Types.FLOAT().arrow_schema().field("f0").type == pa.float32()
    assert Types.PICKLED_BYTE_ARRAY().arrow_schema().names == ["_pickled"]


def test_elements_keep_their_declared_type() -> None:
    e = Elements.from_records([1], Types.DOUBLE())
    assert e.type_info == Types.DOUBLE()
    assert e.arrow().schema.field("f0").type == pa.float64()
    # A pickled batch can be unpickled with the standard pickler too.
    assert pickle.loads(records_to_arrow([{1, 2}]).column(0)[0].as_py()) == {1, 2}
