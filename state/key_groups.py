"""Key-group assignment: the one place that decides which key group a key belongs to.

Keyed state is sharded into ``max_parallelism`` *key groups* (Flink's
``KeyGroupRangeAssignment``).  A key's group is ``murmur3_32(key_to_bytes(key)) %
max_parallelism`` and never changes while ``max_parallelism`` stays the same; operators own
contiguous ranges of key groups, so rescaling only moves whole key groups between operators.

Because snapshots store state by key group, the mapping is part of the on-disk format:

* keys are serialised by :func:`key_to_bytes`, a canonical encoding that does not depend on
  Python's per-process salted ``hash()``, the interpreter version or the platform;
* the hash is MurmurHash3 x86_32 with seed 0 (:func:`murmur3_32`).

Changing either silently sends restored state to the wrong operator, which is why
``tests/unit/test_key_groups.py`` pins the groups of a few keys.

Whole Arrow columns are assigned by :func:`key_groups_of_array` (and composite keys by
:func:`key_groups_of_columns`) with a numpy implementation of MurmurHash3 that gives exactly
the scalar result.  String, binary, integer, boolean, floating point and null columns are
vectorised; other types (structs, lists, timestamps, dates, decimals, ...) fall back to a
per-element loop over :func:`assign_to_key_group`.

>>> assign_to_key_group("user-42", 128) == assign_to_key_group("user-42", 128)
True
>>> key_group_range_for_operator(128, 4, 1)
KeyGroupRange(start=32, end=63)
"""

from __future__ import annotations

import datetime
import functools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

import mmh3
import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "assign_to_key_group",
    "check_parallelism",
    "compute_operator_index_for_key_group",
    "key_group_range_for_operator",
    "key_groups_of_array",
    "key_groups_of_columns",
    "key_groups_of_strs",
    "key_hashes_of_array",
    "key_to_bytes",
    "murmur3_32",
    "operator_indexes",
]

#: Number of key groups used when a job does not configure one (Flink's default for small jobs).
DEFAULT_MAX_PARALLELISM = 128
#: Largest allowed number of key groups, as in Flink (key groups are serialised as 16-bit).
UPPER_BOUND_MAX_PARALLELISM = 32768

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_BIGINT_TAG = b"\xffbigint"
_DOUBLE = struct.Struct("<d")
_LENGTH_PREFIX = struct.Struct("<I")

_KEY_TYPES_HINT = (
    "keys must be str, bytes, int, float, bool, None, date/datetime or tuples of those"
)


# --------------------------------------------------------------------------------------------
# Scalar path
# --------------------------------------------------------------------------------------------


def key_to_bytes(key: object) -> bytes:
    """Serialise ``key`` canonically; equal keys of the same type give equal bytes.

    The encoding is stable across processes, Python versions and platforms (it never uses
    ``hash()``).  ``1`` and ``1.0`` encode identically, as they are the same dict key; ``True``
    and ``1`` do not, matching Java's ``Boolean``/``Integer`` distinction.  Keys of different
    types may share bytes (``"a"`` and ``b"a"``); that only puts them in the same key group.

    >>> key_to_bytes("héllo")
    b'h\\xc3\\xa9llo'
    >>> key_to_bytes(1) == key_to_bytes(1.0) == (1).to_bytes(8, "little", signed=True)
    True
    >>> key_to_bytes(("a", None))
    b'\\x01\\x00\\x00\\x00a\\x00\\x00\\x00\\x00'
    """
    if isinstance(key, str):
        # surrogatepass: any Python str is a legal key, even one that is not valid Unicode.
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    # bool is a subclass of int, so it must be handled first.
    if isinstance(key, bool):
        return b"\x01" if key else b"\x00"
    if isinstance(key, int):
        return _int_to_bytes(key)
    if isinstance(key, float):
        # Integral floats use the int encoding so that keys equal as dict keys (1 == 1.0,
        # -0.0 == 0) share a key group; is_integer() is False for nan and inf.
        if key.is_integer() and _INT64_MIN <= key <= _INT64_MAX:
            return int(key).to_bytes(8, "little", signed=True)
        return _DOUBLE.pack(key)
    if key is None:
        return b""
    if isinstance(key, datetime.date):  # also datetime.datetime, a subclass
        return key.isoformat().encode("utf-8")
    if isinstance(key, (tuple, list)):
        # Length prefixes make the encoding injective: ("ab", "c") != ("a", "bc").
        parts = []
        for element in key:
            encoded = key_to_bytes(element)
            parts.append(_LENGTH_PREFIX.pack(len(encoded)))
            parts.append(encoded)
        return b"".join(parts)
    msg = (
        f"cannot use a value of type {type(key).__module__}.{type(key).__qualname__} as a key: "
        f"{_KEY_TYPES_HINT}"
    )
    raise TypeError(msg)


