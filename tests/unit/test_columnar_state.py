"""The columnar key -> slot index and the write-back aggregate columns, against dict models."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.state import columnar
from weir.state.backend import MISSING
from weir.state.columnar import ColumnarKeyIndex, KeyedAggregates
from weir.state.descriptors import ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, assign_to_key_group

FAST = settings(max_examples=60, deadline=None)
MAX_PAR = 128


def _key(value: Any) -> Any:
    """A key as a dict model holds it: NaN is one key (as its key bytes say)."""
    return "<nan>" if isinstance(value, float) and math.isnan(value) else value


def _check_batches(batches: list[pa.Array]) -> ColumnarKeyIndex:
    """Add each batch's distinct keys; every lookup must agree with a dict model."""
    index = ColumnarKeyIndex(MAX_PAR)
    model: dict[Any, int] = {}
    for batch in batches:
        distinct_keys = list(dict.fromkeys(_key(v) for v in batch.to_pylist()))
        distinct = pa.array([float("nan") if k == "<nan>" else k for k in distinct_keys],
                            batch.type)
        expected_new = [k for k in distinct_keys if k not in model]
        slots, added = index.find_or_add(distinct)
        assert [distinct_keys[i] for i in added.tolist()] == expected_new
        for k in expected_new:
            model[k] = len(model)
        assert slots.tolist() == [model[k] for k in distinct_keys]
        # Any batch, repeated keys included, finds the slots; unknown keys give -1.
        assert index.find(batch).tolist() == [model[_key(v)] for v in batch.to_pylist()]
    assert len(index) == len(model)
    slots = np.arange(len(model), dtype=np.int64)[::-1].copy()
    by_slot = {slot: key for key, slot in model.items()}
    assert [_key(v) for v in index.keys_at(slots).to_pylist()] == \
        [by_slot[s] for s in slots.tolist()]
    assert index.key_groups.tolist() == [
        assign_to_key_group(float("nan") if by_slot[s] == "<nan>" else by_slot[s], MAX_PAR)
        for s in range(len(model))]
    return index


strings = st.one_of(st.none(), st.text(max_size=6), st.sampled_from(["a", "b", "", "long" * 30]))
ints = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(-3, 3))
floats = st.one_of(st.none(), st.floats(allow_nan=False),
                   st.sampled_from([0.0, -0.0, 1.5, float("nan")]))


def _batches(values: st.SearchStrategy[Any], arrow_type: pa.DataType
             ) -> st.SearchStrategy[list[pa.Array]]:
    return st.lists(st.lists(values, min_size=0, max_size=40).map(
        lambda b: pa.array(b, arrow_type)), min_size=1, max_size=6)


@FAST
@given(st.one_of(_batches(strings, pa.string()), _batches(ints, pa.int64()),
                 _batches(floats, pa.float64()), _batches(strings, pa.large_string())))
def test_the_index_agrees_with_a_dict(batches: list[pa.Array]) -> None:
    _check_batches(batches)


@FAST
@given(_batches(strings, pa.string()))
def test_colliding_hashes_never_merge_keys(batches: list[pa.Array]) -> None:
    # Every key hashes alike: one long probe sequence, only the key comparison tells keys
    # apart (and the windowed probe goes on past its first window).
    original = columnar.key_hashes_of_array
    columnar.key_hashes_of_array = lambda a: np.full(len(a), 7, dtype=np.uint32)
    try:
        index = ColumnarKeyIndex(MAX_PAR)
        model: dict[Any, int] = {}
        for batch in batches:
            distinct = pa.array(list(dict.fromkeys(batch.to_pylist())), pa.string())
            index.find_or_add(distinct)
            for k in distinct.to_pylist():
                model.setdefault(k, len(model))
            assert index.find(batch).tolist() == [model[k] for k in batch.to_pylist()]
    finally:
        columnar.key_hashes_of_array = original


def test_many_keys_grow_the_table_and_the_key_buffers() -> None:
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(20_000)]
    batches = [pa.array([words[i] for i in rng.integers(0, len(words), 3000)])
               for _ in range(20)]
    index = _check_batches(batches)
    assert index.find(pa.array(["nope", "w1"])).tolist()[0] == -1


def test_keys_of_a_new_type_are_cast_to_the_stored_one_or_widen_it() -> None:
    index = ColumnarKeyIndex(MAX_PAR)
    index.find_or_add(pa.array([1, 2], pa.int32()))
    assert index.find(pa.array([2, 1], pa.int64())).tolist() == [1, 0]
    # Floats do not cast to ints without loss: the stored keys become floats.
    slots, added = index.find_or_add(pa.array([2.0, 2.5]))
    assert slots.tolist() == [1, 2] and added.tolist() == [1]
    assert index.keys_at(np.array([0, 2])).to_pylist() == [1.0, 2.5]
    # Dictionary-encoded and large strings are strings.
    strings = ColumnarKeyIndex(MAX_PAR)
    strings.find_or_add(pa.array(["x", "y"]).dictionary_encode())
    assert strings.find(pa.array(["y", "x", "z"], pa.large_string())).tolist() == [1, 0, -1]
    with pytest.raises(columnar.KeyTypeMismatchError, match="cannot be compared"):
        strings.find(pa.array([1, 2]))
    # Ints that floats cannot tell apart are not widened to floats.
    big = ColumnarKeyIndex(MAX_PAR)
    big.find_or_add(pa.array([2**60, 2**60 + 1]))
    with pytest.raises(columnar.KeyTypeMismatchError):
        big.find(pa.array([2.5]))


