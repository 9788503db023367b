"""Type information for record streams (``output_type=``), mapped onto Arrow types.

Names follow PyFlink's ``Types`` so job code reads the same; PyFlink's type classes
(``RowTypeInfo``, ``ListTypeInfo``, ...) are in :mod:`weir.common.typeinfo`. ``str()``
prints a type as PyFlink does.

Example:
    >>> Types.TUPLE([Types.STRING(), Types.LONG()]).arrow_schema().names
    ['f0', 'f1']
    >>> str(Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()]))
    'RowTypeInfo(id: Integer, name: String)'
    >>> str(Types.LIST(Types.LONG()))
    'ListTypeInfo<Long>'
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from weir.core.row import Row, RowKind

#: How a batch's rows map back to Python values; stored in the Arrow schema metadata.
KIND_KEY = b"weir.kind"
KIND_SCALAR = b"scalar"
KIND_TUPLE = b"tuple"
KIND_DICT = b"dict"
KIND_ROW = b"row"
KIND_PICKLE = b"pickle"


@dataclass(frozen=True)
class TypeInformation:
    """The Arrow type of a record, and how its rows become Python values.

    ``label`` is how PyFlink prints the type, kept where the Arrow type cannot tell
    (``Types.CHAR()`` and ``Types.STRING()`` are both Arrow strings; an array of
    ``PRIMITIVE_ARRAY`` and a ``LIST`` are both Arrow lists). It takes no part in equality:
    types that make the same Arrow columns are equal.
    """

    arrow_type: pa.DataType | None
    kind: bytes = KIND_SCALAR
    fields: tuple[tuple[str, TypeInformation], ...] = ()
    label: str = field(default="", compare=False)

    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of a batch of records of this type."""
        meta = {KIND_KEY: self.kind}
        if self.kind == KIND_PICKLE:
            return pa.schema([("_pickled", pa.binary())], metadata=meta)
        if self.kind == KIND_SCALAR:
            return pa.schema([("f0", self.arrow_type)], metadata=meta)
        return pa.schema([(name, t.arrow_type) for name, t in self.fields], metadata=meta)

    @property
    def columnar(self) -> bool:
        """Whether records of this type map to Arrow columns: not for pickled values, nor
        for rows or tuples with a field of such a type (a nested row, tuple or pickle),
        which travel pickled whole and come back as the same Python objects."""
        if self.kind == KIND_PICKLE:
            return False
        if self.kind == KIND_SCALAR:
            return self.arrow_type is not None
        return all(t.arrow_type is not None for _, t in self.fields)

    @cached_property
    def field_names(self) -> tuple[str, ...]:
        """The names of a row's (or tuple's) fields, one shared tuple per type.

        >>> Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()]).field_names
        ('id', 'name')
        """
        return tuple(name for name, _ in self.fields)

    @cached_property
    def field_index(self) -> dict[str, int]:
        """Field name -> position, shared by every Row of this type."""
        return {name: i for i, name in enumerate(self.field_names)}

    # -- PyFlink's RowTypeInfo and TupleTypeInfo methods -----------------------------------

    def get_field_names(self) -> list[str]:
        """The field names of a row or tuple type (a tuple's are ``f0``, ``f1``, ...).

        >>> Types.ROW([Types.STRING(), Types.INT()]).get_field_names()
        ['f0', 'f1']
        """
        return list(self._composite("get_field_names").field_names)

    def get_field_types(self) -> list[TypeInformation]:
        """The field types of a row or tuple type.

        >>> [str(t) for t in Types.TUPLE([Types.STRING(), Types.INT()]).get_field_types()]
        ['String', 'Integer']
        """
        return [t for _, t in self._composite("get_field_types").fields]

    def get_field_index(self, field_name: str) -> int:
        """The position of a row's field, -1 when it has no such field (as PyFlink's)."""
        return self._composite("get_field_index").field_index.get(field_name, -1)

    def _composite(self, method: str) -> TypeInformation:
        if self.kind not in (KIND_ROW, KIND_TUPLE, KIND_DICT):
            msg = f"{method}() is for row and tuple types; {self} has no fields"
            raise TypeError(msg)
        return self

    def __str__(self) -> str:
        """The type as PyFlink prints it: ``Long``, ``RowTypeInfo(id: Integer)``,
        ``TupleTypeInfo(String, Integer)``, ``ListTypeInfo<Double>``, ..."""
        if self.label:
            return self.label
        if self.kind == KIND_PICKLE:
            return "PickledByteArrayTypeInfo"
        if self.kind == KIND_SCALAR:
            return _arrow_name(self.arrow_type)
        if self.kind == KIND_TUPLE:
            return f"TupleTypeInfo({', '.join(str(t) for _, t in self.fields)})"
        named = ", ".join(f"{name}: {t}" for name, t in self.fields)
        return f"RowTypeInfo({named})" if self.kind == KIND_ROW else f"MAP_RECORD({named})"

    __repr__ = __str__


