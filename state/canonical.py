"""The canonical snapshot format: backend-independent, key-group ordered, indexed.

Either backend writes it and either backend restores it, for any key-group range, which is
what savepoints, switching backends and rescaling a ``hashmap`` job need. Layout::

    MAGIC
    one segment per (state, key group), in the order of state names and key groups, each
    a tag byte and its entries in one of two encodings:
        b"E" (entries), in the canonical order of keys and namespaces, each
            u32 key length, key, u32 namespace length, namespace, u32 value length, value
        b"P" (packed), in any order:
            u32 count, u64 length of the keys, the keys: count times
                u32 key length, key, u32 namespace length, namespace
            then the values: one pickle of the list of the count values
    index: u16 number of states, then per state: u16 length + UTF-8 name;
           u32 count, then per (state, key group): u16 state, u16 key group,
           u64 offset, u64 length
    u64 offset of the index, MAGIC

The index lets a restore read only the key groups it owns. RocksDB writes entries, as it
reads them. The heap backend writes packed segments: pickling a key group's values in one
call costs about a sixth of pickling them one by one, and a snapshot does it for every
value while the task runs (an upload thread holds the interpreter lock the task needs).
One pickle per key group also keeps what the task's objects share within a key group, as
the live state had it. Files of the first version (``WEIRKGS1``: entries without a tag)
are still read.

Example:
    >>> import io
    >>> out = io.BytesIO()
    >>> write_canonical([("s", 3, b"k", b"", b"v")], out)
    {3: 1}
    >>> list(read_canonical(out.getvalue(), KeyGroupRange(0, 9)))
    [('s', 3, b'k', b'', b'v')]
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO, NamedTuple, NoReturn

from weir.core import relocations
from weir.core.errors import StateError
from weir.state.backend import Entry
from weir.state.key_groups import KeyGroupRange
from weir.state.serializers import VALUE_PROTOCOL, deserialize_value, serialize_values

MAGIC = b"WEIRKGS2"
#: The first version: the same, but every segment is entries, without a tag.
MAGIC_V1 = b"WEIRKGS1"
ENTRIES = b"E"
PACKED = b"P"
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_INDEX = struct.Struct(">HHQQ")
_PACKED_HEAD = struct.Struct(">IQ")


class Segment(NamedTuple):
    """The encoded entries of one (state, key group), ready to be written as one piece."""

    state: str
    key_group: int
    #: Number of entries (not ``count``: that would hide tuple.count).
    entries: int
    data: bytes


def encode_prefix(key: bytes, namespace: bytes) -> bytes:
    """The bytes of an entry before its value (key and namespace with their lengths)."""
    return b"".join((_U32.pack(len(key)), key, _U32.pack(len(namespace)), namespace))


#: Encoded lengths of small values, looked up rather than packed one by one.
_SMALL_LENGTHS = tuple(_U32.pack(n) for n in range(1 << 12))


def encode_segment(prefixes: Sequence[bytes], values: Sequence[bytes]) -> bytes:
    """One entries segment's bytes from its entries' prefixes (``encode_prefix``) and
    values, in the canonical order.

    Called on an upload thread for every (state, key group) of a snapshot: the loops run
    inside C calls (``map``, slice assignment, one join), none in the interpreter, so that
    a snapshot holds the interpreter lock as briefly as it can."""
    count = len(values)
    if len(prefixes) != count:
        msg = f"{len(prefixes)} prefixes for {count} values"
        raise ValueError(msg)
    sizes = list(map(len, values))
    if not count:
        return b""
    lengths = map(_SMALL_LENGTHS.__getitem__, sizes) if max(sizes) < len(_SMALL_LENGTHS) \
        else map(_U32.pack, sizes)
    parts: list[bytes] = [b""] * (3 * count + 1)
    parts[0] = ENTRIES
    parts[1::3] = prefixes
    parts[2::3] = lengths
    parts[3::3] = values
    return b"".join(parts)


def encode_packed(keys: bytes, values: list[Any]) -> bytes:
    """One packed segment's bytes: ``keys`` is the ``encode_prefix`` of each entry, joined,
    in the order of ``values`` (the objects, pickled here in one call)."""
    if not values:
        return b""
    return b"".join((PACKED, _PACKED_HEAD.pack(len(values), len(keys)), keys,
                     pickle.dumps(values, protocol=VALUE_PROTOCOL)))


def segments_of(entries: Iterable[Entry]) -> Iterator[Segment]:
    """Group canonical-ordered ``entries`` into segments."""
    current: tuple[str, int] | None = None
    prefixes: list[bytes] = []
    values: list[bytes] = []
    for state, key_group, key, namespace, value in entries:
        if (state, key_group) != current:
            if current is not None:
                yield Segment(*current, len(values), encode_segment(prefixes, values))
            current, prefixes, values = (state, key_group), [], []
        prefixes.append(encode_prefix(key, namespace))
        values.append(value)
    if current is not None:
        yield Segment(*current, len(values), encode_segment(prefixes, values))


def write_canonical(entries: Iterable[Entry], out: BinaryIO) -> dict[int, int]:
    """Stream ``entries`` (in canonical order) to ``out``; returns entries per key group."""
    return write_segments(segments_of(entries), out)


def write_segments(segments: Iterable[Segment], out: BinaryIO) -> dict[int, int]:
    """Stream ``segments`` (in canonical order, one per (state, key group)) to ``out``;
    returns entries per key group.

    States are numbered as they appear, so their name table follows the entries, at the
    start of the index section."""
    names: dict[str, int] = {}
    index: list[tuple[int, int, int, int]] = []
    counts: dict[int, int] = {}
    out.write(MAGIC)
    position = len(MAGIC)
    for segment in segments:
        if not segment.entries:
            continue
        state_id = names.setdefault(segment.state, len(names))
        out.write(segment.data)
        index.append((state_id, segment.key_group, position, len(segment.data)))
        position += len(segment.data)
        counts[segment.key_group] = counts.get(segment.key_group, 0) + segment.entries
    footer = [_U16.pack(len(names))]
    for name in names:  # insertion order = state ids
        encoded = name.encode("utf-8")
        footer += [_U16.pack(len(encoded)), encoded]
    footer.append(_U32.pack(len(index)))
    footer += [_INDEX.pack(*row) for row in index]
    footer += [_U64.pack(position), MAGIC]
    out.write(b"".join(footer))
    return counts


class Index(NamedTuple):
    """What a canonical snapshot's index says."""

    names: list[str]
    #: (state id, key group, offset, length) of each segment.
    rows: list[tuple[int, int, int, int]]
    #: Whether segments start with their encoding's tag (every version but the first).
    tagged: bool

    def segments(self, view: memoryview, key_groups: KeyGroupRange | None = None
                 ) -> Iterator[SegmentView]:
        """The segments of ``view`` (whose index this is) in ``key_groups`` (all if None)."""
        for state_id, key_group, offset, length in self.rows:
            if key_groups is None or key_group in key_groups:
                yield SegmentView(view, self.names[state_id], key_group, offset, length,
                                  self.tagged)


