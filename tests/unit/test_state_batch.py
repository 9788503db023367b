"""Batched state primitives (get_many / put_many / delete_many): the same results on both
backends and as the per-record handles, ownership checks, raw (TTL) values, and
copy-on-write snapshots."""

from __future__ import annotations

import io
import random

import numpy as np
import pyarrow as pa
import pytest

from weir.core.errors import StateError
from weir.core.time import Time
from weir.state.backend import MISSING
from weir.state.canonical import write_canonical
from weir.state.descriptors import StateTtlConfig, ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, assign_to_key_group, key_groups_of_array
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.testing.state_backend import canonical_bytes

MAX_PAR = 128
ALL = KeyGroupRange(0, MAX_PAR - 1)


def groups(keys: list) -> list[int]:
    return [assign_to_key_group(k, MAX_PAR) for k in keys]




def test_put_get_delete_many(make_backend):
    backend = make_backend()
    backend.get_state(ValueStateDescriptor("v"))
    keys = ["a", 1, (2, "x"), b"raw"]
    backend.put_many("v", groups(keys), keys, None, [10, 20, [30], {"d": 40}])
    assert backend.get_many("v", groups(keys), keys) == [10, 20, [30], {"d": 40}]
    assert backend.get_many("v", groups(["zz"]), ["zz"]) == [MISSING]
    # Namespaces are separate.
    assert backend.get_many("v", groups(keys), keys, namespace="w") == [MISSING] * 4
    doomed = [*keys[:2], "absent"]
    backend.delete_many("v", groups(doomed), doomed)
    assert backend.get_many("v", groups(keys), keys) == [MISSING, MISSING, [30], {"d": 40}]


def test_batches_accept_numpy_key_groups_from_arrow_columns(make_backend):
    backend = make_backend()
    backend.get_state(ValueStateDescriptor("count"))
    column = pa.array([f"user-{i}" for i in range(1000)])
    key_groups = key_groups_of_array(column, MAX_PAR)
    assert isinstance(key_groups, np.ndarray)
    keys = column.to_pylist()
    assert key_groups.tolist() == groups(keys), "vectorised and scalar key groups agree"
    backend.put_many("count", key_groups, keys, None, list(range(1000)))
    assert backend.get_many("count", key_groups, keys) == list(range(1000))


def test_a_later_equal_key_wins_within_a_batch(make_backend):
    backend = make_backend()
    backend.get_state(ValueStateDescriptor("v"))
    keys = ["k", "k", 1, 1.0]
    backend.put_many("v", groups(keys), keys, None, [1, 2, 3, 4])
    assert backend.get_many("v", groups(["k", 1]), ["k", 1]) == [2, 4]


def test_batches_and_handles_see_the_same_state(make_backend):
    rng = random.Random(5)
    batched, per_record = make_backend(), make_backend()
    handle = per_record.get_state(ValueStateDescriptor("v"))
    batched.get_state(ValueStateDescriptor("v"))
    universe = [rng.choice([rng.randrange(500), f"k{rng.randrange(500)}"]) for _ in range(300)]
    for _ in range(20):
        keys = rng.sample(universe, 50)
        old = batched.get_many("v", groups(keys), keys)
        expected = []
        for key in keys:
            per_record.set_current_key(key)
            value = handle.value()
            expected.append(MISSING if value is None else value)
        assert old == expected
        new = [(o if o is not MISSING else 0) + 1 for o in old]
        batched.put_many("v", groups(keys), keys, None, new)
        for key, value in zip(keys, new, strict=True):
            per_record.set_current_key(key)
            handle.update(value)
        doomed = rng.sample(keys, 5)
        batched.delete_many("v", groups(doomed), doomed)
        for key in doomed:
            per_record.set_current_key(key)
            handle.clear()
    assert canonical_bytes(batched) == canonical_bytes(per_record)


def test_both_backends_store_the_same_bytes_from_batches(tmp_path):
    heap = HeapKeyedStateBackend(MAX_PAR, ALL)
    rocks = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "rocks")
    try:
        keys = [f"u{i}" for i in range(2000)] + list(range(2000))
        for backend in (heap, rocks):
            backend.get_state(ValueStateDescriptor("v"))
            backend.put_many("v", groups(keys), keys, "ns", [i * 3 for i in range(len(keys))])
            backend.delete_many("v", groups(keys[::7]), keys[::7], "ns")
        assert canonical_bytes(heap) == canonical_bytes(rocks)
        assert heap.get_many("v", groups(keys), keys, "ns") == \
            rocks.get_many("v", groups(keys), keys, "ns")
    finally:
        rocks.dispose()


def test_batches_check_registration_lengths_and_ownership(make_backend):
    backend = make_backend(KeyGroupRange(0, 63))
    with pytest.raises(StateError, match="not registered"):
        backend.get_many("nope", [0], ["k"])
    backend.get_state(ValueStateDescriptor("v"))
    with pytest.raises(StateError, match="2 keys but 1 key groups"):
        backend.get_many("v", [0], ["a", "b"])
    with pytest.raises(StateError, match="2 keys but 1 values"):
        backend.put_many("v", [0, 0], ["a", "b"], None, [1])
    foreign = next(k for k in range(1000) if assign_to_key_group(k, MAX_PAR) > 63)
    with pytest.raises(StateError, match=f"key {foreign!r} is in key group .* does not own"):
        backend.put_many("v", groups([0, foreign]), [0, foreign], None, [1, 2])


def test_batches_return_raw_ttl_values(make_backend):
    backend = make_backend()
    descriptor = ValueStateDescriptor("t")
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(1)).build())
    handle = backend.get_state(descriptor)
    backend.set_current_key("k")
    handle.update("v")
    (raw,) = backend.get_many("t", groups(["k"]), ["k"])
    assert raw[0] == "v" and isinstance(raw[1], int), "stored as (value, last access ms)"


def test_put_many_after_a_snapshot_leaves_the_snapshot_as_it_was(make_backend):
    backend = make_backend()
    backend.get_state(ValueStateDescriptor("v"))
    keys = list(range(100))
    backend.put_many("v", groups(keys), keys, None, [0] * 100)
    before = canonical_bytes(backend)
    frozen = backend.snapshot()
    backend.put_many("v", groups(keys), keys, None, [1] * 100)
    backend.delete_many("v", groups(keys[:10]), keys[:10])
    out = io.BytesIO()
    write_canonical(frozen.entries(), out)
    frozen.release()
    assert out.getvalue() == before
    assert backend.get_many("v", groups(keys), keys) == [MISSING] * 10 + [1] * 90


def test_batches_keep_the_current_key(make_backend):
    backend = make_backend()
    handle = backend.get_state(ValueStateDescriptor("v"))
    backend.set_current_key("mine")
    handle.update("x")
    backend.put_many("v", groups(["other"]), ["other"], None, ["y"])
    assert backend.current_key == "mine" and handle.value() == "x"
