"""The print sink (``DataStream.print()``): :class:`PrintSinkOperator`, and how it writes a
record: as PyFlink does, which is by the record's declared type.

A stream without a declared type (PyFlink's pickled records) prints ``str(record)``. A typed
stream's records are Java objects in PyFlink, printed with Java's ``toString``: a
``Types.TUPLE`` as ``(a,1)``, a ``Types.ROW`` as ``+I[a, 1]``, ``None`` as ``null``,
booleans as ``true``/``false``, doubles as Java writes them (``1.0E-5``), lists as
``[a, b]`` and maps as ``{k=v}``. Output compared line by line with PyFlink's then matches.

Example:
    >>> from weir.core.types import Types
    >>> pair = Types.TUPLE([Types.STRING(), Types.INT()])
    >>> flink_string(("hi", 9), pair)
    '(hi,9)'
    >>> flink_string(("hi", None), Types.ROW([Types.STRING(), Types.BOOLEAN()]))
    '+I[hi, null]'
    >>> flink_string(("hi", 9), None)
    "('hi', 9)"
"""

from __future__ import annotations

import decimal
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from weir.core.records import Elements
from weir.core.types import KIND_ROW, KIND_SCALAR, KIND_TUPLE, TypeInformation
from weir.taskexecutor.operator import StreamOperator


def flink_string(value: Any, type_info: TypeInformation | None) -> str:
    """``value`` as PyFlink's ``print()`` writes a record of type ``type_info``."""
    return formatter(type_info)(value)


def formatter(type_info: TypeInformation | None) -> Callable[[Any], str]:
    """The function :func:`flink_string` applies for ``type_info``, built once per type."""
    if type_info is None or type_info.kind not in (KIND_TUPLE, KIND_ROW, KIND_SCALAR):
        return str
    if type_info.kind == KIND_SCALAR:
        java = _JAVA_SQL_FORMATS.get(type_info.label)
        return java if java is not None else _scalar_formatter(type_info.arrow_type)
    fields = [formatter(t) for _, t in type_info.fields]
    if type_info.kind == KIND_TUPLE:
        def tuple_string(record: Any) -> str:
            return "(" + ",".join(_or_null(f, v) for f, v in zip(fields, record, strict=True)) \
                + ")"
        return tuple_string

    def row_string(record: Any) -> str:
        kind = getattr(record, "get_row_kind", None)
        prefix = kind().short_string() if kind is not None else "+I"
        return prefix + "[" + ", ".join(_or_null(f, v) for f, v in
                                        zip(fields, record, strict=True)) + "]"
    return row_string


def _sql_timestamp(value: Any) -> str:
    """Java's ``java.sql.Timestamp.toString``: the fraction without trailing zeros, at least
    one digit (``2021-01-09 12:00:00.011``, ``2021-01-09 12:00:00.0``)."""
    if value is None:
        return "null"
    fraction = f"{value.microsecond:06d}".rstrip("0") or "0"
    return f"{value:%Y-%m-%d %H:%M:%S}.{fraction}"


def _sql_time(value: Any) -> str:
    """Java's ``java.sql.Time.toString``: hours, minutes and seconds only."""
    return "null" if value is None else f"{value:%H:%M:%S}"


#: Types PyFlink gives as ``java.sql`` objects, by their label, and how those print.
_JAVA_SQL_FORMATS: dict[str, Callable[[Any], str]] = {
    "TimestampTypeInfo": _sql_timestamp, "TimeTypeInfo": _sql_time}


def _or_null(format_value: Callable[[Any], str], value: Any) -> str:
    return "null" if value is None else format_value(value)


def _scalar_formatter(arrow_type: pa.DataType | None) -> Callable[[Any], str]:
    if arrow_type is None:
        return str
    if pa.types.is_boolean(arrow_type):
        return lambda v: "null" if v is None else ("true" if v else "false")
    if pa.types.is_float64(arrow_type):
        return lambda v: "null" if v is None else java_double(v)
    if pa.types.is_float32(arrow_type):
        return lambda v: "null" if v is None else java_double(v, single=True)
    if pa.types.is_list(arrow_type):
        element = _scalar_formatter(arrow_type.value_type)
        return lambda v: "null" if v is None else \
            "[" + ", ".join(_or_null(element, e) for e in v) + "]"
    if pa.types.is_map(arrow_type):
        key, item = _scalar_formatter(arrow_type.key_type), _scalar_formatter(arrow_type.item_type)
        return lambda v: "null" if v is None else "{" + ", ".join(
            f"{_or_null(key, k)}={_or_null(item, x)}" for k, x in dict(v).items()) + "}"
    return lambda v: "null" if v is None else str(v)


def java_double(value: float, single: bool = False) -> str:
    """A float as Java's ``Double.toString`` (``Float.toString`` with ``single``) writes
    it: the shortest digits that read back, plain from 10^-3 to 10^7, else ``d.dddE±n``.

    >>> [java_double(v) for v in (0.5, 1e7, 1e-05, 163.29999999999998, -0.0)]
    ['0.5', '1.0E7', '1.0E-5', '163.29999999999998', '-0.0']
    >>> java_double(0.1, single=True)
    '0.1'
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    # str of a float32 gives the shortest digits that read back as that float32.
    shortest = str(np.float32(value)) if single else repr(float(value))
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digits, exponent = decimal.Decimal(shortest).normalize().as_tuple()
    text = "".join(map(str, digits))
    assert isinstance(exponent, int)
    power = len(text) - 1 + exponent  # of the first digit
    minus = "-" if sign else ""
    if -3 <= power < 7:
        if power >= 0:
            whole, fraction = text[:power + 1].ljust(power + 1, "0"), text[power + 1:]
        else:
            whole, fraction = "0", "0" * (-power - 1) + text
        return f"{minus}{whole}.{fraction or '0'}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{power}"


class PrintSinkOperator(StreamOperator):
    """Prints records to the task's stdout, prefixed as Flink's print sink does: by the
    subtask (``2> record``) with parallelism > 1, by the identifier given to ``print`` when
    there is one (``words:2> record``, ``words> record``). A record of a declared type
    prints as PyFlink prints it (see :func:`flink_string`)."""

    def __init__(self, name: str, to_stderr: bool = False,
                 sink_identifier: str | None = None,
                 type_info: TypeInformation | None = None) -> None:
        super().__init__(name)
        self.to_stderr = to_stderr
        self.sink_identifier = sink_identifier
        self.type_info = type_info

    def open(self) -> None:
        super().open()
        self._format = formatter(self.type_info)

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        stream = sys.stderr if self.to_stderr else sys.stdout
        subtask = str(self.ctx.subtask_index + 1) if self.ctx.parallelism > 1 else ""
        label = ":".join(p for p in (self.sink_identifier, subtask) if p)
        prefix = f"{label}> " if label else ""
        text = self._format
        stream.write("".join(f"{prefix}{text(r)}\n" for r in elements.records()))
        stream.flush()
