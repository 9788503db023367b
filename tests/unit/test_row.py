"""weir.Row: named and positional records."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import pytest

from weir import Row


def test_named_row_reads_by_name_attribute_and_position() -> None:
    r = Row(user="u1", clicks=3)
    assert r.user == "u1"
    assert r["clicks"] == 3
    assert r[0] == "u1"
    assert r[-1] == 3
    assert r[0:1] == ("u1",)
    assert len(r) == 2
    assert tuple(r) == ("u1", 3)
    assert r._fields == ("user", "clicks")
    assert r.get_fields_by_names() == ["user", "clicks"]
    assert r.as_dict() == {"user": "u1", "clicks": 3}


def test_positional_row() -> None:
    r = Row("a", 1)
    assert r[1] == 1
    assert r._fields == ()
    assert r.get_fields_by_names() == []
    assert repr(r) == "Row('a', 1)"


def test_positional_row_has_no_dict() -> None:
    with pytest.raises(TypeError, match=r"positional Row has no field names"):
        Row("a", 1).as_dict()
    assert Row().as_dict() == {}


def test_repr_of_named_row() -> None:
    assert repr(Row(a=1, b="x")) == "Row(a=1, b='x')"


def test_positional_and_named_values_do_not_mix() -> None:
    with pytest.raises(TypeError, match=r"either positional or named"):
        Row(1, b=2)


def test_unknown_field_names_the_fields() -> None:
    r = Row(user="u1", clicks=3)
    with pytest.raises(KeyError, match=r"no field 'nope'.*user, clicks"):
        r["nope"]
    with pytest.raises(AttributeError, match=r"no field 'nope'"):
        r.nope
    assert not hasattr(r, "nope")
    with pytest.raises(AttributeError):
        r._private


def test_rows_are_tuples() -> None:
    r = Row(a=1, b=2)
    assert isinstance(r, tuple)
    assert r == (1, 2)
    assert hash(r) == hash((1, 2))
    assert sorted([Row(a=2, b=0), Row(a=1, b=5)]) == [(1, 5), (2, 0)]


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps, copy.deepcopy])
def test_rows_survive_pickling_and_copying(dumps) -> None:
    for r in (Row(user="u", n=1), Row(1, 2), Row()):
        data = dumps(r)
        back = data if dumps is copy.deepcopy else pickle.loads(data)
        assert back == r
        assert type(back) is Row
        assert back._fields == r._fields
        if r._fields:
            assert back.user == "u"
            assert back["n"] == 1


def test_from_values_shares_names_between_siblings() -> None:
    fields = ("k", "v")
    index = {"k": 0, "v": 1}
    a = Row.from_values(fields, index, ["a", 1])
    b = Row.from_values(fields, index, ("b", 2))
    assert a.v == 1
    assert b.k == "b"
    assert a._fields is b._fields


def test_fields_named_like_tuple_methods_read_as_fields() -> None:
    # The running count() aggregation emits Rows with a "count" field.
    r = Row(word="a", count=3, index=7)
    assert r.count == 3
    assert r.index == 7
    assert r["count"] == 3
    # Rows without such fields keep the tuple methods.
    plain = Row(word="a", n=1)
    assert plain.count("a") == 1
    assert plain.index(1) == 1
    assert Row(1, 1, 2).count(1) == 2
    assert Row.count((1, 1), 1) == 2
