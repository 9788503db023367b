"""Tests for state.key_groups: key encoding, hashing, vectorised assignment and ranges."""

from __future__ import annotations

import datetime
import decimal
import itertools
import random
from collections.abc import Sequence

import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.state import (
    DEFAULT_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    assign_to_key_group,
    check_parallelism,
    compute_operator_index_for_key_group,
    key_group_range_for_operator,
    key_groups_of_array,
    key_groups_of_columns,
    key_to_bytes,
    murmur3_32,
    operator_indexes,
)
from weir.state.key_groups import key_groups_of_strs

# Non-powers of two make the modulo depend on every hash bit; 32768 is the largest allowed.
MAX_PARALLELISMS = [7, 128, 1000, UPPER_BOUND_MAX_PARALLELISM]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FAST = settings(max_examples=40, deadline=None)


def scalar_groups(values: Sequence[object], max_parallelism: int) -> list[int]:
    return [assign_to_key_group(v, max_parallelism) for v in values]


def assert_matches_scalar(arr: pa.Array | pa.ChunkedArray) -> None:
    """The vectorised result equals assign_to_key_group on each Python value."""
    values = arr.to_pylist()
    for max_parallelism in MAX_PARALLELISMS:
        got = key_groups_of_array(arr, max_parallelism)
        assert got.dtype == np.int32
        assert got.tolist() == scalar_groups(values, max_parallelism), arr.type


# --- murmur3 -------------------------------------------------------------------------------


def test_murmur3_known_vectors() -> None:
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"hello") == 613153351
    for data in [b"", b"a", b"ab", b"abc", b"abcd", b"hello world", bytes(range(256))]:
        assert murmur3_32(data) == mmh3.hash(data, 0, signed=False)


def test_vectorised_hash_covers_every_tail_and_block_count() -> None:
    # Lengths 0..40 hit tails of 0..3 bytes and 0..10 blocks; 250..600 exercise the path for
    # long values, mixed into one array with short ones.
    rng = random.Random(7)
    values = [rng.randbytes(n) for n in range(41)] * 3
    values += [rng.randbytes(n) for n in (250, 256, 257, 259, 260, 600)]
    rng.shuffle(values)
    assert_matches_scalar(pa.array(values, pa.binary()))


@pytest.mark.parametrize("length", range(10))
def test_value_at_the_very_end_of_the_data_buffer(length: int) -> None:
    # The tail read of the last value must not run past (or read garbage after) the buffer.
    for values in (["x" * length], ["abcdefgh", "y" * length], ["abcdefgh", "z" * length, None]):
        assert_matches_scalar(pa.array(values, pa.string()))


# --- vectorised == scalar, by type ----------------------------------------------------------

texts = st.lists(st.none() | st.text(max_size=40), max_size=60)


@FAST
@given(texts)
def test_strings_match_scalar(values: list[str | None]) -> None:
    for type_ in (pa.string(), pa.large_string(), pa.string_view()):
        assert_matches_scalar(pa.array(values, type_))


@FAST
@given(st.lists(st.text(max_size=20) | st.text(alphabet="abc\ud800\udfff", max_size=5),
                max_size=60), st.sampled_from(MAX_PARALLELISMS))
def test_python_strs_match_scalar(values: list[str], max_parallelism: int) -> None:
    # Lists of Python strs (per-record keys) take a path of their own, ASCII or not, and
    # lone surrogates included (which mmh3 must never see as a str).
    assert key_groups_of_strs(values, max_parallelism).tolist() == \
        scalar_groups(values, max_parallelism)


@FAST
@given(st.lists(st.none() | st.binary(max_size=40), max_size=60))
def test_binary_matches_scalar(values: list[bytes | None]) -> None:
    for type_ in (pa.binary(), pa.large_binary(), pa.binary_view()):
        assert_matches_scalar(pa.array(values, type_))


@FAST
@given(st.lists(st.none() | st.binary(min_size=5, max_size=5), max_size=30))
def test_fixed_size_binary_matches_scalar(values: list[bytes | None]) -> None:
    assert_matches_scalar(pa.array(values, pa.binary(5)))