def _int_to_bytes(key: int) -> bytes:
    if _INT64_MIN <= key <= _INT64_MAX:
        return key.to_bytes(8, "little", signed=True)
    # Longer than any int64 encoding (exactly 8 bytes), and 0xff never occurs in UTF-8 text.
    return _BIGINT_TAG + str(key).encode("ascii")


def murmur3_32(data: bytes) -> int:
    """MurmurHash3 x86_32 of ``data`` with seed 0, as an unsigned 32-bit int.

    >>> murmur3_32(b"")
    0
    >>> murmur3_32(b"hello")
    613153351
    """
    return mmh3.hash(data, 0, signed=False)


def assign_to_key_group(key: object, max_parallelism: int) -> int:
    """Return the key group (``0 <= group < max_parallelism``) that owns ``key``.

    >>> assign_to_key_group("hello", 128)
    71
    >>> assign_to_key_group(1, 128) == assign_to_key_group(1.0, 128)
    True
    """
    _check_max_parallelism(max_parallelism)
    return mmh3.hash(key_to_bytes(key), 0, signed=False) % max_parallelism


# --------------------------------------------------------------------------------------------
# Vectorised path: MurmurHash3 x86_32 over Arrow buffers
# --------------------------------------------------------------------------------------------
#
# numpy uint32 arithmetic wraps modulo 2**32, which is exactly what MurmurHash3 relies on, so
# the hash is written with in-place uint32 operations on reused scratch arrays: at these sizes
# memory traffic, not arithmetic, is what costs.

