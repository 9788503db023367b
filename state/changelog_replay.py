"""Replaying a restored state change log: all at once, or row by row as the task goes.

A logged change is one record of a log piece (checkpoint/changelog_storage.py), whose
payload is ``[op: u8][state name length: u16][name][key length: u32][key]
[namespace length: u32][namespace][value]``: a put of a row's whole serialized value, a
delete of the row, or an append of elements to a list (``ListState.add``).

Two ways to apply the log of a restored checkpoint to the backend restored from its
materialization:

* :func:`replay` applies every change in order, before the restore returns. A restore
  into a plain backend (the changelog switched off since the checkpoint) does this.
* :class:`PendingLog` only *indexes* the changes by row (state, key, namespace); the
  changelog backend then applies a row's changes when the task first touches that row,
  and the rest a few hundred rows at a time between records, all of it before anything
  reads the whole state (a materialization, a savepoint, iterating keys). A replay
  applies each change in Python at about 2 µs (RocksDB's write and its binding are most
  of it); indexing costs a third of that. The pieces of the log group their changes by
  state and key group (checkpoint/changelog_storage.py), so a state's key group is
  indexed when the task first touches it, or between records, and whatever reads a whole
  state (the timers at restore) indexes that state alone: the task takes records again
  once the log has downloaded, about when a restore without the changelog would, and
  pays for the index and the replay while it runs. (Pieces written before they had
  groups are indexed at once, while the materialized state downloads.)

Only the last put or delete of a row matters, with the appends after it; a row whose log
starts with appends is applied onto its materialized value.

Example:
    >>> from weir.checkpoint.changelog_storage import VerifiedPiece, frame_piece
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.heap import HeapKeyedStateBackend
    >>> from weir.state.key_groups import KeyGroupRange, assign_to_key_group
    >>> from weir.state.serializers import encode_key, serialize_value
    >>> def put(n, key, value):
    ...     payload = encode_change(PUT, "count", encode_key(key), encode_key(None),
    ...                             serialize_value(value))
    ...     return n, assign_to_key_group(key, 128), payload
    >>> records = [put(0, "ann", 1), put(1, "bob", 7), put(2, "ann", 2)]
    >>> piece = VerifiedPiece.of(frame_piece(0, records))
    >>> pending = PendingLog()
    >>> pending.add([piece], (0, 127)), pending.rows   # not indexed yet: at most 3 rows
    (3, 3)
    >>> backend = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> count = backend.get_state(ValueStateDescriptor("count"))
    >>> pending.drain(backend, 10), pending.rows
    (2, 0)
    >>> backend.set_current_key("ann"); count.value()
    2
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from weir.checkpoint.changelog_storage import RECORD, VerifiedPiece
from weir.state.backend import MISSING, Entry, KeyedStateBackend
from weir.state.serializers import decode_key, deserialize_value

#: Operations of a logged change.
PUT, DELETE, APPEND = 1, 2, 3

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
#: A record's framing (:data:`RECORD`) and its payload's op and state name length.
_RECORD_AND_OP = struct.Struct(RECORD.format + "BH")


#: ``[op][state name length][name]`` of each (op, state) seen: every change of a state
#: starts alike, and this runs on the task thread for every change.
_HEADS: dict[tuple[int, str], bytes] = {}


def encode_change(op: int, state: str, key: bytes, namespace: bytes, value: bytes = b"") -> bytes:
    """The payload of a logged change (see the module docstring)."""
    head = _HEADS.get((op, state))
    if head is None:
        if len(_HEADS) > 4096:  # state names are few; bound it anyway
            _HEADS.clear()
        name = state.encode()
        head = _HEADS[op, state] = bytes((op,)) + _U16.pack(len(name)) + name
    return b"".join((head, _U32.pack(len(key)), key, _U32.pack(len(namespace)), namespace,
                     value))


def decode_change(payload: bytes) -> tuple[int, str, bytes, bytes, bytes]:
    """(op, state, key bytes, namespace bytes, value bytes) of a logged change."""
    op = payload[0]
    (n,) = _U16.unpack_from(payload, 1)
    position = 3 + n
    state = payload[3:position].decode()
    (k,) = _U32.unpack_from(payload, position)
    key = payload[position + 4:position + 4 + k]
    position += 4 + k
    (s,) = _U32.unpack_from(payload, position)
    namespace = payload[position + 4:position + 4 + s]
    return op, state, key, namespace, payload[position + 4 + s:]


def row_id(key: bytes, namespace: bytes) -> bytes:
    """How :class:`PendingLog` names a row of a state: the bytes of a change's payload from
    its key length to the end of its namespace (the lengths keep it unambiguous)."""
    return b"".join((_U32.pack(len(key)), key, _U32.pack(len(namespace)), namespace))


#: Puts replayed in one ``load_entries`` call (one RocksDB write batch): a write per change
#: made replay most of a restore's time.
REPLAY_BATCH = 4096


def replay(backend: KeyedStateBackend, pieces: Iterable[VerifiedPiece],
           key_groups: tuple[int, int]) -> int:
    """Apply the changes of verified log ``pieces`` of key groups ``key_groups`` (first,
    last) to ``backend`` (a plain one, not the changelog wrapper) in order; returns how
    many. Consecutive puts go in batches (a batch keeps their order, so a later put of a
    key wins); an append or a delete first flushes the puts before it.

    This loop runs per change: it walks the records in the log file's bytes and slices
    puts straight into entries (no per-change objects or calls in between: that made
    replay 2-3x slower)."""
    first, last = key_groups
    record, header = RECORD.unpack_from, RECORD.size
    u16, u32 = _U16.unpack_from, _U32.unpack_from
    names: dict[bytes, str] = {}
    puts: list[Entry] = []
    applied = 0
    for data, position, count, _groups in pieces:
        for _ in range(count):
            _sequence, key_group, length = record(data, position)
            start = position + header
            position = start + length
            if key_group < first or key_group > last:
                continue
            applied += 1
            if data[start] != PUT:
                if puts:
                    backend.load_entries(puts)
                    puts = []
                apply_change(backend, key_group, data[start:position])
                continue
            (n,) = u16(data, start + 1)
            at = start + 3 + n
            raw = data[start + 3:at]
            state = names.get(raw)
            if state is None:
                state = names[raw] = raw.decode()
            (k,) = u32(data, at)
            key = data[at + 4:at + 4 + k]
            at += 4 + k
            (s,) = u32(data, at)
            at += 4
            puts.append((state, key_group, key, data[at:at + s], data[at + s:position]))
            if len(puts) >= REPLAY_BATCH:
                backend.load_entries(puts)
                puts = []
    if puts:
        backend.load_entries(puts)
    return applied


def apply_change(backend: KeyedStateBackend, key_group: int, payload: bytes) -> None:
    """Apply one logged change to ``backend`` (a plain one, not the changelog wrapper)."""
    op, state, key, namespace, value = decode_change(payload)
    if op == PUT:
        backend.load_entries([(state, key_group, key, namespace, value)])
        return
    backend._register(state)
    saved = backend.current_key, backend.current_key_group
    try:
        backend.current_key, backend.current_key_group = decode_key(key), key_group
        if op == APPEND:
            ns = decode_key(namespace)
            current = backend._get_mutable(state, ns)
            current = [] if current is MISSING else current
            current.extend(deserialize_value(value))
            backend._put(state, ns, current)
        else:
            backend._delete(state, decode_key(namespace))
    finally:
        backend.current_key, backend.current_key_group = saved


#: A change's place in a :class:`PendingLog`: (file number << _SHIFT) | record offset.
_SHIFT = 40
_OFFSET = (1 << _SHIFT) - 1

#: What a row of a :class:`PendingLog` holds: the position of its last put or delete, or
#: the positions of its changes from the last put or delete on when appends follow it
#: (starting with an append when the log holds no put or delete of the row).
Positions = int | list[int]


class PendingLog:
    """Changes of a restored log not yet applied to the backend, indexed by row (see the
    module docstring). It keeps the log files' bytes until every row is applied.

    Not thread-safe: :meth:`add` runs on the restore's indexing thread before the task
    uses the index; after that only the task thread calls :meth:`take`, :meth:`drain`."""

    def __init__(self) -> None:
        self._files: list[bytes] = []
        self._numbers: dict[int, int] = {}  # id(file bytes) -> number (files stay alive)
        #: State name -> row id (:func:`row_id`) -> positions, of the indexed key groups.
        self.tables: dict[str, dict[bytes, Positions]] = {}
        #: (state, key group) -> its runs of records not indexed yet, in log order: (file
        #: number, start, records).
        self._unindexed: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self._unindexed_changes = 0
        #: Changes added, rows applied so far.
        self.changes = 0
        self.applied = 0

    @property
    def rows(self) -> int:
        """Rows not applied yet: those indexed, and at most one a change not indexed yet
        (0 once everything is applied)."""
        return sum(map(len, self.tables.values())) + self._unindexed_changes

    def add(self, pieces: Iterable[VerifiedPiece], key_groups: tuple[int, int]) -> int:
        """Add the changes of verified ``pieces`` of key groups ``key_groups`` (first, last),
        after those added before; returns how many. A piece's groups are indexed later
        (:meth:`index`); a piece without them (version 1) at once."""
        first, last = key_groups
        added = 0
        for data, start, count, groups in pieces:
            number = self._numbers.get(id(data))
            if number is None:
                number = self._numbers[id(data)] = len(self._files)
                self._files.append(data)
            if groups is None:
                self.index()  # the key groups held back come first in the log
                added += self._index(number, start, count, first, last)
                continue
            for state, key_group, run, records in groups:
                if first <= key_group <= last:
                    self._unindexed.setdefault((state, key_group), []).append(
                        (number, run, records))
                    self._unindexed_changes += records
                    added += records
        self.changes += added
        return added

    def index(self, state: str | None = None, key_group: int | None = None) -> None:
        """Index the changes held back of ``state`` and ``key_group`` (default: of every
        state, of every key group)."""
        if state is not None and key_group is not None:
            groups: Iterable[tuple[str, int]] = ((state, key_group),)
        else:
            groups = [g for g in self._unindexed if state is None or g[0] == state]
        for group in groups:
            runs = self._unindexed.pop(group, None)
            for number, start, records in runs or ():
                self._unindexed_changes -= records
                self._index(number, start, records, group[1], group[1])

    def _index(self, number: int, position: int, count: int, first: int, last: int) -> int:
        """Index ``count`` records of file ``number`` from ``position`` on, those of key
        groups ``first..last``; returns how many. The loop of a restore that runs per
        change, as in :func:`replay`."""
        head, header = _RECORD_AND_OP.unpack_from, RECORD.size
        u32 = _U32.unpack_from
        data = self._files[number]
        base = number << _SHIFT
        by_name: dict[bytes, dict[bytes, Positions]] = {}
        indexed = 0
        for _ in range(count):
            at_record = position
            # One unpack for the record's framing and the payload's op and name length.
            _sequence, key_group, length, op, n = head(data, position)
            position += header + length
            if key_group < first or key_group > last:
                continue
            indexed += 1
            at = at_record + header + 3 + n
            raw = data[at - n:at]
            table = by_name.get(raw)
            if table is None:
                table = by_name[raw] = self.tables.setdefault(raw.decode(), {})
            (k,) = u32(data, at)
            (s,) = u32(data, at + 4 + k)
            row = data[at:at + 8 + k + s]
            if op == APPEND:
                known = table.get(row)
                if known is None:
                    table[row] = [base | at_record]
                elif isinstance(known, int):
                    table[row] = [known, base | at_record]
                else:
                    known.append(base | at_record)
            else:
                table[row] = base | at_record
        return indexed

    def holds(self, state: str, key_group: int) -> bool:
        """Whether rows of ``state`` in ``key_group`` may still be pending."""
        return (state, key_group) in self._unindexed or bool(self.tables.get(state))

    def take(self, state: str, row: bytes, key_group: int) -> Positions | None:
        """Remove ``row`` of ``state`` (in ``key_group``) from the index; its positions, if
        it was there. Indexes the state's ``key_group`` first if it was not."""
        if (state, key_group) in self._unindexed:
            self.index(state, key_group)
        table = self.tables.get(state)
        if not table:
            return None
        positions = table.pop(row, None)
        if positions is not None:
            self.applied += 1
        return positions

    def apply(self, backend: KeyedStateBackend, positions: Positions) -> None:
        """Apply the changes of one row (what :meth:`take` returned) to ``backend``."""
        for position in (positions,) if isinstance(positions, int) else positions:
            apply_change(backend, *self._payload(position))

    def drain(self, backend: KeyedStateBackend, rows: int | None = None,
              state: str | None = None) -> int:
        """Apply up to ``rows`` rows (default: all; of ``state`` only, if given) to
        ``backend`` (a plain one), in no particular order: a row's changes never depend on
        another's. Rows that are a single put go to the backend in batches (one RocksDB
        write batch each). Groups not indexed yet are indexed first: all of them (of
        ``state``) for all rows or for one state, else as many as give ``rows`` rows.
        Returns how many."""
        if rows is None or state is not None:
            self.index(state)
        else:
            while self._unindexed and sum(map(len, self.tables.values())) < rows:
                self.index(*next(iter(self._unindexed)))
        limit = sum(map(len, self.tables.values())) if rows is None else rows
        head, header, u32 = _RECORD_AND_OP.unpack_from, RECORD.size, _U32.unpack_from
        files = self._files
        puts: list[Entry] = []
        done = 0
        for name, table in list(self.tables.items()):
            if state is not None and name != state:
                continue
            while table and done < limit:
                row, positions = table.popitem()
                done += 1
                if isinstance(positions, int):
                    data, offset = files[positions >> _SHIFT], positions & _OFFSET
                    _sequence, key_group, length, op, n = head(data, offset)
                    if op == PUT:  # the row id is the payload's key and namespace part
                        (k,) = u32(row, 0)
                        value = offset + header + 3 + n + len(row)
                        puts.append((name, key_group, row[4:4 + k], row[8 + k:],
                                     data[value:offset + header + length]))
                        if len(puts) >= REPLAY_BATCH:
                            backend.load_entries(puts)
                            puts = []
                        continue
                self.apply(backend, positions)
        if puts:
            backend.load_entries(puts)
        self.applied += done
        if not self.rows:
            self._files.clear()  # the log's bytes are no longer needed
            self._numbers.clear()
        return done

    def _payload(self, position: int) -> tuple[int, bytes]:
        data = self._files[position >> _SHIFT]
        offset = position & _OFFSET
        _sequence, key_group, length = RECORD.unpack_from(data, offset)
        start = offset + RECORD.size
        return key_group, data[start:start + length]

    def __repr__(self) -> str:
        return f"PendingLog({self.rows} rows of {self.changes} changes)"
