"""RecordWriter: forward, rebalance, broadcast and hash partitioning of output batches."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.core.records import Elements, records_to_arrow
from weir.core.row import Row
from weir.operators.keys import FieldKeySpec, FunctionKeySpec, key_spec
from weir.proto import common_pb2
from weir.state.key_groups import (
    assign_to_key_group,
    compute_operator_index_for_key_group,
    key_group_range_for_operator,
)
from weir.taskexecutor.record_writer import RecordWriter, split_by_target

FAST = settings(max_examples=40, deadline=None)


class FakePartitionWriter:
    """Records every emit as (subpartition, records)."""

    def __init__(self, num_subpartitions: int) -> None:
        self.num_subpartitions = num_subpartitions
        self.emits: list[tuple[int, Elements]] = []

    def emit(self, subpartition: int, elements: Elements) -> None:
        assert 0 <= subpartition < self.num_subpartitions
        self.emits.append((subpartition, elements))

    def per_target(self) -> dict[int, list]:
        out: dict[int, list] = {}
        for target, elements in self.emits:
            out.setdefault(target, []).extend(elements.records())
        return out


def owner(key, max_parallelism: int, parallelism: int) -> int:
    """The subtask owning ``key``, computed record by record from state.key_groups."""
    group = assign_to_key_group(key, max_parallelism)
    target = compute_operator_index_for_key_group(max_parallelism, parallelism, group)
    assert group in key_group_range_for_operator(max_parallelism, parallelism, target)
    return target


def expected_split(records: list, key_of, max_parallelism: int, n: int) -> dict[int, list]:
    out: dict[int, list] = {}
    for record in records:
        out.setdefault(owner(key_of(record), max_parallelism, n), []).append(record)
    return out


def writer_for(partitioner: int, n: int, key=None, max_parallelism: int = 128,
               subtask_index: int = 0) -> tuple[RecordWriter, FakePartitionWriter]:
    fake = FakePartitionWriter(n)
    return RecordWriter(fake, partitioner, key, max_parallelism, subtask_index), fake


def test_forward_goes_to_the_one_subpartition() -> None:
    writer, fake = writer_for(common_pb2.FORWARD, 1)
    batches = [Elements.from_records([1, 2]), Elements.from_records([3])]
    for batch in batches:
        writer.emit(batch)
    assert [(t, e) for t, e in fake.emits] == [(0, batches[0]), (0, batches[1])]


def test_any_partitioner_with_one_consumer_sends_everything_there() -> None:
    for partitioner in (common_pb2.REBALANCE, common_pb2.BROADCAST, common_pb2.HASH):
        writer, fake = writer_for(partitioner, 1, key_spec(lambda x: x))
        batch = Elements.from_records([1, 2, 3])
        writer.emit(batch)
        assert fake.emits == [(0, batch)]


@pytest.mark.parametrize("subtask_index", [0, 1, 5])
def test_rebalance_is_round_robin_per_batch(subtask_index) -> None:
    n = 3
    writer, fake = writer_for(common_pb2.REBALANCE, n, subtask_index=subtask_index)
    batches = [Elements.from_records([i]) for i in range(7)]
    for batch in batches:
        writer.emit(batch)
    start = subtask_index % n
    assert [t for t, _ in fake.emits] == [(start + i) % n for i in range(7)]
    assert [e for _, e in fake.emits] == batches  # whole batches, unsplit, in order


def test_broadcast_sends_every_batch_to_every_subpartition() -> None:
    writer, fake = writer_for(common_pb2.BROADCAST, 4)
    batches = [Elements.from_records(["a", "b"]), Elements.from_records(["c"])]
    for batch in batches:
        writer.emit(batch)
    assert fake.per_target() == {t: ["a", "b", "c"] for t in range(4)}
    assert [t for t, _ in fake.emits] == [0, 1, 2, 3, 0, 1, 2, 3]


@pytest.mark.parametrize("n", [2, 3, 7])
@pytest.mark.parametrize("max_parallelism", [7, 128])
@pytest.mark.parametrize("form", ["records", "arrow"])
def test_hash_sends_each_record_to_the_owner_of_its_key_group(n, max_parallelism, form) -> None:
    rng = random.Random(n * 1000 + max_parallelism)
    records = [Row(user=f"u{rng.randrange(50)}", n=i) for i in range(300)]
    elements = Elements.from_records(records)
    if form == "arrow":
        elements = Elements.from_arrow(records_to_arrow(records))
    writer, fake = writer_for(common_pb2.HASH, n, FieldKeySpec("user"), max_parallelism)
    writer.emit(elements)
    got = fake.per_target()
    assert got == expected_split(records, lambda r: r.user, max_parallelism, n)
    # Order is preserved within each target (the "n" field grows along the input).
    for part in got.values():
        assert [r.n for r in part] == sorted(r.n for r in part)
    assert all(e.is_arrow == (form == "arrow") for _, e in fake.emits)


@pytest.mark.parametrize("key", [
    pytest.param(FieldKeySpec(0), id="position"),
    pytest.param(FieldKeySpec((0, 2)), id="two-fields"),
    pytest.param(FunctionKeySpec(lambda r: r[1] % 5), id="function"),
])
@pytest.mark.parametrize("form", ["records", "arrow"])
def test_hash_keys_of_every_kind(key, form) -> None:
    rng = random.Random(7)
    records = [(rng.choice(["a", "b", "c", "dd", ""]), i, rng.randrange(3)) for i in range(200)]
    elements = Elements.from_records(records)
    if form == "arrow":
        elements = Elements.from_arrow(elements.arrow())
    writer, fake = writer_for(common_pb2.HASH, 4, key, 128)
    writer.emit(elements)
    assert fake.per_target() == expected_split(records, key.get_key, 128, 4)


@FAST
@given(st.lists(st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=4)), max_size=40),
       st.integers(2, 6), st.sampled_from([1, 10, 128]).filter(lambda m: m >= 1))
def test_hash_of_any_python_keys(keys, n, max_parallelism) -> None:
    max_parallelism = max(max_parallelism, n)
    records = [(k, i) for i, k in enumerate(keys)]
    writer, fake = writer_for(common_pb2.HASH, n, FieldKeySpec(0), max_parallelism)
    writer.emit(Elements.from_records(records))
    assert fake.per_target() == expected_split(records, lambda r: r[0], max_parallelism, n)


def test_hash_of_a_pickled_batch_uses_the_field_not_the_whole_record() -> None:
    # Nested values make the batch a single column of pickles; the key is still field 0.
    records = [("k", [i]) for i in range(20)] + [("j", {"x": i}) for i in range(20)]
    arrow = Elements.from_arrow(records_to_arrow(records))
    assert arrow.arrow().schema.names == ["_pickled"]
    writer, fake = writer_for(common_pb2.HASH, 8, FieldKeySpec(0), 128)
    writer.emit(arrow)
    assert fake.per_target() == expected_split(records, lambda r: r[0], 128, 8)
    assert len(fake.emits) <= 2


def test_hash_with_a_missing_column_names_it() -> None:
    writer, _ = writer_for(common_pb2.HASH, 2, FieldKeySpec("nope"), 128)
    batch = Elements.from_arrow(pa.record_batch({"user": ["a"]}))
    with pytest.raises(KeyError, match=r"'nope' is not a column.*user"):
        writer.emit(batch)


def test_hash_of_a_batch_with_one_target_is_not_copied() -> None:
    writer, fake = writer_for(common_pb2.HASH, 4, FieldKeySpec(0), 128)
    batch = Elements.from_records([("same", i) for i in range(10)])
    writer.emit(batch)
    assert fake.emits == [(owner("same", 128, 4), batch)]


def test_split_by_target_keeps_order_and_type() -> None:
    from weir.core.types import Types

    t = Types.TUPLE([Types.STRING(), Types.LONG()])
    records = [("a", 0), ("b", 1), ("c", 2), ("d", 3), ("e", 4)]
    targets = np.array([2, 0, 2, 2, 0])
    parts = split_by_target(Elements.from_records(records, t), targets, 3)
    assert [(target, part.records()) for target, part in parts] == [
        (0, [("b", 1), ("e", 4)]), (2, [("a", 0), ("c", 2), ("d", 3)])]
    assert all(part.type_info == t for _, part in parts)


def test_split_by_target_of_arrow_batches() -> None:
    batch = pa.record_batch({"x": list(range(6))})
    targets = np.array([1, 1, 0, 1, 0, 3])
    parts = split_by_target(Elements.from_arrow(batch), targets, 4)
    assert [(t, p.arrow().column(0).to_pylist()) for t, p in parts] == [
        (0, [2, 4]), (1, [0, 1, 3]), (3, [5])]
    assert all(p.is_arrow for _, p in parts)


def test_split_by_target_of_nothing() -> None:
    assert split_by_target(Elements.from_records([]), np.array([], dtype=np.int32), 3) == []


@FAST
@given(st.lists(st.integers(0, 4), max_size=50))
def test_split_by_target_is_a_stable_partition(targets) -> None:
    records = list(range(len(targets)))
    parts = split_by_target(Elements.from_records(records), np.array(targets, dtype=np.int32), 5)
    expected = {}
    for record, target in zip(records, targets, strict=True):
        expected.setdefault(target, []).append(record)
    assert {t: p.records() for t, p in parts} == expected
    assert [t for t, _ in parts] == sorted(expected)
