"""The keyed state backend interface and the state handles built on it.

A backend stores, per registered state, one value per (key, namespace) of the key groups it
owns. The handles (:class:`ValueState`, :class:`ListState`, :class:`MapState`,
:class:`ReducingState`, :class:`AggregatingState`) are written once against four
primitives (``_get``, ``_get_mutable``, ``_put``, ``_delete``), so both backends behave
the same. Everything runs on the task's mailbox thread; only a snapshot's asynchronous
part runs elsewhere, on data the synchronous part froze.

Example:
    >>> from state.heap import HashMapStateBackend
    >>> from state.key_groups import KeyGroupRange
    >>> from state.descriptors import ListStateDescriptor
    >>> backend = HashMapStateBackend(128, KeyGroupRange(0, 127))
    >>> clicks = backend.get_state(ListStateDescriptor("clicks"))
    >>> backend.set_current_key("alice"); clicks.add("home"); clicks.add("cart")
    >>> list(clicks.get())
    ['home', 'cart']
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from state.descriptors import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateTtlConfig,
)
from state.key_groups import KeyGroupRange, assign_to_key_group
from weir.errors import StateError

MISSING: Any = object()

#: One entry of a snapshot: (state name, key group, key bytes, namespace bytes, value bytes).
Entry = tuple[str, int, bytes, bytes, bytes]


class KeyedStateBackend(ABC):
    """Keyed state of one operator instance over a range of key groups."""

    #: ``state.backend.type`` value of the implementation.
    name = ""

    def __init__(self, max_parallelism: int, key_group_range: KeyGroupRange,
                 clock: Callable[[], float] | None = None) -> None:
        self.max_parallelism = max_parallelism
        self.key_group_range = key_group_range
        self.current_key: Any = None
        self.current_key_group = -1
        self._clock = clock or time.time
        self._descriptors: dict[str, StateDescriptor] = {}
        self._handles: dict[str, Any] = {}

    # -- keys -----------------------------------------------------------------------------

    def set_current_key(self, key: Any, key_group: int | None = None) -> None:
        """Scope the handles to ``key`` (its key group may be given when already known)."""
        if key_group is None:
            key_group = assign_to_key_group(key, self.max_parallelism)
        if key_group not in self.key_group_range:
            msg = (f"key {key!r} is in key group {key_group}, which this subtask does not own "
                   f"({self.key_group_range}): the stream was not partitioned by this key")
            raise StateError(msg)
        self.current_key = key
        self.current_key_group = key_group

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- registration ---------------------------------------------------------------------

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The handle of ``descriptor``'s state (registered on first use)."""
        known = self._descriptors.get(descriptor.name)
        if known is not None:
            if known.kind != descriptor.kind:
                msg = (f"state {descriptor.name!r} is already registered as {known.kind} "
                       f"state, not {descriptor.kind}")
                raise StateError(msg)
            return self._handles[descriptor.name]
        self._descriptors[descriptor.name] = descriptor
        self._register(descriptor.name)
        handle = _HANDLES[descriptor.kind](self, descriptor)
        self._handles[descriptor.name] = handle
        return handle

    @property
    def state_names(self) -> list[str]:
        return sorted(self._descriptors)

    # -- primitives (current key) ---------------------------------------------------------

    @abstractmethod
    def _register(self, state: str) -> None:
        """Create the storage of a newly registered state (no-op if restored already)."""

    @abstractmethod
    def _get(self, state: str, namespace: Any) -> Any:
        """The value of the current key in ``namespace``, or MISSING. Not to be mutated."""

    @abstractmethod
    def _get_mutable(self, state: str, namespace: Any) -> Any:
        """Like ``_get``, but the caller may change the value in place and ``_put`` it."""

    @abstractmethod
    def _put(self, state: str, namespace: Any, value: Any) -> None: ...

    @abstractmethod
    def _delete(self, state: str, namespace: Any) -> None: ...

    @abstractmethod
    def keys(self, state: str, namespace: Any = None) -> Iterator[Any]:
        """Every key with a value of ``state`` in ``namespace``."""

    # -- snapshots ------------------------------------------------------------------------

    @abstractmethod
    def entries(self) -> Iterator[Entry]:
        """Every entry, ordered by state name, key group, key bytes and namespace bytes —
        the canonical order, the same for every backend."""

    @abstractmethod
    def load_entries(self, entries: Iterable[Entry]) -> int:
        """Insert entries (restore); entries outside the key-group range are skipped.
        Returns how many were inserted."""

    @abstractmethod
    def snapshot(self) -> Any:
        """Freeze the state (the synchronous part of a snapshot); the returned object's
        ``entries()`` yields the canonical entries and may run on another thread."""

    @abstractmethod
    def dispose(self) -> None:
        """Release resources (files, handles)."""