def read_index(data: bytes | memoryview) -> Index:
    """The index of a canonical snapshot."""
    view = memoryview(data)
    tail = len(MAGIC) + _U64.size
    magic = bytes(view[:len(MAGIC)])
    if len(view) < len(MAGIC) + tail or magic not in (MAGIC, MAGIC_V1) or \
            bytes(view[-len(MAGIC):]) != magic:
        msg = "not a canonical state snapshot (bad magic): the file is damaged or not weir's"
        raise StateError(msg)
    (position,) = _U64.unpack_from(view, len(view) - tail)
    try:
        (count,) = _U16.unpack_from(view, position)
        position += 2
        names = []
        for _ in range(count):
            (length,) = _U16.unpack_from(view, position)
            names.append(bytes(view[position + 2:position + 2 + length]).decode("utf-8"))
            position += 2 + length
        (rows,) = _U32.unpack_from(view, position)
        position += 4
        index = [_INDEX.unpack_from(view, position + i * _INDEX.size) for i in range(rows)]
    except (struct.error, UnicodeDecodeError) as err:
        msg = f"the index of a canonical state snapshot is damaged: {err}"
        raise StateError(msg) from err
    return Index(names, index, magic != MAGIC_V1)


def read_segments(data: bytes | memoryview, key_groups: KeyGroupRange | None = None
                  ) -> Iterator[SegmentView]:
    """The segments of ``data`` whose key group is in ``key_groups`` (all if None)."""
    view = memoryview(data)
    return read_index(view).segments(view, key_groups)


def read_canonical(data: bytes | memoryview, key_groups: KeyGroupRange) -> Iterator[Entry]:
    """The entries of ``data`` whose key group is in ``key_groups`` (reading only those)."""
    for segment in read_segments(data, key_groups):
        yield from segment.entries()


