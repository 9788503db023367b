"""Keyed state backends: the conformance suite on every backend (handle semantics, TTL,
timers, copy-on-write snapshots, restore and rescaling), and what is particular to the
backends: canonical keys, the heap backend's snapshot layout, parity between backends."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import weir.state.serializers
from tests.support.state_backends import apply_write, frozen_bytes, snapshot_entries
from weir.core.errors import StateError
from weir.core.time import Time
from weir.state.backend import KeyedStateBackend
from weir.state.canonical import read_canonical
from weir.state.descriptors import ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, key_group_range_for_operator
from weir.state.restore import restore_canonical
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.serializers import decode_key, encode_key
from weir.testing.state_backend import (
    STATE_BACKEND_CHECKS,
    canonical_bytes,
    fill_counts,
    fill_randomly,
)

MAX_PAR = 128
ALL = KeyGroupRange(0, MAX_PAR - 1)


@pytest.mark.parametrize("check", STATE_BACKEND_CHECKS, ids=lambda check: check.__name__)
def test_conformance(backends, backend_kind, check):
    check(backends.maker(backend_kind))


@pytest.mark.parametrize("key", [None, True, False, 0, -1, 2**70, 1.5, "é\udc80", b"\x00b",
                                 ("a", (1, None)), (), Time.seconds(3)])
def test_keys_round_trip_canonically(key):
    assert decode_key(encode_key(key)) == key
    if isinstance(key, bool) or key is None:
        return
    if isinstance(key, int) and abs(key) < 2**63:
        assert encode_key(float(key)) == encode_key(key)


def test_backends_agree_and_write_the_same_canonical_snapshot(tmp_path):
    heap = HeapKeyedStateBackend(MAX_PAR, ALL)
    rocks = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "rocks")
    try:
        fill_randomly(heap, seed=7)
        fill_randomly(rocks, seed=7)
        heap_bytes, rocks_bytes = canonical_bytes(heap), canonical_bytes(rocks)
        assert len(list(read_canonical(heap_bytes, ALL))) > 100
        assert heap_bytes == rocks_bytes  # entries: both in the canonical order
        assert snapshot_entries(frozen_bytes(heap.snapshot())) == \
            snapshot_entries(frozen_bytes(rocks.snapshot()))
        for name in ("v", "l", "m"):
            assert sorted(map(repr, heap.keys(name))) == sorted(map(repr, rocks.keys(name)))
    finally:
        rocks.dispose()


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
    # The heap backend keeps each table's encoded keys between snapshots, extends them with
    # the keys added since and drops them when a key is removed; whatever the order of
    # writes, deletes and snapshots, its snapshot must hold the entries RocksDB writes for
    # the same state. Four key groups, so that writes after a snapshot often
    # land in a snapshotted table; namespaces of one or of several encoded lengths.
    heap = HeapKeyedStateBackend(4, KeyGroupRange(0, 3))
    rocks = RocksDBKeyedStateBackend(4, KeyGroupRange(0, 3), tmp_path / f"rocks-{random.random()}")
    try:
        for backend in (heap, rocks):
            backend.get_state(ValueStateDescriptor("v"))
        for op, keys, value, namespace in ops:
            if op == "snapshot":
                assert snapshot_entries(frozen_bytes(heap.snapshot())) == \
                    snapshot_entries(frozen_bytes(rocks.snapshot()))
                continue
            apply_write((heap, rocks), op, keys, value, namespace if namespaced else None, 4)
        assert snapshot_entries(frozen_bytes(heap.snapshot())) == \
            snapshot_entries(frozen_bytes(rocks.snapshot())) == \
            snapshot_entries(canonical_bytes(heap))
    finally:
        heap.dispose()
        rocks.dispose()


def test_corrupt_canonical_snapshot_is_a_clear_error():
    backend = HeapKeyedStateBackend(MAX_PAR, ALL)
    fill_randomly(backend, seed=1, keys=20)
    data = bytearray(canonical_bytes(backend))
    data[-3] ^= 0xFF
    with pytest.raises(StateError, match="bad magic"):
        list(read_canonical(bytes(data), ALL))


def _subtasks(parallelism: int) -> list[KeyGroupRange]:
    return [key_group_range_for_operator(MAX_PAR, parallelism, i) for i in range(parallelism)]


def _rescale_and_check(keys: list[object], old: int, new: int, tmp_path: Path,
                       backend_type: str) -> None:
    source = HeapKeyedStateBackend(MAX_PAR, ALL)
    expected = fill_counts(source, keys)
    # Snapshot at the old parallelism: one snapshot per old subtask.
    snapshots = []
    for key_groups in _subtasks(old):
        part = HeapKeyedStateBackend(MAX_PAR, key_groups)
        restore_canonical(part, [canonical_bytes(source)])
        snapshots.append(canonical_bytes(part))
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
