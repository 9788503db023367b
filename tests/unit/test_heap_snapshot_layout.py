"""The heap backend's snapshots when their asynchronous part runs late, as it does in a job:
the task writes on (into copies of the frozen tables) before the upload thread encodes the
snapshot. The bytes must be RocksDB's for the same state, and the key layout a snapshot
computes must serve the next one (the copies were made before it existed)."""

from __future__ import annotations

import io
import random
import struct
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.state_backends import apply_write
from weir.state import heap as heap_module
from weir.state.canonical import encode_prefix, encode_segment, write_segments
from weir.state.descriptors import ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, assign_to_key_group
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.serializers import serialize_value, serialize_values


def frozen_bytes(frozen: Any) -> bytes:
    out = io.BytesIO()
    write_segments(frozen.segments(), out)
    frozen.release()
    return out.getvalue()


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
def test_late_snapshots_write_what_rocksdb_writes(ops: list[tuple[str, list[int], int, Any]],
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
                    assert frozen_bytes(frozen_heap) == frozen_bytes(frozen_rocks)
                continue
            apply_write((heap, rocks), op, keys, value, namespace if namespaced else None, 4)
        while pending:
            frozen_heap, frozen_rocks = pending.popleft()
            assert frozen_bytes(frozen_heap) == frozen_bytes(frozen_rocks)
        assert frozen_bytes(heap.snapshot()) == frozen_bytes(rocks.snapshot())
    finally:
        heap.dispose()
        rocks.dispose()


def test_a_copy_made_before_the_layout_existed_extends_it(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    # As in a job: freeze, write (the first write to a frozen table copies it), and only
    # then encode the frozen tables. Only the first snapshot may encode and sort every key
    # of a table; the later ones extend the layout the previous one left for the copies,
    # although the copies were made before it existed.
    backend = HeapKeyedStateBackend(8, KeyGroupRange(0, 7))
    backend.get_state(ValueStateDescriptor("v"))
    model: dict[str, int] = {}

    def put(keys: list[str], value: int) -> None:
        backend.put_many("v", [assign_to_key_group(k, 8) for k in keys], keys, None,
                         [value] * len(keys))
        model.update(dict.fromkeys(keys, value))

    built: list[int] = []
    original = heap_module._Layout.of.__func__  # type: ignore[attr-defined]

    def counting_of(cls: Any, data: Any) -> Any:
        built.append(len(data))
        return original(cls, data)

    monkeypatch.setattr(heap_module._Layout, "of", classmethod(counting_of))
    put([f"k{i}" for i in range(150)], 0)
    frozen, expected = backend.snapshot(), _canonical(model)
    for round_ in range(1, 5):
        put([f"k{i}" for i in range(0, 150 + 10 * round_, 3)], round_)  # updates, new keys
        before = len(built)
        assert frozen_bytes(frozen) == expected
        if round_ > 1:
            assert len(built) == before, "a snapshot encoded and sorted every key again"
        frozen, expected = backend.snapshot(), _canonical(model)
    assert frozen_bytes(frozen) == expected
    backend.dispose()


def _canonical(model: dict[str, int]) -> bytes:
    """The snapshot of a fresh heap backend holding ``model``."""
    reference = HeapKeyedStateBackend(8, KeyGroupRange(0, 7))
    reference.get_state(ValueStateDescriptor("v"))
    keys = list(model)
    reference.put_many("v", [assign_to_key_group(k, 8) for k in keys], keys, None,
                       list(model.values()))
    data = frozen_bytes(reference.snapshot())
    reference.dispose()
    return data


@pytest.mark.parametrize("sizes", [[], [0], [5, 0, 17], [4095, 4096, 70_000], [3] * 1000])
def test_encode_segment_is_prefix_length_value_per_entry(sizes: list[int]) -> None:
    prefixes = [encode_prefix(f"key{i}".encode(), b"\x00") for i in range(len(sizes))]
    values = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    expected = b"".join(p + struct.pack(">I", len(v)) + v
                        for p, v in zip(prefixes, values, strict=True))
    assert encode_segment(prefixes, values) == expected
    with pytest.raises(ValueError, match="prefixes"):
        encode_segment([*prefixes, b"x"], values)


def test_serialize_values_is_serialize_value_of_each() -> None:
    values = [0, 255, 256, 2**31, -1, 2**70, True, None, 1.5, "é", (1, "x"), [1, [2]], {"a": 1}]
    assert serialize_values(iter(values)) == [serialize_value(v) for v in values]
