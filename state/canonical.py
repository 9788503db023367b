"""The canonical snapshot format: backend-independent, key-group ordered, indexed.

Either backend writes it and either backend restores it, for any key-group range, which is
what savepoints, switching backends and rescaling a ``hashmap`` job need. Layout::

    MAGIC
    entries, grouped by (state, key group) in the canonical order:
        u32 key length, key, u32 namespace length, namespace, u32 value length, value
    index: u16 number of states, then per state: u16 length + UTF-8 name;
           u32 count, then per (state, key group): u16 state, u16 key group,
           u64 offset, u64 length
    u64 offset of the index, MAGIC

The index lets a restore read only the key groups it owns.

Example:
    >>> import io
    >>> out = io.BytesIO()
    >>> write_canonical([("s", 3, b"k", b"", b"v")], out)
    {3: 1}
    >>> list(read_canonical(out.getvalue(), KeyGroupRange(0, 9)))
    [('s', 3, b'k', b'', b'v')]
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO, NamedTuple

from weir.core.errors import StateError
from weir.state.backend import Entry
from weir.state.key_groups import KeyGroupRange

MAGIC = b"WEIRKGS1"
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_INDEX = struct.Struct(">HHQQ")


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
    """One segment's bytes from its entries' prefixes (``encode_prefix``) and values.

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
    parts: list[bytes] = [b""] * (3 * count)
    parts[0::3] = prefixes
    parts[1::3] = lengths
    parts[2::3] = values
    return b"".join(parts)


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


def read_index(data: bytes | memoryview) -> tuple[list[str], list[tuple[int, int, int, int]]]:
    """State names and (state, key group, offset, length) rows of a canonical snapshot."""
    view = memoryview(data)
    tail = len(MAGIC) + _U64.size
    if len(view) < len(MAGIC) + tail or bytes(view[:len(MAGIC)]) != MAGIC or \
            bytes(view[-len(MAGIC):]) != MAGIC:
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
    return names, index


def read_canonical(data: bytes | memoryview, key_groups: KeyGroupRange) -> Iterator[Entry]:
    """The entries of ``data`` whose key group is in ``key_groups`` (reading only those)."""
    view = memoryview(data)
    names, index = read_index(view)
    for state_id, key_group, offset, length in index:
        if key_group in key_groups:
            yield from read_segment(view, names[state_id], key_group, offset, length)


def read_segment(view: memoryview, state: str, key_group: int, offset: int, length: int
                 ) -> Iterator[Entry]:
    """The entries of one (state, key group) index row: what a lazy restore loads at once."""
    if offset < 0 or offset + length > len(view):
        msg = f"key group {key_group} of state {state!r} points outside the snapshot"
        raise StateError(msg)
    unpack = _U32.unpack_from
    position, end = offset, offset + length
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
            yield state, key_group, key, namespace, value
    except struct.error as err:
        msg = f"key group {key_group} of state {state!r} is damaged: {err}"
        raise StateError(msg) from err
    if position != end:
        msg = f"key group {key_group} of state {state!r} overruns its index entry"
        raise StateError(msg)


def key_group_range_of(data: bytes | memoryview) -> KeyGroupRange | None:
    """The smallest range holding every key group of a snapshot (None if it is empty)."""
    _, index = read_index(data)
    if not index:
        return None
    groups = [row[1] for row in index]
    return KeyGroupRange(min(groups), max(groups))
