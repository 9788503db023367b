"""Keyed state backends of every kind for tests, and the pytest fixtures that make them.

``backends`` makes backends of a named kind under the test's directory and disposes of them
at the end; ``make_backend`` is parametrized over every kind (each test using it runs once
per backend), and :meth:`Backends.maker` gives the conformance suite
(:mod:`weir.testing.state_backend`) its maker.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from weir.state.backend import KeyedStateBackend
from weir.state.canonical import read_canonical, write_segments
from weir.state.descriptors import ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, assign_to_key_group
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.serializers import deserialize_value
from weir.testing.state_backend import BackendMaker

MAX_PAR = 128
ALL = KeyGroupRange(0, MAX_PAR - 1)
#: Every keyed state backend (``state.backend.type``).
KINDS = ("hashmap", "rocksdb")


class Backends:
    """Creates backends under one directory and disposes of them all."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.created: list[KeyedStateBackend] = []

    def __call__(self, kind: str, key_groups: KeyGroupRange = ALL,
                 clock: Callable[[], float] | None = None, max_parallelism: int = MAX_PAR,
                 **options: Any) -> KeyedStateBackend:
        """A fresh backend of ``kind``; ``options`` go to the RocksDB backend."""
        if kind == "hashmap":
            backend: KeyedStateBackend = HeapKeyedStateBackend(max_parallelism, key_groups, clock)
        elif kind == "rocksdb":
            backend = RocksDBKeyedStateBackend(max_parallelism, key_groups,
                                          self.root / f"{kind}-{len(self.created)}",
                                          clock=clock, **options)
        else:
            msg = f"unknown state backend {kind!r} (one of {KINDS})"
            raise ValueError(msg)
        self.created.append(backend)
        return backend

    def maker(self, kind: str) -> BackendMaker:
        """What :func:`weir.testing.state_backend.check_state_backend` takes."""
        def make(max_parallelism: int, key_groups: KeyGroupRange,
                 clock: Callable[[], float] | None = None) -> KeyedStateBackend:
            return self(kind, key_groups, clock, max_parallelism)

        return make

    def dispose(self) -> None:
        for backend in self.created:
            backend.dispose()
        self.created.clear()


@pytest.fixture
def backends(tmp_path: Path) -> Iterator[Backends]:
    """``backends(kind, key_groups=ALL, clock=None)``; all disposed after the test."""
    made = Backends(tmp_path / "backends")
    yield made
    made.dispose()


@pytest.fixture(params=KINDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    """Every backend kind in turn."""
    return str(request.param)


@pytest.fixture
def make_backend(backend_kind: str, backends: Backends) -> Callable[..., KeyedStateBackend]:
    """``make(key_groups=ALL, clock=None, kind=None)``: a backend of the test's kind (or of
    ``kind``); the test runs once per kind."""
    def make(key_groups: KeyGroupRange = ALL, clock: Callable[[], float] | None = None,
             kind: str | None = None) -> KeyedStateBackend:
        return backends(kind or backend_kind, key_groups, clock)

    return make


def apply_write(backends: Iterable[KeyedStateBackend], op: str, keys: list[int], value: int,
                namespace: Any, max_parallelism: int) -> None:
    """One write of a generated sequence to each of ``backends``, all alike: ``put_many``,
    ``delete_many`` (the batch paths), ``put`` or ``clear`` (a ValueState ``"v"`` a key)."""
    groups = [assign_to_key_group(k, max_parallelism) for k in keys]
    for backend in backends:
        if op == "put_many":
            backend.put_many("v", groups, keys, namespace, [value] * len(keys))
        elif op == "delete_many":
            backend.delete_many("v", groups, keys, namespace)
        else:
            state = backend.get_state(ValueStateDescriptor("v"))
            for key in keys:
                backend.set_current_key(key)
                if op == "put":
                    state.update(value)
                else:
                    state.clear()


def frozen_bytes(frozen: Any) -> bytes:
    """What the asynchronous part of a snapshot writes for ``frozen`` (then released)."""
    out = io.BytesIO()
    write_segments(frozen.segments(), out)
    frozen.release()
    return out.getvalue()


def snapshot_entries(data: bytes) -> list[tuple[Any, ...]]:
    """The entries of a canonical snapshot, values unpickled, in the canonical order (a
    packed segment's are in the writer's order): what two snapshots of the same state
    share whatever their segments' encodings."""
    return sorted((state, key_group, struct.pack(">I", len(key)) + key, namespace,
                   deserialize_value(value))
                  for state, key_group, key, namespace, value
                  in read_canonical(data, KeyGroupRange(0, (1 << 15) - 1)))
