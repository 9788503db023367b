"""Type information (PyFlink's ``pyflink.common.typeinfo``): ``Types`` and
``TypeInformation`` (:mod:`weir.core.types`, which the runtime uses to encode records),
and PyFlink's type classes. Calling a type class builds the same :class:`TypeInformation`
as the ``Types`` method of that type, and ``isinstance`` tells a type's class, as in
PyFlink.

Example:
    >>> row = RowTypeInfo([Types.INT(), Types.STRING()], ["id", "name"])
    >>> row == Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()]), str(row)
    (True, 'RowTypeInfo(id: Integer, name: String)')
    >>> isinstance(Types.LIST(Types.LONG()), ListTypeInfo), str(Types.LIST(Types.LONG()))
    (True, 'ListTypeInfo<Long>')
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

from weir.core.types import KIND_PICKLE, KIND_ROW, KIND_SCALAR, KIND_TUPLE, TypeInformation, Types
from weir.unsupported import refusing

__all__ = ["BasicArrayTypeInfo", "BasicType", "BasicTypeInfo", "DateTypeInfo",
           "InstantTypeInfo", "ListTypeInfo", "LocalTimeTypeInfo", "MapTypeInfo",
           "ObjectArrayTypeInfo", "PickledBytesTypeInfo", "PrimitiveArrayTypeInfo",
           "RowTypeInfo", "SqlTimeTypeInfo", "TimeTypeInfo", "TimestampTypeInfo",
           "TupleTypeInfo", "TypeInformation", "Types"]

__unsupported__ = {
    "ExternalTypeInfo": "it carries Table API data types; declare records with Types.*",
}
__getattr__ = refusing(__name__, __unsupported__)


class _PyFlinkTypeClass(type):
    """The metaclass of PyFlink's type classes: calling one builds a
    :class:`TypeInformation` (``_make``), and ``isinstance`` asks whether a type is of that
    class (``_describes``). weir has one TypeInformation class, a frozen dataclass that
    travels pickled in job graphs; these names only select and recognise its values."""

    _make: Callable[..., TypeInformation]
    _describes: Callable[[TypeInformation], bool]

    def __call__(cls, *args: Any, **kwargs: Any) -> TypeInformation:
        return cls._make(*args, **kwargs)

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, TypeInformation) and cls._describes(instance)


def _scalar_named(*names: str) -> Callable[[TypeInformation], bool]:
    return lambda t: t.kind == KIND_SCALAR and str(t) in names


def _scalar_of(pyflink_class: str) -> Callable[[TypeInformation], bool]:
    return lambda t: t.kind == KIND_SCALAR and str(t).startswith(pyflink_class + "<")


def _no_constructor(name: str, instead: str) -> Callable[..., TypeInformation]:
    def make(*args: Any, **kwargs: Any) -> TypeInformation:
        msg = f"{name}() makes no type: use {instead}"
        raise TypeError(msg)

    return make


class BasicType(enum.Enum):
    """PyFlink's basic types, by the names it prints them with."""

    STRING = "String"
    BYTE = "Byte"
    BOOLEAN = "Boolean"
    SHORT = "Short"
    INT = "Integer"
    LONG = "Long"
    FLOAT = "Float"
    DOUBLE = "Double"
    CHAR = "Char"
    BIG_INT = "BigInteger"
    BIG_DEC = "BigDecimal"
    INSTANT = "Instant"


def _basic_type(basic_type: BasicType) -> TypeInformation:
    make: Callable[[], TypeInformation] = getattr(Types, BasicType(basic_type).name)
    return make()


class BasicTypeInfo(metaclass=_PyFlinkTypeClass):
    """Strings, numbers, booleans, chars and instants: ``BasicTypeInfo(BasicType.INT)``
    or ``BasicTypeInfo.INT_TYPE_INFO()`` is ``Types.INT()``."""

    _make = staticmethod(_basic_type)
    _describes = staticmethod(_scalar_named(*(t.value for t in BasicType)))

    @staticmethod
    def STRING_TYPE_INFO() -> TypeInformation:  # noqa: N802 - PyFlink's names
        return Types.STRING()

    @staticmethod
    def BOOLEAN_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.BOOLEAN()

    @staticmethod
    def BYTE_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.BYTE()

    @staticmethod
    def SHORT_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.SHORT()

    @staticmethod
    def INT_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.INT()

    @staticmethod
    def LONG_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.LONG()

    @staticmethod
    def FLOAT_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.FLOAT()

    @staticmethod
    def DOUBLE_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.DOUBLE()

    @staticmethod
    def CHAR_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.CHAR()

    @staticmethod
    def BIG_INT_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.BIG_INT()

    @staticmethod
    def BIG_DEC_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.BIG_DEC()

    @staticmethod
    def INSTANT_TYPE_INFO() -> TypeInformation:  # noqa: N802
        return Types.INSTANT()


class InstantTypeInfo(metaclass=_PyFlinkTypeClass):
    """``Types.INSTANT()`` (a basic type too, as in PyFlink)."""

    _make = staticmethod(lambda basic_type=BasicType.INSTANT: Types.INSTANT())
    _describes = staticmethod(_scalar_named("Instant"))