def test_other_key_types_are_kept_in_chunks() -> None:
    index = ColumnarKeyIndex(MAX_PAR)
    for batch in ([True, None], [False, True]):
        index.find_or_add(pa.array(list(dict.fromkeys(batch)), pa.bool_()))
    assert index.find(pa.array([False, True, None, True])).tolist() == [2, 0, 1, 0]
    assert index.keys_at(np.array([2, 1, 0])).to_pylist() == [False, None, True]


def _backend() -> HeapKeyedStateBackend:
    backend = HeapKeyedStateBackend(MAX_PAR, KeyGroupRange(0, MAX_PAR - 1))
    backend.get_state(ValueStateDescriptor("total"))
    return backend


def _stored(backend: HeapKeyedStateBackend, keys: list[Any]) -> list[Any]:
    groups = [assign_to_key_group(k, MAX_PAR) for k in keys]
    return backend.get_many("total", groups, keys)


def test_aggregates_read_each_key_from_the_backend_once_and_write_back_on_flush() -> None:
    backend = _backend()
    backend.put_many("total", [assign_to_key_group("a", MAX_PAR)], ["a"], None, [10])
    totals = KeyedAggregates(backend, "total")
    slots = totals.slots(pa.array(["a", "b"]))
    assert totals.values[slots].tolist() == [10, 0] and totals.has[slots].tolist() == [True,
                                                                                     False]
    totals.update(slots, np.array([11, 1]))
    # Not written yet: the backend is written back before a snapshot, not per batch.
    assert _stored(backend, ["a", "b"]) == [10, MISSING]
    assert totals.flush() == 2
    assert _stored(backend, ["a", "b"]) == [11, 1]
    assert totals.flush() == 0
    # A min/max with no value for a key leaves the backend without it.
    slots = totals.slots(pa.array(["c", "a"]))
    totals.update(slots, np.array([5, 12]), np.array([False, True]))
    assert totals.flush() == 1
    assert _stored(backend, ["a", "c"]) == [12, MISSING]
    # Values widen: an int total becomes a float one.
    totals.update(totals.slots(pa.array(["b"])), np.array([1.5]))
    totals.flush()
    assert _stored(backend, ["a", "b"]) == [12.0, 1.5]


def test_keys_of_another_type_start_the_cache_afresh_from_the_backend() -> None:
    backend = _backend()
    totals = KeyedAggregates(backend, "total")
    totals.update(totals.slots(pa.array(["1"])), np.array([3]))
    slots = totals.slots(pa.array([1, 2]))  # ints: the strings are flushed, then forgotten
    assert len(totals) == 2 and totals.has[slots].tolist() == [False, False]
    assert _stored(backend, ["1"]) == [3]


def test_a_fresh_backend_is_not_read_for_new_keys() -> None:
    backend = _backend()
    reads: list[int] = []
    get_many = backend.get_many
    backend.get_many = lambda *args: reads.append(1) or get_many(*args)  # type: ignore
    totals = KeyedAggregates(backend, "total", restored=False)
    totals.update(totals.slots(pa.array(["a", "b"])), np.array([1, 2]))
    assert reads == []
    totals.slots(pa.array([1]))  # another key type: the columns start afresh, reading
    assert reads == [1]
    assert KeyedAggregates(backend, "total").slots(pa.array(["a"])).tolist() == [0]
    assert reads == [1, 1]


def test_a_sorted_put_many_into_the_heap_backend_keeps_snapshots_and_the_last_value() -> None:
    backend = _backend()
    keys = [f"k{i}" for i in range(300)] + ["k7"]
    groups = [assign_to_key_group(k, MAX_PAR) for k in keys]
    order = sorted(range(len(keys)), key=lambda i: groups[i])  # stable: "k7" twice, in order
    backend.put_many("total", [groups[i] for i in order], [keys[i] for i in order], None,
                     [1 if i < 300 else 2 for i in order])
    frozen = backend.snapshot()
    before = list(frozen.entries())
    backend.put_many("total", [groups[i] for i in order], [keys[i] for i in order], None,
                     [5] * len(keys))
    assert list(frozen.entries()) == before  # copy on write: the snapshot kept its values
    assert _stored(backend, ["k7", "k0"]) == [5, 5]
    fresh = _backend()
    fresh.put_many("total", [groups[i] for i in order], [keys[i] for i in order], None,
                   [1 if i < 300 else 2 for i in order])
    assert _stored(fresh, ["k7", "k0"]) == [2, 1]


def test_past_max_keys_the_columns_are_written_back_and_start_afresh() -> None:
    backend = _backend()
    totals = KeyedAggregates(backend, "total", restored=False, max_keys=3)
    totals.update(totals.slots(pa.array(["a", "b", "c", "d"])), np.array([1, 2, 3, 4]))
    slots = totals.slots(pa.array(["a", "e"]))  # over 3 keys: flushed, then read back
    assert len(totals) == 2 and totals.values[slots].tolist() == [1, 0]
    assert _stored(backend, ["a", "b", "c", "d", "e"]) == [1, 2, 3, 4, MISSING]
