"""``Row``: a record with named fields, readable by name and by position, like PyFlink's Row.

Example:
    >>> from weir import Row
    >>> r = Row(user="u1", clicks=3)
    >>> r.user, r["clicks"], r[0]
    ('u1', 3, 'u1')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Row(tuple):
    """An immutable record. Positional rows have no names; named rows have ``_fields``."""

    _fields: tuple[str, ...]
    _index: dict[str, int]

    def __new__(cls, *values: Any, **named: Any) -> Row:
        if values and named:
            msg = "Row takes either positional or named values, not both"
            raise TypeError(msg)
        if named:
            row = tuple.__new__(cls, named.values())
            row._fields = tuple(named)
            row._index = {name: i for i, name in enumerate(row._fields)}
        else:
            row = tuple.__new__(cls, values)
            row._fields = ()
            row._index = {}
        return row

    @classmethod
    def from_values(cls, fields: tuple[str, ...], index: dict[str, int],
                    values: Sequence[Any]) -> Row:
        """Build a named row sharing ``fields``/``index`` with its siblings (no copies)."""
        row = tuple.__new__(cls, values)
        row._fields = fields
        row._index = index
        return row

    def __getitem__(self, item: Any) -> Any:  # type: ignore[override]
        if isinstance(item, str):
            try:
                return tuple.__getitem__(self, self._index[item])
            except KeyError:
                msg = f"Row has no field {item!r} (fields: {', '.join(self._fields)})"
                raise KeyError(msg) from None
        return tuple.__getitem__(self, item)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return tuple.__getitem__(self, self._index[name])
        except KeyError:
            msg = f"Row has no field {name!r} (fields: {', '.join(self._fields)})"
            raise AttributeError(msg) from None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_row, (self._fields, tuple(self)))

    def get_fields_by_names(self) -> list[str]:
        """Field names, as in PyFlink."""
        return list(self._fields)

    def as_dict(self) -> dict[str, Any]:
        """The named fields as a dict."""
        if not self._fields and len(self):
            msg = "a positional Row has no field names: build it as Row(name=value, ...)"
            raise TypeError(msg)
        return dict(zip(self._fields, self, strict=True))

    def __repr__(self) -> str:
        if self._fields:
            inner = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self, strict=True))
        else:
            inner = ", ".join(repr(v) for v in self)
        return f"Row({inner})"


class _FieldOrTupleMethod:
    """``row.count``/``row.index``: the field when the row has one of that name (as the
    running ``count()`` aggregation emits), else the tuple method."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._method = getattr(tuple, name)

    def __get__(self, row: Row | None, owner: type) -> Any:
        if row is None:
            return self._method
        position = row._index.get(self._name)
        if position is None:
            return self._method.__get__(row, owner)
        return tuple.__getitem__(row, position)


Row.count = _FieldOrTupleMethod("count")  # type: ignore[assignment,method-assign]
Row.index = _FieldOrTupleMethod("index")  # type: ignore[assignment,method-assign]


def _rebuild_row(fields: tuple[str, ...], values: tuple[Any, ...]) -> Row:
    if fields:
        return Row.from_values(fields, {n: i for i, n in enumerate(fields)}, values)
    return Row(*values)