INT_TYPES = [
    (pa.int8(), -(2**7), 2**7 - 1),
    (pa.int16(), -(2**15), 2**15 - 1),
    (pa.int32(), -(2**31), 2**31 - 1),
    (pa.int64(), INT64_MIN, INT64_MAX),
    (pa.uint8(), 0, 2**8 - 1),
    (pa.uint16(), 0, 2**16 - 1),
    (pa.uint32(), 0, 2**32 - 1),
    (pa.uint64(), 0, 2**64 - 1),
]


@pytest.mark.parametrize(("type_", "low", "high"), INT_TYPES, ids=str)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_integers_match_scalar(
    type_: pa.DataType, low: int, high: int, data: st.DataObject
) -> None:
    element = st.none() | st.integers(low, high) | st.sampled_from([low, high, 0, high // 2])
    values = data.draw(st.lists(element, max_size=40))
    assert_matches_scalar(pa.array(values, type_))


def test_int64_extremes_and_uint64_beyond_int64() -> None:
    assert_matches_scalar(pa.array([INT64_MIN, INT64_MAX, 0, -1, None], pa.int64()))
    # Above int64 the key uses the bigint encoding (per-element fallback).
    assert_matches_scalar(pa.array([2**64 - 1, 2**63, 5, None], pa.uint64()))


special_floats = st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, 2.0**53, 2.0**63, -(2.0**63), 2.0**62, 1e300, float("inf"), -1e-300]
)
integral_floats = st.integers(-(2**60), 2**60).map(float)


@FAST
@given(st.lists(st.none() | st.floats() | integral_floats | special_floats, max_size=40))
def test_float64_matches_scalar(values: list[float | None]) -> None:
    assert_matches_scalar(pa.array(values, pa.float64()))


@FAST
@given(st.lists(st.none() | st.floats(width=32) | st.integers(-1000, 1000).map(float), max_size=40))
def test_float32_and_float16_match_scalar(values: list[float | None]) -> None:
    assert_matches_scalar(pa.array(values, pa.float32()))
    halves = np.array([0.0 if v is None else v for v in values], dtype=np.float32)
    with np.errstate(over="ignore"):
        halves16 = halves.astype(np.float16)
    mask = np.array([v is None for v in values], dtype=bool)
    assert_matches_scalar(pa.array(halves16, mask=mask, type=pa.float16()))


@FAST
@given(st.lists(st.none() | st.booleans(), max_size=40))
def test_bools_match_scalar(values: list[bool | None]) -> None:
    assert_matches_scalar(pa.array(values, pa.bool_()))


def test_null_entries_hash_like_none() -> None:
    assert_matches_scalar(pa.nulls(5))
    for type_ in (pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.binary()):
        arr = pa.array([None, None, None], type_)
        assert key_groups_of_array(arr, 128).tolist() == [assign_to_key_group(None, 128)] * 3


def test_null_slot_spanning_bytes_hashes_as_none() -> None:
    # Arrow allows a null string slot to cover data bytes; it must still hash as None.
    offsets = pa.array([0, 3, 6], pa.int32())
    validity = pa.array([True, False]).buffers()[1]
    arr = pa.StringArray.from_buffers(
        2, offsets.buffers()[1], pa.py_buffer(b"abcdef"), validity, null_count=1
    )
    assert arr.to_pylist() == ["abc", None]
    assert_matches_scalar(arr)


def test_empty_arrays() -> None:
    for type_ in (pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.timestamp("s")):
        got = key_groups_of_array(pa.array([], type_), 128)
        assert got.dtype == np.int32
        assert got.size == 0
    assert key_groups_of_array(pa.chunked_array([], pa.string()), 128).size == 0


