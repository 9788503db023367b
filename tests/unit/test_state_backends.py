"""Keyed state backends: handle semantics, parity, TTL, copy-on-write snapshots, canonical
snapshots and restore for any key-group range (rescaling)."""

from __future__ import annotations

import doctest
import io
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import weir.core.time
import weir.state.backend
import weir.state.canonical
import weir.state.descriptors
import weir.state.heap
import weir.state.restore
import weir.state.rocksdb
import weir.state.serializers
from weir.core.errors import StateError
from weir.core.time import Time
from weir.state.backend import KeyedStateBackend
from weir.state.canonical import read_canonical, write_canonical, write_segments
from weir.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, assign_to_key_group, key_group_range_for_operator
from weir.state.restore import restore_canonical
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.serializers import decode_key, encode_key

MAX_PAR = 128
ALL = KeyGroupRange(0, MAX_PAR - 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["hashmap", "rocksdb"])
def make_backend(request, tmp_path) -> Iterator[Callable[..., KeyedStateBackend]]:
    created: list[KeyedStateBackend] = []

    def make(key_groups: KeyGroupRange = ALL, clock=None) -> KeyedStateBackend:
        if request.param == "hashmap":
            backend: KeyedStateBackend = HeapKeyedStateBackend(MAX_PAR, key_groups, clock)
        else:
            backend = RocksDBKeyedStateBackend(MAX_PAR, key_groups,
                                          tmp_path / f"rocks-{len(created)}", clock=clock)
        created.append(backend)
        return backend

    yield make
    for backend in created:
        backend.dispose()


def canonical(backend: KeyedStateBackend) -> bytes:
    out = io.BytesIO()
    write_canonical(backend.entries(), out)
    return out.getvalue()


def test_module_examples_run():
    for module in (weir.state.backend, weir.state.canonical, weir.state.descriptors,
                   weir.state.heap, weir.state.restore, weir.state.rocksdb,
                   weir.state.serializers, weir.core.time):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


@pytest.mark.parametrize("key", [None, True, False, 0, -1, 2**70, 1.5, "é\udc80", b"\x00b",
                                 ("a", (1, None)), (), Time.seconds(3)])
def test_keys_round_trip_canonically(key):
    assert decode_key(encode_key(key)) == key
    if isinstance(key, bool) or key is None:
        return
    if isinstance(key, int) and abs(key) < 2**63:
        assert encode_key(float(key)) == encode_key(key)


def test_value_list_map_reducing_aggregating_state(make_backend):
    backend = make_backend()

    class Average:
        def create_accumulator(self):
            return (0, 0)

        def add(self, value, acc):
            return (acc[0] + value, acc[1] + 1)

        def get_result(self, acc):
            return acc[0] / acc[1]

    value = backend.get_state(ValueStateDescriptor("v"))
    items = backend.get_state(ListStateDescriptor("l"))
    table = backend.get_state(MapStateDescriptor("m"))
    total = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    mean = backend.get_state(AggregatingStateDescriptor("a", Average()))
    for key in ("x", "y"):
        backend.set_current_key(key)
        assert value.value() is None and items.get() == [] and table.is_empty()
        assert total.get() is None and mean.get() is None
        value.update(key * 2)
        items.add(1)
        items.add_all([2, 3])
        table.put("a", 1)
        table.put_all({"b": 2, "c": 3})
        table.remove("a")
        for n in (1, 2, 6):
            total.add(n)
            mean.add(n)
    backend.set_current_key("x")
    assert value.value() == "xx" and items.get() == [1, 2, 3]
    assert table.items() == [("b", 2), ("c", 3)] and table.get("a") is None
    assert table.contains("b") and not table.contains("a")
    assert total.get() == 9 and mean.get() == 3
    items.update([7])
    value.clear()
    assert items.get() == [7] and value.value() is None
    backend.set_current_key("y")
    assert value.value() == "yy" and items.get() == [1, 2, 3]
    assert sorted(backend.keys("v")) == ["y"]


def test_a_state_name_keeps_its_kind(make_backend):
    backend = make_backend()
    backend.get_state(ValueStateDescriptor("s"))
    with pytest.raises(StateError, match="already registered as value"):
        backend.get_state(ListStateDescriptor("s"))


def test_a_key_outside_the_owned_key_groups_is_refused(make_backend):
    backend = make_backend(KeyGroupRange(0, 0))
    key = next(k for k in range(1000) if assign_to_key_group(k, MAX_PAR) != 0)
    with pytest.raises(StateError, match="does not own"):
        backend.set_current_key(key)


def random_operations(backend: KeyedStateBackend, seed: int, keys: int = 200) -> None:
    rng = random.Random(seed)
    value = backend.get_state(ValueStateDescriptor("v"))
    items = backend.get_state(ListStateDescriptor("l"))
    table = backend.get_state(MapStateDescriptor("m"))
    for _ in range(2000):
        backend.set_current_key(rng.choice([rng.randrange(keys), f"k{rng.randrange(keys)}",
                                            (rng.randrange(9), "t")]))
        op = rng.randrange(6)
        if op == 0:
            value.update(rng.random())
        elif op == 1:
            value.clear()
        elif op == 2:
            items.add(rng.randrange(100))
        elif op == 3:
            table.put(rng.randrange(5), rng.random())
        elif op == 4:
            table.remove(rng.randrange(5))
        else:
            items.clear()


