"""Columnar keyed state: a key -> slot index over Arrow keys and per-slot aggregate arrays.

The vectorised keyed aggregations (``key_by("word").count()``) keep one number per key. Held
as Python objects in the keyed backend, every batch costs a Python call per distinct key to
read the totals and another to write them back. Here the keys live in Arrow arrays and the
totals in numpy arrays indexed by a dense *slot*, so a batch costs a fixed number of numpy
and pyarrow calls whatever the number of its distinct keys.

:class:`ColumnarKeyIndex` maps keys of one Arrow type to slots ``0..size-1``: an
open-addressing hash table (linear probing, at most half full) over each key's MurmurHash3,
the hash the exchange and the key groups use (:func:`weir.state.key_groups.key_hashes_of_array`),
spread over the table by a multiplicative hash so that the key-group bits a subtask shares do
not crowd one part of it. Probing runs for all keys of a batch at once, one round per probe
step; a hash match is verified by comparing the keys themselves (``take`` + ``equal``), so
colliding hashes never merge two keys. The null key has a slot of its own outside the table.
Keys are stored in Arrow chunks of geometrically decreasing size (each at least four times the
next, merged as they fill): an insert copies each key O(log) times in all, and a lookup
reads a handful of chunks.

:class:`KeyedAggregates` adds one aggregate per slot (a numpy array whose dtype widens as
values need it, a "has a value" mask for a min/max that only saw nulls, the key group of each
slot) and ties it to a keyed state backend.

Design: the columns are a *write-back cache* of one ``ValueState`` of the operator's keyed
backend, which stays the state of record. A key met for the first time (in this run, or
since a restore) is read from the backend once, in one ``get_many`` for all of a batch's new
keys; updates stay in the columns and mark their slots dirty; before every snapshot the
operator calls :meth:`KeyedAggregates.flush`, which writes the dirty slots back in one
``put_many`` (the subtask owns one key-group range). So a checkpoint, a savepoint (canonical
or native), an incremental RocksDB snapshot, the changelog backend, a restore and a rescale
see exactly the state they saw before: the same state name, the same Python keys and values,
in the same key groups; nothing in their formats changes meaning, and a restored subtask
starts with an empty cache that fills as keys come. The alternative, snapshotting the columns
themselves, would need a second snapshot format on every backend and its own rescaling.
The cost is memory (a key is in the columns and in the backend; past ``MAX_KEYS`` keys the
columns are written back and emptied, so that a RocksDB backend may still hold more keys
than memory) and a flush per checkpoint, on the task thread, proportional to the keys
updated since the previous one (about 0.3 us a key into the heap backend, 0.7 us into
RocksDB).

Example:
    >>> import pyarrow as pa
    >>> index = ColumnarKeyIndex(128)
    >>> index.find_or_add(pa.array(["a", "b", None]))[0].tolist()
    [0, 1, 2]
    >>> index.find(pa.array(["b", "c", None, "a"])).tolist()
    [1, -1, 2, 0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from weir.state.backend import MISSING
from weir.state.key_groups import key_hashes_of_array

if TYPE_CHECKING:
    from weir.state.backend import KeyedStateBackend

__all__ = ["MAX_KEYS", "ColumnarKeyIndex", "KeyTypeMismatchError", "KeyedAggregates"]

_Slots = npt.NDArray[np.int64]
#: Keys KeyedAggregates holds before it starts afresh (about 100 bytes each with the index).
MAX_KEYS = 1 << 22
#: Fibonacci hashing: the high bits of ``hash * 2**64 / phi`` depend on every bit of the hash.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIN_TABLE_BITS = 4
#: A key chunk is merged into the one before it once that one is less than this many times
#: its size: at most log_4(keys) chunks, and each key copied O(log) times in all.
_CHUNK_RATIO = 4
#: Table positions a lookup reads per key and round (see ColumnarKeyIndex._probe).
_WINDOW = 8
_WINDOW_OFFSETS = np.arange(_WINDOW, dtype=np.int64)
#: Key types stored as their 64-bit-offset variant.
_WIDE_TYPES = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary(),
               pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}


class KeyTypeMismatchError(TypeError):
    """Keys of a type the index's keys cannot be compared with (neither casts to the other)."""