class _Handle:
    """Common part of the state handles: the backend, the state name, the namespace, TTL."""

    def __init__(self, backend: KeyedStateBackend, descriptor: StateDescriptor) -> None:
        self._backend = backend
        self._name = descriptor.name
        self._namespace: Any = None
        ttl = descriptor.ttl_config
        self._ttl = ttl
        self._refresh_on_read = ttl is not None and \
            ttl.update_type == StateTtlConfig.UpdateType.OnReadAndWrite
        self._hide_expired = ttl is not None and \
            ttl.visibility == StateTtlConfig.StateVisibility.NeverReturnExpired

    def set_current_namespace(self, namespace: Any) -> None:
        self._namespace = namespace

    # With TTL, a stored value is (value, last access ms); without, the value itself.

    def _read(self) -> Any:
        stored = self._backend._get(self._name, self._namespace)
        if stored is MISSING or self._ttl is None:
            return stored
        value, stamp = stored
        now = self._backend.now_ms()
        if now - stamp >= self._ttl.ttl_ms:
            self._backend._delete(self._name, self._namespace)  # clean up on access
            if self._hide_expired:
                return MISSING
            return value
        if self._refresh_on_read:
            self._backend._put(self._name, self._namespace, (value, now))
        return value

    def _read_mutable(self) -> Any:
        if self._ttl is not None:
            return self._read()
        return self._backend._get_mutable(self._name, self._namespace)

    def _write(self, value: Any) -> None:
        if self._ttl is not None:
            value = (value, self._backend.now_ms())
        self._backend._put(self._name, self._namespace, value)

    def clear(self) -> None:
        self._backend._delete(self._name, self._namespace)


class ValueState(_Handle):
    """One value per key (and namespace)."""

    def value(self) -> Any:
        value = self._read()
        return None if value is MISSING else value

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self._write(value)


class ListState(_Handle):
    """A list per key; ``get()`` returns the elements in the order they were added."""

    def get(self) -> list[Any]:
        value = self._read()
        return [] if value is MISSING else list(value)

    def add(self, value: Any) -> None:
        if value is None:
            msg = f"cannot add None to list state {self._name!r}"
            raise StateError(msg)
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if not values:
            return
        current = self._read_mutable()
        if current is MISSING:
            current = []
        current.extend(values)
        self._write(current)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values)
        if values:
            self._write(values)
        else:
            self.clear()


class MapState(_Handle):
    """A map per key."""

    def _map(self) -> dict[Any, Any]:
        value = self._read()
        return {} if value is MISSING else value

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def contains(self, key: Any) -> bool:
        return key in self._map()

    def put(self, key: Any, value: Any) -> None:
        self.put_all({key: value})

    def put_all(self, entries: dict[Any, Any]) -> None:
        current = self._read_mutable()
        if current is MISSING:
            current = {}
        current.update(entries)
        self._write(current)

    def remove(self, key: Any) -> None:
        current = self._read_mutable()
        if current is MISSING or key not in current:
            return
        del current[key]
        if current:
            self._write(current)
        else:
            self.clear()

    def keys(self) -> list[Any]:
        return list(self._map())

    def values(self) -> list[Any]:
        return list(self._map().values())

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._map().items())

    def is_empty(self) -> bool:
        return not self._map()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


class ReducingState(_Handle):
    """Values added are combined with the descriptor's reduce function."""

    def __init__(self, backend: KeyedStateBackend, descriptor: StateDescriptor) -> None:
        super().__init__(backend, descriptor)
        assert isinstance(descriptor, ReducingStateDescriptor)
        self._reduce = descriptor.reducer()

    def get(self) -> Any:
        value = self._read()
        return None if value is MISSING else value

    def add(self, value: Any) -> None:
        current = self._read()
        self._write(value if current is MISSING else self._reduce(current, value))


class AggregatingState(_Handle):
    """Values added are folded into an accumulator; ``get()`` returns its result."""

    def __init__(self, backend: KeyedStateBackend, descriptor: StateDescriptor) -> None:
        super().__init__(backend, descriptor)
        assert isinstance(descriptor, AggregatingStateDescriptor)
        self._fn = descriptor.agg_function

    def get(self) -> Any:
        accumulator = self._read()
        return None if accumulator is MISSING else self._fn.get_result(accumulator)

    def add(self, value: Any) -> None:
        accumulator = self._read()
        if accumulator is MISSING:
            accumulator = self._fn.create_accumulator()
        self._write(self._fn.add(value, accumulator))


_HANDLES: dict[str, type[_Handle]] = {
    "value": ValueState, "list": ListState, "map": MapState, "reducing": ReducingState,
    "aggregating": AggregatingState,
}
