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

The asynchronous part mostly pickles values: each table keeps its keys in the canonical
order with their encoded bytes and their positions in the dict (its *layout*), a copy
inherits it — also when it was copied before the snapshot computed it, as a table written
right after the freeze is — and the next snapshot only sorts the keys added since into it
(a deleted key drops it). The values are taken in the dict's order and put in the canonical
one with an array index, and pickled and joined in C-level loops: an upload thread holds
the interpreter lock, which the task thread needs, about 0.3 µs per entry. Encoding and
sorting every key was two thirds of a snapshot's time; the layout costs one bytes object
and one array slot per entry.

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
from weir.state.canonical import Segment, encode_segment
from weir.state.key_groups import KeyGroupRange
from weir.state.serializers import (
    decode_key,
    deserialize_value,
    encode_key,
    serialize_value,
    serialize_values,
)

decode_value = deserialize_value
_U32 = struct.Struct(">I")


class _Table:
    """The entries of one state in one key group: (key, namespace) -> value."""

    __slots__ = ("__weakref__", "base", "data", "epoch", "frozen", "layout")

    def __init__(self, epoch: int, data: dict[tuple[Any, Any], Any] | None = None,
                 frozen: _Table | None = None) -> None:
        self.data = data if data is not None else {}
        self.epoch = epoch
        # The frozen table this one was copied from, whose values it may still share.
        self.frozen = weakref.ref(frozen) if frozen is not None else None
        # Where a snapshot that froze this table leaves its layout.
        self.layout = _LayoutCell()
        # The cell of the table this one was copied from: its layout describes a head of
        # ``data``'s keys (None once a key is removed, or once this table has its own).
        self.base = frozen.layout if frozen is not None else None


class _LayoutCell:
    """A frozen table's layout, once the asynchronous part of a snapshot computed it.

    A copy of a frozen table is made at the first write after the freeze, usually before
    the upload thread got to that table: the copy keeps the cell, not the table (whose
    values the snapshot releases), and the next snapshot extends the layout found there
    instead of encoding and sorting every key again. Written once, on an upload thread;
    read by the next snapshot's (a reference assignment: no lock needed)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: _Layout | None = None


class _Layout(NamedTuple):
    """A table's entries in the canonical order: each one's encoded prefix, and where it
    is in the table's dict.

    It describes the first ``len(order)`` keys of the table's dict: keys are only ever
    appended to a dict (deleting one drops the layout), so the keys added since it was
    made are the dict's tail, and ``extend`` sorts only those into it. Positions rather
    than keys: a snapshot takes the values in the dict's own order, one pass through its
    memory, and puts them in the canonical order with one array index, instead of a dict
    look-up per entry (hashing a tuple, touching its key: a cache miss or two each)."""

    prefixes: list[bytes]
    #: ``order[i]``: the position in the dict of the entry ``prefixes[i]`` encodes.
    order: npt.NDArray[np.intp]
    # Length of every namespace's encoding, or None if they differ: when they are all the
    # same length, prefixes sort in the canonical order themselves.
    namespace_length: int | None

    @classmethod
    def of(cls, data: dict[tuple[Any, Any], Any]) -> _Layout:
        rows, lengths = _rows(data, 0)
        rows.sort()
        return cls([row[1] for row in rows],
                   np.fromiter((row[2] for row in rows), dtype=np.intp, count=len(rows)),
                   next(iter(lengths)) if len(lengths) == 1 else None)

    def extend(self, data: dict[tuple[Any, Any], Any]) -> _Layout:
        """The layout of ``data``, whose first ``len(self.order)`` keys this describes."""
        known = len(self.order)
        if known == len(data):
            return self
        rows, lengths = _rows(itertools.islice(data, known, None), known)
        if known == 0 or self.namespace_length is None or lengths != {self.namespace_length}:
            return _Layout.of(data)
        rows.sort()
        # Two sorted runs: the sort merges them in one pass.
        merged = [*zip(self.prefixes, self.order.tolist(), strict=True),
                  *((row[1], row[2]) for row in rows)]
        merged.sort(key=operator.itemgetter(0))
        return _Layout([row[0] for row in merged],
                       np.fromiter((row[1] for row in merged), dtype=np.intp,
                                   count=len(merged)),
                       self.namespace_length)

    def values(self, data: dict[tuple[Any, Any], Any]) -> npt.NDArray[np.object_]:
        """The values of ``data`` (which this describes whole) in the canonical order."""
        return np.fromiter(data.values(), dtype=object, count=len(data))[self.order]


def _rows(entries: Iterable[tuple[Any, Any]], start: int
          ) -> tuple[list[tuple[bytes, bytes, int]], set[int]]:
    """(sort key, prefix, position) of each entry, positions counted from ``start``, and
    the lengths of their encoded namespaces. The canonical order is RocksDB's row-key
    order: key group, key length, key bytes, namespace bytes; as one bytes object per entry
    (unique, since the length fixes where the key ends) it sorts by plain byte comparison."""
    pack32 = _U32.pack
    namespaces: dict[tuple[type, Any], bytes] = {}  # few distinct namespaces
    rows = []
    for position, (key, namespace) in enumerate(entries, start):
        encoded = namespaces.get((type(namespace), namespace))
        if encoded is None:
            encoded = namespaces[(type(namespace), namespace)] = encode_key(namespace)
        key_bytes = encode_key(key)
        head = pack32(len(key_bytes)) + key_bytes
        rows.append((head + encoded, head + pack32(len(encoded)) + encoded, position))
    return rows, {len(encoded) for encoded in namespaces.values()}


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
        # One copy-on-write check per key group of the batch, not per key.
        writable: dict[int, _Table] = {}
        for key_group, key, value in zip(key_groups, keys, values, strict=True):
            table = writable.get(key_group)
            if table is None:
                found = self._table(state, key_group, create=True)
                assert found is not None
                table = writable[key_group] = found
            table.data[(key, namespace)] = value

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

    def _layouts(self) -> Iterator[tuple[str, int, _Table, _Layout]]:
        for state in sorted(self._tables):
            for index, table in enumerate(self._tables[state]):
                if table is None or not table.data:
                    continue
                # A frozen table never changes (writes go to a copy), so its layout may be
                # computed here, off the task thread, and kept for the copies made of it.
                layout = table.layout.value
                if layout is None:
                    base = table.base.value if table.base is not None else None
                    layout = _Layout.of(table.data) if base is None else base.extend(table.data)
                    table.layout.value = layout
                    table.base = None  # its own layout serves from now on
                yield state, self._range.start + index, table, layout

    def entries(self) -> Iterator[Entry]:
        for state, key_group, table, layout in self._layouts():
            for prefix, value in zip(layout.prefixes, layout.values(table.data), strict=True):
                key_length = _U32.unpack_from(prefix)[0]
                key = prefix[4:4 + key_length]
                yield state, key_group, key, prefix[8 + key_length:], serialize_value(value)

    def segments(self) -> Iterator[Segment]:
        """The frozen state as canonical segments (what a snapshot writes)."""
        for state, key_group, table, layout in self._layouts():
            values = serialize_values(layout.values(table.data))
            yield Segment(state, key_group, len(values), encode_segment(layout.prefixes, values))
