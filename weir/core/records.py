"""Micro-batches of records and their Arrow encoding, and the other stream elements that
travel with them: record timestamps and watermarks.

Records travel between tasks as Arrow RecordBatches. Inside an operator chain a batch may
stay a plain Python list, so per-record operators chained together never pay for Arrow
conversion; :class:`Elements` converts lazily, in whichever direction is asked for, and
caches the result.

Python records map to Arrow by kind (kept in the schema metadata so the far side rebuilds
the same Python values): scalars -> one column ``f0``; tuples -> ``f0..fn``; ``Row`` ->
named columns; dicts -> columns by key; anything Arrow cannot type (mixed types, nested
containers, arbitrary objects) -> one binary column of pickles.

A watermark ``w`` says that no record with timestamp ``<= w`` is expected any more. It
travels between tasks as an in-band event whose payload :func:`encode_watermark` makes. The
strategies that generate watermarks are user API
(:mod:`weir.common.watermark_strategy`); this module is what the runtime needs to carry
and compare them.

Example:
    >>> from weir.core.records import Elements
    >>> e = Elements.from_records([("a", 1), ("b", 2)])
    >>> e.arrow().schema.names
    ['f0', 'f1']
    >>> Elements.from_arrow(e.arrow()).records()
    [('a', 1), ('b', 2)]
    >>> decode_watermark(encode_watermark(1_700_000_000_000))
    1700000000000
    >>> MIN_WATERMARK < 0 < MAX_WATERMARK
    True
"""

from __future__ import annotations

import enum
import pickle
import struct
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

from weir.core.row import Row, RowKind
from weir.core.types import (
    KIND_DICT,
    KIND_KEY,
    KIND_PICKLE,
    KIND_ROW,
    KIND_SCALAR,
    KIND_TUPLE,
    TypeInformation,
    arrow_array,
)

_SCALAR_TYPES = (int, float, str, bytes, bool)
#: Size assumed per record not yet encoded, to decide when output buffers are full.
ESTIMATED_RECORD_BYTES = 24
#: Name of the column that carries records' timestamps between tasks.
TIMESTAMP_COLUMN = "__weir_timestamp"

#: The smallest watermark: event time has not started.
MIN_WATERMARK = -(1 << 63)
#: The end of event time: every timer fires (sent when an input ends).
MAX_WATERMARK = (1 << 63) - 1
#: Marks a record without a timestamp inside a batch that otherwise has them.
NO_TIMESTAMP = MIN_WATERMARK

_WATERMARK = struct.Struct(">q")


def encode_watermark(watermark: int) -> bytes:
    """The payload of a watermark event: 8 bytes, big-endian, signed."""
    return _WATERMARK.pack(watermark)


def decode_watermark(payload: bytes) -> int:
    """The watermark carried by a watermark event's payload."""
    return int(_WATERMARK.unpack(payload)[0])