@FAST
@given(
    st.lists(st.none() | st.text(max_size=12), min_size=1, max_size=40),
    st.integers(0, 40),
    st.integers(0, 40),
)
def test_sliced_arrays_match_scalar(values: list[str | None], offset: int, length: int) -> None:
    offset = min(offset, len(values))
    ints = [None if v is None else len(v) - 5 for v in values]
    floats = [None if v is None else len(v) / 2 for v in values]
    bools = [None if v is None else len(v) % 2 == 0 for v in values]
    for full in (
        pa.array(values, pa.string()),
        pa.array(values, pa.large_string()),
        pa.array(ints, pa.int32()),
        pa.array(floats, pa.float64()),
        pa.array(bools, pa.bool_()),
        pa.array([None if v is None else v.encode() for v in values], pa.binary()),
        pa.array([None if v is None else v.encode()[:1].ljust(3) for v in values], pa.binary(3)),
    ):
        sliced = full.slice(offset, length)
        assert sliced.offset == offset or len(sliced) == 0
        assert_matches_scalar(sliced)


@FAST
@given(st.lists(st.lists(st.none() | st.text(max_size=20), max_size=10), max_size=5))
def test_chunked_arrays_match_scalar(chunks: list[list[str | None]]) -> None:
    assert_matches_scalar(pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string()))
    ints = [[None if v is None else len(v) for v in c] for c in chunks]
    assert_matches_scalar(pa.chunked_array([pa.array(c, pa.int64()) for c in ints], pa.int64()))


@FAST
@given(st.lists(st.none() | st.sampled_from(["a", "bb", "ccc", "dddd", "é", ""]), max_size=40))
def test_dictionary_arrays_match_scalar(values: list[str | None]) -> None:
    assert_matches_scalar(pa.array(values, pa.string()).dictionary_encode())
    assert_matches_scalar(pa.array(values, pa.string()).dictionary_encode().slice(1))


def test_dictionary_with_null_values_and_null_indices() -> None:
    arr = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, None, 2, 1], pa.int8()), pa.array(["x", None, "zz"])
    )
    assert arr.to_pylist() == ["x", None, None, "zz", None]
    assert_matches_scalar(arr)
    empty_dictionary = pa.DictionaryArray.from_arrays(
        pa.array([None, None], pa.int32()), pa.array([], pa.string())
    )
    assert_matches_scalar(empty_dictionary)
    # Dictionary values without a vectorised path go through the fallback.
    dates = pa.DictionaryArray.from_arrays(
        pa.array([1, 0, None]), pa.array([datetime.date(2024, 1, 1), datetime.date(1999, 12, 31)])
    )
    assert_matches_scalar(dates)


def test_fallback_types_match_scalar() -> None:
    assert_matches_scalar(pa.array([datetime.datetime(2024, 5, 6, 7, 8, 9), None]))
    assert_matches_scalar(
        pa.array([datetime.datetime(2024, 5, 6, tzinfo=datetime.UTC)], pa.timestamp("ms", "UTC"))
    )
    assert_matches_scalar(pa.array([datetime.date(2024, 5, 6), None], pa.date32()))
    assert_matches_scalar(pa.array([["a", "b"], None, [], ["x", None]], pa.list_(pa.string())))
    structs = pa.array([{"a": "x", "b": 1}, None, {"a": None, "b": 2}])
    expected = [assign_to_key_group(("x", 1), 128), assign_to_key_group(None, 128)]
    expected.append(assign_to_key_group((None, 2), 128))
    assert key_groups_of_array(structs, 128).tolist() == expected


def test_unsupported_column_type_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"decimal\.Decimal"):
        key_groups_of_array(pa.array([decimal.Decimal("1.5")]), 128)


# --- composite keys -------------------------------------------------------------------------

rows_strategy = st.lists(
    st.tuples(
        st.none() | st.text(max_size=15),
        st.none() | st.integers(INT64_MIN, INT64_MAX),
        st.none() | st.floats() | integral_floats,
        st.none() | st.booleans(),
        st.none() | st.binary(max_size=9),
    ),
    max_size=30,
)