_U32 = np.uint32
_C1 = _U32(0xCC9E2D51)
_C2 = _U32(0x1B873593)
_M5 = _U32(5)
_N1 = _U32(0xE6546B64)
_F1 = _U32(0x85EBCA6B)
_F2 = _U32(0xC2B2AE35)
# Keeps the first 0..3 bytes of a little-endian word: the tail of a value.
_TAIL_MASKS = np.array([0x0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)
# MurmurHash3 of b"", i.e. of a null key.
_EMPTY_HASH = 0
# Rows with more 4-byte blocks than this are hashed by mmh3 one at a time (see _murmur3_rows).
_LONG_ROW_BLOCKS = 64
# Variable-length values are hashed this many rows at a time (see _murmur3_rows).
_BATCH_ROWS = 1 << 16

_EMPTY_U8 = np.zeros(0, dtype=np.uint8)

_U32Array = npt.NDArray[np.uint32]
_IntArray = npt.NDArray[np.signedinteger[Any]]


class _Encoded(NamedTuple):
    """A column as the bytes key_to_bytes gives its values.

    Row ``i`` is ``data[starts[i] : starts[i] + lengths[i]]``; null rows have length 0.  When
    ``width`` is positive, every non-null row is ``width`` bytes long and row ``i`` starts at
    ``i * width``.
    """

    data: npt.NDArray[np.uint8]
    starts: _IntArray
    lengths: _IntArray
    width: int = 0


def _rotl(x: _U32Array, r: int, tmp: _U32Array) -> None:
    np.right_shift(x, _U32(32 - r), out=tmp)
    x <<= _U32(r)
    x |= tmp


def _mix_block(h: _U32Array, k: _U32Array, tmp: _U32Array) -> None:
    """Murmur's body step ``h = rotl(h ^ scramble(k), 13) * 5 + n``; clobbers ``k``."""
    _scramble(k, tmp)
    h ^= k
    _rotl(h, 13, tmp)
    h *= _M5
    h += _N1


def _scramble(k: _U32Array, tmp: _U32Array) -> None:
    k *= _C1
    _rotl(k, 15, tmp)
    k *= _C2


def _fmix(h: _U32Array, tmp: _U32Array) -> None:
    for shift, multiplier in ((16, _F1), (13, _F2)):
        np.right_shift(h, _U32(shift), out=tmp)
        h ^= tmp
        h *= multiplier
    np.right_shift(h, _U32(16), out=tmp)
    h ^= tmp


def _u32_windows(data: npt.NDArray[np.uint8]) -> _U32Array:
    """View ``data`` as the little-endian uint32 starting at every byte (overlapping, no copy).

    One gather from this view reads a whole unaligned block, instead of four byte gathers.
    """
    return np.ndarray(shape=(data.size - 3,), dtype="<u4", buffer=data, offset=0, strides=(1,))


def _murmur3_rows(encoded: _Encoded) -> _U32Array:
    """MurmurHash3 x86_32 (seed 0) of every row of ``encoded``, without a Python loop per row.

    The loop runs over block positions instead: step ``j`` mixes the ``j``-th 4-byte block of
    every row that still has one.  Rows are first put in order of block count, longest first,
    so the rows still active at step ``j`` are a prefix and each step works on contiguous
    slices, with no masks or compaction.  Rows longer than ``_LONG_ROW_BLOCKS`` blocks are
    hashed one by one with mmh3: a row's blocks must be mixed in sequence anyway, and for such
    rows one C call per row is cheaper than one numpy step per block.
    """
    data, starts, lengths = encoded.data, encoded.starts, encoded.lengths
    n = starts.size
    if n > _BATCH_ROWS:
        # Batches keep the per-row temporaries in cache: about 1.5x faster on a 1M-row array.
        hashes = np.empty(n, dtype=np.uint32)
        for i in range(0, n, _BATCH_ROWS):
            rows = slice(i, i + _BATCH_ROWS)
            hashes[rows] = _murmur3_rows(_Encoded(data, starts[rows], lengths[rows]))
        return hashes
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    if data.size < 4:
        # The windowed view needs one whole word; a buffer this small is free to copy.
        data = np.concatenate([data, np.zeros(4, dtype=np.uint8)])
    words = _u32_windows(data)
    nblocks = lengths >> 2
    max_blocks = int(nblocks.max())
    long_rows = None
    if max_blocks > _LONG_ROW_BLOCKS:
        long_rows = np.flatnonzero(nblocks > _LONG_ROW_BLOCKS)
        nblocks[long_rows] = 0  # their result is overwritten below
        max_blocks = int(nblocks.max())

    if max_blocks == 0 or int(nblocks.min()) == max_blocks:
        order = None  # all rows have the same block count (fixed-width values): keep row order
        pos, lens = starts.copy(), lengths
        active = [n] * max_blocks
    else:
        # A stable sort on a one-byte key is a radix sort: linear, not n log n.
        order = np.argsort((max_blocks - nblocks).astype(np.uint8), kind="stable")
        pos, lens = starts[order], lengths[order]
        # active[j] = number of rows with more than j blocks = prefix alive at step j.
        counts = np.bincount(nblocks, minlength=max_blocks + 1)
        active = (n - np.cumsum(counts))[:-1].tolist()
    del nblocks

    h = np.zeros(n, dtype=np.uint32)
    tmp = np.empty(n, dtype=np.uint32)
    for m in active:
        # Fancy indexing rather than np.take: take first makes a contiguous copy of a strided
        # source, and the overlapping view is four times the size of the data.
        _mix_block(h[:m], words[pos[:m]], tmp[:m])
        pos[:m] += 4

    # Every row's pos is now where its tail starts.
    k = _load_words(words, pos)
    k &= _TAIL_MASKS[lens & 3]
    # A zero tail scrambles to zero, so rows without tail bytes need no special case.
    _scramble(k, tmp)
    h ^= k
    tmp[:] = lens  # lengths modulo 2**32, as in the reference implementation
    h ^= tmp
    _fmix(h, tmp)

    if order is not None:
        k[order] = h
        h = k
    if long_rows is not None:
        for row in long_rows.tolist():
            start = int(starts[row])
            value = data[start : start + int(lengths[row])].tobytes()  # mmh3 wants bytes
            h[row] = mmh3.hash(value, 0, signed=False)
    return h


def _load_words(words: _U32Array, pos: _IntArray) -> _U32Array:
    """``words[pos]``, except that bytes past the end of the data read as zero.

    A tail can sit in the last 0..3 bytes of the buffer, where a whole word would overrun.
    Such positions read the last word instead and shift the wanted bytes down; the shift is
    done in two halves because shifting a uint32 by 32 is undefined.
    """
    last = words.size - 1
    if int(pos.max()) <= last:
        return words[pos]
    clamped = np.minimum(pos, last)
    out = words[clamped]
    half_shift = ((pos - clamped) * 4).astype(np.uint32)
    out >>= half_shift
    out >>= half_shift
    return out


def _hash_int64(values: npt.NDArray[np.int64], valid: npt.NDArray[np.bool_] | None) -> _U32Array:
    """Murmur of each value's 8 little-endian bytes: exactly two blocks, no tail, no gathers."""
    words = np.ascontiguousarray(values, dtype="<i8").view(np.uint32)
    h = words[0::2].copy()
    tmp = np.empty_like(h)
    # First block from h = 0: h ^ scramble(k) is just scramble(k).
    _scramble(h, tmp)
    _rotl(h, 13, tmp)
    h *= _M5
    h += _N1
    k = words[1::2].copy()
    _mix_block(h, k, tmp)
    h ^= _U32(8)
    _fmix(h, tmp)
    if valid is not None:
        h[~valid] = _EMPTY_HASH
    return h


def _validity(arr: pa.Array) -> npt.NDArray[np.bool_] | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)


