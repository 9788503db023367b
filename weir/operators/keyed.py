"""Per-record operators on keyed streams: reduce, field aggregations, keyed process.

Semantics are Flink's: a keyed reduce or aggregation emits the updated value for every
input record. Their state, and a keyed process function's state and timers, live in the
job's keyed state backend (``state.backend.type``), so snapshots capture them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from weir.core.records import NO_TIMESTAMP, Elements
from weir.core.row import Row
from weir.core.types import TypeInformation
from weir.datastream.functions import (
    Function,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    ProcessFunction,
    ReduceFunction,
    _SideOutputs,
    resolve_callable,
)
from weir.datastream.time_domain import TimeDomain
from weir.datastream.timerservice import TimerService
from weir.operators.base import (
    PER_RECORD_SLICE,
    KeyedOperator,
    emit_with_side_outputs,
    open_functions,
)
from weir.operators.keys import KeySpec, key_groups_of_keys
from weir.state.backend import MISSING
from weir.state.descriptors import ValueStateDescriptor
from weir.state.timers import Timer

if TYPE_CHECKING:
    from weir.core.ids import CheckpointId
    from weir.state.snapshot import SnapshotLocation
    from weir.taskexecutor.operator import OperatorSnapshot

#: The keyed state holding each key's running reduction.
_REDUCE_STATE = "reduce"
#: Key types whose equality is their serialized form's, so that a batch's keys can be
#: grouped in a dict exactly as the backend tells them apart (1 == 1.0 == True are one dict
#: key but three RocksDB keys: mixed batches take the per-record path).
_BATCHABLE_KEYS = frozenset((str, bytes, int))
#: Keys a reduce keeps in its write-back cache before it writes them back and starts anew.
_CACHE_KEYS = 1 << 17


class ReduceOperator(KeyedOperator):
    """``reduce(fn)``: the running reduction per key, emitted for every record."""

    max_batch_records = PER_RECORD_SLICE

    def __init__(self, name: str, key: KeySpec, fn: ReduceFunction | Callable[[Any, Any], Any],
                 output_type: TypeInformation | None = None) -> None:
        super().__init__(name)
        self.key = key
        self.fn = fn
        #: The input's declared type: a reduction's results are of its input's type.
        self.output_type = output_type
        resolve_callable(fn, "reduce")

    def functions(self) -> list[Any]:
        return [self.fn]

    def open(self) -> None:
        assert self.ctx is not None
        self._reduce = resolve_callable(self.fn, "reduce")
        self._state = self.open_keyed().get_state(ValueStateDescriptor(_REDUCE_STATE))
        # A function without keyed state of its own needs no current key per call, so a
        # batch's totals are read and written once per distinct key (see _process_batched).
        self._batched = not isinstance(self.fn, Function) or type(self.fn).open is Function.open
        self._cache: dict[Any, Any] = {}
        self._dirty: dict[Any, None] = {}
        self._final_only = self.final_values_only()
        # A ReduceFunction may keep keyed state of its own, as in PyFlink (where reduce
        # runs as a keyed process function): each call runs under its record's key.
        open_functions(self, self.backend)

    def finish(self) -> None:
        self._write_back(evict=True)
        super().finish()
        if self._final_only:
            finals = self.final_values(_REDUCE_STATE, self._state.value)
            if finals:
                assert self.output is not None
                self.output.emit(Elements.from_records(finals, self.output_type))

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        records = elements.records()
        keys = self.key.keys(elements)
        if self._batched and _BATCHABLE_KEYS.issuperset(map(type, keys)):
            out = self._process_batched(keys, records)
        else:
            out = self._process_per_record(keys, records)
        if self._final_only:
            return
        assert self.output is not None
        self.output.emit(Elements.from_records(out, self.output_type, elements.timestamps))

    def _process_batched(self, keys: list[Any], records: list[Any]) -> list[Any]:
        """The per-record loop over totals kept in a dict across batches, a write-back cache
        of the backend's state: only keys not in it are read (one batched read per batch),
        and the keys a batch changed are written back before each snapshot, at the end of
        the input, and when the cache outgrows ``_CACHE_KEYS`` (one batched write). That
        saves a state access per record, and on RocksDB a serialization per record.
        Records of one key still reduce in order."""
        assert self.ctx is not None and self.backend is not None
        touched = dict.fromkeys(keys)
        cache = self._cache
        # Once the cache holds every key (the usual case), one subset test in C replaces a
        # Python loop over the batch's distinct keys.
        unknown = [] if touched.keys() <= cache.keys() else \
            [key for key in touched if key not in cache]
        if unknown:
            groups = key_groups_of_keys(unknown, self.ctx.max_parallelism)
            stored = self.backend.get_many(_REDUCE_STATE, groups, unknown)
            # MISSING and None both mean "no total yet": ValueState.update(None) clears.
            cache.update(zip(unknown, [None if v is MISSING else v for v in stored],
                             strict=True))
        reduce = self._reduce
        out: list[Any] = []
        append = out.append
        for key, record in zip(keys, records, strict=True):
            total = cache[key]
            total = record if total is None else reduce(total, record)
            cache[key] = total
            append(total)
        self._dirty.update(touched)
        if len(cache) > _CACHE_KEYS:
            self._write_back(evict=True)
        return out

    def _write_back(self, evict: bool = False) -> None:
        """Store the totals the cache changed since the last write-back (and with ``evict``,
        empty the cache)."""
        assert self.ctx is not None and self.backend is not None
        if self._dirty:
            keys = list(self._dirty)
            totals = [self._cache[key] for key in keys]
            groups = key_groups_of_keys(keys, self.ctx.max_parallelism)
            cleared = [i for i, total in enumerate(totals) if total is None]
            if cleared:
                kept = [i for i, total in enumerate(totals) if total is not None]
                self.backend.delete_many(_REDUCE_STATE, groups[cleared],
                                         [keys[i] for i in cleared])
                groups, keys, totals = (groups[kept], [keys[i] for i in kept],
                                        [totals[i] for i in kept])
            self.backend.put_many(_REDUCE_STATE, groups, keys, None, totals)
            self._dirty.clear()
        if evict:
            self._cache.clear()

    def snapshot_state(self, checkpoint_id: CheckpointId, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot:
        self._write_back()
        return super().snapshot_state(checkpoint_id, timestamp_ms, location)

    def _process_per_record(self, keys: list[Any], records: list[Any]) -> list[Any]:
        """One state access per record, under its key: for functions with keyed state."""
        assert self.ctx is not None and self.backend is not None
        self._write_back(evict=True)  # the backend is read directly from here on
        groups = key_groups_of_keys(keys, self.ctx.max_parallelism).tolist()
        set_current_key = self.backend.set_current_key
        state = self._state
        reduce = self._reduce
        out: list[Any] = []
        append = out.append
        for key, group, record in zip(keys, groups, records, strict=True):
            set_current_key(key, group)
            current = state.value()
            current = record if current is None else reduce(current, record)
            state.update(current)
            append(current)
        return out


def field_value(record: Any, field: str | int) -> Any:
    """A record's field, as aggregations read it: the record itself when it is a plain
    value (no tuple, list, Row or dict) and the field is the first, as in PyFlink.

    >>> field_value(("a", 3), 1), field_value(7, 0), field_value("word", 0)
    (3, 7, 'word')
    """
    if field in (0, "f0") and not isinstance(record, tuple | list | dict):
        return record
    return record[field]


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


class FieldAggregateOperator(KeyedOperator):
    """``sum``/``min``/``max`` of one field per key; other fields come from the first record."""

    max_batch_records = PER_RECORD_SLICE

    _OPS: dict[str, Callable[[Any, Any], Any]] = {
        "sum": lambda a, b: a + b, "min": min, "max": max}

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
        self._state = self.open_keyed().get_state(ValueStateDescriptor("aggregate"))
        self._final_only = self.final_values_only()

    def finish(self) -> None:
        super().finish()
        if self._final_only:
            finals = self.final_values("aggregate", self._state.value)
            if finals:
                assert self.output is not None
                self.output.emit(Elements.from_records(finals, self.output_type))

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        op = self._OPS[self.kind]
        keys = self.key.keys(elements)
        groups = key_groups_of_keys(keys, self.ctx.max_parallelism).tolist()
        assert self.backend is not None
        set_current_key = self.backend.set_current_key
        state = self._state
        out: list[Any] = []
        for key, group, record in zip(keys, groups, elements.records(), strict=True):
            set_current_key(key, group)
            current = state.value()
            if current is None:
                current = record
            else:
                current = replace_field(current, self.field,
                                        op(field_value(current, self.field),
                                           field_value(record, self.field)))
            state.update(current)
            out.append(current)
        if self._final_only:
            return
        assert self.output is not None
        self.output.emit(Elements.from_records(out, self.output_type, elements.timestamps))


#: The context of ``on_timer`` (key, timestamp and time domain of the timer that fired).
_OnTimerContext = (KeyedProcessFunction.OnTimerContext
                   | KeyedBroadcastProcessFunction.OnTimerContext)


class ProcessFunctionOperator(KeyedOperator):
    """What the operators of process functions share (keyed or not, with one input or
    two): calling the function for each record with its context, calling its
    ``on_timer`` when a timer fires, and emitting what they return, and what ``ctx.output``
    collected, with their record's (or event-time timer's) timestamp.

    A subclass's ``open`` sets the function's contexts (``_contexts``: those whose side
    outputs to emit) and, for a function with timers, ``_on_timer`` and ``_timer_ctx``.
    """

    max_batch_records = PER_RECORD_SLICE
    #: The function's ``on_timer`` (None: it has no timers).
    _on_timer: Callable[[int, _OnTimerContext], Iterable[Any] | None] | None = None
    _timer_ctx: _OnTimerContext | None = None

    def __init__(self, name: str, output_type: TypeInformation | None = None) -> None:
        super().__init__(name)
        self.output_type = output_type
        self._contexts: list[_SideOutputs] = []
        self._pending: list[Any] = []
        self._pending_ts: list[int] = []

    def _apply(self, elements: Elements, call: Callable[..., Any],
               ctx: _SideOutputs | None, key: KeySpec | None, single: bool = False) -> None:
        """``call(record, ctx)`` (``call(record)`` without a ``ctx``) for every record,
        with the current key set to the record's by ``key`` (None: not keyed) and ``ctx``
        told the key and the record's timestamp; emits what the calls return (one output
        each if ``single``, else an iterable or None), stamped with their record's
        timestamp. For operators whose inputs differ in function or key."""
        records = elements.records()
        keyed_ctx = ctx if isinstance(ctx, KeyedProcessFunction.Context) else None
        if key is not None:
            assert self.ctx is not None and self.backend is not None
            keys = key.keys(elements)
            groups = key_groups_of_keys(keys, self.ctx.max_parallelism).tolist()
            set_current_key = self.backend.set_current_key
        timestamps = elements.timestamps.tolist() if elements.timestamps is not None else None
        out: list[Any] = []
        stamps: list[int] = []
        for index, record in enumerate(records):
            if key is not None:
                set_current_key(keys[index], groups[index])
                if keyed_ctx is not None:
                    keyed_ctx._key = keys[index]
            if timestamps is not None and ctx is not None:
                ctx._timestamp = timestamps[index]
            result = call(record) if ctx is None else call(record, ctx)
            if single:
                result = (result,)
            if result is not None:
                before = len(out)
                out.extend(result)
                if timestamps is not None:
                    stamps.extend([timestamps[index]] * (len(out) - before))
        self._emit(out, stamps if timestamps is not None else None)

    def _emit(self, out: list[Any], stamps: list[int] | None) -> None:
        assert self.output is not None
        emit_with_side_outputs(self.output, out, stamps, self._contexts, self.output_type)

    def _fire(self, timer: Timer, domain: TimeDomain) -> None:
        if self._on_timer is None:
            return
        ctx = self._timer_ctx
        assert ctx is not None
        ctx._key = timer.key
        ctx._timestamp = timer.timestamp
        ctx._time_domain = domain
        result = self._on_timer(timer.timestamp, ctx)
        if result is not None:
            before = len(self._pending)
            self._pending.extend(result)
            stamp = timer.timestamp if domain is TimeDomain.EVENT_TIME else NO_TIMESTAMP
            self._pending_ts.extend([stamp] * (len(self._pending) - before))

    def on_event_time(self, timer: Timer) -> None:
        self._fire(timer, TimeDomain.EVENT_TIME)

    def on_processing_time(self, timer: Timer) -> None:
        self._fire(timer, TimeDomain.PROCESSING_TIME)

    def after_timers(self) -> None:
        out, stamps = self._pending, self._pending_ts
        self._pending, self._pending_ts = [], []
        self._emit(out, stamps)


class KeyedProcessOperator(ProcessFunctionOperator):
    """Runs a :class:`KeyedProcessFunction`: keyed state scoped to each record's key, and
    event-time and processing-time timers (kept in the same backend) firing ``on_timer``.

    Outputs take the timestamp of the record they came from; outputs of ``on_timer`` take
    the timer's timestamp for event-time timers, none for processing-time ones (as Flink).
    """

    def __init__(self, name: str, key: KeySpec, fn: KeyedProcessFunction | ProcessFunction,
                 output_type: TypeInformation | None = None) -> None:
        super().__init__(name, output_type)
        self.key = key
        self.fn = fn
        resolve_callable(fn, "process_element")

    def functions(self) -> list[Any]:
        return [self.fn]

    def open(self) -> None:
        backend = self.open_keyed()
        service = TimerService(self.open_timers("user"))
        self._fn_ctx = KeyedProcessFunction.Context(service)
        self._timer_ctx = KeyedProcessFunction.OnTimerContext(service)
        self._contexts = [self._fn_ctx, self._timer_ctx]
        self._process = resolve_callable(self.fn, "process_element")
        self._on_timer = getattr(self.fn, "on_timer", None)
        self._pending = []
        self._pending_ts = []
        open_functions(self, backend)

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        out: list[Any] = []
        stamps: list[int] = []
        ctx = self._fn_ctx
        process = self._process
        assert self.backend is not None
        set_current_key = self.backend.set_current_key
        keys = self.key.keys(elements)
        groups = key_groups_of_keys(keys, self.ctx.max_parallelism).tolist()
        timestamps = elements.timestamps
        if timestamps is None:
            for key, group, record in zip(keys, groups, elements.records(), strict=True):
                set_current_key(key, group)
                ctx._key = key
                result = process(record, ctx)
                if result is not None:
                    out.extend(result)
            self._emit(out, None)
            return
        for key, group, record, stamp in zip(keys, groups, elements.records(),
                                             timestamps.tolist(), strict=True):
            set_current_key(key, group)
            ctx._key = key
            ctx._timestamp = stamp
            result = process(record, ctx)
            if result is not None:
                before = len(out)
                out.extend(result)
                stamps.extend([stamp] * (len(out) - before))
        self._emit(out, stamps)
