"""PyFlink's Row semantics on weir's tuple-based Row: ``RowKind`` and the row kind, the row
factory idiom (``Person = Row("name", "age")``), ``as_dict(recursive=True)``,
``set_field_names``, ``in`` and the refusal of field assignment (weir Rows are immutable)."""

from __future__ import annotations

import copy
import doctest
import pickle

import cloudpickle
import pytest

import weir.core.row
from weir import Row, StreamExecutionEnvironment
from weir.core.row import RowKind, _rebuild_row


def _env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def _with_kind(row: Row, kind: RowKind) -> Row:
    row.set_row_kind(kind)
    return row


# -- RowKind ---------------------------------------------------------------------------------


def test_row_kind_values_and_short_strings_are_flinks() -> None:
    assert [(k.name, k.value) for k in RowKind] == [
        ("INSERT", 0), ("UPDATE_BEFORE", 1), ("UPDATE_AFTER", 2), ("DELETE", 3)]
    assert [k.short_string() for k in RowKind] == ["+I", "-U", "+U", "-D"]
    assert RowKind(2) is RowKind.UPDATE_AFTER


def test_every_row_is_an_insert_until_set() -> None:
    fields, index = ("k",), {"k": 0}
    for row in (Row(a=1), Row(1, 2), Row(), Row.from_values(fields, index, [1]),
                Row("name")("Alice")):
        assert row.get_row_kind() is RowKind.INSERT


def test_set_row_kind_changes_the_kind_but_not_equality_or_hash() -> None:
    row = Row(id=7, name="x")
    assert row.set_row_kind(RowKind.UPDATE_BEFORE) is None
    assert row.get_row_kind() is RowKind.UPDATE_BEFORE
    assert row == (7, "x") == Row(id=7, name="x")
    assert hash(row) == hash((7, "x"))
    assert {row: 1}[Row(id=7, name="x")] == 1
    # Another row with the same values keeps its own kind.
    assert Row(id=7, name="x").get_row_kind() is RowKind.INSERT


def test_set_row_kind_takes_only_row_kinds() -> None:
    row = Row(id=1)
    for wrong in (3, "DELETE", None):
        with pytest.raises(TypeError, match=r"set_row_kind takes a RowKind"):
            row.set_row_kind(wrong)  # type: ignore[arg-type]
    assert row.get_row_kind() is RowKind.INSERT


def test_repr_shows_a_kind_other_than_insert_first() -> None:
    row = Row(id=1, name="a")
    assert repr(row) == "Row(id=1, name='a')"
    row.set_row_kind(RowKind.DELETE)
    assert repr(row) == "-D Row(id=1, name='a')"
    assert repr(_with_kind(Row(1, "a"), RowKind.UPDATE_AFTER)) == "+U Row(1, 'a')"
    assert repr(_with_kind(Row(1), RowKind.INSERT)) == "Row(1)"


# -- pickling --------------------------------------------------------------------------------


def _round_trips(row: Row) -> list[Row]:
    return [pickle.loads(pickle.dumps(row)), pickle.loads(cloudpickle.dumps(row)),
            copy.copy(row), copy.deepcopy(row)]


@pytest.mark.parametrize("kind", list(RowKind))
def test_pickling_keeps_values_fields_and_kind(kind: RowKind) -> None:
    for row in (Row(user="u", n=1), Row(1, "a"), Row()):
        row.set_row_kind(kind)
        for back in _round_trips(row):
            assert type(back) is Row
            assert back is not row
            assert tuple(back) == tuple(row)
            assert back._fields == row._fields
            assert back.get_row_kind() is kind
            if row._fields:
                assert (back.user, back["n"]) == ("u", 1)


def test_cloudpickle_keeps_fields_and_kind_of_rows_inside_values() -> None:
    inner = _with_kind(Row(name="a", age=2), RowKind.UPDATE_BEFORE)
    outer = _with_kind(Row(key=1, value=inner, more=[inner]), RowKind.UPDATE_AFTER)
    back = pickle.loads(cloudpickle.dumps(outer))
    assert back.get_row_kind() is RowKind.UPDATE_AFTER
    assert back.value.name == "a"
    assert back.value.get_row_kind() is RowKind.UPDATE_BEFORE
    assert back.more[0].get_row_kind() is RowKind.UPDATE_BEFORE