def _integers_as_int64(arr: pa.Array) -> npt.NDArray[np.int64] | None:
    """The values as int64 (nulls as 0), or None if a uint64 value needs the bigint encoding."""
    filled = arr.fill_null(0) if arr.null_count else arr
    values: npt.NDArray[Any] = filled.to_numpy(zero_copy_only=False)
    if values.dtype == np.uint64 and values.size and values.max() > _INT64_MAX:
        return None
    return values.astype(np.int64, copy=False)


def _floats_as_int64_bits(arr: pa.Array) -> npt.NDArray[np.int64]:
    """The 8 bytes key_to_bytes gives each float, as int64 (nulls as arbitrary values)."""
    # Widening float16/float32 to double is exact and is what .as_py() does too.
    f = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        # Float bounds: the int64 limits would round to 2**63 and let an out-of-range value in.
        integral = (np.floor(f) == f) & (f >= -(2.0**63)) & (f < 2.0**63)
        # Same rule as key_to_bytes: integral doubles, -0.0 included, take the int encoding.
        return np.where(integral, f.astype(np.int64), f.view(np.int64))


def _hash_bools(arr: pa.Array) -> _U32Array:
    table = np.array([murmur3_32(b"\x00"), murmur3_32(b"\x01")], dtype=np.uint32)
    filled = arr.fill_null(False) if arr.null_count else arr
    h = table[np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.uint8)]
    valid = _validity(arr)
    if valid is not None:
        h[~valid] = _EMPTY_HASH
    return h


def _encode_offsets_column(arr: pa.Array, offset_dtype: type[np.signedinteger[Any]]) -> _Encoded:
    _, offsets_buf, data_buf = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(offsets_buf, dtype=offset_dtype)[arr.offset : arr.offset + n + 1]
    data = _EMPTY_U8 if data_buf is None else np.frombuffer(data_buf, dtype=np.uint8)
    lengths = np.diff(offsets)
    valid = _validity(arr)
    if valid is not None:
        # Arrow allows a null slot to span bytes; a null key is the empty byte string.
        lengths[~valid] = 0
    return _Encoded(data, offsets[:-1], lengths)


