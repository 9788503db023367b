"""The heap backend's snapshots when their asynchronous part runs late, as it does in a job:
the task writes on (into copies of the frozen tables) before the upload thread encodes the
snapshot. The entries must be RocksDB's for the same state, and the keys a snapshot encodes
must serve the next one (the copies were made before it existed)."""

from __future__ import annotations

import random
import struct
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.state_backends import apply_write, frozen_bytes, snapshot_entries
from weir.core.errors import StateError
from weir.state import heap as heap_module
from weir.state.canonical import (
    PACKED,
    encode_prefix,
    encode_segment,
    read_canonical,
    read_segments,
)
from weir.state.descriptors import ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, assign_to_key_group
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.serializers import deserialize_value, encode_key, serialize_value, serialize_values

ALL = KeyGroupRange(0, 3)


def frozen_entries(frozen: Any) -> list[tuple[Any, ...]]:
    return snapshot_entries(frozen_bytes(frozen))


NAMESPACES = [None, "w", 12_345]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["put_many", "put_many", "delete_many", "put",
                                               "freeze", "write"]),
                              st.lists(st.integers(0, 40), min_size=1, max_size=6),
                              st.integers(0, 1000), st.sampled_from(NAMESPACES)),
                    max_size=40),
       namespaced=st.booleans())
@example(ops=[("put_many", [1, 2], 1, None), ("freeze", [0], 0, None),
              ("put_many", [3], 2, None), ("freeze", [0], 0, None), ("write", [0], 0, None),
              ("put_many", [4], 3, None), ("write", [0], 0, None)], namespaced=False)
def test_late_snapshots_hold_what_rocksdb_holds(ops: list[tuple[str, list[int], int, Any]],
                                                   namespaced: bool, tmp_path: Path) -> None:
    heap = HeapKeyedStateBackend(4, KeyGroupRange(0, 3))
    rocks = RocksDBKeyedStateBackend(4, KeyGroupRange(0, 3), tmp_path / f"rocks-{random.random()}")
    # Frozen snapshots whose asynchronous part has not run yet, oldest first.
    pending: deque[tuple[Any, Any]] = deque()
    try:
        for backend in (heap, rocks):
            backend.get_state(ValueStateDescriptor("v"))
        for op, keys, value, namespace in ops:
            if op == "freeze":
                pending.append((heap.snapshot(), rocks.snapshot()))
                continue
            if op == "write":
                if pending:
                    frozen_heap, frozen_rocks = pending.popleft()
                    assert frozen_entries(frozen_heap) == frozen_entries(frozen_rocks)
                continue
            apply_write((heap, rocks), op, keys, value, namespace if namespaced else None, 4)
        while pending:
            frozen_heap, frozen_rocks = pending.popleft()
            assert frozen_entries(frozen_heap) == frozen_entries(frozen_rocks)
        assert frozen_entries(heap.snapshot()) == frozen_entries(rocks.snapshot())
    finally:
        heap.dispose()
        rocks.dispose()


def test_a_copy_made_before_the_keys_were_encoded_extends_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As in a job: freeze, write (the first write to a frozen table copies it), and only
    # then encode the frozen tables. Only the first snapshot may encode every key of a
    # table; the later ones extend the keys the previous one left for the copies, although
    # the copies were made before they existed.
    backend = HeapKeyedStateBackend(8, KeyGroupRange(0, 7))
    backend.get_state(ValueStateDescriptor("v"))
    model: dict[str, int] = {}

    def put(keys: list[str], value: int) -> None:
        backend.put_many("v", [assign_to_key_group(k, 8) for k in keys], keys, None,
                         [value] * len(keys))
        model.update(dict.fromkeys(keys, value))

    encoded: list[int] = []
    original = heap_module._prefixes

    def counting(entries: Any) -> list[bytes]:
        out = original(entries)
        encoded.append(len(out))
        return out

    monkeypatch.setattr(heap_module, "_prefixes", counting)
    put([f"k{i}" for i in range(150)], 0)
    frozen, expected = backend.snapshot(), _entries(model)
    added = 0
    for round_ in range(1, 5):
        new = [f"k{i}" for i in range(0, 150 + 10 * round_, 3) if f"k{i}" not in model]
        put([f"k{i}" for i in range(0, 150 + 10 * round_, 3)], round_)  # updates, new keys
        before = sum(encoded)
        assert frozen_entries(frozen) == expected
        if round_ > 1:
            assert sum(encoded) - before == added, "a snapshot encoded unchanged keys again"
        added = len(new)
        frozen, expected = backend.snapshot(), _entries(model)
    assert frozen_entries(frozen) == expected
    backend.dispose()