def test_backends_agree_and_write_the_same_canonical_snapshot(tmp_path):
    heap = HeapKeyedStateBackend(MAX_PAR, ALL)
    rocks = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "rocks")
    try:
        random_operations(heap, seed=7)
        random_operations(rocks, seed=7)
        heap_bytes, rocks_bytes = canonical(heap), canonical(rocks)
        assert len(list(read_canonical(heap_bytes, ALL))) > 100
        assert heap_bytes == rocks_bytes
        for name in ("v", "l", "m"):
            assert sorted(map(repr, heap.keys(name))) == sorted(map(repr, rocks.keys(name)))
    finally:
        rocks.dispose()


def test_snapshots_restore_across_backends(make_backend, tmp_path):
    heap = HeapKeyedStateBackend(MAX_PAR, ALL)
    random_operations(heap, seed=3)
    original = canonical(heap)
    target = make_backend()
    restore_canonical(target, [original])
    target.get_state(ValueStateDescriptor("v"))
    assert canonical(target) == original


def test_snapshot_is_frozen_while_processing_goes_on(make_backend):
    backend = make_backend()
    value = backend.get_state(ValueStateDescriptor("v"))
    items = backend.get_state(ListStateDescriptor("l"))
    table = backend.get_state(MapStateDescriptor("m"))
    backend.set_current_key("k")
    value.update(1)
    items.add("a")
    table.put("x", 1)
    before = canonical(backend)
    frozen = backend.snapshot()
    value.update(2)
    items.add("b")  # an in-place change of a list shared with the snapshot
    table.put("y", 2)
    backend.set_current_key("other")
    value.update(3)
    out = io.BytesIO()
    write_canonical(frozen.entries(), out)
    frozen.release()
    assert out.getvalue() == before
    backend.set_current_key("k")
    assert (value.value(), items.get(), table.items()) == (2, ["a", "b"], [("x", 1), ("y", 2)])


def frozen_bytes(frozen) -> bytes:
    out = io.BytesIO()
    write_segments(frozen.segments(), out)
    frozen.release()
    return out.getvalue()


NAMESPACES = [None, "w", "window-17", 12_345, (1, "x")]   # encodings of different lengths


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["put", "delete", "put_many", "delete_many",
                                               "snapshot"]),
                              st.lists(st.integers(0, 40), min_size=1, max_size=6),
                              st.integers(0, 1000), st.sampled_from(NAMESPACES)),
                    max_size=40),
       namespaced=st.booleans())
# a namespace of another length added later: "w" sorts after 12345 (type tags first) but
# its prefix, whose length field is smaller, would sort before
@example(ops=[("put_many", [1], 1, "w"), ("snapshot", [0], 0, None),
              ("put_many", [1], 2, 12_345), ("snapshot", [0], 0, None)], namespaced=True)
def test_heap_snapshot_layout_follows_every_key_change(ops, namespaced, tmp_path):
    # The heap backend keeps each table's key order between snapshots, extends it with the
    # keys added since and drops it when a key is removed; whatever the order of writes,
    # deletes and snapshots, its snapshot must be the bytes RocksDB (which sorts on disk)
    # writes for the same state. Four key groups, so that writes after a snapshot often
    # land in a snapshotted table; namespaces of one or of several encoded lengths.
    heap = HeapKeyedStateBackend(4, KeyGroupRange(0, 3))
    rocks = RocksDBKeyedStateBackend(4, KeyGroupRange(0, 3), tmp_path / f"rocks-{random.random()}")
    try:
        for backend in (heap, rocks):
            backend.get_state(ValueStateDescriptor("v"))
        for op, keys, value, namespace in ops:
            if op == "snapshot":
                assert frozen_bytes(heap.snapshot()) == frozen_bytes(rocks.snapshot())
                continue
            namespace = namespace if namespaced else None
            groups = [assign_to_key_group(k, 4) for k in keys]
            for backend in (heap, rocks):
                if op == "put_many":
                    backend.put_many("v", groups, keys, namespace, [value] * len(keys))
                elif op == "delete_many":
                    backend.delete_many("v", groups, keys, namespace)
                else:
                    state = backend.get_state(ValueStateDescriptor("v"))
                    for key in keys:
                        backend.set_current_key(key)
                        state.update(value) if op == "put" else state.clear()
        assert frozen_bytes(heap.snapshot()) == frozen_bytes(rocks.snapshot()) == canonical(heap)
    finally:
        heap.dispose()
        rocks.dispose()