def _encode_fixed_width(
    data: npt.NDArray[np.uint8], width: int, valid: npt.NDArray[np.bool_] | None
) -> _Encoded:
    """Encoding of ``len(data) // width`` values of ``width`` bytes each, back to back."""
    n = data.size // width
    lengths = np.full(n, width, dtype=np.int64)
    if valid is not None:
        lengths[~valid] = 0
    return _Encoded(data, np.arange(0, width * n, width, dtype=np.int64), lengths, width)


def _encode_fixed_size_binary(arr: pa.Array) -> _Encoded:
    width = arr.type.byte_width
    data_buf = arr.buffers()[1]
    data = _EMPTY_U8 if data_buf is None else np.frombuffer(data_buf, dtype=np.uint8)
    data = data[arr.offset * width : (arr.offset + len(arr)) * width]
    return _encode_fixed_width(data, width, _validity(arr))


def _encode_int64_values(
    values: npt.NDArray[np.int64], valid: npt.NDArray[np.bool_] | None
) -> _Encoded:
    return _encode_fixed_width(np.ascontiguousarray(values, dtype="<i8").view(np.uint8), 8, valid)


def _encode_column(arr: pa.Array) -> _Encoded | None:
    """Lay out ``arr`` as the bytes :func:`key_to_bytes` gives each value; None if unsupported."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _encode_column(arr.dictionary_decode())
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return _encode_offsets_column(arr, np.int32)
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return _encode_offsets_column(arr, np.int64)
    if pa.types.is_string_view(t):
        return _encode_column(arr.cast(pa.large_string()))
    if pa.types.is_binary_view(t):
        return _encode_column(arr.cast(pa.large_binary()))
    if pa.types.is_fixed_size_binary(t):
        return _encode_fixed_size_binary(arr)
    if pa.types.is_integer(t):
        ints = _integers_as_int64(arr)
        return None if ints is None else _encode_int64_values(ints, _validity(arr))
    if pa.types.is_floating(t):
        return _encode_int64_values(_floats_as_int64_bits(arr), _validity(arr))
    if pa.types.is_boolean(t):
        filled = arr.fill_null(False) if arr.null_count else arr
        data = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.uint8)
        return _encode_fixed_width(data, 1, _validity(arr))
    if pa.types.is_null(t):
        zeros = np.zeros(len(arr), dtype=np.int64)
        return _Encoded(_EMPTY_U8, zeros, zeros)
    return None


def _hash_chunk(arr: pa.Array) -> _U32Array | None:
    """Murmur hash of every value's key bytes, or None if the type has no vectorised path."""
    t = arr.type
    if pa.types.is_dictionary(t):
        # Hash each distinct value once, then look up by index: same result as decoding.
        dictionary_hashes = _hash_chunk(arr.dictionary)
        if dictionary_hashes is None:
            return None
        # The extra last entry serves null indices (the key None).
        lookup = np.append(dictionary_hashes, _U32(_EMPTY_HASH))
        indices = arr.indices.fill_null(len(lookup) - 1) if arr.null_count else arr.indices
        hashes: npt.NDArray[np.uint32] = lookup[indices.to_numpy(zero_copy_only=False)]
        return hashes
    if pa.types.is_integer(t):
        ints = _integers_as_int64(arr)
        return None if ints is None else _hash_int64(ints, _validity(arr))
    if pa.types.is_floating(t):
        return _hash_int64(_floats_as_int64_bits(arr), _validity(arr))
    if pa.types.is_boolean(t):
        return _hash_bools(arr)
    if pa.types.is_null(t):
        return np.full(len(arr), _EMPTY_HASH, dtype=np.uint32)
    encoded = _encode_column(arr)
    return None if encoded is None else _murmur3_rows(encoded)


def _as_key(value: object) -> object:
    """Turn a value from ``to_pylist()`` into a key: struct rows become tuples of their fields."""
    if isinstance(value, dict):
        return tuple(_as_key(v) for v in value.values())
    if isinstance(value, list):
        return [_as_key(v) for v in value]
    if isinstance(value, tuple):  # map entries arrive as (key, value) tuples
        return tuple(_as_key(v) for v in value)
    return value


