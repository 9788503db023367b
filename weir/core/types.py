"""Type information for record streams (``output_type=``), mapped onto Arrow types.

Names follow PyFlink's ``Types`` so job code reads the same.

Example:
    >>> from weir import Types
    >>> Types.TUPLE([Types.STRING(), Types.LONG()]).arrow_schema().names
    ['f0', 'f1']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
    """The Arrow type of a record, and how its rows become Python values."""

    arrow_type: pa.DataType | None
    kind: bytes = KIND_SCALAR
    fields: tuple[tuple[str, TypeInformation], ...] = ()

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


class Types:
    """Factory of :class:`TypeInformation`, named as PyFlink's ``Types``."""

    @staticmethod
    def STRING() -> TypeInformation:  # noqa: N802 - PyFlink's names
        return TypeInformation(pa.string())

    @staticmethod
    def LONG() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.int64())

    @staticmethod
    def INT() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.int32())

    @staticmethod
    def DOUBLE() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.float64())

    @staticmethod
    def FLOAT() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.float32())

    @staticmethod
    def BOOLEAN() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.bool_())

    @staticmethod
    def BYTES() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.binary())

    @staticmethod
    def SHORT() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.int16())

    @staticmethod
    def BYTE() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.int8())

    @staticmethod
    def CHAR() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.string())

    @staticmethod
    def BIG_INT() -> TypeInformation:  # noqa: N802
        """Python ints beyond 64 bits travel pickled; in a typed column, up to 64 bits."""
        return TypeInformation(pa.int64())

    @staticmethod
    def BIG_DEC() -> TypeInformation:  # noqa: N802
        """``decimal.Decimal`` values (38 digits, 18 after the point)."""
        return TypeInformation(pa.decimal128(38, 18))

    @staticmethod
    def SQL_DATE() -> TypeInformation:  # noqa: N802
        """``datetime.date`` values."""
        return TypeInformation(pa.date32())

    @staticmethod
    def SQL_TIME() -> TypeInformation:  # noqa: N802
        """``datetime.time`` values."""
        return TypeInformation(pa.time64("us"))

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:  # noqa: N802
        """``datetime.datetime`` values without a time zone."""
        return TypeInformation(pa.timestamp("us"))

    @staticmethod
    def INSTANT() -> TypeInformation:  # noqa: N802
        """Points in time: ``datetime.datetime`` values in UTC."""
        return TypeInformation(pa.timestamp("us", tz="UTC"))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        """Lists of a basic type (PyFlink's arrays of primitives)."""
        return TypeInformation(pa.list_(_arrow(element_type, "PRIMITIVE_ARRAY")))

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.list_(_arrow(element_type, "BASIC_ARRAY")))

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.list_(_arrow(element_type, "OBJECT_ARRAY")))

    @staticmethod
    def LIST(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        """Python lists of ``element_type``."""
        return TypeInformation(pa.list_(_arrow(element_type, "LIST")))

    @staticmethod
    def MAP(key_type: TypeInformation, value_type: TypeInformation) -> TypeInformation:  # noqa: N802
        """Python dicts from ``key_type`` to ``value_type``."""
        return TypeInformation(pa.map_(_arrow(key_type, "MAP"), _arrow(value_type, "MAP")))

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
        return Types.ROW_NAMED([f"f{i}" for i in range(len(types))], types)

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
