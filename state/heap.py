"""``hashmap``: keyed state in Python dicts, one per (state, key group).

Snapshots are copy-on-write at two levels, so the synchronous part of a snapshot is
O(key groups) and processing goes on while the asynchronous part writes:

* :meth:`HeapKeyedStateBackend.snapshot` freezes every key-group table (it bumps an epoch);
  the first write to a frozen table replaces it with a shallow copy, leaving the frozen one
  to the snapshot;
* a list or map value inside a copied table is still shared with the snapshot, so the first
  in-place change of such a value copies it too (``_get_mutable``): the copy knows the
  frozen table it came from (weakly: once the snapshot is written and released nothing is
  shared any more), and a value is shared while it is the very object the frozen table
  holds. Plain writes pay nothing for this.

The asynchronous part writes each frozen table as one packed segment (state/canonical.py):
its keys encoded, in the dict's order, and its values pickled in one call. Both run in C
loops, because an upload thread holds the interpreter lock the task thread needs. Encoding
the keys was most of the rest: each table keeps its keys' encoding (its *key block*), a
copy inherits it — also when it was copied before the snapshot computed it, as a table
written right after the freeze is — and the next snapshot encodes only the keys added
since (keys are only ever appended to a dict; a deleted key drops the block).

Example:
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.key_groups import KeyGroupRange
    >>> backend = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> total = backend.get_state(ValueStateDescriptor("total"))
    >>> backend.set_current_key("k"); total.update(1)
    >>> frozen = backend.snapshot()
    >>> total.update(2)
    >>> [decode_value(e[4]) for e in frozen.entries()], total.value()
    ([1], 2)
"""

from __future__ import annotations

import copy
import itertools
import operator
import struct
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from weir.state.backend import MISSING, Entry, KeyedStateBackend
from weir.state.canonical import Segment, SegmentView, encode_packed
from weir.state.key_groups import KeyGroupRange
from weir.state.serializers import (
    decode_key,
    deserialize_value,
    encode_key,
    serialize_value,
)

decode_value = deserialize_value
_U32 = struct.Struct(">I")


class _Table:
    """The entries of one state in one key group: (key, namespace) -> value."""

    __slots__ = ("__weakref__", "base", "data", "epoch", "frozen", "keys")

    def __init__(self, epoch: int, data: dict[tuple[Any, Any], Any] | None = None,
                 frozen: _Table | None = None) -> None:
        self.data = data if data is not None else {}
        self.epoch = epoch
        # The frozen table this one was copied from, whose values it may still share.
        self.frozen = weakref.ref(frozen) if frozen is not None else None
        # Where a snapshot that froze this table leaves its key block.
        self.keys = _KeysCell()
        # The cell of the table this one was copied from: its block encodes a head of
        # ``data``'s keys (None once a key is removed, or once this table has its own).
        self.base = frozen.keys if frozen is not None else None


class _KeysCell:
    """A frozen table's key block, once the asynchronous part of a snapshot computed it.

    A copy of a frozen table is made at the first write after the freeze, usually before
    the upload thread got to that table: the copy keeps the cell, not the table (whose
    values the snapshot releases), and the next snapshot extends the block found there
    instead of encoding every key again. Written once, on an upload thread; read by the
    next snapshot's (a reference assignment: no lock needed)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: _KeyBlock | None = None


class _KeyBlock(NamedTuple):
    """The ``encode_prefix`` of the first ``keys`` keys of a table's dict, joined."""

    keys: int
    data: bytes

    def extend(self, data: dict[tuple[Any, Any], Any]) -> _KeyBlock:
        """The block of ``data``, whose first ``self.keys`` keys this encodes."""
        if self.keys == len(data):
            return self
        tail = _prefixes(itertools.islice(data, self.keys, None))
        return _KeyBlock(len(data), self.data + b"".join(tail))


_NO_KEYS = _KeyBlock(0, b"")
#: A put_many of more keys than this, sorted by key group, updates one dict per key group.
_RUN_MIN = 64


def _prefixes(entries: Iterable[tuple[Any, Any]]) -> list[bytes]:
    """``encode_prefix`` of each (key, namespace), encoding each distinct namespace once."""
    pack32 = _U32.pack
    namespaces: dict[tuple[type, Any], bytes] = {}  # few distinct namespaces
    out = []
    for key, namespace in entries:
        encoded = namespaces.get((type(namespace), namespace))
        if encoded is None:
            ns = encode_key(namespace)
            encoded = namespaces[(type(namespace), namespace)] = pack32(len(ns)) + ns
        key_bytes = encode_key(key)
        out.append(pack32(len(key_bytes)) + key_bytes + encoded)
    return out