def _groups_from_hashes(hashes: _U32Array, max_parallelism: int) -> npt.NDArray[np.int32]:
    hashes %= _U32(max_parallelism)
    # Groups are below 2**15, so reinterpreting the bits is the cast, without a copy.
    return hashes.view(np.int32)


def _key_groups_of_chunk(arr: pa.Array, max_parallelism: int) -> npt.NDArray[np.int32]:
    hashes = _hash_chunk(arr)
    if hashes is not None:
        return _groups_from_hashes(hashes, max_parallelism)
    # Fallback for types without a vectorised encoding: one Python call per element.
    return np.fromiter(
        (assign_to_key_group(_as_key(v), max_parallelism) for v in arr.to_pylist()),
        dtype=np.int32,
        count=len(arr),
    )


def key_hashes_of_array(values: pa.Array) -> npt.NDArray[np.uint32]:
    """MurmurHash3 (seed 0) of every value's :func:`key_to_bytes`: what
    :func:`key_groups_of_array` takes modulo the max parallelism, for callers that need the
    hash itself too (the columnar keyed state hashes each key once for both). Vectorised for
    the same types; others take one Python call per element.

    >>> key_hashes_of_array(pa.array(["hello", None])).tolist() == [
    ...     murmur3_32(key_to_bytes("hello")), 0]
    True
    """
    hashes = _hash_chunk(values)
    if hashes is not None:
        return hashes
    return np.fromiter((murmur3_32(key_to_bytes(_as_key(v))) for v in values.to_pylist()),
                       dtype=np.uint32, count=len(values))


def key_groups_of_strs(keys: Sequence[str], max_parallelism: int) -> npt.NDArray[np.int32]:
    """Key groups of Python strs (what :func:`assign_to_key_group` gives each), hashed one
    by one in C.

    For the lists of keys a per-record stream selects this is as fast as converting them to
    Arrow and hashing the column, and it holds the GIL from start to end: the vectorised
    path's many short numpy calls each release it, and under a busy task thread each waits
    up to the interpreter's switch interval to get it back.

    >>> key_groups_of_strs(["hello", "héllo"], 128).tolist() == [
    ...     assign_to_key_group("hello", 128), assign_to_key_group("héllo", 128)]
    True
    """
    _check_max_parallelism(max_parallelism)
    n = len(keys)
    if all(map(str.isascii, keys)):
        # mmh3 hashes a str as its UTF-8 bytes, and ASCII is UTF-8: no encoding needed.
        # (Only ASCII: mmh3 crashes on a str holding a lone surrogate.)
        hashes = np.fromiter(map(mmh3.hash, keys, repeat(0), repeat(False)),
                             dtype=np.uint32, count=n)
    else:
        hashes = np.fromiter((mmh3.hash(key_to_bytes(k), 0, False) for k in keys),
                             dtype=np.uint32, count=n)
    return (hashes % max_parallelism).astype(np.int32)