@FAST
@given(rows_strategy)
def test_composite_keys_match_scalar_tuples(rows: list[tuple[object, ...]]) -> None:
    types = [pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.binary()]
    columns = [pa.array([r[i] for r in rows], t) for i, t in enumerate(types)]
    for max_parallelism in MAX_PARALLELISMS:
        expected = [assign_to_key_group(tuple(r), max_parallelism) for r in rows]
        assert key_groups_of_columns(columns, max_parallelism).tolist() == expected
        # A sliced and a chunked column take the same route.
        pairs = [(r[0], r[1]) for r in rows[1:]]
        sliced = [columns[0].slice(1), pa.chunked_array([columns[1].slice(1)])]
        expected_pairs = [assign_to_key_group(p, max_parallelism) for p in pairs]
        assert key_groups_of_columns(sliced, max_parallelism).tolist() == expected_pairs


def test_composite_keys_of_other_layouts() -> None:
    # Null slots spanning bytes (values not back to back), fixed-size binary, a sliced
    # dictionary column and a null column.
    offsets = pa.array([0, 3, 6, 8], pa.int32()).buffers()[1]
    validity = pa.array([True, False, True]).buffers()[1]
    spanning = pa.StringArray.from_buffers(3, offsets, pa.py_buffer(b"abcdefgh"), validity)
    fixed = pa.array([b"xyz", None, b"\x00\x01\x02", b"qqq"], pa.binary(3)).slice(1)
    labels = pa.array(["p", "q", None, "p"]).dictionary_encode().slice(1)
    columns = [spanning, fixed, labels, pa.nulls(3)]
    rows = list(zip(*(c.to_pylist() for c in columns), strict=True))
    assert rows[0] == ("abc", None, "q", None)
    for max_parallelism in MAX_PARALLELISMS:
        expected = [assign_to_key_group(r, max_parallelism) for r in rows]
        assert key_groups_of_columns(columns, max_parallelism).tolist() == expected


def test_arrays_longer_than_one_internal_batch() -> None:
    rng = random.Random(3)
    values: list[str | None] = [
        None if rng.random() < 0.05 else "k" * rng.randrange(0, 20) + str(i) for i in range(140_000)
    ]
    values[70_000] = "long" * 100
    arr = pa.array(values)
    assert key_groups_of_array(arr, 1000).tolist() == scalar_groups(values, 1000)
    chunked = pa.chunked_array([arr.slice(0, 65_537), arr.slice(65_537)])
    assert key_groups_of_array(chunked, 1000).tolist() == scalar_groups(values, 1000)


def test_composite_keys_with_a_fallback_column() -> None:
    names = pa.array(["a", "b", None])
    days = pa.array([datetime.date(2024, 1, 1), None, datetime.date(2024, 1, 3)])
    expected = [
        assign_to_key_group(("a", datetime.date(2024, 1, 1)), 128),
        assign_to_key_group(("b", None), 128),
        assign_to_key_group((None, datetime.date(2024, 1, 3)), 128),
    ]
    assert key_groups_of_columns([names, days], 128).tolist() == expected
    single = key_groups_of_columns([names], 128).tolist()
    assert single == scalar_groups([("a",), ("b",), (None,)], 128)


def test_composite_keys_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one column"):
        key_groups_of_columns([], 128)
    with pytest.raises(ValueError, match="differ in length"):
        key_groups_of_columns([pa.array([1, 2]), pa.array([1])], 128)


# --- key_to_bytes -------------------------------------------------------------------------


def test_key_to_bytes_encodings() -> None:
    assert key_to_bytes("é") == b"\xc3\xa9"
    assert key_to_bytes(b"ab") == key_to_bytes(bytearray(b"ab")) == key_to_bytes(memoryview(b"ab"))
    assert key_to_bytes(True) == b"\x01"
    assert key_to_bytes(False) == b"\x00"
    assert key_to_bytes(1) == b"\x01" + bytes(7)
    assert key_to_bytes(-1) == b"\xff" * 8
    assert key_to_bytes(2**63) == b"\xffbigint9223372036854775808"
    assert key_to_bytes(INT64_MIN) == bytes(7) + b"\x80"
    assert key_to_bytes(0.5) == b"\x00\x00\x00\x00\x00\x00\xe0\x3f"
    assert key_to_bytes(None) == b""
    assert key_to_bytes(datetime.date(2024, 1, 2)) == b"2024-01-02"
    assert key_to_bytes(datetime.datetime(2024, 1, 2, 3, 4, 5)) == b"2024-01-02T03:04:05"
    assert key_to_bytes(("ab", None)) == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"
    assert key_to_bytes(["ab", None]) == key_to_bytes(("ab", None))
    # Length prefixes keep differently split tuples apart.
    assert key_to_bytes(("ab", "c")) != key_to_bytes(("a", "bc"))