def test_inserts_pickle_as_before_row_kinds_and_old_pickles_load() -> None:
    # An INSERT reduces to the two-argument form older weir versions wrote (and read).
    assert Row(a=1).__reduce__() == (_rebuild_row, (("a",), (1,)))
    assert _with_kind(Row(a=1), RowKind.DELETE).__reduce__() == (
        _rebuild_row, (("a",), (1,), 3))
    old = _rebuild_row(("a", "b"), (1, 2))
    assert (old.a, old.b, old.get_row_kind()) == (1, 2, RowKind.INSERT)


def test_pickling_keeps_names_set_with_set_field_names() -> None:
    row = Row(1, 2)
    row.set_field_names(["x", "y"])
    back = pickle.loads(cloudpickle.dumps(row))
    assert (back.x, back.y, back._fields) == (1, 2, ("x", "y"))


# -- the row factory -------------------------------------------------------------------------


def test_a_row_of_field_names_makes_named_rows() -> None:
    Person = Row("name", "age")  # noqa: N806 - PyFlink's idiom names the factory like a class
    alice = Person("Alice", 11)
    assert type(alice) is Row
    assert (alice.name, alice.age, alice["age"], alice[0]) == ("Alice", 11, 11, "Alice")
    assert alice._fields == ("name", "age")
    assert alice == ("Alice", 11)
    assert repr(alice) == "Row(name='Alice', age=11)"
    assert alice.as_dict() == {"name": "Alice", "age": 11}
    # Siblings share the names; the factory stays a positional row of strings.
    assert Person("Bob", 12)._fields is alice._fields
    assert Person == ("name", "age") and Person._fields == ()
    assert "name" in Person and "wrong_key" not in Person


def test_a_factory_passes_its_row_kind_on() -> None:
    Change = _with_kind(Row("id"), RowKind.DELETE)  # noqa: N806
    row = Change(5)
    assert row.get_row_kind() is RowKind.DELETE
    assert repr(row) == "-D Row(id=5)"


def test_a_factory_with_fields_named_like_tuple_methods() -> None:
    WordCount = Row("word", "count")  # noqa: N806
    row = WordCount("a", 3)
    assert (row.word, row.count) == ("a", 3)


def test_only_a_positional_row_of_distinct_strings_is_a_factory() -> None:
    with pytest.raises(TypeError, match=r"row factory needs field names that are strings; "
                                        r"got 11"):
        Row("Alice", 11)("x", "y")
    with pytest.raises(TypeError, match=r"only a Row of field names is a row factory.*"
                                        r"Row\(name='age'\) is a named row"):
        Row(name="age")("x")
    with pytest.raises(ValueError, match=r"distinct field names; repeated: a"):
        Row("a", "b", "a")(1, 2, 3)


def test_a_factory_takes_one_value_per_field() -> None:
    Person = Row("name", "age")  # noqa: N806
    with pytest.raises(ValueError, match=r"takes 2 values, got 3"):
        Person("Alice", 11, "extra")
    with pytest.raises(ValueError, match=r"takes 2 values, got 1"):
        Person("Alice")
    assert Person("Carol", 3).age == 3  # a refused call leaves the factory usable


# -- as_dict ---------------------------------------------------------------------------------


def test_as_dict_keeps_nested_rows_unless_recursive() -> None:
    row = Row(key=1, value=Row(name="a", age=2))
    flat = row.as_dict()
    assert flat == {"key": 1, "value": ("a", 2)}
    assert type(flat["value"]) is Row
    deep = row.as_dict(recursive=True)
    assert deep == {"key": 1, "value": {"name": "a", "age": 2}}
    assert type(deep["value"]) is dict


def test_as_dict_recursive_converts_rows_in_lists_and_dicts() -> None:
    row = Row(id=1,
              items=[Row(sku="s1", qty=2), 3, [Row(sku="s2", qty=1)]],
              by_name={"x": Row(v=Row(w=0)), "y": 4},
              pair=(Row(a=1), 2))
    assert row.as_dict(True) == {
        "id": 1,
        "items": [{"sku": "s1", "qty": 2}, 3, [{"sku": "s2", "qty": 1}]],
        "by_name": {"x": {"v": {"w": 0}}, "y": 4},
        # Tuples are values, as in PyFlink: a Row inside one stays a Row.
        "pair": (Row(a=1), 2),
    }
    assert type(row.as_dict(True)["pair"][0]) is Row