class Elements:
    """A batch of records: a list of Python values, an Arrow RecordBatch, or both.

    Immutable once emitted: operators build new lists rather than mutating their input.
    """

    __slots__ = ("_batch", "_bytes", "_records", "timestamps", "type_info")

    def __init__(self, records: list[Any] | None = None, batch: pa.RecordBatch | None = None,
                 type_info: TypeInformation | None = None,
                 timestamps: np.ndarray | None = None) -> None:
        self._records = records
        self._batch = batch
        self._bytes: int | None = None
        self.type_info = type_info
        #: Event-time timestamps (int64 epoch milliseconds), one per record, or None when
        #: the records carry none (no timestamp assigner upstream).
        self.timestamps = timestamps

    @classmethod
    def from_records(cls, records: list[Any], type_info: TypeInformation | None = None,
                     timestamps: np.ndarray | None = None) -> Elements:
        if type_info is not None and type_info.kind == KIND_ROW:
            records = as_rows(records, type_info)
        return cls(records=records, type_info=type_info, timestamps=timestamps)

    @classmethod
    def from_arrow(cls, batch: pa.RecordBatch, timestamps: np.ndarray | None = None) -> Elements:
        return cls(batch=batch, timestamps=timestamps)

    @classmethod
    def from_wire(cls, batch: pa.RecordBatch) -> Elements:
        """A batch as it travelled between tasks: timestamps, if any, ride in a trailing
        column (see :meth:`wire_batch`), taken out here."""
        if batch.num_columns and batch.schema.names[-1] == TIMESTAMP_COLUMN:
            timestamps = batch.column(batch.num_columns - 1).to_numpy()
            return cls(batch=batch.drop_columns([TIMESTAMP_COLUMN]), timestamps=timestamps)
        return cls(batch=batch)

    def wire_batch(self) -> pa.RecordBatch:
        """The Arrow form to send to another task: the records plus, when there are
        timestamps, a trailing int64 column :data:`TIMESTAMP_COLUMN`."""
        batch = self.arrow()
        if self.timestamps is None:
            return batch
        return batch.append_column(TIMESTAMP_COLUMN, pa.array(self.timestamps, pa.int64()))

    def with_timestamps(self, timestamps: np.ndarray | None) -> Elements:
        """The same records (and cached forms) with other timestamps."""
        return Elements(self._records, self._batch, self.type_info, timestamps)

    def take_timestamps(self, indices: np.ndarray | list[int]) -> np.ndarray | None:
        """The timestamps of the records at ``indices`` (None without timestamps)."""
        return None if self.timestamps is None else self.timestamps[indices]

    def __len__(self) -> int:
        if self._records is not None:
            return len(self._records)
        assert self._batch is not None
        rows: int = self._batch.num_rows
        return rows

    @property
    def is_arrow(self) -> bool:
        """True when the Arrow form exists already (vectorised operators prefer it)."""
        return self._batch is not None

    def records(self) -> list[Any]:
        """The records as Python values."""
        if self._records is None:
            assert self._batch is not None
            self._records = arrow_to_records(self._batch)
        return self._records

    def arrow(self) -> pa.RecordBatch:
        """The records as one Arrow RecordBatch."""
        if self._batch is None:
            assert self._records is not None
            self._batch = records_to_arrow(self._records, self.type_info)
            self._bytes = None  # the encoded size replaces the estimate from a few records
        return self._batch

    def slice(self, start: int, length: int) -> Elements:
        """Records ``start`` to ``start + length`` (fewer at the end), in every form this
        batch has already (zero-copy for Arrow; no conversion of the records again).

        Example:
            >>> Elements.from_records([1, 2, 3, 4]).slice(1, 2).records()
            [2, 3]
        """
        ts = self.timestamps
        return Elements(
            None if self._records is None else self._records[start:start + length],
            None if self._batch is None else self._batch.slice(start, length),
            self.type_info, None if ts is None else ts[start:start + length])

    def slices(self, size: int) -> list[Elements]:
        """This batch in consecutive pieces of at most ``size`` records (zero-copy for Arrow)."""
        n = len(self)
        if n <= size:
            return [self]
        ts = self.timestamps
        if self._batch is not None:
            return [Elements.from_arrow(self._batch.slice(i, size),
                                        None if ts is None else ts[i:i + size])
                    for i in range(0, n, size)]
        assert self._records is not None
        return [Elements.from_records(self._records[i:i + size], self.type_info,
                                      None if ts is None else ts[i:i + size])
                for i in range(0, n, size)]

    def split_by_bytes(self, limit: int, first: int | None = None) -> list[Elements]:
        """This batch cut at record boundaries into consecutive pieces of at most ``limit``
        estimated bytes each (the first of at most ``first``, when at least one record fits
        in it), each piece with its records' timestamps. A record larger than ``limit`` is
        a piece of its own.

        Cheap: a record's bytes are estimated once, as the batch's average, and pieces are
        cut by count (zero-copy for Arrow, list slices for Python records), each weighing
        its share of the batch's estimate. Records of very different sizes in one batch
        may make a piece heavier than its estimate.

        >>> pieces = Elements.from_records([("x" * 60, i) for i in range(100)]).split_by_bytes(
        ...     1000, first=300)
        >>> [len(p) for p in pieces][:3], sum(map(len, pieces))
        ([4, 13, 13], 100)
        >>> [p.estimated_bytes() for p in pieces][:3]
        [288, 936, 936]
        """
        n = len(self)
        if not n:
            return []
        size = self.estimated_bytes()
        if not size or size <= (limit if first is None else first):
            return [self]
        per_record = size / n
        # Without the timestamps' 8 bytes a record, which estimated_bytes adds back.
        record_bytes = per_record - (0 if self.timestamps is None else 8)
        budget = limit if first is None or first < per_record else first
        pieces: list[Elements] = []
        start = 0
        while start < n:
            stop = start + max(1, min(n - start, int(budget // per_record)))
            ts = None if self.timestamps is None else self.timestamps[start:stop]
            piece = Elements(
                None if self._records is None else self._records[start:stop],
                None if self._batch is None else self._batch.slice(start, stop - start),
                self.type_info, ts)
            piece._bytes = int(record_bytes * (stop - start))
            pieces.append(piece)
            start = stop
            budget = limit
        return pieces

    @classmethod
    def concat(cls, parts: Sequence[Elements]) -> Elements | None:
        """The records of ``parts``, in order, as one batch; None when they cannot be one
        (Python records with different declared types, Arrow batches with different
        schemas, timestamps on some only). Arrow batches are copied into one, Python
        records joined as one list.

        >>> Elements.concat([Elements.from_records([1, 2]), Elements.from_records([3])]).records()
        [1, 2, 3]
        """
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        stamped = first.timestamps is not None
        if any((p.timestamps is not None) != stamped for p in parts):
            return None
        timestamps = np.concatenate([p.timestamps for p in parts]) if stamped else None
        batches = [p._batch for p in parts if p._batch is not None]
        lists = [p._records for p in parts
                 if p._records is not None and p.type_info is first.type_info]
        if len(batches) == len(parts):
            schema = batches[0].schema
            if not all(b.schema.equals(schema, check_metadata=True) for b in batches):
                return None
            joined = Elements(None, pa.concat_batches(batches), first.type_info, timestamps)
        elif len(lists) == len(parts):
            records: list[Any] = []
            for part in lists:
                records.extend(part)
            joined = Elements(records, None, first.type_info, timestamps)
        else:
            return None
        joined._bytes = sum(p.estimated_bytes() for p in parts) - (
            8 * len(timestamps) if timestamps is not None else 0)
        return joined

    def estimated_bytes(self) -> int:
        """Bytes the records take in Arrow, with their timestamps: an Arrow batch's size,
        a piece's share of its batch's estimate, or an estimate from a few records."""
        extra = 0 if self.timestamps is None else 8 * len(self.timestamps)
        if self._bytes is None:
            self._bytes = int(self._batch.nbytes) if self._batch is not None else \
                _estimate_records_bytes(self._records or [])
        return self._bytes + extra

    def __repr__(self) -> str:
        form = "arrow" if self._batch is not None else "records"
        return f"Elements({len(self)} {form})"


def _estimate_records_bytes(records: list[Any], samples: int = 8) -> int:
    """Bytes the records take encoded, estimated from a few of them (strings and bytes by
    their encoded length and offset, at least :data:`ESTIMATED_RECORD_BYTES` a record):
    output buffers fill, and backpressure starts, at about the configured size even for
    wide records."""
    n = len(records)
    if not n:
        return 0
    step = max(1, n // samples)
    picked = records[::step][:samples]
    average = sum(max(ESTIMATED_RECORD_BYTES, _payload_bytes(r)) for r in picked) / len(picked)
    return int(average * n)


def _payload_bytes(value: Any, depth: int = 0) -> int:
    # A string or bytes value takes its UTF-8 bytes and a 4-byte offset in Arrow: counting
    # only its characters would let buffers of wide records outgrow the segment size.
    if isinstance(value, str):
        return (len(value) if value.isascii() else len(value.encode())) + 4
    if isinstance(value, bytes | bytearray):
        return len(value) + 4
    if isinstance(value, int | float | bool) or value is None or depth > 2:
        return 8
    if isinstance(value, tuple | list):
        return sum(_payload_bytes(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return sum(_payload_bytes(v, depth + 1) + 8 for v in value.values())
    if isinstance(value, Row):
        return sum(_payload_bytes(v, depth + 1) for v in value)
    return ESTIMATED_RECORD_BYTES


def records_to_arrow(records: Sequence[Any],
                     type_info: TypeInformation | None = None) -> pa.RecordBatch:
    """Encode Python records as a RecordBatch (see the module docstring for the mapping)."""
    if type_info is not None:
        return _encode_typed(records, type_info)
    if not records:
        return pa.RecordBatch.from_pylist([], schema=_pickle_schema())
    types = set(map(type, records))
    try:
        if len(types) == 1:
            kind = types.pop()
            first = records[0]
            if kind is Row and first._fields:
                # Arrow columns carry no row kind: rows other than INSERT travel pickled.
                if len(set(map(_row_fields, records))) == 1 and all(
                        r._row_kind is INSERT for r in records):
                    return _columns_batch(_transpose(records, len(first)),
                                          list(first._fields), KIND_ROW)
            elif kind is tuple:  # tuple subclasses (namedtuples) would come back plain
                if len(set(map(len, records))) == 1 and len(first) > 0:
                    names = [f"f{i}" for i in range(len(first))]
                    return _columns_batch(_transpose(records, len(first)), names, KIND_TUPLE)
            elif kind is dict:
                # Only dicts with the same str keys (in the same order) become columns: any
                # other key would be lost or come back as an added None.
                key_sets = set(map(tuple, records))
                if len(key_sets) == 1:
                    names = list(key_sets.pop())
                    if names and all(type(k) is str for k in names):
                        return _columns_batch([[r[k] for r in records] for k in names],
                                              names, KIND_DICT)
            elif kind in _SCALAR_TYPES:
                return _columns_batch([records], ["f0"], KIND_SCALAR)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError,
            TypeError, ValueError):
        pass
    return _pickled_batch(records)


def as_rows(records: list[Any], type_info: TypeInformation) -> list[Any]:
    """Records of a stream declared ``Types.ROW``/``ROW_NAMED``, as Rows with the declared
    field names, so a function sees a Row whether or not its input crossed an exchange
    (PyFlink's records of a row type are always Rows). A named Row gives its values by
    name, so its own field order does not matter; a tuple, list or positional Row gives
    them by position. A row's kind is kept.

    >>> from weir import Row, Types
    >>> row_type = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    >>> as_rows([(1, "a"), Row(name="b", id=2)], row_type)
    [Row(id=1, name='a'), Row(id=2, name='b')]
    """
    fields = type_info.field_names
    if all(type(r) is Row and r._fields == fields for r in records):
        return records
    index = type_info.field_index
    make = Row.from_values
    out = []
    for record in records:
        if type(record) is Row and record._fields == fields:
            out.append(record)
            continue
        try:
            if isinstance(record, Row) and record._fields:
                values: Sequence[Any] = [record[name] for name in fields]
            else:
                values = record
            if len(values) != len(fields):
                raise ValueError(len(values))
            row = make(fields, index, values)
        except (KeyError, TypeError, ValueError) as err:
            msg = (f"a record does not match the declared row type {list(fields)}: "
                   f"{record!r:.80} (give a Row with these fields, or a tuple of "
                   f"{len(fields)} values)")
            raise TypeError(msg) from err
        if isinstance(record, Row) and record._row_kind is not INSERT:
            row.set_row_kind(record._row_kind)
        out.append(row)
    return out


def arrow_to_records(batch: pa.RecordBatch) -> list[Any]:
    """Decode a RecordBatch into Python records (batches without weir metadata -> Rows)."""
    meta = batch.schema.metadata or {}
    kind = meta.get(KIND_KEY, KIND_ROW)
    if kind == KIND_SCALAR:
        return _pylist(batch.column(0))
    if kind == KIND_TUPLE:
        return list(zip(*(_pylist(c) for c in batch.columns), strict=True))
    if kind == KIND_PICKLE:
        loads = pickle.loads
        return [loads(b) for b in batch.column(0).to_pylist()]
    if kind == KIND_DICT:
        dicts: list[Any] = batch.to_pylist()
        return dicts
    fields = tuple(batch.schema.names)
    index = {name: i for i, name in enumerate(fields)}
    make = Row.from_values
    if batch.num_columns == 0:
        return [make(fields, index, ()) for _ in range(batch.num_rows)]
    return [make(fields, index, values)
            for values in zip(*(_pylist(c) for c in batch.columns), strict=True)]


def _pylist(column: pa.Array) -> list[Any]:
    """A column's Python values; a map column's as dicts (Arrow gives key-value lists)."""
    values: list[Any] = column.to_pylist()
    if pa.types.is_map(column.type):
        return [None if v is None else dict(v) for v in values]
    return values


def _transpose(records: Sequence[Any], width: int) -> list[list[Any]]:
    """Columns of equally long records; itemgetter per column is ~3x faster than zip(*)."""
    return [list(map(itemgetter(i), records)) for i in range(width)]


INSERT = RowKind.INSERT


def _row_fields(row: Row) -> tuple[str, ...]:
    return row._fields


#: Python and numpy types Arrow stores in one column type and gives back as the first.
_VALUE_KINDS = ((bool, bool), (np.bool_, bool), (int, int), (np.integer, int),
                (float, float), (np.floating, float), (str, str), (bytes, bytes))


def _value_kind(t: type) -> type | None:
    """What a value of type ``t`` comes back from Arrow as; None: not safely (enums)."""
    if issubclass(t, enum.Enum):
        return None  # IntEnum/StrEnum members would come back as plain ints and strs
    for cls, kind in _VALUE_KINDS:
        if issubclass(t, cls):
            return kind
    return t


def _is_nested(t: pa.DataType) -> bool:
    nested: bool = pa.types.is_nested(t) or pa.types.is_null(t)
    return nested


def _columns_batch(columns: Sequence[Sequence[Any]], names: list[str],
                   kind: bytes) -> pa.RecordBatch:
    for col in columns:
        types = set(map(type, col))
        types.discard(type(None))
        kinds = set(map(_value_kind, types))
        if len(kinds) > 1 or None in kinds:
            # Arrow would coerce mixed values (1 and 2.5 -> doubles, str and bytes -> binary)
            # or drop an enum's type: pickle them to get them back unchanged.
            msg = "mixed value types are pickled"
            raise TypeError(msg)
    arrays = [pa.array(col) for col in columns]
    if any(_is_nested(a.type) for a in arrays):
        # Nested values would come back as lists/dicts instead of tuples: keep them exact.
        msg = "nested values are pickled"
        raise TypeError(msg)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(
        [pa.field(n, a.type) for n, a in zip(names, arrays, strict=True)],
        metadata={KIND_KEY: kind}))


def _pickle_schema() -> pa.Schema:
    return pa.schema([("_pickled", pa.binary())], metadata={KIND_KEY: KIND_PICKLE})


def _pickled_batch(records: Sequence[Any]) -> pa.RecordBatch:
    dumps = cloudpickle.dumps
    return pa.RecordBatch.from_arrays(
        [pa.array([dumps(r) for r in records], pa.binary())], schema=_pickle_schema())


def _encode_typed(records: Sequence[Any], type_info: TypeInformation) -> pa.RecordBatch:
    if not type_info.columnar:
        return _pickled_batch(records)
    schema = type_info.arrow_schema()
    try:
        if type_info.kind == KIND_SCALAR:
            columns: list[Sequence[Any]] = [records]
        elif type_info.kind == KIND_DICT:
            columns = [[r[name] for r in records] for name in schema.names]
        elif records:
            columns = list(zip(*records, strict=True))
        else:
            columns = [[] for _ in schema.names]
        arrays = [arrow_array(col, f.type) for col, f in zip(columns, schema, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, KeyError) as err:
        sample = repr(records[0])[:80] if records else ""
        msg = f"records do not match the declared output_type: {err} (first record: {sample})"
        raise TypeError(msg) from err
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