def test_ttl_expiry_and_update_types(make_backend):
    clock = FakeClock()
    backend = make_backend(clock=clock)
    on_write = ValueStateDescriptor("w")
    on_write.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10)).build())
    on_read = ValueStateDescriptor("r")
    on_read.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10))
                                .update_ttl_on_read_and_write().build())
    visible = ListStateDescriptor("e")
    visible.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10))
                                .return_expired_if_not_cleaned_up().build())
    w, r, e = (backend.get_state(d) for d in (on_write, on_read, visible))
    backend.set_current_key("k")
    w.update("w")
    r.update("r")
    e.add("e")
    clock.now += 6
    assert w.value() == "w" and r.value() == "r"  # the read restarts r's clock
    clock.now += 6
    assert w.value() is None, "expired 12 s after its write"
    assert r.value() == "r", "read 6 s ago"
    assert e.get() == ["e"], "expired but still visible once, as configured"
    assert e.get() == [], "and cleaned up by that read"
    clock.now += 11
    assert r.value() is None


def test_corrupt_canonical_snapshot_is_a_clear_error():
    backend = HeapKeyedStateBackend(MAX_PAR, ALL)
    random_operations(backend, seed=1, keys=20)
    data = bytearray(canonical(backend))
    data[-3] ^= 0xFF
    with pytest.raises(StateError, match="bad magic"):
        list(read_canonical(bytes(data), ALL))


def _subtasks(parallelism: int) -> list[KeyGroupRange]:
    return [key_group_range_for_operator(MAX_PAR, parallelism, i) for i in range(parallelism)]


def _rescale_and_check(keys: list[object], old: int, new: int, tmp_path: Path,
                       backend_type: str) -> None:
    source = HeapKeyedStateBackend(MAX_PAR, ALL)
    count = source.get_state(ValueStateDescriptor("count"))
    expected = {}
    for i, key in enumerate(keys):
        source.set_current_key(key)
        count.update(i + 1)
        expected[encode_key(key)] = i + 1
    # Snapshot at the old parallelism: one snapshot per old subtask.
    snapshots = []
    for key_groups in _subtasks(old):
        part = HeapKeyedStateBackend(MAX_PAR, key_groups)
        restore_canonical(part, [canonical(source)])
        snapshots.append(canonical(part))
    seen: dict[bytes, int] = {}
    for index, key_groups in enumerate(_subtasks(new)):
        if backend_type == "hashmap":
            target: KeyedStateBackend = HeapKeyedStateBackend(MAX_PAR, key_groups)
        else:
            target = RocksDBKeyedStateBackend(MAX_PAR, key_groups,
                                              tmp_path / f"r{old}-{new}-{index}")
        try:
            restore_canonical(target, snapshots)
            for _, key_group, key, _, value in target.entries():
                assert key_group in key_groups
                assert key not in seen, "a key restored into two subtasks"
                seen[key] = weir.state.serializers.deserialize_value(value)
        finally:
            target.dispose()
    assert seen == expected


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.one_of(st.integers(), st.text(max_size=8),
                               st.tuples(st.integers(0, 9), st.text(max_size=3))),
                     unique_by=lambda k: encode_key(k), max_size=60))
def test_rescaling_every_p_to_p_prime_keeps_every_key_exactly_once(keys, tmp_path):
    for old in range(1, 9):
        for new in range(1, 9):
            _rescale_and_check(keys, old, new, tmp_path, "hashmap")


@pytest.mark.parametrize(("old", "new"), [(1, 8), (3, 2), (2, 3), (8, 1)])
def test_rescaling_into_rocksdb(old, new, tmp_path):
    keys = [f"user-{i}" for i in range(300)] + list(range(300))
    _rescale_and_check(keys, old, new, tmp_path, "rocksdb")


@pytest.mark.parametrize("backend_type", ["hashmap", "rocksdb"])
def test_restoring_a_state_as_another_kind_is_refused(tmp_path, backend_type):
    """A snapshot records each state's kind; declaring a restored state as another kind
    fails with a message naming the operator and the state, not with garbage reads."""
    from weir.checkpoint.storage import create_storage
    from weir.core.errors import IncompatibleStateError
    from weir.state.descriptors import ListStateDescriptor, ValueStateDescriptor
    from weir.state.heap import HeapKeyedStateBackend
    from weir.state.key_groups import KeyGroupRange
    from weir.state.restore import restore
    from weir.state.rocksdb import RocksDBKeyedStateBackend
    from weir.state.snapshot import SnapshotLocation

    def make(name: str):
        if backend_type == "hashmap":
            return HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
        return RocksDBKeyedStateBackend(128, KeyGroupRange(0, 127), tmp_path / name)

    storage = create_storage(str(tmp_path / "checkpoints"))
    old = make("old")
    old.get_state(ValueStateDescriptor("count"))
    old.set_current_key("k")
    old.get_state(ValueStateDescriptor("count")).update(3)
    handle = old.snapshot_to(1, SnapshotLocation.for_checkpoint(storage, "j", 1, "op")).run()
    assert handle.state_kinds == {"count": "value"}
    same, other = make("same"), make("other")
    try:
        restore(same, [handle], storage)
        same.set_current_key("k")
        assert same.get_state(ValueStateDescriptor("count")).value() == 3
        restore(other, [handle], storage)
        other.owner = "counts"
        with pytest.raises(IncompatibleStateError, match=r"operator 'counts'.*'count' is value"):
            other.get_state(ListStateDescriptor("count"))
    finally:
        for backend in (old, same, other):
            backend.dispose()