class SegmentView:
    """One (state, key group) of a snapshot, decoded when asked: as entries (values
    pickled one by one, what RocksDB stores) or as objects (what the heap backend holds).
    Each encoding gives the form it holds without a detour through the other."""

    __slots__ = ("_tagged", "_view", "key_group", "length", "offset", "state")

    def __init__(self, view: memoryview, state: str, key_group: int, offset: int,
                 length: int, tagged: bool = True) -> None:
        if offset < 0 or offset + length > len(view) or (tagged and length < 1):
            msg = f"key group {key_group} of state {state!r} points outside the snapshot"
            raise StateError(msg)
        self._view = view
        self.state = state
        self.key_group = key_group
        self.offset = offset
        self.length = length
        self._tagged = tagged

    @property
    def packed(self) -> bool:
        return self._tagged and self._view[self.offset] == PACKED[0]

    def entries(self) -> Iterator[Entry]:
        """The entries, values as their pickled bytes (in the canonical order for an
        entries segment; in the writer's order for a packed one)."""
        state, key_group = self.state, self.key_group
        if self.packed:
            keys, values = self._unpack()
            for (key, namespace), value in zip(keys, serialize_values(values), strict=True):
                yield state, key_group, key, namespace, value
            return
        for key, namespace, value in self._entries():
            yield state, key_group, key, namespace, value

    def objects(self) -> Iterator[tuple[bytes, bytes, Any]]:
        """(key, namespace, value) of every entry, the value unpickled."""
        if self.packed:
            keys, values = self._unpack()
            for (key, namespace), value in zip(keys, values, strict=True):
                yield key, namespace, value
            return
        for key, namespace, value in self._entries():
            yield key, namespace, deserialize_value(value)

    def _damaged(self, why: object) -> NoReturn:
        msg = f"key group {self.key_group} of state {self.state!r} is damaged: {why}"
        raise StateError(msg)

    def _entries(self) -> Iterator[tuple[bytes, bytes, bytes]]:
        view, unpack = self._view, _U32.unpack_from
        position, end = self.offset + self._tagged, self.offset + self.length
        if self._tagged and view[self.offset] != ENTRIES[0]:
            self._damaged(f"unknown encoding {bytes(view[self.offset:self.offset + 1])!r}")
        try:
            while position < end:
                (n,) = unpack(view, position)
                key = bytes(view[position + 4:position + 4 + n])
                position += 4 + n
                (n,) = unpack(view, position)
                namespace = bytes(view[position + 4:position + 4 + n])
                position += 4 + n
                (n,) = unpack(view, position)
                value = bytes(view[position + 4:position + 4 + n])
                position += 4 + n
                yield key, namespace, value
        except struct.error as err:
            self._damaged(err)
        if position != end:
            msg = f"key group {self.key_group} of state {self.state!r} overruns its index entry"
            raise StateError(msg)

    def _unpack(self) -> tuple[list[tuple[bytes, bytes]], list[Any]]:
        view, unpack = self._view, _U32.unpack_from
        end = self.offset + self.length
        try:
            count, keys_length = _PACKED_HEAD.unpack_from(view, self.offset + 1)
            position = self.offset + 1 + _PACKED_HEAD.size
            keys_end = position + keys_length
            if keys_end > end:
                self._damaged("its keys overrun it")
            keys = []
            while position < keys_end:
                (n,) = unpack(view, position)
                key = bytes(view[position + 4:position + 4 + n])
                position += 4 + n
                (n,) = unpack(view, position)
                keys.append((key, bytes(view[position + 4:position + 4 + n])))
                position += 4 + n
        except struct.error as err:
            self._damaged(err)
        if position != keys_end:
            self._damaged("its keys overrun their length")
        try:
            values = relocations.loads(view[keys_end:end])
        except Exception as err:  # any unpickling failure: the bytes are not what was written
            self._damaged(f"its values do not unpickle ({err})")
        if not isinstance(values, list) or len(values) != count or len(keys) != count:
            self._damaged(f"{len(keys)} keys and values for {count} entries")
        return keys, values


def key_group_range_of(data: bytes | memoryview) -> KeyGroupRange | None:
    """The smallest range holding every key group of a snapshot (None if it is empty)."""
    rows = read_index(data).rows
    if not rows:
        return None
    groups = [row[1] for row in rows]
    return KeyGroupRange(min(groups), max(groups))
