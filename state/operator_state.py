"""Operator (non-keyed) state: list and union list state, with Flink's redistribution.

Every operator instance (one parallel subtask of one operator) owns an
:class:`OperatorStateBackend`. A state is a list of elements; how the lists of all old
subtasks are handed to the new subtasks on restore is the state's :class:`DistributionMode`:

* ``get_list_state`` (``SPLIT_DISTRIBUTE``, Flink's "even split"): with the same
  parallelism each subtask gets its own elements back; after rescaling, the elements of all
  old subtasks (concatenated in old-subtask order) are dealt round-robin, element ``k`` to
  new subtask ``k % parallelism``, so every new subtask gets ``n // p`` or ``n // p + 1``.
  Sources keep their splits this way.
* ``get_union_list_state`` (``UNION``): every new subtask gets all elements of all old
  subtasks, in old-subtask order. For state each subtask must see whole, such as the
  largest part-file counter of a file sink.

Elements are pickled (:func:`weir.state.serializers.serialize_value`). A snapshot is bytes in
this versioned layout (big-endian)::

    MAGIC "WEIROPS" + u8 version (1)
    u16 number of states, then per state:
        u16 name length, UTF-8 name, u8 mode (0 = SPLIT_DISTRIBUTE, 1 = UNION),
        u32 number of elements, then per element: u32 length, pickled element

Functions take part through :class:`CheckpointedFunction` (``initialize_state`` with a
:class:`FunctionInitializationContext`, ``snapshot_state`` with a
:class:`FunctionSnapshotContext`) and :class:`CheckpointListener`, as in Flink.

Example:
    >>> from weir.state.descriptors import ListStateDescriptor
    >>> old = []
    >>> for subtask, offsets in enumerate([[10, 11], [12], [13]]):
    ...     backend = OperatorStateBackend()
    ...     backend.get_list_state(ListStateDescriptor("offsets")).update(offsets)
    ...     backend.get_union_list_state(ListStateDescriptor("seen")).add(subtask)
    ...     old.append(backend.snapshot())
    >>> restored = OperatorStateBackend()
    >>> restored.restore(old, subtask_index=1, parallelism=2)    # rescale 3 -> 2
    >>> restored.get_list_state(ListStateDescriptor("offsets")).get()
    [11, 13]
    >>> restored.get_union_list_state(ListStateDescriptor("seen")).get()
    [0, 1, 2]
"""

from __future__ import annotations

import enum
import struct
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from weir.core.errors import StateError
from weir.core.generics import MapAccess, TypeParameters
from weir.core.ids import CheckpointId
from weir.state.descriptors import ListStateDescriptor
from weir.state.serializers import deserialize_value, serialize_value

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CheckpointListener",
    "CheckpointedFunction",
    "DistributionMode",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "OperatorListState",
    "OperatorStateBackend",
    "OperatorStateStore",
    "decode_snapshot",
    "redistribute",
]

MAGIC = b"WEIROPS"
FORMAT_VERSION = 1
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

T = TypeVar("T")


class DistributionMode(enum.Enum):
    """How a state's elements are handed to the new subtasks on restore."""

    #: Round-robin over the new subtasks after rescaling; kept in place otherwise.
    SPLIT_DISTRIBUTE = 0
    #: Every new subtask gets every element.
    UNION = 1
    #: Broadcast state: every subtask holds the same entries, subtask 0 alone writes them
    #: into snapshots, and every new subtask gets them.
    BROADCAST = 2


def redistribute(per_subtask: Sequence[Sequence[T]], mode: DistributionMode,
                 parallelism: int) -> list[list[T]]:
    """The lists the ``parallelism`` new subtasks get from the lists of the old ones.

    Example:
        >>> redistribute([["a", "b"], ["c"]], DistributionMode.SPLIT_DISTRIBUTE, 3)
        [['a'], ['b'], ['c']]
        >>> redistribute([["a", "b"], ["c"]], DistributionMode.UNION, 2)
        [['a', 'b', 'c'], ['a', 'b', 'c']]
    """
    return [share_of(per_subtask, mode, i, parallelism) for i in range(parallelism)]


