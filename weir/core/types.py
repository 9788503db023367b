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

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

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
    if pa.types.is_decimal(arrow_type):
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
        """``decimal.Decimal`` values (38 digits, 18 after the point)."""
        return _basic(pa.decimal128(38, 18), "BigDecimal")

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