def test_as_dict_of_a_positional_row_is_refused_also_nested() -> None:
    with pytest.raises(TypeError, match=r"positional Row has no field names"):
        Row(1, 2).as_dict()
    with pytest.raises(TypeError, match=r"positional Row has no field names"):
        Row(key=1, value=Row(1, 2)).as_dict(recursive=True)
    assert Row(key=1, value=Row(1, 2)).as_dict() == {"key": 1, "value": (1, 2)}


# -- set_field_names -------------------------------------------------------------------------


def test_set_field_names_names_a_positional_row_in_place() -> None:
    row = Row("Alice", 11)
    assert row.set_field_names(["name", "age"]) is None
    assert (row.name, row["age"], row._fields) == ("Alice", 11, ("name", "age"))
    assert row == ("Alice", 11)
    assert row.as_dict() == {"name": "Alice", "age": 11}
    assert repr(row) == "Row(name='Alice', age=11)"


def test_set_field_names_renames_one_row_not_its_siblings() -> None:
    fields, index = ("k", "v"), {"k": 0, "v": 1}
    a = Row.from_values(fields, index, ["a", 1])
    b = Row.from_values(fields, index, ["b", 2])
    a.set_field_names(("key", "value"))
    assert (a.key, a.value) == ("a", 1)
    with pytest.raises(AttributeError, match=r"no field 'k'"):
        a.k
    assert (b.k, b.v, b._fields) == ("b", 2, ("k", "v"))
    assert fields == ("k", "v") and index == {"k": 0, "v": 1}


def test_set_field_names_needs_one_distinct_string_per_value() -> None:
    row = Row(a=1, b=2)
    with pytest.raises(ValueError, match=r"got 3 names for a row of 2 values"):
        row.set_field_names(["x", "y", "z"])
    with pytest.raises(ValueError, match=r"got 1 names for a row of 2 values"):
        row.set_field_names(["x"])
    with pytest.raises(TypeError, match=r"strings; got 2"):
        row.set_field_names(["x", 2])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"not one string"):
        row.set_field_names("xy")
    with pytest.raises(ValueError, match=r"repeated: x"):
        row.set_field_names(["x", "x"])
    assert row._fields == ("a", "b") and row.a == 1  # refused calls change nothing


def test_a_factory_given_field_names_is_a_named_row() -> None:
    Person = Row("name", "age")  # noqa: N806
    assert Person("A", 1).name == "A"
    Person.set_field_names(["first", "second"])
    assert Person.first == "name"
    with pytest.raises(TypeError, match=r"only a Row of field names is a row factory"):
        Person("B", 2)


# -- in --------------------------------------------------------------------------------------


def test_in_finds_field_names_and_values_of_a_named_row() -> None:
    row = Row(name="Alice", age=11)
    assert "name" in row
    assert "age" in row
    assert "Alice" in row
    assert 11 in row
    assert "wrong_key" not in row
    assert 12 not in row
    assert [1] not in row  # unhashable: compared with the values, no error


def test_in_tests_the_values_of_a_positional_row() -> None:
    row = Row("Alice", 11)
    assert "Alice" in row and 11 in row
    assert "name" not in row
    assert 0 not in row  # not a position


# -- immutability ----------------------------------------------------------------------------


def test_setting_a_field_by_name_or_attribute_is_refused_with_the_fix() -> None:
    row = Row(name="Alice", age=11)
    fix = r"build a new Row instead, e\.g\. Row\(\*\*\{\*\*row\.as_dict\(\), 'name': new_value\}\)"
    with pytest.raises(TypeError, match=r"Row is immutable.*" + fix):
        row.name = "Bob"
    with pytest.raises(TypeError, match=fix):
        row["name"] = "Bob"
    with pytest.raises(TypeError, match=fix):
        row[0] = "Bob"
    with pytest.raises(TypeError, match=r"'age': new_value"):
        row[-1] = 12
    with pytest.raises(TypeError, match=r"'name' cannot be set or deleted"):
        del row.name
    with pytest.raises(TypeError, match=r"cannot be set or deleted"):
        del row["name"]
    with pytest.raises(TypeError, match=r"'other' cannot be set"):
        row.other = 1
    assert (row.name, row.age, tuple(row)) == ("Alice", 11, ("Alice", 11))
    assert "name" not in vars(row) and "other" not in vars(row)
    # The fix the message names works.
    renamed = Row(**{**row.as_dict(), "name": "Bob"})
    assert (renamed.name, renamed.age) == ("Bob", 11)