def share_of(per_subtask: Sequence[Sequence[T]], mode: DistributionMode, subtask_index: int,
             parallelism: int) -> list[T]:
    """What new subtask ``subtask_index`` of ``parallelism`` gets (see :func:`redistribute`)."""
    if parallelism < 1 or not 0 <= subtask_index < parallelism:
        msg = f"subtask index {subtask_index} is not valid for parallelism {parallelism}"
        raise ValueError(msg)
    if mode is DistributionMode.SPLIT_DISTRIBUTE and len(per_subtask) == parallelism:
        # Unchanged parallelism: a subtask keeps what it had, which is what lets a task
        # restored on the same TaskExecutor reuse its local state.
        return list(per_subtask[subtask_index])
    if mode is DistributionMode.BROADCAST:
        return list(per_subtask[0]) if per_subtask else []
    everything = [element for elements in per_subtask for element in elements]
    if mode is DistributionMode.UNION:
        return everything
    return everything[subtask_index::parallelism]


class OperatorListState(TypeParameters):
    """A list of elements of one operator instance; the handle of list and union state.

    Behaves like the keyed ``ListState`` without a current key. Used on the task thread only.
    """

    def __init__(self, name: str, mode: DistributionMode,
                 elements: Iterable[Any] = ()) -> None:
        self._name = name
        self.mode = mode
        self._elements: list[Any] = list(elements)

    @property
    def name(self) -> str:
        return self._name

    def get(self) -> list[Any]:
        """The elements, in the order they were added (a copy)."""
        return list(self._elements)

    def add(self, value: Any) -> None:
        if value is None:
            msg = f"cannot add None to operator list state {self._name!r}"
            raise StateError(msg)
        self._elements.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            msg = f"cannot add None to operator list state {self._name!r}"
            raise StateError(msg)
        self._elements.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        """Replace the elements with ``values``."""
        self._elements = []
        self.add_all(values)

    def clear(self) -> None:
        self._elements = []

    def __iter__(self) -> Iterator[Any]:
        """``for value in state``: the elements, as the keyed ``ListState`` allows."""
        return iter(self.get())

    def __repr__(self) -> str:
        return f"OperatorListState({self._name!r}, {self.mode.name}, {len(self._elements)})"


class BroadcastState(TypeParameters, MapAccess):
    """The broadcast state of one MapStateDescriptor: a map that every subtask of the
    operator holds alike (each applies the same broadcast elements to it). Written by
    ``process_broadcast_element``; ``process_element`` reads it through
    :class:`ReadOnlyBroadcastState`.

    Example:
        >>> rules = BroadcastState("rules")
        >>> rules.put("max", 10)
        >>> rules.get("max"), rules.contains("min"), rules.items()
        (10, False, [('max', 10)])
    """

    def __init__(self, name: str, entries: Iterable[tuple[Any, Any]] = ()) -> None:
        self.name = name
        self._map: dict[Any, Any] = dict(entries)

    def get(self, key: Any) -> Any:
        return self._map.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._map

    def put(self, key: Any, value: Any) -> None:
        self._map[key] = value

    def put_all(self, entries: dict[Any, Any]) -> None:
        self._map.update(entries)

    def remove(self, key: Any) -> None:
        self._map.pop(key, None)

    def clear(self) -> None:
        self._map.clear()

    def keys(self) -> list[Any]:
        return list(self._map)

    def values(self) -> list[Any]:
        return list(self._map.values())

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._map.items())

    def is_empty(self) -> bool:
        return not self._map


    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._map))


class ReadOnlyBroadcastState(TypeParameters):
    """A read-only view of a :class:`BroadcastState` (what ``process_element`` gets: only
    broadcast elements may change it, so that every subtask keeps the same state)."""

    def __init__(self, state: BroadcastState) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    def keys(self) -> list[Any]:
        return self._state.keys()

    def values(self) -> list[Any]:
        return self._state.values()

    def items(self) -> list[tuple[Any, Any]]:
        return self._state.items()

    def is_empty(self) -> bool:
        return self._state.is_empty()

    # Read-only dict-like access, as PyFlink's: state[key], key in state, for key in state.

    def __getitem__(self, key: Any) -> Any:
        return self._state.get(key)

    def __contains__(self, key: Any) -> bool:
        return self._state.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._state)


class OperatorStateStore(ABC):
    """What functions see of operator state (Flink's ``OperatorStateStore``)."""

    @abstractmethod
    def get_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        """List state: on rescale its elements are dealt round-robin to the new subtasks."""

    @abstractmethod
    def get_union_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        """Union list state: on restore every subtask gets the elements of all subtasks."""