class ColumnarKeyIndex:
    """Keys of one Arrow type mapped to dense slots ``0..size-1``, in insertion order.

    ``max_parallelism`` decides each slot's key group (:attr:`key_groups`), the same as
    :func:`weir.state.key_groups.assign_to_key_group` gives its key.
    """

    def __init__(self, max_parallelism: int) -> None:
        self.max_parallelism = max_parallelism
        #: The Arrow type of the keys (None until the first insert).
        self.key_type: pa.DataType | None = None
        self._size = 0
        self._store: _KeyStore | None = None
        self._hashes = np.zeros(16, dtype=np.uint32)
        self._groups = np.zeros(16, dtype=np.int32)
        self._bits = _MIN_TABLE_BITS
        self._table = np.full(1 << self._bits, -1, dtype=np.int64)
        #: The hash of the key at each table position (read with the position: one gather).
        self._table_hashes = np.zeros(1 << self._bits, dtype=np.uint32)
        self._null_slot = -1

    def __len__(self) -> int:
        return self._size

    @property
    def key_groups(self) -> npt.NDArray[np.int32]:
        """The key group of every slot (a view; slot ``i`` at index ``i``)."""
        return self._groups[: self._size]

    # -- lookups ---------------------------------------------------------------------------

    def find(self, keys: pa.Array) -> _Slots:
        """The slot of every key (``-1`` where absent); ``keys`` may repeat and hold nulls."""
        keys = self._conform(keys)
        slots = np.full(len(keys), -1, dtype=np.int64)
        if len(keys) == 0 or self._size == 0:
            if keys.null_count:
                slots[_nulls(keys)] = self._null_slot
            return slots
        rows = self._valid_rows(keys, slots)
        if rows.size:
            found, _ = self._probe(keys, key_hashes_of_array(keys)[rows], rows)
            slots[rows] = found
        return slots

    def find_or_add(self, keys: pa.Array) -> tuple[_Slots, npt.NDArray[np.intp]]:
        """The slot of every key, adding the absent ones; ``keys`` must be distinct (a
        dictionary, ``pc.unique``). Returns the slots and the positions in ``keys`` of the keys
        added (their slots are the new ``size - len(added) .. size - 1``, in that order)."""
        keys = self._conform(keys)
        n = len(keys)
        slots = np.full(n, -1, dtype=np.int64)
        rows = self._valid_rows(keys, slots)
        hashes = key_hashes_of_array(keys)
        ends = np.zeros(rows.size, dtype=np.int64)
        if rows.size and self._size:
            slots[rows], ends = self._probe(keys, hashes[rows], rows)
        else:
            ends = self._positions(hashes[rows])
        missing = slots < 0
        added = np.flatnonzero(missing)
        if added.size == 0:
            return slots, added
        new_slots = np.arange(self._size, self._size + added.size, dtype=np.int64)
        slots[added] = new_slots
        self._reserve(self._size + added.size)
        self._hashes[new_slots] = hashes[added]
        groups = hashes[added] % np.uint32(self.max_parallelism)
        self._groups[new_slots] = groups.astype(np.int32)
        if self._store is None:
            self._store = _store_for(keys.type)
        self._store.append(keys.take(pa.array(added)))
        is_null = np.zeros(n, dtype=bool)
        if keys.null_count:
            is_null[_nulls(keys)] = True
        if is_null[added].any():
            self._null_slot = int(slots[np.flatnonzero(is_null)[0]])
        # Rows whose keys go into the table, and where their probes stopped (an empty
        # position then; a rebuild starts them again from their home positions).
        in_table = ~is_null[added]
        row_index = np.full(n, -1, dtype=np.int64)
        row_index[rows] = np.arange(rows.size)
        table_slots = new_slots[in_table]
        starts = ends[row_index[added[in_table]]] if rows.size else ends
        if self._grow_table(self._size + added.size):
            starts = self._positions(hashes[added[in_table]])
        self._place(table_slots, starts)
        self._size += added.size
        return slots, added

    def keys_at(self, slots: _Slots) -> pa.Array:
        """The keys of ``slots``, in that order."""
        if self._store is None:
            return pa.nulls(len(slots), self.key_type or pa.null())
        taken, order = self._store.take(slots)
        if order is not None:
            inverse = np.empty_like(order)
            inverse[order] = np.arange(order.size)
            taken = taken.take(pa.array(inverse))
        if self._null_slot >= 0:
            is_null = slots == self._null_slot
            if is_null.any():
                taken = pc.if_else(pa.array(is_null), pa.nulls(len(slots), taken.type), taken)
        return taken

    # -- internals -------------------------------------------------------------------------

    def _conform(self, keys: pa.Array) -> pa.Array:
        """``keys`` as the index's key type (the index adopts a wider type when only the
        other way round casts, e.g. ints then floats); KeyTypeMismatchError if neither."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        if pa.types.is_dictionary(keys.type):
            keys = keys.dictionary_decode()
        wide = _WIDE_TYPES.get(keys.type)
        if wide is not None:
            # Stored keys are one buffer of values and one of 64-bit offsets.
            keys = keys.cast(wide)
        if self.key_type is None:
            if self._size == 0:
                self.key_type = keys.type
            return keys
        if keys.type == self.key_type:
            return keys
        if _kind(keys.type) != _kind(self.key_type):
            # Arrow casts 1 to "1", but they are two keys (in Python and in the backend).
            msg = f"keys of type {keys.type} cannot be compared with keys of type {self.key_type}"
            raise KeyTypeMismatchError(msg)
        try:
            return keys.cast(self.key_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        try:
            if self._store is not None:
                self._store = self._store.cast(keys.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            msg = f"keys of type {keys.type} cannot be compared with keys of type {self.key_type}"
            raise KeyTypeMismatchError(msg) from None
        self.key_type = keys.type
        return keys

    def _valid_rows(self, keys: pa.Array, slots: _Slots) -> npt.NDArray[np.intp]:
        """Rows of non-null keys; null rows get the null slot in ``slots``."""
        if not keys.null_count:
            return np.arange(len(keys))
        nulls = _nulls(keys)
        slots[nulls] = self._null_slot
        return np.flatnonzero(~nulls)

    def _positions(self, hashes: npt.NDArray[np.uint32]) -> _Slots:
        spread = hashes.astype(np.uint64) * _GOLDEN
        return (spread >> np.uint64(64 - self._bits)).astype(np.int64)

    def _probe(self, keys: pa.Array, hashes: npt.NDArray[np.uint32], rows: npt.NDArray[np.intp]
               ) -> tuple[_Slots, _Slots]:
        """Slots of ``keys[rows]`` (-1: absent) and where each probe stopped (for an absent
        key, the empty position it may be inserted at).

        The first round reads each key's home position, where most keys are; each later round
        a window of ``_WINDOW`` positions per key, so the long clusters of linear probing take
        a round or two, not one round per probe step.
        """
        mask = self._table.size - 1
        found = np.full(rows.size, -1, dtype=np.int64)
        ends = np.full(rows.size, -1, dtype=np.int64)
        pos = self._positions(hashes)
        candidates = self._table[pos]
        occupied = candidates >= 0
        hits = np.flatnonzero(occupied & (self._table_hashes[pos] == hashes))
        if hits.size:
            equal = self._verify(keys, rows[hits], candidates[hits], distinct=True)
            found[hits[equal]] = candidates[hits[equal]]
        ends[~occupied] = pos[~occupied]
        pending = np.flatnonzero(occupied & (found < 0))
        pos = (pos[pending] + 1) & mask
        while pending.size:
            positions = (pos[:, None] + _WINDOW_OFFSETS) & mask
            window = self._table[positions]
            occupied_window = window >= 0
            has_empty = ~occupied_window.all(axis=1)
            first_empty = np.where(has_empty, np.argmin(occupied_window, axis=1), _WINDOW)
            # A key is never stored past the first empty position of its probe sequence.
            reachable = first_empty[:, None] > _WINDOW_OFFSETS
            match = reachable & (self._table_hashes[positions] == hashes[pending][:, None])
            done = has_empty.copy()
            hit_rows, hit_cols = np.nonzero(match)
            if hit_rows.size:
                slots = window[hit_rows, hit_cols]
                equal = self._verify(keys, rows[pending[hit_rows]], slots, distinct=False)
                found[pending[hit_rows[equal]]] = slots[equal]
                done[hit_rows[equal]] = True
            absent = has_empty & (found[pending] < 0)
            ends[pending[absent]] = (pos[absent] + first_empty[absent]) & mask
            go_on = ~done
            pending = pending[go_on]
            pos = (pos[go_on] + _WINDOW) & mask
        return found, ends

    def _verify(self, keys: pa.Array, rows: npt.NDArray[np.intp], slots: _Slots,
                distinct: bool) -> npt.NDArray[np.bool_]:
        """Whether ``keys[rows[i]]`` is the key of ``slots[i]``, for every ``i``
        (``distinct``: no row is asked twice)."""
        store = self._store
        assert store is not None
        floating = pa.types.is_floating(keys.type)
        if distinct and store.contiguous and 2 * rows.size > len(keys):
            # Most keys are asked: compare all of them in their own order (the others
            # against slot 0, ignored) rather than copy the asked ones out of ``keys``.
            every = np.zeros(len(keys), dtype=np.int64)
            every[rows] = slots
            stored, _ = store.take(every)
            equal_all: npt.NDArray[np.bool_] = _equal(stored, keys, floating)[rows]
            return equal_all
        stored, order = store.take(slots)
        if order is not None:
            rows = rows[order]
        equal = _equal(stored, keys.take(pa.array(rows)), floating)
        if order is None:
            return equal
        unsorted = np.empty_like(equal)
        unsorted[order] = equal
        return unsorted

    def _reserve(self, size: int) -> None:
        if size <= self._hashes.size:
            return
        capacity = max(size, 2 * self._hashes.size)
        self._hashes = _grown(self._hashes, capacity)
        self._groups = _grown(self._groups, capacity)

    def _grow_table(self, size: int) -> bool:
        """Keep the table at most half full; True if it was rebuilt (positions changed)."""
        if 2 * size <= self._table.size:
            return False
        bits = self._bits
        while 2 * size > (1 << bits):
            bits += 1
        self._bits = bits
        self._table = np.full(1 << bits, -1, dtype=np.int64)
        self._table_hashes = np.zeros(1 << bits, dtype=np.uint32)
        old = np.arange(self._size, dtype=np.int64)
        if self._null_slot >= 0:
            old = old[old != self._null_slot]
        self._place(old, self._positions(self._hashes[old]))
        return True

    def _place(self, slots: _Slots, pos: _Slots) -> None:
        """Put keys known to be absent and distinct into empty positions, from ``pos`` on."""
        mask = (1 << self._bits) - 1
        table = self._table
        while slots.size:
            free = table[pos] < 0
            claim = np.flatnonzero(free)
            if claim.size:
                # Several keys may claim one position: the last write wins, the others probe on.
                table[pos[claim]] = slots[claim]
                won = table[pos[claim]] == slots[claim]
                free[claim[~won]] = False
                placed = pos[claim[won]]
                self._table_hashes[placed] = self._hashes[table[placed]]
            slots = slots[~free]
            pos = (pos[~free] + 1) & mask


class _KeyStore:
    """The keys of an index, slot ``i`` at row ``i``: keys of fixed width and strings in
    buffers grown geometrically, read as one Arrow array without a copy; others in chunks."""

    @property
    def contiguous(self) -> bool:
        """One array holds every key (``take`` returns keys in the order asked)."""
        return True

    def __init__(self, key_type: pa.DataType) -> None:
        self.key_type = key_type
        self.size = 0

    def append(self, keys: pa.Array) -> None:
        raise NotImplementedError

    def array(self) -> pa.Array:
        raise NotImplementedError

    def take(self, slots: _Slots) -> tuple[pa.Array, npt.NDArray[np.intp] | None]:
        """The keys of ``slots`` and the order they come in (None: as asked)."""
        return self.array().take(pa.array(slots)), None

    def cast(self, key_type: pa.DataType) -> _KeyStore:
        """The keys as ``key_type``; ArrowInvalid if that would merge two of them (ints
        beyond 2**53 as floats)."""
        store = _store_for(key_type)
        if self.size:
            keys = self.array()
            cast = keys.cast(key_type)
            if not pc.all(pc.equal(cast.cast(self.key_type), keys)).as_py():
                msg = f"keys of type {self.key_type} do not all cast to {key_type} exactly"
                raise pa.ArrowInvalid(msg)
            store.append(cast)
        return store


class _FixedWidthStore(_KeyStore):
    """Keys whose values are one buffer of ``byte_width`` bytes each (ints, floats, dates)."""

    def __init__(self, key_type: pa.DataType) -> None:
        super().__init__(key_type)
        self.width = key_type.bit_width // 8
        self.data = np.zeros(16 * self.width, dtype=np.uint8)

    def append(self, keys: pa.Array) -> None:
        n = len(keys)
        end = (self.size + n) * self.width
        if end > self.data.size:
            self.data = _grown(self.data, max(end, 2 * self.data.size))
        buffer = keys.buffers()[1]
        start = keys.offset * self.width
        if buffer is not None:
            self.data[self.size * self.width:end] = \
                np.frombuffer(buffer, dtype=np.uint8)[start:start + n * self.width]
        self.size += n

    def array(self) -> pa.Array:
        data = pa.py_buffer(self.data[: self.size * self.width])
        return pa.Array.from_buffers(self.key_type, self.size, [None, data])


class _VarWidthStore(_KeyStore):
    """large_string / large_binary keys: 64-bit offsets and the bytes."""

    def __init__(self, key_type: pa.DataType) -> None:
        super().__init__(key_type)
        self.offsets = np.zeros(17, dtype=np.int64)
        self.data = np.zeros(64, dtype=np.uint8)

    def append(self, keys: pa.Array) -> None:
        n = len(keys)
        _, offsets_buffer, data_buffer = keys.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[keys.offset:keys.offset + n + 1]
        first, last = int(offsets[0]), int(offsets[-1])
        used = int(self.offsets[self.size])
        if self.size + n + 1 > self.offsets.size:
            self.offsets = _grown(self.offsets, max(self.size + n + 1, 2 * self.offsets.size))
        if used + last - first > self.data.size:
            self.data = _grown(self.data, max(used + last - first, 2 * self.data.size))
        self.offsets[self.size + 1:self.size + n + 1] = offsets[1:] - first + used
        if last > first:
            self.data[used:used + last - first] = \
                np.frombuffer(data_buffer, dtype=np.uint8)[first:last]
        self.size += n

    def array(self) -> pa.Array:
        offsets = pa.py_buffer(self.offsets[: self.size + 1])
        data = pa.py_buffer(self.data[: int(self.offsets[self.size])])
        return pa.Array.from_buffers(self.key_type, self.size, [None, offsets, data])


class _ChunkStore(_KeyStore):
    """Keys of other types, in chunks of geometrically decreasing size, each at least
    ``_CHUNK_RATIO`` times the next (merged as they fill): each key is copied O(log) times,
    and a read takes a few chunks, until the chunks are merged into one."""

    def __init__(self, key_type: pa.DataType) -> None:
        super().__init__(key_type)
        self.chunks: list[pa.Array] = []
        self.starts: list[int] = []
        #: Keys read since the chunks were last merged.
        self.read = 0

    @property
    def contiguous(self) -> bool:
        return len(self.chunks) == 1

    def append(self, keys: pa.Array) -> None:
        self.chunks.append(keys)
        self.starts.append(self.size)
        self.size += len(keys)
        while len(self.chunks) > 1 and len(self.chunks[-2]) < _CHUNK_RATIO * len(self.chunks[-1]):
            last = self.chunks.pop()
            self.starts.pop()
            self.chunks[-1] = pa.concat_arrays([self.chunks[-1], last])

    def array(self) -> pa.Array:
        if len(self.chunks) != 1:
            self.chunks = [pa.concat_arrays(self.chunks) if self.chunks else
                           pa.nulls(0, self.key_type)]
            self.starts = [0]
        return self.chunks[0]

    def take(self, slots: _Slots) -> tuple[pa.Array, npt.NDArray[np.intp] | None]:
        self.read += slots.size
        if len(self.chunks) > 1 and self.read > self.size:
            # The keys read since the last merge pay for merging them all (each merge costs
            # at most as many reads): then one take serves a lookup.
            self.array()
            self.read = 0
        if len(self.chunks) == 1:
            return self.chunks[0].take(pa.array(slots)), None
        starts = np.asarray(self.starts, dtype=np.int64)
        chunk_of = np.searchsorted(starts, slots, side="right") - 1
        order = np.argsort(chunk_of, kind="stable")
        sorted_slots = slots[order]
        bounds = np.searchsorted(chunk_of[order], np.arange(len(self.chunks) + 1))
        pieces = []
        for c, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(),
                                         strict=True)):
            if hi > lo:
                local = sorted_slots[lo:hi] - self.starts[c]
                pieces.append(self.chunks[c].take(pa.array(local)))
        taken = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
        return taken, order


def _store_for(key_type: pa.DataType) -> _KeyStore:
    if pa.types.is_large_string(key_type) or pa.types.is_large_binary(key_type):
        return _VarWidthStore(key_type)
    if (pa.types.is_integer(key_type) or pa.types.is_floating(key_type)
            or pa.types.is_temporal(key_type) or pa.types.is_fixed_size_binary(key_type)
            or pa.types.is_decimal(key_type)):
        try:
            if key_type.bit_width % 8 == 0:
                return _FixedWidthStore(key_type)
        except ValueError:
            pass
    return _ChunkStore(key_type)


def _kind(key_type: pa.DataType) -> object:
    """Types whose values may be equal keys: numbers (1 == 1.0), strings, binaries; any
    other type only with itself."""
    if pa.types.is_integer(key_type) or pa.types.is_floating(key_type):
        return "number"
    if key_type in _WIDE_TYPES or key_type in (pa.large_string(), pa.large_binary()):
        return "binary" if "binary" in str(key_type) else "string"
    return key_type


def _nulls(keys: pa.Array) -> npt.NDArray[np.bool_]:
    valid: npt.NDArray[np.bool_] = keys.is_valid().to_numpy(zero_copy_only=False)
    return ~valid


def _equal(a: pa.Array, b: pa.Array, floating: bool) -> npt.NDArray[np.bool_]:
    equal = pc.equal(a, b)
    if floating:
        # NaN is one key, as its key bytes (and so the backend) say, though NaN != NaN.
        equal = pc.or_(equal, pc.and_(pc.is_nan(a), pc.is_nan(b)))
    if equal.null_count:
        equal = equal.fill_null(False)  # null rows, compared in place by the first round
    out: npt.NDArray[np.bool_] = equal.to_numpy(zero_copy_only=False)
    return out


def _grown(array: npt.NDArray[Any], capacity: int) -> npt.NDArray[Any]:
    out = np.zeros(capacity, dtype=array.dtype)
    out[: array.size] = array
    return out


class KeyedAggregates:
    """One aggregate per key, in columns: a write-back cache of the ValueState ``state`` of
    ``backend`` (see the module docstring). ``restored=False`` promises that the backend
    holds no value of ``state`` yet (a fresh start): new keys are then not looked up.

    ``values[slot]`` is the aggregate and ``has[slot]`` whether there is one (a min/max over
    nulls only has none); both are arrays of at least :meth:`len` entries.
    """

    def __init__(self, backend: KeyedStateBackend, state: str, restored: bool = True,
                 max_keys: int = MAX_KEYS) -> None:
        self.backend = backend
        self.state = state
        #: More keys than this, and the columns are written back and emptied (a RocksDB
        #: backend may hold more keys than memory).
        self.max_keys = max_keys
        #: Whether the backend may hold keys the columns do not (it was restored, or the
        #: columns were reset): if not, a new key has no stored value and is not read.
        self.restored = restored
        self.index = ColumnarKeyIndex(backend.max_parallelism)
        self.values: npt.NDArray[Any] = np.zeros(16, dtype=np.int64)
        self.has = np.zeros(16, dtype=bool)
        self._dirty = np.zeros(16, dtype=bool)
        self._any_dirty = False

    def __len__(self) -> int:
        return len(self.index)

    def slots(self, keys: pa.Array) -> _Slots:
        """The slots of distinct ``keys``; keys new to the cache are read from the backend,
        all in one ``get_many``."""
        if len(self.index) > self.max_keys:
            self.reset()
        try:
            slots, added = self.index.find_or_add(keys)
        except KeyTypeMismatchError:
            # Keys of another type than the cached ones: the backend compares them as Python
            # values; start the cache afresh from it.
            self.reset()
            slots, added = self.index.find_or_add(keys)
        if added.size:
            new = slots[added]
            self._reserve(len(self.index))
            self.values[new] = 0
            self.has[new] = False
            self._dirty[new] = False
            if not self.restored:
                return slots
            stored = self.backend.get_many(self.state, self.index.key_groups[new],
                                           self.index.keys_at(new).to_pylist())
            present = [i for i, v in enumerate(stored) if v is not MISSING]
            if present:
                loaded = np.asarray([stored[i] for i in present])
                self._widen(loaded.dtype)
                self.values[new[present]] = loaded
                self.has[new[present]] = True
        return slots

    def update(self, slots: _Slots, values: npt.NDArray[Any],
               has: npt.NDArray[np.bool_] | None = None) -> None:
        """Set the aggregates of ``slots`` (distinct) to ``values`` where ``has`` (all: None)."""
        if has is not None:
            slots, values = slots[has], values[has]
        self._widen(values.dtype)
        self.values[slots] = values
        self.has[slots] = True
        self._dirty[slots] = True
        self._any_dirty = True

    def flush(self) -> int:
        """Write the aggregates changed since the last flush to the backend (one
        ``put_many``, ordered by key group); returns how many."""
        if not self._any_dirty:
            return 0
        size = len(self.index)
        dirty = np.flatnonzero(self._dirty[:size])
        groups = self.index.key_groups[dirty]
        # Key groups are below 2**15: a stable sort of them as 16-bit keys is a radix sort.
        order = np.argsort(groups.astype(np.uint16), kind="stable")
        dirty, groups = dirty[order], groups[order]
        self.backend.put_many(self.state, groups, self.index.keys_at(dirty).to_pylist(), None,
                              self.values[dirty].tolist())
        self._dirty[:size] = False
        self._any_dirty = False
        return int(dirty.size)

    def reset(self) -> None:
        """Flush and forget every key (they are read from the backend again when met)."""
        self.flush()
        self.restored = True
        self.index = ColumnarKeyIndex(self.backend.max_parallelism)
        self.has[:] = False

    def _reserve(self, size: int) -> None:
        if size <= self.values.size:
            return
        capacity = max(size, 2 * self.values.size)
        self.values = _grown(self.values, capacity)
        self.has = _grown(self.has, capacity)
        self._dirty = _grown(self._dirty, capacity)

    def _widen(self, dtype: np.dtype[Any]) -> None:
        """Let ``values`` hold ``dtype`` too (ints then floats: floats)."""
        if dtype == self.values.dtype:
            return
        wider = np.result_type(self.values.dtype, dtype)
        if len(self.index) == int(np.count_nonzero(~self.has[: len(self.index)])):
            wider = dtype  # nothing stored yet: take the values' own type
        if wider != self.values.dtype:
            self.values = self.values.astype(wider)
