"""``Row`` and ``RowKind``: records with named fields, like PyFlink's ``pyflink.common.Row``.

A Row is read by name and by position:

    >>> from weir.core.row import Row, RowKind
    >>> r = Row(user="u1", clicks=3)
    >>> r.user, r["clicks"], r[0]
    ('u1', 3, 'u1')

A positional Row of strings is a row factory, as in PyFlink:

    >>> Person = Row("name", "age")
    >>> Person("Alice", 11)
    Row(name='Alice', age=11)

Every Row has a change kind (``RowKind``), ``INSERT`` unless set:

    >>> r.get_row_kind()
    <RowKind.INSERT: 0>

Where weir's Row differs from PyFlink's, and why:

* **Immutable.** A weir Row is a ``tuple`` (the engine hashes, compares and converts
  records to Arrow as tuples), so ``row[0] = x``, ``row["name"] = x`` and ``row.name = x``
  raise ``TypeError``. Build a new Row instead, e.g.
  ``Row(**{**row.as_dict(), "name": x})``. Only the metadata PyFlink also changes in place
  can change: ``set_row_kind`` and ``set_field_names``.
* **Equal to its values.** ``Row(a=1, b=2) == (1, 2)`` and ``== Row(x=1, y=2)``; the field
  names and the row kind take no part in ``==`` and ``hash`` (PyFlink compares both, and a
  PyFlink Row never equals a tuple).
* **Fields keep their order.** ``Row(b=1, a=2)`` has the fields ``b, a``, in the order
  given (some PyFlink versions sort keyword fields by name).
* **``in`` on a named Row** is True for a field name (as PyFlink documents) and also for a
  value (as PyFlink's code does); on a positional Row it tests the values.
* **A row factory takes exactly one value per field** (PyFlink accepts fewer and gives a row
  whose names and values do not line up), and only a positional Row of distinct strings is
  a factory.
* **repr** of a positional row is ``Row(1, 'a')`` (PyFlink: ``<Row(1, 'a')>``), and a kind
  other than INSERT shows first, as Flink prints it: ``-D Row(id=1)``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn


class RowKind(enum.Enum):
    """The kind of change a row stands for in a changelog, as in Flink.

    >>> RowKind.UPDATE_AFTER.value, RowKind.UPDATE_AFTER.short_string()
    (2, '+U')
    """

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def short_string(self) -> str:
        """The kind as Flink prints it before a row: ``+I``, ``-U``, ``+U`` or ``-D``.

        >>> [kind.short_string() for kind in RowKind]
        ['+I', '-U', '+U', '-D']
        """
        return _SHORT_STRINGS[self.value]


_SHORT_STRINGS = ("+I", "-U", "+U", "-D")
_KINDS = tuple(RowKind)


class Row(tuple[Any, ...]):
    """An immutable record. Positional rows have no names; named rows have ``_fields``.

    >>> Row(name="Alice", age=11)
    Row(name='Alice', age=11)
    >>> Row(name="Alice", age=11) == ("Alice", 11)
    True
    """

    _fields: tuple[str, ...]
    _index: dict[str, int]
    #: The class-level default; ``set_row_kind`` stores a kind on the instance.
    _row_kind: RowKind = RowKind.INSERT

    def __new__(cls, *values: Any, **named: Any) -> Row:
        if values and named:
            msg = "Row takes either positional or named values, not both"
            raise TypeError(msg)
        if named:
            row = tuple.__new__(cls, named.values())
            fields = tuple(named)
            state = row.__dict__
            state["_fields"] = fields
            state["_index"] = {name: i for i, name in enumerate(fields)}
        else:
            row = tuple.__new__(cls, values)
            state = row.__dict__
            state["_fields"] = ()
            state["_index"] = {}
        return row

    @classmethod
    def from_values(cls, fields: tuple[str, ...], index: dict[str, int],
                    values: Iterable[Any]) -> Row:
        """Build a named row sharing ``fields``/``index`` with its siblings (no copies).

        >>> fields, index = ("k", "v"), {"k": 0, "v": 1}
        >>> Row.from_values(fields, index, ["a", 1])
        Row(k='a', v=1)
        """
        row = tuple.__new__(cls, values)
        # Straight into the instance dict: __setattr__ refuses public names, and this is
        # the engine's hot path (every record decoded from Arrow).
        state = row.__dict__
        state["_fields"] = fields
        state["_index"] = index
        return row

    # -- reading ---------------------------------------------------------------------------

    def __getitem__(self, item: Any) -> Any:
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

    def __contains__(self, item: object) -> bool:
        """``x in row``: a field name of a named row, or one of the row's values.

        >>> row = Row(name="Alice", age=11)
        >>> "name" in row, "Alice" in row, "wrong_key" in row
        (True, True, False)
        >>> "name" in Row("Alice", 11)
        False
        """
        if isinstance(item, str) and item in self._index:
            return True
        return tuple.__contains__(self, item)

    def get_fields_by_names(self) -> list[str]:
        """The field names, as in PyFlink (empty for a positional row).

        >>> Row(user="u1", clicks=3).get_fields_by_names()
        ['user', 'clicks']
        """
        return list(self._fields)

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        """The named fields as a dict; ``recursive=True`` also turns nested Rows into dicts,
        including Rows in list and dict values, as PyFlink does.

        >>> row = Row(key=1, value=Row(name="a", age=2))
        >>> row.as_dict()
        {'key': 1, 'value': Row(name='a', age=2)}
        >>> row.as_dict(recursive=True)
        {'key': 1, 'value': {'name': 'a', 'age': 2}}
        """
        if not self._fields and len(self):
            msg = "a positional Row has no field names: build it as Row(name=value, ...)"
            raise TypeError(msg)
        if not recursive:
            return dict(zip(self._fields, self, strict=True))
        return {name: _as_plain(value) for name, value in zip(self._fields, self, strict=True)}

    # -- row kind and field names (metadata PyFlink also changes in place) ----------------

    def get_row_kind(self) -> RowKind:
        """The kind of change this row stands for; ``RowKind.INSERT`` unless set.

        >>> Row(id=1).get_row_kind()
        <RowKind.INSERT: 0>
        """
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        """Set this row's kind, in place as in PyFlink (the values stay; ``==`` and
        ``hash`` do not look at the kind).

        >>> row = Row(id=1)
        >>> row.set_row_kind(RowKind.DELETE)
        >>> row.get_row_kind(), row
        (<RowKind.DELETE: 3>, -D Row(id=1))
        """
        if not isinstance(row_kind, RowKind):
            msg = f"set_row_kind takes a RowKind, not {type(row_kind).__name__}: {row_kind!r}"
            raise TypeError(msg)
        self.__dict__["_row_kind"] = row_kind

    def set_field_names(self, field_names: Sequence[str]) -> None:
        """Name this row's fields, in place as in PyFlink (the values stay): one distinct
        string per value. A positional row becomes a named one.

        >>> row = Row("Alice", 11)
        >>> row.set_field_names(["name", "age"])
        >>> row.name, row
        ('Alice', Row(name='Alice', age=11))
        """
        fields = _field_names(field_names, "set_field_names")
        if len(fields) != len(self):
            msg = (f"set_field_names got {len(fields)} names for a row of {len(self)} "
                   f"values: {list(fields)}")
            raise ValueError(msg)
        state = self.__dict__
        state["_fields"] = fields
        state["_index"] = {name: i for i, name in enumerate(fields)}
        state.pop("_factory_layout", None)  # a named row is no longer a factory

    # -- the row factory ---------------------------------------------------------------------

    def __call__(self, *values: Any) -> Row:
        """Use a positional Row of field names as a factory of named rows, as in PyFlink.
        The new rows share the names (and take the factory's row kind).

        >>> Person = Row("name", "age")
        >>> alice = Person("Alice", 11)
        >>> alice.name, alice.age
        ('Alice', 11)
        """
        layout = self.__dict__.get("_factory_layout")
        if layout is None:
            if self._fields:
                msg = (f"only a Row of field names is a row factory, e.g. "
                       f"Person = Row('name', 'age'); {self!r} is a named row")
                raise TypeError(msg)
            fields = _field_names(self, f"{self!r} called as a row factory")
            layout = fields, {name: i for i, name in enumerate(fields)}
            self.__dict__["_factory_layout"] = layout
        fields, index = layout
        if len(values) != len(fields):
            msg = (f"Row({', '.join(map(repr, fields))}) takes {len(fields)} values, "
                   f"got {len(values)}: {values!r}")
            raise ValueError(msg)
        row = Row.from_values(fields, index, values)
        if self._row_kind is not RowKind.INSERT:
            row.__dict__["_row_kind"] = self._row_kind
        return row

    # -- immutability ------------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # internal state: _fields, _index, _row_kind
            object.__setattr__(self, name, value)
            return
        self._refuse_assignment(name)

    def __delattr__(self, name: str) -> None:
        if name.startswith("_"):
            object.__delattr__(self, name)
            return
        self._refuse_assignment(name)

    def __setitem__(self, key: Any, value: Any) -> NoReturn:
        self._refuse_assignment(key)

    def __delitem__(self, key: Any) -> NoReturn:
        self._refuse_assignment(key)

    def _refuse_assignment(self, key: Any) -> NoReturn:
        position = key if isinstance(key, int) and -len(self) <= key < len(self) else 0
        position %= max(len(self), 1)
        if self._fields:
            name = key if isinstance(key, str) else self._fields[position]
            fix = f"Row(**{{**row.as_dict(), {name!r}: new_value}})"
        else:
            fix = f"Row(*row[:{position}], new_value, *row[{position + 1}:])"
        msg = (f"a weir Row is immutable (a tuple), unlike a PyFlink Row: {key!r} cannot be "
               f"set or deleted; build a new Row instead, e.g. {fix}")
        raise TypeError(msg)

    # -- pickling and printing ---------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        kind = self._row_kind
        if kind is RowKind.INSERT:  # the usual case: pickles as before row kinds existed
            return (_rebuild_row, (self._fields, tuple(self)))
        return (_rebuild_row, (self._fields, tuple(self), kind.value))

    def __repr__(self) -> str:
        if self._fields:
            inner = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self, strict=True))
        else:
            inner = ", ".join(repr(v) for v in self)
        kind = self._row_kind
        if kind is RowKind.INSERT:
            return f"Row({inner})"
        return f"{kind.short_string()} Row({inner})"


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


def _as_plain(value: Any) -> Any:
    """``as_dict(recursive=True)`` of one value: Rows, and Rows in lists and dicts, as dicts."""
    if isinstance(value, Row):
        return value.as_dict(recursive=True)
    if isinstance(value, list):
        return [_as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_plain(v) for k, v in value.items()}
    return value


def _field_names(names: Iterable[Any], what: str) -> tuple[str, ...]:
    """``names`` as a tuple of distinct strings, or a TypeError/ValueError naming ``what``."""
    if isinstance(names, str):
        msg = f"{what} takes a sequence of field names, not one string: {names!r}"
        raise TypeError(msg)
    fields = tuple(names)
    wrong = [name for name in fields if not isinstance(name, str)]
    if wrong:
        msg = f"{what} needs field names that are strings; got {wrong[0]!r} in {fields!r}"
        raise TypeError(msg)
    if len(set(fields)) != len(fields):
        duplicates = sorted({name for name in fields if fields.count(name) > 1})
        msg = f"{what} needs distinct field names; repeated: {', '.join(duplicates)}"
        raise ValueError(msg)
    return fields


def _rebuild_row(fields: tuple[str, ...], values: tuple[Any, ...], kind: int = 0) -> Row:
    """Unpickle a Row (``kind`` is a ``RowKind`` value; pickles without it are INSERTs)."""
    if fields:
        row = Row.from_values(fields, {n: i for i, n in enumerate(fields)}, values)
    else:
        row = Row(*values)
    if kind:
        row.__dict__["_row_kind"] = _KINDS[kind]
    return row