def _entries(model: dict[str, int]) -> list[tuple[Any, ...]]:
    """The snapshot entries of a fresh heap backend holding ``model``."""
    reference = HeapKeyedStateBackend(8, KeyGroupRange(0, 7))
    reference.get_state(ValueStateDescriptor("v"))
    keys = list(model)
    reference.put_many("v", [assign_to_key_group(k, 8) for k in keys], keys, None,
                       list(model.values()))
    entries = frozen_entries(reference.snapshot())
    reference.dispose()
    return entries


def test_packed_segments_read_as_entries_and_as_objects() -> None:
    # A heap snapshot is packed: RocksDB restores it from entries (values pickled one by
    # one), the heap backend from objects; both are the state that was written, and what
    # values shared within a key group they share again.
    backend = HeapKeyedStateBackend(4, ALL)
    backend.get_state(ValueStateDescriptor("v"))
    shared = [1, 2]
    keys = [f"k{i}" for i in range(40)]
    groups = [assign_to_key_group(k, 4) for k in keys]
    backend.put_many("v", groups, keys, None, [shared if i % 2 else (k, i)
                                               for i, k in enumerate(keys)])
    data = frozen_bytes(backend.snapshot())
    segments = list(read_segments(data))
    assert segments and all(segment.packed for segment in segments)
    assert data[8:9] == PACKED
    restored = HeapKeyedStateBackend(4, ALL)
    assert sum(map(restored.load_segment, read_segments(data))) == len(keys)
    state = restored.get_state(ValueStateDescriptor("v"))
    got = {}
    for key in keys:
        restored.set_current_key(key)
        got[key] = state.value()
    assert got == {k: [1, 2] if i % 2 else (k, i) for i, k in enumerate(keys)}
    by_group: dict[int, list[Any]] = {}
    for key, group in zip(keys[1::2], groups[1::2], strict=True):
        by_group.setdefault(group, []).append(got[key])
    for lists in by_group.values():
        assert all(value is lists[0] for value in lists)  # shared within a key group
    entries = sorted(read_canonical(data, ALL))
    assert [deserialize_value(e[4]) for e in entries] == \
        [deserialize_value(v) for *_, v in sorted(backend.entries())]
    backend.dispose()
    restored.dispose()


def test_a_damaged_packed_segment_is_refused_by_name() -> None:
    backend = HeapKeyedStateBackend(4, ALL)
    backend.get_state(ValueStateDescriptor("v"))
    backend.put_many("v", [assign_to_key_group("k", 4)], ["k"], None, [12])
    segment = next(read_segments(frozen_bytes(backend.snapshot())))
    cut = bytearray(frozen_bytes(backend.snapshot()))
    cut[segment.offset + segment.length - 2] = 0  # the pickle's last opcodes
    with pytest.raises(StateError, match=r"key group \d+ of state 'v' is damaged"):
        list(read_canonical(bytes(cut), ALL))
    backend.dispose()


@pytest.mark.parametrize("sizes", [[], [0], [5, 0, 17], [4095, 4096, 70_000], [3] * 1000])
def test_encode_segment_is_prefix_length_value_per_entry(sizes: list[int]) -> None:
    prefixes = [encode_prefix(f"key{i}".encode(), b"\x00") for i in range(len(sizes))]
    values = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    expected = b"E" + b"".join(p + struct.pack(">I", len(v)) + v
                               for p, v in zip(prefixes, values, strict=True))
    if not sizes:
        expected = b""
    assert encode_segment(prefixes, values) == expected
    with pytest.raises(ValueError, match="prefixes"):
        encode_segment([*prefixes, b"x"], values)


def test_serialize_values_is_serialize_value_of_each() -> None:
    values = [0, 255, 256, 2**31, -1, 2**70, True, None, 1.5, "é", (1, "x"), [1, [2]], {"a": 1}]
    assert serialize_values(iter(values)) == [serialize_value(v) for v in values]


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_snapshots_of_the_first_version_still_restore(kind: str, tmp_path: Path) -> None:
    # WEIRKGS1: the same file without a tag per segment (every segment entries).
    value = serialize_value(("w", 5))
    body = encode_prefix(encode_key("k"), encode_key(None)) + struct.pack(">I", len(value)) \
        + value
    index = (struct.pack(">H", 1) + struct.pack(">H", 1) + b"v" + struct.pack(">I", 1)
             + struct.pack(">HHQQ", 0, 2, 8, len(body)))
    data = b"WEIRKGS1" + body + index + struct.pack(">Q", 8 + len(body)) + b"WEIRKGS1"
    backend = HeapKeyedStateBackend(4, ALL) if kind == "heap" else \
        RocksDBKeyedStateBackend(4, ALL, tmp_path / "rocks")
    try:
        assert sum(map(backend.load_segment, read_segments(data, ALL))) == 1
        assert [(e[1], deserialize_value(e[4])) for e in backend.entries()] == [(2, ("w", 5))]
    finally:
        backend.dispose()