class SqlTimeTypeInfo(metaclass=_PyFlinkTypeClass):
    """``SqlTimeTypeInfo.DATE()``, ``TIME()`` and ``TIMESTAMP()``: ``Types.SQL_DATE()``,
    ``SQL_TIME()`` and ``SQL_TIMESTAMP()``."""

    _make = staticmethod(_no_constructor("SqlTimeTypeInfo", "SqlTimeTypeInfo.DATE() and "
                                                            "friends"))
    _describes = staticmethod(_scalar_named("DateTypeInfo", "TimeTypeInfo",
                                            "TimestampTypeInfo"))

    @staticmethod
    def DATE() -> TypeInformation:  # noqa: N802 - PyFlink's names
        return Types.SQL_DATE()

    @staticmethod
    def TIME() -> TypeInformation:  # noqa: N802
        return Types.SQL_TIME()

    @staticmethod
    def TIMESTAMP() -> TypeInformation:  # noqa: N802
        return Types.SQL_TIMESTAMP()


class LocalTimeTypeInfo(metaclass=_PyFlinkTypeClass):
    """``LocalTimeTypeInfo.LOCAL_DATE()``, ``LOCAL_TIME()`` and ``LOCAL_DATE_TIME()``:
    ``Types.LOCAL_DATE()`` and friends (stored as the SQL ones are)."""

    _make = staticmethod(_no_constructor("LocalTimeTypeInfo", "LocalTimeTypeInfo.LOCAL_DATE() "
                                                              "and friends"))
    _describes = staticmethod(_scalar_named("LocalDate", "LocalTime", "LocalDateTime"))

    @staticmethod
    def LOCAL_DATE() -> TypeInformation:  # noqa: N802 - PyFlink's names
        return Types.LOCAL_DATE()

    @staticmethod
    def LOCAL_TIME() -> TypeInformation:  # noqa: N802
        return Types.LOCAL_TIME()

    @staticmethod
    def LOCAL_DATE_TIME() -> TypeInformation:  # noqa: N802
        return Types.LOCAL_DATE_TIME()


def _type_class(name: str, make: Callable[..., TypeInformation],
                describes: Callable[[TypeInformation], bool], doc: str) -> _PyFlinkTypeClass:
    """A PyFlink type class whose call is ``make`` and whose instances ``describes``."""
    return _PyFlinkTypeClass(name, (), {"__doc__": doc, "_make": staticmethod(make),
                                        "_describes": staticmethod(describes),
                                        "__module__": __name__})


DateTypeInfo = _type_class(
    "DateTypeInfo", Types.SQL_DATE, _scalar_named("DateTypeInfo"),
    "``Types.SQL_DATE()``.")
TimeTypeInfo = _type_class(
    "TimeTypeInfo", Types.SQL_TIME, _scalar_named("TimeTypeInfo"),
    "``Types.SQL_TIME()``.")
TimestampTypeInfo = _type_class(
    "TimestampTypeInfo", Types.SQL_TIMESTAMP, _scalar_named("TimestampTypeInfo"),
    "``Types.SQL_TIMESTAMP()``.")
PrimitiveArrayTypeInfo = _type_class(
    "PrimitiveArrayTypeInfo", Types.PRIMITIVE_ARRAY, _scalar_of("PrimitiveArrayTypeInfo"),
    "``PrimitiveArrayTypeInfo(element_type)`` is ``Types.PRIMITIVE_ARRAY(element_type)``.")
BasicArrayTypeInfo = _type_class(
    "BasicArrayTypeInfo", Types.BASIC_ARRAY, _scalar_of("BasicArrayTypeInfo"),
    "``BasicArrayTypeInfo(element_type)`` is ``Types.BASIC_ARRAY(element_type)``.")
ObjectArrayTypeInfo = _type_class(
    "ObjectArrayTypeInfo", Types.OBJECT_ARRAY, _scalar_of("ObjectArrayTypeInfo"),
    "``ObjectArrayTypeInfo(element_type)`` is ``Types.OBJECT_ARRAY(element_type)``.")
ListTypeInfo = _type_class(
    "ListTypeInfo", Types.LIST, _scalar_of("ListTypeInfo"),
    "``ListTypeInfo(element_type)`` is ``Types.LIST(element_type)``.")
MapTypeInfo = _type_class(
    "MapTypeInfo", Types.MAP, _scalar_of("MapTypeInfo"),
    "``MapTypeInfo(key_type_info, value_type_info)`` is ``Types.MAP(key, value)``.")
PickledBytesTypeInfo = _type_class(
    "PickledBytesTypeInfo", Types.PICKLED_BYTE_ARRAY, lambda t: t.kind == KIND_PICKLE,
    "``PickledBytesTypeInfo()`` is ``Types.PICKLED_BYTE_ARRAY()``.")


def _row(field_types: Sequence[TypeInformation],
         field_names: Sequence[str] | None = None) -> TypeInformation:
    if field_names is None:
        return Types.ROW(field_types)
    return Types.ROW_NAMED(field_names, field_types)


class RowTypeInfo(metaclass=_PyFlinkTypeClass):
    """``RowTypeInfo(field_types, field_names=None)`` is
    ``Types.ROW_NAMED(field_names, field_types)``, or ``Types.ROW(field_types)`` without
    names."""

    _make = staticmethod(_row)
    _describes = staticmethod(lambda t: t.kind == KIND_ROW)


class TupleTypeInfo(metaclass=_PyFlinkTypeClass):
    """``TupleTypeInfo(field_types)`` is ``Types.TUPLE(field_types)``."""

    _make = staticmethod(Types.TUPLE)
    _describes = staticmethod(lambda t: t.kind == KIND_TUPLE)
