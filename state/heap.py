"""``hashmap``: keyed state in Python dicts, one per (state, key group).

Snapshots are copy-on-write at two levels, so the synchronous part of a snapshot is
O(key groups) and processing goes on while the asynchronous part writes:

* :meth:`HashMapStateBackend.snapshot` freezes every key-group table (it bumps an epoch);
  the first write to a frozen table replaces it with a shallow copy, leaving the frozen one
  to the snapshot;
* a list or map value inside a copied table is still shared with the snapshot, so the first
  in-place change of such a value copies it too (``_get_mutable``).

Example:
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.key_groups import KeyGroupRange
    >>> backend = HashMapStateBackend(128, KeyGroupRange(0, 127))
    >>> total = backend.get_state(ValueStateDescriptor("total"))
    >>> backend.set_current_key("k"); total.update(1)
    >>> frozen = backend.snapshot()
    >>> total.update(2)
    >>> [decode_value(e[4]) for e in frozen.entries()], total.value()
    ([1], 2)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from weir.state.backend import MISSING, Entry, KeyedStateBackend
from weir.state.key_groups import KeyGroupRange
from weir.state.serializers import decode_key, deserialize_value, encode_key, serialize_value

decode_value = deserialize_value


class _Table:
    """The entries of one state in one key group: (key, namespace) -> value."""

    __slots__ = ("data", "epoch", "owned")

    def __init__(self, epoch: int, data: dict[tuple[Any, Any], Any] | None = None,
                 shared: bool = False) -> None:
        self.data = data if data is not None else {}
        self.epoch = epoch
        # Entries whose list/map value this table owns; None: all of them (never copied).
        self.owned: set[tuple[Any, Any]] | None = set() if shared else None


class HashMapStateBackend(KeyedStateBackend):
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
            table = tables[index] = _Table(self._epoch, dict(table.data), shared=True)
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
        if value is not MISSING and table.owned is not None and entry not in table.owned:
            value = table.data[entry] = copy.copy(value)  # shared with a snapshot
            table.owned.add(entry)
        return value

    def _put(self, state: str, namespace: Any, value: Any) -> None:
        table = self._table(state, self.current_key_group, create=True)
        assert table is not None
        entry = (self.current_key, namespace)
        table.data[entry] = value
        if table.owned is not None:
            table.owned.add(entry)

    def _delete(self, state: str, namespace: Any) -> None:
        table = self._table(state, self.current_key_group, create=False)
        if table is None or (self.current_key, namespace) not in table.data:
            return
        table = self._table(state, self.current_key_group, create=True)
        assert table is not None
        del table.data[(self.current_key, namespace)]

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
            entry = (key, namespace)
            table.data[entry] = value
            if table.owned is not None:
                table.owned.add(entry)

    def _delete_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                     namespace: Any) -> None:
        for key_group, key in zip(key_groups, keys, strict=True):
            table = self._table(state, key_group, create=False)
            if table is None or (key, namespace) not in table.data:
                continue
            table = self._table(state, key_group, create=True)
            assert table is not None
            del table.data[(key, namespace)]

    def keys(self, state: str, namespace: Any = None) -> Iterator[Any]:
        self._await_restored()
        for table in list(self._tables.get(state, ())):
            if table is not None:
                for key, ns in list(table.data):
                    if ns == namespace:
                        yield key

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

    def entries(self) -> Iterator[Entry]:
        # The canonical order is RocksDB's row-key order: key group, key length, key bytes,
        # namespace bytes.
        for state in sorted(self._tables):
            for index, table in enumerate(self._tables[state]):
                if table is None or not table.data:
                    continue
                key_group = self._range.start + index
                encoded = sorted(
                    ((encode_key(key), encode_key(namespace), value)
                     for (key, namespace), value in table.data.items()),
                    key=lambda entry: (len(entry[0]), entry[0], entry[1]))
                for key, namespace, value in encoded:
                    yield state, key_group, key, namespace, serialize_value(value)