class OperatorStateBackend(OperatorStateStore):
    """The operator state of one operator instance: named list and union list states.

    Lifecycle: create; :meth:`restore` at most once, before the first ``get_*_state``
    (skip it on a fresh start); register and use states on the task thread;
    :meth:`snapshot` on the task thread at each checkpoint; :meth:`dispose`. Restored states
    that the operator never asks for are kept and written into later snapshots unchanged,
    so a version of a job that does not use a state does not lose it.

    Example:
        >>> from weir.state.descriptors import ListStateDescriptor
        >>> backend = OperatorStateBackend()
        >>> buffered = backend.get_list_state(ListStateDescriptor("buffered"))
        >>> buffered.add_all(["a", "b"])
        >>> fresh = OperatorStateBackend()
        >>> fresh.restore([backend.snapshot()], subtask_index=0, parallelism=1)
        >>> fresh.is_restored, fresh.get_list_state(ListStateDescriptor("buffered")).get()
        (True, ['a', 'b'])
    """

    def __init__(self) -> None:
        self._states: dict[str, OperatorListState] = {}
        # Broadcast states, and whether this instance writes them into snapshots.
        self._broadcast: dict[str, tuple[BroadcastState, bool]] = {}
        # Restored elements not asked for yet, still pickled: (mode, elements' bytes).
        self._restored: dict[str, tuple[DistributionMode, list[bytes]]] = {}
        self._is_restored = False

    @property
    def is_restored(self) -> bool:
        """Whether :meth:`restore` ran (also when the restored snapshots held no state)."""
        return self._is_restored

    @property
    def state_names(self) -> list[str]:
        """Names of every state the next snapshot will hold, registered or only restored."""
        return sorted({*self._states, *self._broadcast, *self._restored})

    def get_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        """List state: on rescale its elements are dealt round-robin to the new subtasks."""
        return self._get(descriptor, DistributionMode.SPLIT_DISTRIBUTE)

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        """Union list state: on restore every subtask gets the elements of all subtasks."""
        return self._get(descriptor, DistributionMode.UNION)

    def get_broadcast_state(self, descriptor: Any, writer: bool) -> BroadcastState:
        """The broadcast state of a MapStateDescriptor; only a ``writer`` (subtask 0) puts
        its entries into snapshots, and on restore every subtask gets the writer's."""
        name = _descriptor_name(descriptor, "map", "broadcast state")
        if name in self._states:
            _check_mode(name, self._states[name].mode, DistributionMode.BROADCAST)
        known = self._broadcast.get(name)
        if known is not None:
            return known[0]
        state = BroadcastState(name, self._take_restored(name, DistributionMode.BROADCAST))
        self._broadcast[name] = (state, writer)
        return state

    def _get(self, descriptor: ListStateDescriptor, mode: DistributionMode
             ) -> OperatorListState:
        name = _descriptor_name(descriptor, "list", "operator state")
        if name in self._broadcast:
            _check_mode(name, DistributionMode.BROADCAST, mode)
        known = self._states.get(name)
        if known is not None:
            _check_mode(name, known.mode, mode)
            return known
        state = OperatorListState(name, mode, self._take_restored(name, mode))
        self._states[name] = state
        return state

    def _take_restored(self, name: str, mode: DistributionMode) -> list[Any]:
        """The restored elements of state ``name`` (none if it was not restored), which
        must have been written in ``mode``."""
        restored = self._restored.pop(name, None)
        if restored is None:
            return []
        restored_mode, raw = restored
        try:
            _check_mode(name, restored_mode, mode)
        except StateError:
            self._restored[name] = restored
            raise
        return [deserialize_value(data) for data in raw]

    def snapshot(self) -> bytes:
        """Every state's elements, pickled now, in the versioned format of the module.

        Called on the task thread (the elements may change right after it returns, so the
        copy cannot be deferred); it blocks only on pickling. Raises StateError naming the
        state if an element cannot be pickled.
        """
        parts = [MAGIC, _U8.pack(FORMAT_VERSION), _U16.pack(len(self.state_names))]
        for name in self.state_names:
            state = self._states.get(name)
            broadcast = self._broadcast.get(name)
            if broadcast is not None:
                mode = DistributionMode.BROADCAST
                try:
                    raw = [serialize_value(entry) for entry in broadcast[0].items()] \
                        if broadcast[1] else []
                except Exception as err:
                    msg = f"an entry of broadcast state {name!r} cannot be pickled: {err}"
                    raise StateError(msg) from err
            elif state is not None:
                mode = state.mode
                try:
                    raw = [serialize_value(element) for element in state.get()]
                except Exception as err:
                    msg = f"an element of operator state {name!r} cannot be pickled: {err}"
                    raise StateError(msg) from err
            else:
                mode, raw = self._restored[name]
            encoded = name.encode("utf-8")
            if len(encoded) > 0xFFFF:
                msg = f"operator state name is too long ({len(encoded)} bytes): {name[:40]}..."
                raise StateError(msg)
            parts += [_U16.pack(len(encoded)), encoded, _U8.pack(mode.value),
                      _U32.pack(len(raw))]
            for data in raw:
                parts += [_U32.pack(len(data)), data]
        return b"".join(parts)

    def restore(self, snapshots: Sequence[bytes | bytearray | memoryview | None],
                subtask_index: int, parallelism: int) -> None:
        """Take this subtask's share of the snapshots of *all* old subtasks.

        ``snapshots[i]`` is what old subtask ``i`` returned from :meth:`snapshot` (None if
        it had no operator state). Called once, on the task thread, before any state is
        registered; only the elements this subtask gets are unpickled. Raises StateError if
        a snapshot is damaged, if one state name has different modes in different
        snapshots, or if called twice or after a state was registered; ValueError if
        ``subtask_index`` is not below ``parallelism``.
        """
        if self._is_restored or self._states:
            msg = "operator state can be restored only once, before any state is registered"
            raise StateError(msg)
        if parallelism < 1 or not 0 <= subtask_index < parallelism:
            msg = f"subtask index {subtask_index} is not valid for parallelism {parallelism}"
            raise ValueError(msg)
        decoded = [decode_snapshot(s) if s is not None else {} for s in snapshots]
        modes: dict[str, DistributionMode] = {}
        for states in decoded:
            for name, (mode, _) in states.items():
                _check_mode(name, modes.setdefault(name, mode), mode)
        for name, mode in modes.items():
            per_subtask = [states[name][1] if name in states else [] for states in decoded]
            self._restored[name] = (mode, share_of(per_subtask, mode, subtask_index,
                                                   parallelism))
        self._is_restored = True

    def dispose(self) -> None:
        """Drop every state (the backend holds only memory)."""
        self._states.clear()
        self._restored.clear()