class HeapKeyedStateBackend(KeyedStateBackend):
    """In-memory keyed state (see the module docstring)."""

    name = "hashmap"

    def __init__(self, max_parallelism: int, key_group_range: KeyGroupRange,
                 clock: Callable[[], float] | None = None) -> None:
        super().__init__(max_parallelism, key_group_range, clock)
        self._epoch = 0
        self._tables: dict[str, list[_Table | None]] = {}

    # -- storage --------------------------------------------------------------------------

    def _register(self, state: str) -> None:
        self._tables.setdefault(state, [None] * len(self.key_group_range))

    def _table(self, state: str, key_group: int, create: bool) -> _Table | None:
        tables = self._tables[state]
        index = key_group - self.key_group_range.start
        table = tables[index]
        if table is None:
            if not create:
                return None
            table = tables[index] = _Table(self._epoch)
        elif table.epoch < self._epoch and create:
            # Frozen by a snapshot: the snapshot keeps it, writes go to a copy.
            table = tables[index] = _Table(self._epoch, dict(table.data), frozen=table)
        return table

    def _get(self, state: str, namespace: Any) -> Any:
        table = self._table(state, self.current_key_group, create=False)
        if table is None:
            return MISSING
        return table.data.get((self.current_key, namespace), MISSING)

    def _get_mutable(self, state: str, namespace: Any) -> Any:
        table = self._table(state, self.current_key_group, create=True)
        assert table is not None
        entry = (self.current_key, namespace)
        value = table.data.get(entry, MISSING)
        if value is not MISSING and table.frozen is not None:
            frozen = table.frozen()
            if frozen is None:
                table.frozen = None  # its snapshot is done: nothing is shared any more
            elif frozen.data.get(entry, MISSING) is value:
                value = table.data[entry] = copy.copy(value)  # shared with a snapshot
        return value

    def _put(self, state: str, namespace: Any, value: Any) -> None:
        table = self._table(state, self.current_key_group, create=True)
        assert table is not None
        table.data[(self.current_key, namespace)] = value

    def _delete(self, state: str, namespace: Any) -> None:
        table = self._table(state, self.current_key_group, create=False)
        if table is None or (self.current_key, namespace) not in table.data:
            return
        table = self._table(state, self.current_key_group, create=True)
        assert table is not None
        del table.data[(self.current_key, namespace)]
        table.base = None

    def _get_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                  namespace: Any) -> list[Any]:
        tables = self._tables[state]
        start = self.key_group_range.start
        missing = MISSING
        out: list[Any] = []
        append = out.append
        for key_group, key in zip(key_groups, keys, strict=True):
            table = tables[key_group - start]
            append(missing if table is None else table.data.get((key, namespace), missing))
        return out

    def _put_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                  namespace: Any, values: Sequence[Any]) -> None:
        if len(keys) > _RUN_MIN and key_groups[0] <= key_groups[-1]:
            groups = np.asarray(key_groups)
            if bool((groups[1:] >= groups[:-1]).all()):
                self._put_runs(state, groups, keys, namespace, values)
                return
        # One copy-on-write check per key group of the batch, not per key.
        writable: dict[int, _Table] = {}
        for key_group, key, value in zip(key_groups, keys, values, strict=True):
            table = writable.get(key_group)
            if table is None:
                found = self._table(state, key_group, create=True)
                assert found is not None
                table = writable[key_group] = found
            table.data[(key, namespace)] = value

    def _put_runs(self, state: str, groups: npt.NDArray[Any], keys: Sequence[Any],
                  namespace: Any, values: Sequence[Any]) -> None:
        """``_put_many`` of keys sorted by key group (a columnar flush): one dict update
        per key group, its loop in C."""
        bounds = [0, *(np.flatnonzero(groups[1:] != groups[:-1]) + 1).tolist(), len(keys)]
        for start, end in itertools.pairwise(bounds):
            table = self._table(state, int(groups[start]), create=True)
            assert table is not None
            pairs = zip(keys[start:end], itertools.repeat(namespace))
            table.data.update(zip(pairs, values[start:end], strict=True))

    def _delete_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                     namespace: Any) -> None:
        for key_group, key in zip(key_groups, keys, strict=True):
            table = self._table(state, key_group, create=False)
            if table is None or (key, namespace) not in table.data:
                continue
            table = self._table(state, key_group, create=True)
            assert table is not None
            del table.data[(key, namespace)]
            table.base = None

    def keys(self, state: str, namespace: Any = None) -> Iterator[Any]:
        self._await_restored()
        for table in list(self._tables.get(state, ())):
            if table is not None:
                for key, ns in list(table.data):
                    if ns == namespace:
                        yield key

    def namespaced_keys(self, state: str) -> Iterator[tuple[int, Any, Any]]:
        self._await_restored()
        start = self.key_group_range.start
        for index, table in enumerate(list(self._tables.get(state, ()))):
            if table is not None:
                for key, namespace in list(table.data):
                    yield start + index, key, namespace

    # -- snapshots ------------------------------------------------------------------------

    def snapshot(self) -> HeapSnapshot:
        """Freeze the current tables (synchronous part: O(states x key groups))."""
        self._await_restored()
        self._epoch += 1
        frozen = {state: list(tables) for state, tables in self._tables.items()}
        return HeapSnapshot(frozen, self.key_group_range)

    def entries(self) -> Iterator[Entry]:
        return self.snapshot().entries()

    def load_entries(self, entries: Iterable[Entry]) -> int:
        loaded = 0
        for state, key_group, key, namespace, value in entries:
            if key_group not in self.key_group_range:
                continue
            self._register(state)
            table = self._table(state, key_group, create=True)
            assert table is not None
            table.data[(decode_key(key), decode_key(namespace))] = deserialize_value(value)
            table.base = None
            loaded += 1
        return loaded

    def load_segment(self, segment: SegmentView) -> int:
        if segment.key_group not in self.key_group_range:
            return 0
        self._register(segment.state)
        table = self._table(segment.state, segment.key_group, create=True)
        assert table is not None
        data = table.data
        before = len(data)
        for key, namespace, value in segment.objects():
            data[(decode_key(key), decode_key(namespace))] = value
        table.base = None
        return len(data) - before

    def dispose(self) -> None:
        self._close_restore_gate()
        self._tables.clear()


