"""The keyed state backend interface and the state handles built on it.

A backend stores, per registered state, one value per (key, namespace) of the key groups it
owns. The handles (:class:`ValueState`, :class:`ListState`, :class:`MapState`,
:class:`ReducingState`, :class:`AggregatingState`) are written once against four
primitives (``_get``, ``_get_mutable``, ``_put``, ``_delete``), so both backends behave
the same. Everything runs on the task's mailbox thread; only a snapshot's asynchronous
part runs elsewhere, on data the synchronous part froze.

Example:
    >>> from weir.state.heap import HeapKeyedStateBackend
    >>> from weir.state.key_groups import KeyGroupRange
    >>> from weir.state.descriptors import ListStateDescriptor
    >>> backend = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> clicks = backend.get_state(ListStateDescriptor("clicks"))
    >>> backend.set_current_key("alice"); clicks.add("home"); clicks.add("cart")
    >>> list(clicks.get())
    ['home', 'cart']
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from weir.core.errors import IncompatibleStateError, StateError
from weir.core.generics import MapAccess, TypeParameters
from weir.core.ids import CheckpointId
from weir.state.descriptors import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateTtlConfig,
)
from weir.state.key_groups import KeyGroupRange, assign_to_key_group
from weir.state.serializers import encode_key

if TYPE_CHECKING:
    from weir.state.canonical import SegmentView
    from weir.state.handles import KeyedStateHandle
    from weir.state.snapshot import AsyncSnapshot, SnapshotLocation, SnapshotStrategy

MISSING: Any = object()
#: No key encoded yet (``None`` is a key like any other).
_NOT_ENCODED: Any = object()

#: One entry of a snapshot: (state name, key group, key bytes, namespace bytes, value bytes).
Entry = tuple[str, int, bytes, bytes, bytes]

#: Key groups of a batch of keys, as computed by ``key_groups_of_array`` (or a list of ints).
KeyGroups = Sequence[int] | np.ndarray


class KeyGroupGate(Protocol):
    """What a backend waits on while a lazy restore still loads key groups (state/lazy.py).

    Called on the task thread only; each method returns once the key groups are loaded, and
    raises StateError if loading failed or did not finish within the restore's timeout."""

    def await_key_group(self, key_group: int) -> None: ...

    def await_key_groups(self, key_groups: Iterable[int]) -> None: ...

    def await_all(self) -> None: ...

    def close(self) -> None: ...


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
        #: Set by a lazy restore until every key group is loaded (see state/lazy.py).
        self._restore_gate: KeyGroupGate | None = None
        #: ``encode_key`` of the key it was computed for (see ``_current_key_bytes``).
        self._encoded_key = b""
        self._encoded_for: Any = _NOT_ENCODED
        #: ``state.backend.restore.lazy`` and ``...rocksdb.restore.rescale-method``, set by
        #: the factory; ``restore()`` reads them.
        self.lazy_restore = False
        self.rescale_method = "clip"
        self._snapshot_strategies: dict[str, SnapshotStrategy] = {}
        #: Kinds of the states a restore brought, by name (checked on registration), and
        #: whose state this is (the operator uid, for messages).
        self._restored_kinds: dict[str, str] = {}
        self.owner = ""

    # -- keys -----------------------------------------------------------------------------

    def set_current_key(self, key: Any, key_group: int | None = None) -> None:
        """Scope the handles to ``key`` (its key group may be given when already known)."""
        if key_group is None:
            key_group = assign_to_key_group(key, self.max_parallelism)
        if key_group not in self.key_group_range:
            msg = (f"key {key!r} is in key group {key_group}, which this subtask does not own "
                   f"({self.key_group_range}): the stream was not partitioned by this key")
            raise StateError(msg)
        gate = self._restore_gate
        if gate is not None:
            gate.await_key_group(key_group)
        self.current_key = key
        self.current_key_group = key_group

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- registration ---------------------------------------------------------------------

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The handle of ``descriptor``'s state (registered on first use)."""
        restored = self._restored_kinds.get(descriptor.name)
        if restored is not None and restored != descriptor.kind:
            raise self._incompatible(descriptor.name, restored, descriptor.kind)
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

    def state_kinds(self) -> dict[str, str]:
        """The kind of every registered state, by name (recorded in snapshots)."""
        return {name: d.kind for name, d in self._descriptors.items()}

    def expect_state_kinds(self, kinds: dict[str, str]) -> None:
        """A restore brought states of these kinds: registering one of them as another
        kind raises IncompatibleStateError (as would one registered already)."""
        for name, kind in kinds.items():
            known = self._descriptors.get(name)
            if known is not None and known.kind != kind:
                raise self._incompatible(name, kind, known.kind)
        self._restored_kinds.update(kinds)

    def _incompatible(self, name: str, restored: str, declared: str) -> IncompatibleStateError:
        owner = f"operator {self.owner!r}: " if self.owner else ""
        msg = (f"{owner}state {name!r} is {restored} state in the snapshot being restored, "
               f"but the job declares it as {declared} state; restoring would read it "
               f"wrongly: keep its kind, or give the new state another name")
        return IncompatibleStateError(msg)

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

    def _put_serialized(self, state: str, namespace: Any, value: Any, data: bytes) -> None:
        """``_put``, given ``value`` already serialized as ``data`` (``serialize_value``):
        a backend that stores bytes stores these instead of serializing ``value`` again."""
        self._put(state, namespace, value)

    def _current_key_bytes(self) -> bytes:
        """``encode_key(current_key)``, computed once per key: consecutive writes of one
        key, and several states of one record, reuse it."""
        if self._encoded_for is not self.current_key:
            self._encoded_key = encode_key(self.current_key)
            self._encoded_for = self.current_key
        return self._encoded_key

    @abstractmethod
    def _delete(self, state: str, namespace: Any) -> None: ...

    @abstractmethod
    def keys(self, state: str, namespace: Any = None) -> Iterator[Any]:
        """Every key with a value of ``state`` in ``namespace``."""

    @abstractmethod
    def namespaced_keys(self, state: str) -> Iterator[tuple[int, Any, Any]]:
        """``(key group, key, namespace)`` of every value of ``state``, in any order.

        Reads only that state (timers are rebuilt from it on restore, and must not pay for
        the rest of a large backend).
        """

    # -- snapshots ------------------------------------------------------------------------

    @abstractmethod
    def entries(self) -> Iterator[Entry]:
        """Every entry, ordered by state name, key group, key bytes and namespace bytes —
        the canonical order, the same for every backend."""

    @abstractmethod
    def load_entries(self, entries: Iterable[Entry]) -> int:
        """Insert entries (restore); entries outside the key-group range are skipped.
        Returns how many were inserted."""

    def load_segment(self, segment: SegmentView) -> int:
        """Insert one (state, key group) of a canonical snapshot (restore), in the form of
        it this backend stores; as ``load_entries`` otherwise."""
        return self.load_entries(segment.entries())

    @abstractmethod
    def snapshot(self) -> Any:
        """Freeze the state (the synchronous part of a snapshot); the returned object's
        ``entries()`` yields the canonical entries and may run on another thread."""

    @abstractmethod
    def dispose(self) -> None:
        """Release resources (files, handles)."""

    # -- batched primitives (vectorised operators) ----------------------------------------

    def get_many(self, state: str, key_groups: KeyGroups, keys: Sequence[Any],
                 namespace: Any = None) -> list[Any]:
        """The stored values of ``keys`` (whose key groups are given) in ``namespace``, or
        MISSING for absent ones; the values are not to be mutated.

        Values are raw: a state with a time to live stores ``(value, last access ms)``
        pairs, which are returned as they are, expired or not, and no access time is
        refreshed. ``state`` must have been registered with :meth:`get_state`. Runs on the
        task thread; the current key is left as it was.

        Example:
            >>> from weir.state.heap import HeapKeyedStateBackend
            >>> from weir.state.key_groups import KeyGroupRange, assign_to_key_group
            >>> from weir.state.descriptors import ValueStateDescriptor
            >>> backend = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
            >>> _ = backend.get_state(ValueStateDescriptor("total"))
            >>> keys = ["a", "b"]
            >>> groups = [assign_to_key_group(k, 128) for k in keys]
            >>> backend.put_many("total", groups, keys, None, [1, 2])
            >>> backend.get_many("total", groups, keys, None)
            [1, 2]
            >>> backend.get_many("total", [assign_to_key_group("c", 128)], ["c"])[0] is MISSING
            True
        """
        groups = self._checked_batch(state, key_groups, keys)
        return self._get_many(state, groups, keys, namespace)

    def put_many(self, state: str, key_groups: KeyGroups, keys: Sequence[Any],
                 namespace: Any, values: Sequence[Any]) -> None:
        """Store ``values[i]`` for ``keys[i]`` in ``namespace`` (raw values: no TTL stamp is
        added, see :meth:`get_many`). A later key wins over an earlier equal one."""
        if len(values) != len(keys):
            msg = f"put_many on state {state!r}: {len(keys)} keys but {len(values)} values"
            raise StateError(msg)
        groups = self._checked_batch(state, key_groups, keys)
        self._put_many(state, groups, keys, namespace, values)

    def delete_many(self, state: str, key_groups: KeyGroups, keys: Sequence[Any],
                    namespace: Any = None) -> None:
        """Remove the values of ``keys`` in ``namespace`` (absent ones are ignored)."""
        groups = self._checked_batch(state, key_groups, keys)
        self._delete_many(state, groups, keys, namespace)

    def _checked_batch(self, state: str, key_groups: KeyGroups, keys: Sequence[Any]
                       ) -> list[int]:
        if state not in self._descriptors:
            msg = (f"state {state!r} is not registered with this backend: call "
                   "get_state(descriptor) before using it in a batch")
            raise StateError(msg)
        groups: list[int] = key_groups.tolist() if isinstance(key_groups, np.ndarray) \
            else list(key_groups)
        if len(groups) != len(keys):
            msg = (f"batch on state {state!r}: {len(keys)} keys but {len(groups)} key "
                   "groups")
            raise StateError(msg)
        if groups:
            owned = self.key_group_range
            if min(groups) < owned.start or max(groups) > owned.end:
                index = next(i for i, g in enumerate(groups) if g not in owned)
                msg = (f"key {keys[index]!r} is in key group {groups[index]}, which this "
                       f"subtask does not own ({owned}): the stream was not partitioned by "
                       "this key")
                raise StateError(msg)
            gate = self._restore_gate
            if gate is not None:
                gate.await_key_groups(set(groups))
        return groups

    # Generic versions over the single-key primitives; the backends override them.

    def _get_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                  namespace: Any) -> list[Any]:
        saved = self.current_key, self.current_key_group
        try:
            out = []
            for key_group, key in zip(key_groups, keys, strict=True):
                self.current_key, self.current_key_group = key, key_group
                out.append(self._get(state, namespace))
            return out
        finally:
            self.current_key, self.current_key_group = saved

    def _put_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                  namespace: Any, values: Sequence[Any]) -> None:
        saved = self.current_key, self.current_key_group
        try:
            for key_group, key, value in zip(key_groups, keys, values, strict=True):
                self.current_key, self.current_key_group = key, key_group
                self._put(state, namespace, value)
        finally:
            self.current_key, self.current_key_group = saved

    def _delete_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                     namespace: Any) -> None:
        saved = self.current_key, self.current_key_group
        try:
            for key_group, key in zip(key_groups, keys, strict=True):
                self.current_key, self.current_key_group = key, key_group
                self._delete(state, namespace)
        finally:
            self.current_key, self.current_key_group = saved

    # -- checkpoints (state/snapshot.py) --------------------------------------------------

    def snapshot_to(self, checkpoint_id: CheckpointId, location: SnapshotLocation, *,
                    canonical: bool = False) -> AsyncSnapshot:
        """The synchronous part of checkpoint ``checkpoint_id``.

        Called on the task thread when the checkpoint's barrier is processed; it blocks only
        for the backend's freeze (O(key groups) for ``hashmap``; a flush and a RocksDB
        checkpoint of hard links for ``rocksdb``). The returned snapshot's ``run()`` — the
        asynchronous part — may run on another thread while the task goes on reading and
        writing state; it writes to ``location`` and returns the state handle.
        ``canonical`` (or a canonical savepoint's location) forces the backend-independent
        format; otherwise ``rocksdb`` writes a native incremental snapshot when
        ``state.backend.incremental`` is on (a native savepoint: always native). During a
        lazy restore this waits until every key group is loaded."""
        self._await_restored()
        canonical = canonical or location.canonical_savepoint
        return self._snapshot_strategy(canonical).snapshot(checkpoint_id, location)

    def work_while_idle(self) -> bool:
        """Do a little deferred work while the task has no input (task thread, about a
        millisecond); True when some is left. Only the changelog backend has any: the rows
        of a restored log the task has not touched yet."""
        return False

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> None:
        """Checkpoint ``checkpoint_id`` completed (every task acknowledged it and its
        metadata is durable): the next incremental snapshot may build on it, and older local
        copies are removed. Task thread; cheap (no remote I/O)."""
        for strategy in list(self._snapshot_strategies.values()):
            strategy.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> None:
        """Checkpoint ``checkpoint_id`` will never complete: nothing may build on it, and its
        local copy is removed. Task thread."""
        for strategy in list(self._snapshot_strategies.values()):
            strategy.notify_checkpoint_aborted(checkpoint_id)

    def restored_from(self, handle: KeyedStateHandle) -> None:
        """Called by ``weir.state.restore.restore`` after this backend was restored from exactly
        ``handle`` (same key-group range): a backend may build its next incremental
        snapshot on the restored files. Nothing to do for a full-snapshot backend."""
        return None

    def _snapshot_strategy(self, canonical: bool) -> SnapshotStrategy:
        strategy = self._snapshot_strategies.get("canonical")
        if strategy is None:
            from weir.state.snapshot import CanonicalSnapshotStrategy  # snapshot imports backend

            strategy = self._snapshot_strategies["canonical"] = CanonicalSnapshotStrategy(self)
        return strategy

    # -- lazy restore hook ----------------------------------------------------------------

    def _await_restored(self) -> None:
        """Block until a lazy restore has loaded every key group (whole-state operations)."""
        gate = self._restore_gate
        if gate is not None:
            gate.await_all()

    def _close_restore_gate(self) -> None:
        """Stop a lazy restore's loader thread (dispose)."""
        gate, self._restore_gate = self._restore_gate, None
        if gate is not None:
            gate.close()


class _Handle(TypeParameters):
    """Common part of the state handles: the backend, the state name, the namespace, TTL.

    The handles take type parameters as PyFlink's do (``ValueState[int]``,
    ``MapState[str, int]``): the parameters document, the class is the same.
    """

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

    def __iter__(self) -> Iterator[Any]:
        """``for value in list_state``: the elements, as ``get()`` returns them."""
        return iter(self.get())


class MapState(_Handle, MapAccess):
    """A map per key; also usable as PyFlink allows, with ``state[key]`` (None when
    absent, as ``get``), ``state[key] = value``, ``del state[key]``, ``key in state`` and
    ``for key in state``."""

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