def test_tuple_subclasses_encode_like_tuples() -> None:
    from collections import namedtuple

    Row = namedtuple("Row", ["name", "count"])
    assert key_to_bytes(Row("x", 3)) == key_to_bytes(("x", 3))


def test_equal_numeric_keys_share_a_key_group() -> None:
    assert key_to_bytes(1) == key_to_bytes(1.0)
    assert key_to_bytes(0) == key_to_bytes(-0.0) == key_to_bytes(0.0)
    assert key_to_bytes(-(2**62)) == key_to_bytes(-(2.0**62))
    for max_parallelism in MAX_PARALLELISMS:
        assert assign_to_key_group(1, max_parallelism) == assign_to_key_group(1.0, max_parallelism)
        assert assign_to_key_group(("k", 2), 128) == assign_to_key_group(("k", 2.0), 128)
    # The same holds for whole columns of different types.
    ints = key_groups_of_array(pa.array([1, 0, -7, None], pa.int64()), 128)
    floats = key_groups_of_array(pa.array([1.0, -0.0, -7.0, None], pa.float64()), 128)
    assert ints.tolist() == floats.tolist()


@pytest.mark.parametrize(
    "key", [object(), {"a": 1}, {1, 2}, decimal.Decimal("1"), datetime.time(1, 2), ("ok", [{}])]
)
def test_key_to_bytes_rejects_other_types(key: object) -> None:
    with pytest.raises(TypeError) as excinfo:
        key_to_bytes(key)
    message = str(excinfo.value)
    assert "keys must be str, bytes, int, float, bool, None, date/datetime or tuples" in message
    if not isinstance(key, tuple):
        assert type(key).__qualname__ in message


# --- stability -----------------------------------------------------------------------------

# Computed once from this implementation.  Key groups are persisted in snapshots, so if any of
# these change, restored state would land on the wrong operator: do not "fix" the numbers.
PINNED = [
    ("hello", 613153351, 71),
    ("", 0, 0),
    ("user-42", 3111312080, 80),
    ("héllo wörld", 2549609076, 116),
    (0, 1669671676, 124),
    (1, 1392991556, 68),
    (-1, 1651860712, 104),
    (INT64_MAX, 2188461247, 63),
    (INT64_MIN, 1366273829, 37),
    (2**64, 3312237466, 26),
    (3.5, 1347587445, 117),
    (float("inf"), 420913893, 101),
    (True, 3831157163, 43),
    (False, 1364076727, 55),
    (None, 0, 0),
    (b"\x00\xff", 3712929428, 20),
    (("a", 1), 628967455, 31),
    (("a", ("b", None)), 3028424309, 117),
    (datetime.date(2024, 1, 2), 233801279, 63),
    (datetime.datetime(2024, 1, 2, 3, 4, 5), 124992515, 3),
]


@pytest.mark.parametrize(("key", "hash_", "group"), PINNED)
def test_pinned_key_groups(key: object, hash_: int, group: int) -> None:
    assert murmur3_32(key_to_bytes(key)) == hash_
    assert assign_to_key_group(key, DEFAULT_MAX_PARALLELISM) == group


def test_pinned_key_groups_vectorised() -> None:
    # Lists, not a dict: True == 1 as dict keys, yet their key groups differ.
    for kind in (str, int, float, bool):
        pinned = [(k, g) for k, _, g in PINNED if type(k) is kind and k != 2**64]
        keys, groups = [k for k, _ in pinned], [g for _, g in pinned]
        assert key_groups_of_array(pa.array(keys), 128).tolist() == groups, kind


# --- max parallelism, operators and ranges ---------------------------------------------------


