"""How a keyed stream finds each record's key, per record or vectorised over a column.

Example:
    >>> from weir.operators.keys import key_spec
    >>> key_spec(lambda r: r[0]).get_key(("a", 1))
    'a'
    >>> key_spec("user").column
    'user'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from weir.core.records import Elements
from weir.core.types import KIND_KEY, KIND_PICKLE
from weir.datastream.functions import KeySelector, resolve_callable
from weir.state.key_groups import (
    assign_to_key_group,
    key_groups_of_array,
    key_groups_of_columns,
    key_groups_of_strs,
)


class KeySpec:
    """Extracts keys and key groups from :class:`Elements`."""

    #: A column name (str) or position (int) when the key is one field, else None.
    column: str | int | None = None

    def get_key(self, record: Any) -> Any:
        raise NotImplementedError

    def keys(self, elements: Elements) -> list[Any]:
        get = self.get_key
        return [get(r) for r in elements.records()]

    def key_groups(self, elements: Elements, max_parallelism: int) -> np.ndarray:
        """Key group of every record, in order."""
        return key_groups_of_keys(self.keys(elements), max_parallelism)


def hashable_key(key: Any) -> Any:
    """A key state can be kept under: lists become tuples and sets frozensets (PyFlink
    keys by the serialized value, so a key selector may return a list).

    >>> hashable_key([1, [2, 3]]), hashable_key("a")
    ((1, (2, 3)), 'a')
    """
    if isinstance(key, list):
        return tuple(map(hashable_key, key))
    if isinstance(key, set):
        return frozenset(key)
    return key


_UNHASHABLE = frozenset((list, set))


class FunctionKeySpec(KeySpec):
    """A user key selector: one Python call per record."""

    def __init__(self, fn: Callable[[Any], Any] | KeySelector) -> None:
        self.fn = fn
        self._call = resolve_callable(fn, "get_key")

    def get_key(self, record: Any) -> Any:
        key = self._call(record)
        return hashable_key(key) if type(key) in _UNHASHABLE else key

    def keys(self, elements: Elements) -> list[Any]:
        keys = list(map(self._call, elements.records()))
        # One set of the keys' types is 3x cheaper than an isinstance per key (hot path).
        if not _UNHASHABLE.isdisjoint(set(map(type, keys))):
            return list(map(hashable_key, keys))
        return keys


class FieldKeySpec(KeySpec):
    """Key = one field (by name or position) or several; vectorised on Arrow batches."""

    def __init__(self, fields: str | int | tuple[str | int, ...]) -> None:
        self.fields = fields
        self.column = fields if isinstance(fields, str | int) else None

    def get_key(self, record: Any) -> Any:
        if isinstance(self.fields, tuple):
            return tuple(record[f] for f in self.fields)
        return record[self.fields]

    def arrow_columns(self, elements: Elements) -> list[Any]:
        batch = elements.arrow()
        fields = self.fields if isinstance(self.fields, tuple) else (self.fields,)
        columns = []
        for f in fields:
            try:
                columns.append(batch.column(f))
            except KeyError:
                msg = (f"key field {f!r} is not a column of the stream "
                       f"(columns: {', '.join(batch.schema.names)})")
                raise KeyError(msg) from None
        return columns

    def key_groups(self, elements: Elements, max_parallelism: int) -> np.ndarray:
        if not elements.is_arrow or _is_pickled(elements.arrow()):
            # A pickled batch has no field columns: its one column holds whole records.
            return super().key_groups(elements, max_parallelism)
        columns = self.arrow_columns(elements)
        if len(columns) == 1:
            return key_groups_of_array(columns[0], max_parallelism)
        return key_groups_of_columns(columns, max_parallelism)


def _is_pickled(batch: pa.RecordBatch) -> bool:
    return (batch.schema.metadata or {}).get(KIND_KEY) == KIND_PICKLE


def key_groups_of_keys(keys: list[Any], max_parallelism: int) -> np.ndarray:
    """Key groups of Python keys: vectorised when they are all str, bytes or int."""
    kinds = set(map(type, keys))
    if kinds == {str}:
        return key_groups_of_strs(keys, max_parallelism)
    if len(kinds) == 1 and kinds.pop() in (str, bytes, int):
        try:
            return key_groups_of_array(pa.array(keys), max_parallelism)
        except (pa.ArrowInvalid, OverflowError):
            pass  # e.g. ints beyond 64 bits: the per-key path encodes them
    return np.fromiter((assign_to_key_group(k, max_parallelism) for k in keys),
                       dtype=np.int32, count=len(keys))


#: What ``key_by`` takes: a column name or position, a tuple (or list) of them, a function
#: of the record or a KeySelector (or a KeySpec already made).
KeyBy = (str | int | tuple[str | int, ...] | list[str | int] | Callable[[Any], Any]
         | KeySelector | KeySpec)


def key_spec(key: KeyBy) -> KeySpec:
    """The KeySpec for what ``key_by`` was given: a field name/position, a tuple, a function."""
    if isinstance(key, KeySpec):
        return key
    if isinstance(key, str | int) and not isinstance(key, bool):
        return FieldKeySpec(key)
    if isinstance(key, tuple | list) and key and all(isinstance(k, str | int) for k in key):
        return FieldKeySpec(tuple(key))
    if callable(key) or isinstance(key, KeySelector):
        return FunctionKeySpec(key)
    msg = ("key_by expects a column name, a position, a tuple of those, a function or a "
           f"KeySelector, got {type(key).__name__}")
    raise TypeError(msg)