def _arrow_name(arrow_type: pa.DataType | None) -> str:
    """PyFlink's name of the type of values stored as ``arrow_type``."""
    if arrow_type is None:
        return "PickledByteArrayTypeInfo"
    if pa.types.is_list(arrow_type):
        return f"ListTypeInfo<{_arrow_name(arrow_type.value_type)}>"
    if pa.types.is_map(arrow_type):
        return f"MapTypeInfo<{_arrow_name(arrow_type.key_type)}, " \
               f"{_arrow_name(arrow_type.item_type)}>"
    if pa.types.is_decimal(arrow_type) or arrow_type == BIG_DECIMAL:
        return "BigDecimal"
    if pa.types.is_timestamp(arrow_type):
        return "Instant" if arrow_type.tz is not None else "TimestampTypeInfo"
    if pa.types.is_time(arrow_type):
        return "TimeTypeInfo"
    if pa.types.is_date(arrow_type):
        return "DateTypeInfo"
    return _ARROW_NAMES.get(arrow_type, str(arrow_type))


_ARROW_NAMES: dict[pa.DataType, str] = {
    pa.string(): "String", pa.large_string(): "String", pa.bool_(): "Boolean",
    pa.int8(): "Byte", pa.int16(): "Short", pa.int32(): "Integer", pa.int64(): "Long",
    pa.float32(): "Float", pa.float64(): "Double", pa.binary(): "PrimitiveArrayTypeInfo<Byte>",
}


def _basic(arrow_type: pa.DataType, name: str) -> TypeInformation:
    return TypeInformation(arrow_type, label=name)