def test_setting_a_position_of_a_positional_row_is_refused_with_the_fix() -> None:
    row = Row("a", "b", "c")
    with pytest.raises(TypeError, match=r"e\.g\. Row\(\*row\[:1\], new_value, \*row\[2:\]\)"):
        row[1] = "x"
    with pytest.raises(TypeError, match=r"Row\(\*row\[:2\], new_value, \*row\[3:\]\)"):
        row[-1] = "x"
    new_value = "x"
    assert Row(*row[:1], new_value, *row[2:]) == ("a", "x", "c")
    assert row == ("a", "b", "c")


# -- what stays as it was --------------------------------------------------------------------


def test_rows_stay_tuples_with_tuple_methods() -> None:
    row = Row(a=1, b=1)
    assert isinstance(row, tuple)
    assert row == (1, 1) and row == Row(x=1, y=1) and hash(row) == hash((1, 1))
    assert row.count(1) == 2 and row.index(1) == 0
    assert Row(word="w", count=4).count == 4
    assert row[0:1] == (1,)


def test_the_module_examples_hold() -> None:
    result = doctest.testmod(weir.core.row)
    assert result.failed == 0
    assert result.attempted >= 20


# -- in a job --------------------------------------------------------------------------------

Person = Row("name", "age")  # PyFlink's idiom: a row factory named like a class


@pytest.mark.usefixtures("runs_on")
def test_the_row_factory_in_a_job() -> None:
    people = [("Alice", 11), ("Bob", 12), ("Carol", 13), ("Dan", 14)]
    got = (_env(2).from_collection(people)
           .map(lambda p: Person(*p))
           .rebalance()
           .map(lambda person: Person(person.name.upper(), person.age + 1))
           .execute_and_collect())
    rows = sorted(got)
    assert rows == [("ALICE", 12), ("BOB", 13), ("CAROL", 14), ("DAN", 15)]
    assert all(type(r) is Row and r._fields == ("name", "age") for r in rows)
    assert [r.name for r in rows] == ["ALICE", "BOB", "CAROL", "DAN"]


@pytest.mark.usefixtures("runs_on")
def test_factory_rows_are_read_by_name_in_key_by_and_reduce() -> None:
    clicks = [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]
    Click = Row("user", "clicks")  # noqa: N806
    got = (_env(2).from_collection(clicks)
           .map(lambda c: Click(*c))
           .key_by(lambda c: c.user)
           .reduce(lambda x, y: Click(x.user, x.clicks + y.clicks))
           .execute_and_collect())
    finals: dict[str, int] = {}
    for r in got:
        finals[r.user] = max(finals.get(r.user, 0), r.clicks)
    assert finals == {"a": 9, "b": 6}


def _as_update_after(value: int) -> Row:
    return _with_kind(Row(value, value * 10), RowKind.UPDATE_AFTER)


@pytest.mark.usefixtures("runs_on")
def test_the_row_kind_of_positional_rows_crosses_an_exchange() -> None:
    got = (_env(2).from_collection([1, 2, 3]).map(_as_update_after).rebalance()
           .map(lambda r: r).execute_and_collect())
    rows = sorted(got)
    assert rows == [(1, 10), (2, 20), (3, 30)]
    assert [r.get_row_kind() for r in rows] == [RowKind.UPDATE_AFTER] * 3


def _as_delete(value: int) -> Row:
    return _with_kind(Row(id=value), RowKind.DELETE)


@pytest.mark.usefixtures("runs_on")
def test_the_row_kind_of_named_rows_crosses_an_exchange() -> None:
    got = (_env(2).from_collection([1, 2]).map(_as_delete).rebalance()
           .map(lambda r: r).execute_and_collect())
    rows = sorted(got)
    assert rows == [(1,), (2,)]
    assert [r.get_row_kind() for r in rows] == [RowKind.DELETE] * 2