def split_only(data: bytes | bytearray | memoryview) -> bool:
    """Whether every state of a snapshot is split-distributed (no union state): then, at
    unchanged parallelism, each subtask needs only its own snapshot back."""
    return all(mode is DistributionMode.SPLIT_DISTRIBUTE
               for mode, _ in decode_snapshot(data).values())


def decode_snapshot(data: bytes | bytearray | memoryview
                    ) -> dict[str, tuple[DistributionMode, list[bytes]]]:
    """The states of a snapshot by name: (mode, pickled elements), without unpickling."""
    view = memoryview(data)
    if bytes(view[:len(MAGIC)]) != MAGIC:
        msg = "not an operator state snapshot (bad magic): the object is damaged or not weir's"
        raise StateError(msg)
    try:
        position = len(MAGIC)
        (version,) = _U8.unpack_from(view, position)
        if version != FORMAT_VERSION:
            msg = (f"operator state snapshot has format version {version}; this weir reads "
                   f"version {FORMAT_VERSION}")
            raise StateError(msg)
        (count,) = _U16.unpack_from(view, position + 1)
        position += 3
        states: dict[str, tuple[DistributionMode, list[bytes]]] = {}
        for _ in range(count):
            (length,) = _U16.unpack_from(view, position)
            name = bytes(view[position + 2:position + 2 + length]).decode("utf-8")
            position += 2 + length
            (mode_value,) = _U8.unpack_from(view, position)
            (elements,) = _U32.unpack_from(view, position + 1)
            position += 5
            raw = []
            for _ in range(elements):
                (size,) = _U32.unpack_from(view, position)
                if position + 4 + size > len(view):
                    msg = f"an element of operator state {name!r} is truncated"
                    raise StateError(msg)
                raw.append(bytes(view[position + 4:position + 4 + size]))
                position += 4 + size
            states[name] = (DistributionMode(mode_value), raw)
    except (struct.error, UnicodeDecodeError, ValueError) as err:
        msg = f"operator state snapshot is damaged: {err}"
        raise StateError(msg) from err
    if position != len(view):
        msg = f"operator state snapshot has {len(view) - position} stray bytes at its end"
        raise StateError(msg)
    return states


def _descriptor_name(descriptor: Any, kind: str, what: str) -> str:
    """The name of ``descriptor``, which must be a state descriptor of ``kind``."""
    if getattr(descriptor, "kind", None) != kind:
        msg = (f"{what} needs a {kind.capitalize()}StateDescriptor, got "
               f"{type(descriptor).__name__} for {getattr(descriptor, 'name', '?')!r}")
        raise StateError(msg)
    return str(descriptor.name)