def key_groups_of_array(
    values: pa.Array | pa.ChunkedArray, max_parallelism: int
) -> npt.NDArray[np.int32]:
    """Key group of every value of an Arrow column; equal to ``assign_to_key_group`` per element.

    Vectorised (no Python call per element) for string, large_string, string_view, binary,
    large_binary, binary_view, fixed_size_binary, every integer type (except uint64 values
    above the int64 range), bool, float16/32/64 and null columns; nulls are treated as the key
    ``None``.  Dictionary arrays hash their dictionary once and map the indices.  Values of 260
    bytes or more are the exception: each is hashed by one C call, which beats vectorising
    their many blocks.

    Every other type (struct, list, timestamp, date, decimal, ...) falls back to a per-element
    Python loop over :func:`assign_to_key_group`, with struct values taken as tuples of their
    fields; values :func:`key_to_bytes` does not accept raise ``TypeError``.

    >>> key_groups_of_array(pa.array(["hello", None, "x"]), 128).tolist() == [
    ...     assign_to_key_group(k, 128) for k in ["hello", None, "x"]]
    True
    """
    _check_max_parallelism(max_parallelism)
    if isinstance(values, pa.ChunkedArray):
        parts = [_key_groups_of_chunk(chunk, max_parallelism) for chunk in values.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return _key_groups_of_chunk(values, max_parallelism)


def _interleave_tuple_encoding(columns: Sequence[_Encoded], n: int) -> _Encoded:
    """Build, per row, the bytes ``key_to_bytes(tuple(row))`` gives: (u32 length, bytes)*."""
    total = np.zeros(n, dtype=np.int64)
    for column in columns:
        total += column.lengths
    total += 4 * len(columns)
    row_starts = np.zeros(n, dtype=np.int64)
    np.cumsum(total[:-1], out=row_starts[1:])
    # Spare bytes at the end let the windowed views below write whole words everywhere.
    out = np.zeros(int(total.sum()) + 8, dtype=np.uint8)
    out_u32 = np.ndarray(shape=(out.size - 3,), dtype="<u4", buffer=out, strides=(1,))
    out_u64 = np.ndarray(shape=(out.size - 7,), dtype="<u8", buffer=out, strides=(1,))
    cursor = row_starts.copy()
    for data, starts, lengths, width in columns:
        out_u32[cursor] = lengths.astype(np.uint32)
        cursor += 4
        if width in (1, 8):
            # One scatter of whole values (ints, floats, bools), skipping nulls.
            valid = lengths > 0
            values = data if width == 1 else data.view("<u8")
            target = out if width == 1 else out_u64
            target[cursor[valid]] = values[valid]
        else:
            _scatter_bytes(out, cursor, data, starts, lengths)
        cursor += lengths
    return _Encoded(out, row_starts, total)


def _scatter_bytes(
    out: npt.NDArray[np.uint8],
    cursor: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    starts: _IntArray,
    lengths: _IntArray,
) -> None:
    """Copy row ``i``'s bytes to ``out[cursor[i]:]``, for all rows at once."""
    n_bytes = int(lengths.sum())
    if n_bytes == 0:
        return
    # Byte k of the rows' concatenation lies in row r; it goes to cursor[r] + (k - before[r]).
    before = np.cumsum(lengths) - lengths
    positions = np.arange(n_bytes, dtype=np.int64)
    dst = np.repeat(cursor - before, lengths)
    dst += positions
    first = int(starts[0])
    if np.array_equal(starts - first, before):
        # The usual Arrow layout: the rows' bytes are already back to back in data.
        out[dst] = data[first : first + n_bytes]
    else:
        positions += np.repeat(starts - before, lengths)
        out[dst] = data[positions]


def key_groups_of_columns(
    columns: Sequence[pa.Array | pa.ChunkedArray], max_parallelism: int
) -> npt.NDArray[np.int32]:
    """Key groups of composite keys: row ``i`` is keyed by ``tuple(col[i] for col in columns)``.

    Matches ``assign_to_key_group(tuple(row values), max_parallelism)``.  When every column has
    a vectorised encoding (see :func:`key_groups_of_array`) the tuple encoding is assembled and
    hashed with numpy; otherwise this falls back to a per-row Python loop.

    >>> a, b = pa.array(["x", "y"]), pa.array([1, None])
    >>> key_groups_of_columns([a, b], 128).tolist() == [
    ...     assign_to_key_group(("x", 1), 128), assign_to_key_group(("y", None), 128)]
    True
    """
    _check_max_parallelism(max_parallelism)
    if not columns:
        msg = "a composite key needs at least one column"
        raise ValueError(msg)
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        msg = f"key columns differ in length: {[len(a) for a in arrays]}"
        raise ValueError(msg)
    encoded = [_encode_column(a) for a in arrays]
    if all(e is not None for e in encoded):
        tuples = _interleave_tuple_encoding([e for e in encoded if e is not None], n)
        return _groups_from_hashes(_murmur3_rows(tuples), max_parallelism)
    # Fallback: at least one column has no vectorised encoding, so build each row's tuple.
    rows = zip(*(a.to_pylist() for a in arrays), strict=True)
    return np.fromiter(
        (assign_to_key_group(tuple(_as_key(v) for v in row), max_parallelism) for row in rows),
        dtype=np.int32,
        count=n,
    )


# --------------------------------------------------------------------------------------------
# Key-group ranges and operators
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyGroupRange:
    """The key groups ``start..end`` (both inclusive); empty when ``end < start``.

    >>> r = KeyGroupRange(32, 63)
    >>> len(r), 40 in r, 64 in r, str(r)
    (32, True, False, 'KeyGroupRange{start=32, end=63}')
    >>> r.intersection(KeyGroupRange(60, 100))
    KeyGroupRange(start=60, end=63)
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0:
            msg = f"key group range start must be >= 0, got {self.start}"
            raise ValueError(msg)

    @classmethod
    def empty(cls) -> KeyGroupRange:
        """The canonical empty range, so that all empty results compare equal.

        >>> KeyGroupRange(5, 1).intersection(KeyGroupRange(0, 9)) == KeyGroupRange.empty()
        True
        """
        return cls(0, -1)

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        """Key groups in both ranges (the canonical empty range if none)."""
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange.empty()

    def __str__(self) -> str:
        return f"KeyGroupRange{{start={self.start}, end={self.end}}}"


def _check_max_parallelism(max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        msg = (
            f"max parallelism must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, "
            f"got {max_parallelism}"
        )
        raise ValueError(msg)


def check_parallelism(parallelism: int, max_parallelism: int) -> None:
    """Raise ``ValueError`` unless ``1 <= parallelism <= max_parallelism <= 32768``.

    >>> check_parallelism(4, 128)
    >>> check_parallelism(256, 128)
    Traceback (most recent call last):
    ...
    ValueError: parallelism 256 must not exceed max parallelism 128
    """
    _check_max_parallelism(max_parallelism)
    if parallelism < 1:
        msg = f"parallelism must be at least 1, got {parallelism}"
        raise ValueError(msg)
    if parallelism > max_parallelism:
        # Every operator needs at least one key group.
        msg = f"parallelism {parallelism} must not exceed max parallelism {max_parallelism}"
        raise ValueError(msg)


def compute_operator_index_for_key_group(
    max_parallelism: int, parallelism: int, key_group: int
) -> int:
    """Index of the operator (``0..parallelism-1``) that owns ``key_group``.

    >>> [compute_operator_index_for_key_group(128, 4, g) for g in (0, 31, 32, 127)]
    [0, 0, 1, 3]
    """
    return key_group * parallelism // max_parallelism


def operator_indexes(
    key_groups: npt.NDArray[np.integer[Any]], max_parallelism: int, parallelism: int
) -> npt.NDArray[np.int32]:
    """Vectorised :func:`compute_operator_index_for_key_group` (int32 result).

    >>> operator_indexes(np.array([0, 31, 32, 127]), 128, 4).tolist()
    [0, 0, 1, 3]
    """
    # A lookup in the owner table of all key groups: one gather instead of a multiply and
    # an integer division per record.
    owners: npt.NDArray[np.int32] = _owner_table(max_parallelism, parallelism)[key_groups]
    return owners


@functools.lru_cache(maxsize=256)
def _owner_table(max_parallelism: int, parallelism: int) -> npt.NDArray[np.int32]:
    groups = np.arange(max_parallelism, dtype=np.int64)
    table = (groups * parallelism // max_parallelism).astype(np.int32)
    table.flags.writeable = False
    return table


def key_group_range_for_operator(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """Key groups owned by one operator, as Flink's ``computeKeyGroupRangeForOperatorIndex``.

    The ranges of operators ``0..parallelism-1`` partition ``0..max_parallelism-1`` and agree
    with :func:`compute_operator_index_for_key_group`.

    >>> for i in range(3):
    ...     print(key_group_range_for_operator(10, 3, i))
    KeyGroupRange{start=0, end=3}
    KeyGroupRange{start=4, end=6}
    KeyGroupRange{start=7, end=9}
    """
    check_parallelism(parallelism, max_parallelism)
    if not 0 <= operator_index < parallelism:
        msg = f"operator index must be between 0 and {parallelism - 1}, got {operator_index}"
        raise ValueError(msg)
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)