class HeapSnapshot:
    """Frozen key-group tables; ``entries()`` serialises them in the canonical order and may
    run on another thread while the task keeps writing (to copies)."""

    def __init__(self, tables: dict[str, list[_Table | None]],
                 key_group_range: KeyGroupRange) -> None:
        self._tables = tables
        self._range = key_group_range

    def release(self) -> None:
        self._tables = {}

    def _frozen(self) -> Iterator[tuple[str, int, _Table]]:
        for state in sorted(self._tables):
            for index, table in enumerate(self._tables[state]):
                if table is not None and table.data:
                    yield state, self._range.start + index, table

    def entries(self) -> Iterator[Entry]:
        """The canonical entries, in the canonical order (sorted here: the entries of
        savepoint tools and tests, not of checkpoints)."""
        for state, key_group, table in self._frozen():
            rows = sorted(zip(map(_sort_key, table.data), table.data.values(), strict=True),
                          key=operator.itemgetter(0))
            for (sized_key, namespace), value in rows:
                yield state, key_group, sized_key[4:], namespace, serialize_value(value)

    def segments(self) -> Iterator[Segment]:
        """The frozen state as packed segments (what a snapshot writes)."""
        for state, key_group, table in self._frozen():
            # A frozen table never changes (writes go to a copy), so its key block may be
            # computed here, off the task thread, and kept for the copies made of it.
            block = table.keys.value
            if block is None:
                base = table.base.value if table.base is not None else None
                block = (base or _NO_KEYS).extend(table.data)
                table.keys.value = block
                table.base = None  # its own block serves from now on
            yield Segment(state, key_group, len(table.data),
                          encode_packed(block.data, list(table.data.values())))


def _sort_key(entry: tuple[Any, Any]) -> tuple[bytes, bytes]:
    """(key bytes, namespace bytes) of a table's key; sorting by the length of the key
    first, as RocksDB's row keys do (state/rocksdb.py ``row_key``)."""
    key, namespace = entry
    key_bytes = encode_key(key)
    return _U32.pack(len(key_bytes)) + key_bytes, encode_key(namespace)