def _check_mode(name: str, known: DistributionMode, wanted: DistributionMode) -> None:
    if known is not wanted:
        kinds = {DistributionMode.SPLIT_DISTRIBUTE: ("list state", "get_list_state"),
                 DistributionMode.UNION: ("union list state", "get_union_list_state"),
                 DistributionMode.BROADCAST: ("broadcast state", "broadcast(descriptor)")}
        msg = (f"operator state {name!r} is {kinds[known][0]}, not {kinds[wanted][0]}: "
               f"use {kinds[known][1]}, or give the new state another name")
        raise StateError(msg)


class FunctionSnapshotContext:
    """What a function learns when a checkpoint is taken (Flink's ``FunctionSnapshotContext``).

    Example:
        >>> FunctionSnapshotContext(7, 1_700_000_000_000).get_checkpoint_id()
        7
    """

    def __init__(self, checkpoint_id: CheckpointId, checkpoint_timestamp: int = 0) -> None:
        self._checkpoint_id = checkpoint_id
        self._checkpoint_timestamp = checkpoint_timestamp

    def get_checkpoint_id(self) -> int:
        return self._checkpoint_id

    def get_checkpoint_timestamp(self) -> int:
        """When the checkpoint was triggered, in milliseconds since the epoch."""
        return self._checkpoint_timestamp


class FunctionInitializationContext:
    """What a function gets in ``initialize_state``: its operator state store (and the keyed
    store on a keyed stream), and whether the state was restored.

    Example:
        >>> context = FunctionInitializationContext(OperatorStateBackend())
        >>> context.is_restored()
        False
    """

    def __init__(self, operator_state_store: OperatorStateBackend,
                 keyed_state_store: Any = None) -> None:
        self._operator_state_store = operator_state_store
        self._keyed_state_store = keyed_state_store

    def is_restored(self) -> bool:
        """True when the job restarted from a checkpoint or savepoint."""
        return self._operator_state_store.is_restored

    def get_operator_state_store(self) -> OperatorStateStore:
        return self._operator_state_store

    def get_keyed_state_store(self) -> Any:
        """The keyed state store; only on a keyed stream."""
        if self._keyed_state_store is None:
            msg = "keyed state is only available on a keyed stream (use key_by first)"
            raise StateError(msg)
        return self._keyed_state_store


class CheckpointedFunction(ABC):
    """A function (or operator) with operator state, as Flink's ``CheckpointedFunction``.

    ``initialize_state`` is called once on the task thread, before ``open`` and before any
    record, on a fresh start and on a restore alike; it registers the states and, when
    ``context.is_restored()``, reads them back. ``snapshot_state`` is called on the task
    thread when a checkpoint is taken, between two records; it writes what the function
    holds in its own fields into the registered states, and the backend snapshot follows.

    Example:
        >>> from weir.state.descriptors import ListStateDescriptor
        >>> class BufferingSink(CheckpointedFunction):
        ...     def __init__(self):
        ...         self.buffer = []
        ...     def initialize_state(self, context):
        ...         store = context.get_operator_state_store()
        ...         self.saved = store.get_list_state(ListStateDescriptor("buffered"))
        ...         if context.is_restored():
        ...             self.buffer = self.saved.get()
        ...     def snapshot_state(self, context):
        ...         self.saved.update(self.buffer)
        >>> sink, backend = BufferingSink(), OperatorStateBackend()
        >>> sink.initialize_state(FunctionInitializationContext(backend))
        >>> sink.buffer.append("record")
        >>> sink.snapshot_state(FunctionSnapshotContext(1))
        >>> backend.get_list_state(ListStateDescriptor("buffered")).get()
        ['record']
    """

    @abstractmethod
    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        """Write the function's state into its registered states for this checkpoint."""

    @abstractmethod
    def initialize_state(self, context: FunctionInitializationContext) -> None:
        """Register the states, and read them back when the state was restored."""


class CheckpointListener(ABC):  # noqa: B024 - both notifications are optional
    """Notified when checkpoints complete or are aborted (Flink's ``CheckpointListener``).

    Called on the task thread. A completed checkpoint ``n`` also completes every earlier one
    a listener was not told about; a two-phase-commit sink commits here what it
    pre-committed for checkpoints up to ``n``.
    """

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> None:  # noqa: B027
        """Checkpoint ``checkpoint_id`` is complete and durable."""

    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> None:  # noqa: B027
        """Checkpoint ``checkpoint_id`` will never complete."""