class Types:
    """Factory of :class:`TypeInformation`, named as PyFlink's ``Types``."""

    @staticmethod
    def STRING() -> TypeInformation:  # noqa: N802 - PyFlink's names
        return _basic(pa.string(), "String")

    @staticmethod
    def LONG() -> TypeInformation:  # noqa: N802
        return _basic(pa.int64(), "Long")

    @staticmethod
    def INT() -> TypeInformation:  # noqa: N802
        return _basic(pa.int32(), "Integer")

    @staticmethod
    def DOUBLE() -> TypeInformation:  # noqa: N802
        return _basic(pa.float64(), "Double")

    @staticmethod
    def FLOAT() -> TypeInformation:  # noqa: N802
        return _basic(pa.float32(), "Float")

    @staticmethod
    def BOOLEAN() -> TypeInformation:  # noqa: N802
        return _basic(pa.bool_(), "Boolean")

    @staticmethod
    def BYTES() -> TypeInformation:  # noqa: N802
        """``bytes`` values (PyFlink's byte arrays)."""
        return _basic(pa.binary(), "PrimitiveArrayTypeInfo<Byte>")

    @staticmethod
    def SHORT() -> TypeInformation:  # noqa: N802
        return _basic(pa.int16(), "Short")

    @staticmethod
    def BYTE() -> TypeInformation:  # noqa: N802
        return _basic(pa.int8(), "Byte")

    @staticmethod
    def CHAR() -> TypeInformation:  # noqa: N802
        return _basic(pa.string(), "Char")

    @staticmethod
    def BIG_INT() -> TypeInformation:  # noqa: N802
        """Python ints beyond 64 bits travel pickled; in a typed column, up to 64 bits."""
        return _basic(pa.int64(), "BigInteger")

    @staticmethod
    def BIG_DEC() -> TypeInformation:  # noqa: N802
        """``decimal.Decimal`` values, each kept as it is: its digits and its scale, of any
        precision (Java's ``BigDecimal`` in PyFlink). Ints are taken as Decimals."""
        return _basic(BIG_DECIMAL, "BigDecimal")

    @staticmethod
    def SQL_DATE() -> TypeInformation:  # noqa: N802
        """``datetime.date`` values."""
        return _basic(pa.date32(), "DateTypeInfo")

    @staticmethod
    def SQL_TIME() -> TypeInformation:  # noqa: N802
        """``datetime.time`` values."""
        return _basic(pa.time64("us"), "TimeTypeInfo")

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:  # noqa: N802
        """``datetime.datetime`` values without a time zone."""
        return _basic(pa.timestamp("us"), "TimestampTypeInfo")

    @staticmethod
    def INSTANT() -> TypeInformation:  # noqa: N802
        """Points in time: ``datetime.datetime`` values in UTC."""
        return _basic(pa.timestamp("us", tz="UTC"), "Instant")

    @staticmethod
    def LOCAL_DATE() -> TypeInformation:  # noqa: N802
        """``datetime.date`` values (Java's LocalDate in PyFlink)."""
        return _basic(pa.date32(), "LocalDate")

    @staticmethod
    def LOCAL_TIME() -> TypeInformation:  # noqa: N802
        """``datetime.time`` values (Java's LocalTime in PyFlink)."""
        return _basic(pa.time64("us"), "LocalTime")

    @staticmethod
    def LOCAL_DATE_TIME() -> TypeInformation:  # noqa: N802
        """``datetime.datetime`` values without a time zone (Java's LocalDateTime)."""
        return _basic(pa.timestamp("us"), "LocalDateTime")

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        """Lists of a basic type (PyFlink's arrays of primitives)."""
        return _listing("PrimitiveArrayTypeInfo", "PRIMITIVE_ARRAY", element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        return _listing("BasicArrayTypeInfo", "BASIC_ARRAY", element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        return _listing("ObjectArrayTypeInfo", "OBJECT_ARRAY", element_type)

    @staticmethod
    def LIST(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        """Python lists of ``element_type``."""
        return _listing("ListTypeInfo", "LIST", element_type)

    @staticmethod
    def MAP(key_type: TypeInformation, value_type: TypeInformation) -> TypeInformation:  # noqa: N802
        """Python dicts from ``key_type`` to ``value_type``."""
        return TypeInformation(pa.map_(_arrow(key_type, "MAP"), _arrow(value_type, "MAP")),
                               label=f"MapTypeInfo<{key_type}, {value_type}>")

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:  # noqa: N802
        return TypeInformation(None, KIND_PICKLE)

    @staticmethod
    def TUPLE(types: Sequence[TypeInformation]) -> TypeInformation:  # noqa: N802
        fields = tuple((f"f{i}", t) for i, t in enumerate(types))
        return TypeInformation(None, KIND_TUPLE, fields)

    @staticmethod
    def ROW(types: Sequence[TypeInformation]) -> TypeInformation:  # noqa: N802
        """Rows with positional fields (named ``f0``, ``f1``, ...)."""
        row = Types.ROW_NAMED([f"f{i}" for i in range(len(types))], types)
        # PyFlink prints a row declared without names by its field types only.
        return TypeInformation(None, KIND_ROW, row.fields,
                               label=f"RowTypeInfo({', '.join(map(str, types))})")

    @staticmethod
    def ROW_NAMED(names: Sequence[str], types: Sequence[TypeInformation]) -> TypeInformation:  # noqa: N802
        if len(names) != len(types):
            msg = "ROW_NAMED needs as many names as types"
            raise ValueError(msg)
        return TypeInformation(None, KIND_ROW, tuple(zip(names, types, strict=True)))

    @staticmethod
    def MAP_RECORD(names: Sequence[str], types: Sequence[TypeInformation]) -> TypeInformation:  # noqa: N802
        """Dict records with these keys."""
        return TypeInformation(None, KIND_DICT, tuple(zip(names, types, strict=True)))


def _arrow(type_info: TypeInformation, where: str) -> pa.DataType:
    if type_info.arrow_type is None:
        msg = f"Types.{where} takes basic element types (not rows, tuples or pickled values)"
        raise TypeError(msg)
    return type_info.arrow_type


def _listing(pyflink_class: str, where: str, element_type: TypeInformation) -> TypeInformation:
    return TypeInformation(pa.list_(_arrow(element_type, where)),
                           label=f"{pyflink_class}<{element_type}>")


# -- Decimals of any precision and scale -----------------------------------------------------

class _BigDecimalScalar(pa.ExtensionScalar):  # type: ignore[misc]  # pyarrow is untyped
    def as_py(self, *args: Any, **kwargs: Any) -> decimal.Decimal | None:
        text = self.value
        return None if text is None else decimal.Decimal(text.as_py())


class BigDecimalType(pa.ExtensionType):  # type: ignore[misc]  # pyarrow is untyped
    """The Arrow type of ``Types.BIG_DEC()`` values: each Decimal as its text (a string
    column underneath), so that it comes back with its own scale and digits, as Java's
    ``BigDecimal`` keeps them in PyFlink. A ``decimal128`` column has one scale for all its
    values (``Decimal('1')`` would come back as ``Decimal('1.000000000000000000')``) and at
    most 38 digits."""

    def __init__(self) -> None:
        super().__init__(pa.string(), "weir.big_decimal")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType,
                                  serialized: bytes) -> BigDecimalType:
        return cls()

    def __arrow_ext_scalar_class__(self) -> type[pa.ExtensionScalar]:
        return _BigDecimalScalar

    def __reduce__(self) -> tuple[type[BigDecimalType], tuple[()]]:
        return BigDecimalType, ()

    def __hash__(self) -> int:
        # Arrow's extension types are not hashable; types (and TypeInformation) are keys.
        return hash(self.extension_name)


BIG_DECIMAL = BigDecimalType()
try:
    # Batches that cross a process boundary (Arrow IPC) come back with this type.
    pa.register_extension_type(BIG_DECIMAL)
except pa.ArrowKeyError:  # registered already (the module was loaded twice)
    pass


def _decimal_text(value: Any) -> str:
    if isinstance(value, decimal.Decimal) or (type(value) is int):
        return str(value)
    msg = f"int or Decimal object expected, got {type(value).__name__}"
    raise TypeError(msg)


@lru_cache(maxsize=256)
def _storage_encoder(arrow_type: pa.DataType) -> tuple[pa.DataType, Callable[[Any], Any]] | None:
    """For a type with Decimals in it, its storage type (strings for the Decimals) and the
    function making a Python value of the type one of the storage type; None otherwise."""
    if arrow_type == BIG_DECIMAL:
        return pa.string(), _decimal_text
    if pa.types.is_list(arrow_type):
        inner = _storage_encoder(arrow_type.value_type)
        if inner is None:
            return None
        element_storage, element = inner
        return pa.list_(element_storage), lambda v: [
            None if e is None else element(e) for e in v]
    if pa.types.is_map(arrow_type):
        keys, items = _storage_encoder(arrow_type.key_type), _storage_encoder(arrow_type.item_type)
        if keys is None and items is None:
            return None
        key_storage, key = keys or (arrow_type.key_type, _same)
        item_storage, item = items or (arrow_type.item_type, _same)
        return pa.map_(key_storage, item_storage), lambda v: [
            (key(k), None if x is None else item(x))
            for k, x in (v.items() if isinstance(v, dict) else v)]
    return None


def _same(value: Any) -> Any:
    return value


def arrow_array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """The Arrow array of ``values`` of a declared type: ``pa.array`` but for types with
    Decimals (:class:`BigDecimalType`), which are built from their storage.

    >>> import decimal
    >>> arrow_array([decimal.Decimal("1.50"), None], Types.BIG_DEC().arrow_type).to_pylist()
    [Decimal('1.50'), None]
    """
    encoder = _storage_encoder(arrow_type)
    if encoder is None:
        return pa.array(values, type=arrow_type)
    storage, encode = encoder
    return pa.array([None if v is None else encode(v) for v in values],
                    type=storage).cast(arrow_type)


# -- PyFlink's conversion of declared collection values ----------------------------------------

#: Declared types whose Java values are narrower than a Python number: PyFlink's
#: ``from_collection`` stores a value as Java's ``byteValue()``, ``shortValue()``,
#: ``intValue()`` or ``floatValue()`` does (wrapping ints, rounding floats to 32 bits).
_INT_BITS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32}


def _wrap(bits: int) -> Callable[[Any], Any]:
    half, whole = 1 << (bits - 1), 1 << bits

    def wrap(value: Any) -> Any:
        if isinstance(value, int | np.integer) and not isinstance(value, bool):
            return (int(value) + half) % whole - half
        return value
    return wrap


def _single(value: Any) -> Any:
    if isinstance(value, float | int | np.number) and not isinstance(value, bool):
        with np.errstate(over="ignore"):
            return float(np.float32(value))
    return value


def _arrow_converter(arrow_type: pa.DataType | None) -> Callable[[Any], Any] | None:
    if arrow_type is None:
        return None
    bits = _INT_BITS.get(arrow_type)
    if bits is not None:
        return _wrap(bits)
    if arrow_type == pa.float32():
        return _single
    if pa.types.is_list(arrow_type):
        element = _arrow_converter(arrow_type.value_type)
        if element is None:
            return None
        return lambda v: v if not isinstance(v, list | tuple) else [
            None if e is None else element(e) for e in v]
    if pa.types.is_map(arrow_type):
        key = _arrow_converter(arrow_type.key_type) or _same
        item = _arrow_converter(arrow_type.item_type) or _same
        if key is _same and item is _same:
            return None
        return lambda v: v if not isinstance(v, dict) else {
            key(k): None if x is None else item(x) for k, x in v.items()}
    return None


def collection_converter(type_info: TypeInformation) -> Callable[[Any], Any] | None:
    """What PyFlink's ``from_collection(items, type_info)`` does to each item on its way
    into Java: a BYTE, SHORT or INT value wraps to 8, 16 or 32 bits (43878 as a SHORT is
    -21658), a FLOAT value is rounded to 32 bits, in rows, tuples, lists and maps too.
    None when the type has no such values (the items stay as they are).

    >>> convert = collection_converter(Types.TUPLE([Types.SHORT(), Types.INT(), Types.LONG()]))
    >>> convert((43878, 9147483648, 9147483648))
    (-21658, 557549056, 9147483648)
    """
    if type_info.kind == KIND_SCALAR:
        return _arrow_converter(type_info.arrow_type)
    if type_info.kind not in (KIND_ROW, KIND_TUPLE):
        return None
    fields = [_arrow_converter(t.arrow_type) if t.kind == KIND_SCALAR
              else collection_converter(t) for _, t in type_info.fields]
    if all(f is None for f in fields):
        return None
    converters = [f or _same for f in fields]

    def convert(record: Any) -> Any:
        if not isinstance(record, tuple | list) or len(record) != len(converters):
            return record  # not of the type: the encoder names it
        values = [None if v is None else c(v)
                  for c, v in zip(converters, record, strict=True)]
        if isinstance(record, Row):
            row = Row.from_values(record._fields, record._index, values) if record._fields \
                else Row(*values)
            if record._row_kind is not RowKind.INSERT:
                row.set_row_kind(record._row_kind)
            return row
        return values if isinstance(record, list) else tuple(values)
    return convert
