"""Per-record operators on keyed streams: reduce, field aggregations, keyed process.

Semantics are Flink's: a keyed reduce or aggregation emits the updated value for every
input record. A keyed process function's state lives in the job's keyed state backend
(``state.backend.type``).
"""

from __future__ import annotations

from typing import Any

from weir.functions import KeyedProcessFunction, resolve_callable
from weir.keys import KeySpec, key_groups_of_keys
from weir.operators.base import PER_RECORD_SLICE, StreamOperator
from weir.records import Elements
from weir.row import Row
from weir.types import TypeInformation

_MISSING = object()


class ReduceOperator(StreamOperator):
    """``reduce(fn)``: the running reduction per key, emitted for every record."""

    max_batch_records = PER_RECORD_SLICE

    def __init__(self, name: str, key: KeySpec, fn: Any) -> None:
        super().__init__(name)
        self.key = key
        self.fn = fn
        resolve_callable(fn, "reduce")

    def functions(self) -> list[Any]:
        return [self.fn]

    def open(self) -> None:
        self._reduce = resolve_callable(self.fn, "reduce")
        self._values: dict[Any, Any] = {}
        self._open_functions()

    def close(self) -> None:
        self._close_functions()

    def process(self, elements: Elements, input_index: int = 0) -> None:
        records = elements.records()
        keys = self.key.keys(elements)
        values = self._values
        reduce = self._reduce
        out = []
        append = out.append
        for key, record in zip(keys, records, strict=True):
            current = values.get(key, _MISSING)
            current = record if current is _MISSING else reduce(current, record)
            values[key] = current
            append(current)
        assert self.output is not None
        self.output.emit(Elements.from_records(out))


def replace_field(record: Any, field: str | int, value: Any) -> Any:
    """A copy of ``record`` (tuple, Row or dict) with one field set to ``value``."""
    if isinstance(record, Row):
        index = record._index[field] if isinstance(field, str) else field
        values = list(record)
        values[index] = value
        if record._fields:
            return Row.from_values(record._fields, record._index, values)
        return Row(*values)
    if isinstance(record, tuple):
        index = int(field)
        return (*record[:index], value, *record[index + 1:])
    if isinstance(record, dict):
        return {**record, field: value}
    if field in (0, "f0"):
        return value
    msg = f"cannot aggregate field {field!r} of a {type(record).__name__} record"
    raise TypeError(msg)


class FieldAggregateOperator(StreamOperator):
    """``sum``/``min``/``max`` of one field per key; other fields come from the first record."""

    max_batch_records = PER_RECORD_SLICE

    _OPS = {"sum": lambda a, b: a + b, "min": min, "max": max}

    def __init__(self, name: str, key: KeySpec, kind: str, field: str | int,
                 output_type: TypeInformation | None = None) -> None:
        super().__init__(name)
        if kind not in self._OPS:
            msg = f"unknown aggregation {kind!r}"
            raise ValueError(msg)
        self.key = key
        self.kind = kind
        self.field = field
        self.output_type = output_type

    def open(self) -> None:
        self._values: dict[Any, Any] = {}

    def _get(self, record: Any) -> Any:
        if isinstance(record, int | float) and self.field in (0, "f0"):
            return record
        return record[self.field]

    def process(self, elements: Elements, input_index: int = 0) -> None:
        op = self._OPS[self.kind]
        values = self._values
        out = []
        for key, record in zip(self.key.keys(elements), elements.records(), strict=True):
            current = values.get(key, _MISSING)
            if current is _MISSING:
                current = record
            else:
                current = replace_field(current, self.field,
                                        op(self._get(current), self._get(record)))
            values[key] = current
            out.append(current)
        assert self.output is not None
        self.output.emit(Elements.from_records(out, self.output_type))


class KeyedProcessOperator(StreamOperator):
    """Runs a :class:`KeyedProcessFunction` with keyed ValueState scoped to each record's key."""

    max_batch_records = PER_RECORD_SLICE

    def __init__(self, name: str, key: KeySpec, fn: KeyedProcessFunction,
                 output_type: TypeInformation | None = None) -> None:
        super().__init__(name)
        self.key = key
        self.fn = fn
        self.output_type = output_type
        resolve_callable(fn, "process_element")

    def functions(self) -> list[Any]:
        return [self.fn]

    def open(self) -> None:
        assert self.ctx is not None
        self._backend = self.ctx.create_keyed_state_backend(self.uid or self.name)
        self._fn_ctx = KeyedProcessFunction.Context()
        self._process = resolve_callable(self.fn, "process_element")
        self._open_functions(self._backend)

    def close(self) -> None:
        try:
            self._close_functions()
        finally:
            backend = getattr(self, "_backend", None)
            if backend is not None:
                backend.dispose()

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        out: list[Any] = []
        ctx = self._fn_ctx
        process = self._process
        set_current_key = self._backend.set_current_key
        keys = self.key.keys(elements)
        groups = key_groups_of_keys(keys, self.ctx.max_parallelism).tolist()
        for key, group, record in zip(keys, groups, elements.records(), strict=True):
            set_current_key(key, group)
            ctx._key = key
            result = process(record, ctx)
            if result is not None:
                out.extend(result)
        if out:
            assert self.output is not None
            self.output.emit(Elements.from_records(out, self.output_type))
