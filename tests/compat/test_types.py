"""PyFlink's Types, as a program declares them for from_collection and map: the records
cross a real exchange (Arrow columns of the declared types) and come back as the same
Python values; Rows read by field name, also in key_by and sum."""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pytest

from weir import Row, StreamExecutionEnvironment, Types

pytestmark = pytest.mark.usefixtures("runs_on")


def _through_an_exchange(records: list, type_info) -> list:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    stream = env.from_collection(records, type_info=type_info).rebalance()
    return list(stream.map(lambda r: r, output_type=type_info).execute_and_collect())


def test_rows_declared_with_row_and_row_named_are_rows() -> None:
    named = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    got = _through_an_exchange([Row(id=1, name="a"), Row(id=2, name="b")], named)
    assert sorted((r.id, r.name) for r in got) == [(1, "a"), (2, "b")]
    positional = _through_an_exchange([Row(1, "a")], Types.ROW([Types.INT(), Types.STRING()]))
    assert [(r[0], r[1]) for r in positional] == [(1, "a")]


def test_decimal_date_time_instant_list_and_map_values_come_back_alike() -> None:
    row = Types.ROW_NAMED(
        ["price", "day", "at", "when", "instant", "tags", "counts", "small"],
        [Types.BIG_DEC(), Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP(),
         Types.INSTANT(), Types.LIST(Types.STRING()), Types.MAP(Types.STRING(), Types.INT()),
         Types.PRIMITIVE_ARRAY(Types.SHORT())])
    utc = datetime.UTC
    records = [Row(price=decimal.Decimal("12.5"), day=datetime.date(2026, 11, 25),
                   at=datetime.time(13, 30), when=datetime.datetime(2026, 11, 25, 13, 30),
                   instant=datetime.datetime(2026, 11, 25, 12, 30, tzinfo=utc),
                   tags=["a", "b"], counts={"x": 1, "y": 2}, small=[1, 2, 3])]
    (got,) = _through_an_exchange(records, row)
    assert got.price == decimal.Decimal("12.5")
    assert (got.day, got.at, got.when) == (records[0].day, records[0].at, records[0].when)
    assert got.instant == records[0].instant
    assert (got.tags, got.counts, got.small) == (["a", "b"], {"x": 1, "y": 2}, [1, 2, 3])


def test_row_fields_by_name_in_key_by_and_sum() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    row = Types.ROW_NAMED(["user", "clicks"], [Types.STRING(), Types.INT()])
    records = [Row(user=u, clicks=c) for u, c in [("a", 1), ("b", 2), ("a", 3), ("b", 4)]]
    sums = env.from_collection(records, type_info=row).key_by("user").sum("clicks")
    finals: dict[str, int] = {}
    for r in sums.execute_and_collect():
        finals[r.user] = max(finals.get(r.user, 0), r.clicks)
    assert finals == {"a": 4, "b": 6}


def test_records_of_a_row_type_are_rows_in_a_chain_too() -> None:
    # No exchange between the source and the maps: a tuple declared as a row is still a
    # Row in the chained function, and a named Row is read by name whatever its order.
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    row = Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()])
    records = [(1, '{"tel": 1}'), Row(info='{"tel": 2}', id=2)]
    stream = (env.from_collection(records, type_info=row)
              .map(lambda r: (r.id, r.info.upper()),
                   output_type=Types.ROW([Types.INT(), Types.STRING()]))
              .map(lambda r: f"{r.f0}:{r.f1}"))
    assert sorted(stream.execute_and_collect()) == ['1:{"TEL": 1}', '2:{"TEL": 2}']


def test_a_record_that_does_not_fit_its_row_type_is_named() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    row = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    with pytest.raises(TypeError, match=r"does not match the declared row type \['id', 'name'\]"):
        env.from_collection([(1, "a", "extra")], type_info=row)


def test_a_row_or_tuple_nested_in_a_declared_type_comes_back_alike() -> None:
    inner = Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.BIG_DEC()])
    outer = Types.TUPLE([Types.STRING(), inner, Types.PICKLED_BYTE_ARRAY()])
    records = [("x", Row(a="a", b=decimal.Decimal(1)), {"any": [1]}),
               ("y", Row(a="b", b=decimal.Decimal("2.5")), None)]
    got = _through_an_exchange(records, outer)
    assert sorted(got) == sorted(records)
    assert {r[1].a for r in got} == {"a", "b"}


def test_a_decimal_keeps_its_scale_and_digits() -> None:
    values = [decimal.Decimal("1"), decimal.Decimal("1.50"), decimal.Decimal("-0.000"),
              decimal.Decimal("1E+3"),
              decimal.Decimal("12345678901234567890.123456789012345678901")]
    got = _through_an_exchange(values, Types.BIG_DEC())
    assert sorted(map(str, got)) == sorted(map(str, values))
    nested = Types.ROW_NAMED(["prices", "by_name"], [Types.LIST(Types.BIG_DEC()),
                                                     Types.MAP(Types.STRING(), Types.BIG_DEC())])
    (row,) = _through_an_exchange([Row(prices=[decimal.Decimal("2.0"), None],
                                       by_name={"a": decimal.Decimal("0.10")})], nested)
    assert (list(map(str, row.prices[:1])), row.prices[1], str(row.by_name["a"])) == (
        ["2.0"], None, "0.10")


def test_declared_narrow_values_of_a_collection_are_stored_as_java_stores_them() -> None:
    # PyFlink's from_collection hands the values to Java (byteValue(), shortValue(),
    # intValue(), floatValue()): a chained function sees the same as one after an exchange.
    row = Types.ROW([Types.BYTE(), Types.SHORT(), Types.INT(), Types.LONG(), Types.FLOAT(),
                     Types.PRIMITIVE_ARRAY(Types.SHORT())])
    records = [(200, 43878, 9147483648, 9147483648, 0.1, [40000, 1])]
    expected = (200 - 256, 43878 - 65536, 9147483648 - 2 ** 33, 9147483648,
                float(np.float32(0.1)), [40000 - 65536, 1])
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    chained = env.from_collection(records, type_info=row).map(tuple)
    assert [tuple(r) for r in chained.execute_and_collect()] == [expected]
    assert [tuple(r) for r in _through_an_exchange(records, row)] == [expected]