@pytest.mark.parametrize("max_parallelism", [1, 7, 128, 1000])
def test_operator_ranges_partition_key_groups(max_parallelism: int) -> None:
    all_groups = np.arange(max_parallelism)
    for parallelism in range(1, max_parallelism + 1):
        ranges = [
            key_group_range_for_operator(max_parallelism, parallelism, i)
            for i in range(parallelism)
        ]
        assert ranges[0].start == 0
        assert ranges[-1].end == max_parallelism - 1
        for before, after in itertools.pairwise(ranges):
            assert after.start == before.end + 1
        assert all(len(r) >= 1 for r in ranges)
        # The operator owning each key group is the one whose range holds it.
        owners = np.repeat(np.arange(parallelism), [len(r) for r in ranges])
        vectorised = operator_indexes(all_groups, max_parallelism, parallelism)
        assert vectorised.dtype == np.int32
        assert np.array_equal(vectorised, owners)
        scalar = [
            compute_operator_index_for_key_group(max_parallelism, parallelism, g)
            for g in range(max_parallelism)
        ]
        assert scalar == owners.tolist()


def test_key_group_range_matches_flink_examples() -> None:
    assert key_group_range_for_operator(128, 4, 1) == KeyGroupRange(32, 63)
    assert key_group_range_for_operator(10, 3, 0) == KeyGroupRange(0, 3)
    assert key_group_range_for_operator(10, 3, 1) == KeyGroupRange(4, 6)
    assert key_group_range_for_operator(10, 3, 2) == KeyGroupRange(7, 9)
    assert key_group_range_for_operator(1, 1, 0) == KeyGroupRange(0, 0)


def test_key_group_range_rejects_bad_operator_index() -> None:
    with pytest.raises(ValueError, match="operator index"):
        key_group_range_for_operator(128, 4, 4)
    with pytest.raises(ValueError, match="operator index"):
        key_group_range_for_operator(128, 4, -1)


@pytest.mark.parametrize(
    ("parallelism", "max_parallelism", "message"),
    [
        (0, 128, "parallelism must be at least 1"),
        (1, 0, "max parallelism must be between 1 and 32768"),
        (1, 32769, "max parallelism must be between 1 and 32768"),
        (129, 128, "parallelism 129 must not exceed max parallelism 128"),
    ],
)
def test_check_parallelism_rejects(parallelism: int, max_parallelism: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_parallelism(parallelism, max_parallelism)


def test_check_parallelism_accepts_bounds() -> None:
    check_parallelism(1, 1)
    check_parallelism(32768, 32768)
    check_parallelism(4, DEFAULT_MAX_PARALLELISM)


@pytest.mark.parametrize("max_parallelism", [0, -1, 32769])
def test_assignment_rejects_bad_max_parallelism(max_parallelism: int) -> None:
    with pytest.raises(ValueError, match="max parallelism"):
        assign_to_key_group("k", max_parallelism)
    with pytest.raises(ValueError, match="max parallelism"):
        key_groups_of_array(pa.array(["k"]), max_parallelism)
    with pytest.raises(ValueError, match="max parallelism"):
        key_groups_of_columns([pa.array(["k"])], max_parallelism)


def test_key_group_range_behaviour() -> None:
    r = KeyGroupRange(3, 6)
    assert len(r) == 4
    assert list(r) == [3, 4, 5, 6]
    assert 3 in r and 6 in r
    assert 2 not in r and 7 not in r and "4" not in r
    assert str(r) == "KeyGroupRange{start=3, end=6}"
    assert r.intersection(KeyGroupRange(5, 10)) == KeyGroupRange(5, 6)
    assert r.intersection(KeyGroupRange(0, 3)) == KeyGroupRange(3, 3)
    assert r.intersection(KeyGroupRange(7, 9)) == KeyGroupRange.empty()
    empty = KeyGroupRange(5, 4)
    assert len(empty) == 0
    assert list(empty) == []
    assert 5 not in empty
    assert empty.intersection(r) == KeyGroupRange.empty()
    with pytest.raises(ValueError, match="start must be >= 0"):
        KeyGroupRange(-1, 3)
    with pytest.raises(AttributeError):
        r.start = 0  # type: ignore[misc]
