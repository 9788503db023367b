"""The keyed window operator: assigner, trigger and window function over keyed state.

Per record: the assigner gives its windows (session windows first merge with the key's
open sessions); a record whose window is already past its allowed lateness is dropped and
counted; otherwise it is added to the window's contents — keyed state in the namespace of
the window — and the trigger decides whether the window fires now. Timers (the trigger's,
and the cleanup timer at ``end - 1 + allowed lateness``) live in the same backend, so a
snapshot holds windows and their timers together.

Contents are a ReducingState (``reduce``), an AggregatingState (``aggregate``) or a
ListState (``process``). Results carry the window's ``max_timestamp()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from weir.core.errors import UserError
from weir.core.records import MAX_WATERMARK, NO_TIMESTAMP, Elements
from weir.core.types import TypeInformation
from weir.datastream.functions import ReduceFunction, resolve_callable
from weir.datastream.window.assigners import WindowAssigner
from weir.datastream.window.evictors import Evictor
from weir.datastream.window.functions import ProcessAllWindowFunction, ProcessWindowFunction
from weir.datastream.window.triggers import Trigger, TriggerResult
from weir.datastream.window.windows import TimeWindow
from weir.operators.base import PER_RECORD_SLICE, KeyedOperator, open_functions
from weir.operators.keyed import replace_field
from weir.operators.keys import KeySpec, key_groups_of_keys
from weir.state.backend import MISSING, KeyedStateBackend
from weir.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from weir.state.timers import InternalTimerService, Timer

REDUCE, AGGREGATE, PROCESS = "reduce", "aggregate", "process"


def end_of_time_cleanup(window: TimeWindow, allowed_lateness: int, event_time: bool) -> int:
    """When a window's state is dropped: its end (+ lateness for event time), capped."""
    if not event_time:
        return window.max_timestamp()
    cleanup = window.max_timestamp() + allowed_lateness
    return cleanup if cleanup >= window.max_timestamp() and cleanup < MAX_WATERMARK \
        else MAX_WATERMARK


class FieldReducer(ReduceFunction):
    """``sum``/``min``/``max`` of one field as a reduce function: the other fields come
    from the window's first record (Flink's semantics for windowed field aggregations)."""

    _OPS: dict[str, Callable[[Any, Any], Any]] = {
        "sum": lambda a, b: a + b, "min": min, "max": max}

    def __init__(self, kind: str, field: str | int) -> None:
        if kind not in self._OPS:
            msg = f"unknown aggregation {kind!r}"
            raise ValueError(msg)
        self.kind = kind
        self.field = field

    def _get(self, record: Any) -> Any:
        if isinstance(record, int | float) and self.field in (0, "f0"):
            return record
        return record[self.field]

    def reduce(self, a: Any, b: Any) -> Any:
        return replace_field(a, self.field, self._OPS[self.kind](self._get(a), self._get(b)))


class CountPerKey:
    """Counts a window's records: ``(key, count)``."""

    def __init__(self, key: KeySpec) -> None:
        self.key = key

    def create_accumulator(self) -> tuple[Any, int]:
        return (None, 0)

    def add(self, value: Any, accumulator: tuple[Any, int]) -> tuple[Any, int]:
        key = self.key.get_key(value) if accumulator[1] == 0 else accumulator[0]
        return (key, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[Any, int]) -> tuple[Any, int]:
        return accumulator

    def merge(self, a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int]:
        return (a[0] if a[1] else b[0], a[1] + b[1])


class _NamespacedState:
    """Keyed state of the current key in one namespace (a window, or None = across windows)."""

    def __init__(self, backend: KeyedStateBackend, namespace: TimeWindow | None) -> None:
        self._backend = backend
        self._namespace = namespace

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any:
        if descriptor.name.startswith("_"):
            msg = f"state names starting with '_' are reserved, got {descriptor.name!r}"
            raise ValueError(msg)
        handle = self._backend.get_state(descriptor)
        handle.set_current_namespace(self._namespace)
        return handle

    get_state = get_list_state = get_map_state = get_reducing_state = get_partitioned_state
    get_aggregating_state = get_partitioned_state


class _TriggerContext(Trigger.TriggerContext):
    """What a trigger sees: timers and state of the current key and window."""

    def __init__(self, timers: InternalTimerService, backend: KeyedStateBackend) -> None:
        self._timers = timers
        self._backend = backend
        self.window: TimeWindow = TimeWindow(0, 0)

    def current_watermark(self) -> int:
        return self._timers.current_watermark

    def current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def register_event_time_timer(self, time: int) -> None:
        self._timers.register_event_time_timer(self.window, time)

    def register_processing_time_timer(self, time: int) -> None:
        self._timers.register_processing_time_timer(self.window, time)

    def delete_event_time_timer(self, time: int) -> None:
        self._timers.delete_event_time_timer(self.window, time)

    def delete_processing_time_timer(self, time: int) -> None:
        self._timers.delete_processing_time_timer(self.window, time)

    def get_partitioned_state(self, state_descriptor: StateDescriptor) -> Any:
        return _NamespacedState(self._backend, self.window).get_partitioned_state(
            state_descriptor)


class _WindowContext(ProcessWindowFunction.Context, ProcessAllWindowFunction.Context):
    """What a ProcessWindowFunction sees (PyFlink's ``ProcessWindowFunction.Context``), and
    through WindowFunctionAdapter a ProcessAllWindowFunction."""

    def __init__(self, timers: InternalTimerService, backend: KeyedStateBackend) -> None:
        self._timers = timers
        self._backend = backend
        self._window: TimeWindow = TimeWindow(0, 0)

    def window(self) -> TimeWindow:
        return self._window

    def current_watermark(self) -> int:
        return self._timers.current_watermark

    def current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def window_state(self) -> _NamespacedState:
        """Keyed state scoped to this window (cleared with it via ``clear``)."""
        return _NamespacedState(self._backend, self._window)

    def global_state(self) -> _NamespacedState:
        """Keyed state shared by all windows of the key."""
        return _NamespacedState(self._backend, None)


class WindowOperator(KeyedOperator):
    """``key_by(...).window(assigner)[.trigger(t)][.allowed_lateness(ms)].reduce/aggregate/
    process(...)`` (see the module docstring).

    ``function`` is the user's, of the form ``kind`` says: a ReduceFunction or function of
    two records, an AggregateFunction, or a ProcessWindowFunction or function of ``(key,
    context, elements)``; ``window_function``, if any, one of the latter two. They are
    checked by their methods, as PyFlink users pass any object that has them.
    """

    max_batch_records = PER_RECORD_SLICE

    def __init__(self, name: str, key: KeySpec, assigner: WindowAssigner, kind: str,
                 function: Any, window_function: Any = None, trigger: Trigger | None = None,
                 allowed_lateness_ms: int = 0,
                 output_type: TypeInformation | None = None, late_data_tag: str = "",
                 evictor: Evictor | None = None) -> None:
        super().__init__(name)
        #: With an evictor the window keeps (record, timestamp) pairs and the function runs
        #: when it fires (see weir.datastream.window.Evictor).
        self.evictor = evictor
        #: Side output (OutputTag id) for records too late for their window ("": drop).
        self.late_data_tag = late_data_tag
        if kind not in (REDUCE, AGGREGATE, PROCESS):
            msg = f"unknown window function kind {kind!r}"
            raise ValueError(msg)
        if allowed_lateness_ms < 0:
            msg = f"allowed lateness must not be negative, got {allowed_lateness_ms} ms"
            raise ValueError(msg)
        self.key = key
        self.assigner = assigner
        self.kind = kind
        self.function = function
        self.window_function = window_function
        self.trigger = trigger or assigner.default_trigger()
        self.allowed_lateness_ms = allowed_lateness_ms if assigner.is_event_time() else 0
        self.output_type = output_type
        self._check()

    def _check(self) -> None:
        if self.kind == REDUCE:
            resolve_callable(self.function, "reduce")
        elif self.kind == AGGREGATE:
            for method in ("create_accumulator", "add", "get_result"):
                if not callable(getattr(self.function, method, None)):
                    msg = f"the aggregate function has no {method}() method"
                    raise TypeError(msg)
        else:
            resolve_callable(self.function, "process")
        if self.window_function is not None:
            resolve_callable(self.window_function, "process")
        if self.assigner.is_merging():
            if not self.trigger.can_merge():
                msg = (f"{type(self.trigger).__name__} cannot be used with merging (session) "
                       "windows")
                raise TypeError(msg)
            if self.kind == AGGREGATE and not _implements_merge(self.function):
                msg = ("session windows merge accumulators: the aggregate function must "
                       "implement merge(a, b)")
                raise TypeError(msg)

    def functions(self) -> list[Any]:
        return [f for f in (self.function, self.window_function) if f is not None]

    # -- lifecycle -----------------------------------------------------------------------

    def open(self) -> None:
        backend = self.open_keyed()
        self._timers = self.open_timers("window")
        self._set_current_key = backend.set_current_key
        self._event_time = self.assigner.is_event_time()
        self.fire_processing_time_at_end = not self._event_time
        if self.evictor is not None:
            descriptor: StateDescriptor = ListStateDescriptor("_window/contents")
        elif self.kind == REDUCE:
            descriptor = ReducingStateDescriptor(
                "_window/contents", resolve_callable(self.function, "reduce"))
        elif self.kind == AGGREGATE:
            descriptor = AggregatingStateDescriptor("_window/contents", self.function)
        else:
            descriptor = ListStateDescriptor("_window/contents")
        self._contents = backend.get_state(descriptor)
        self._sessions = backend.get_state(ValueStateDescriptor("_window/sessions")) \
            if self.assigner.is_merging() else None
        self._trigger_ctx = _TriggerContext(self._timers, backend)
        self._window_ctx = _WindowContext(self._timers, backend)
        self._emit_fn = self._make_emitter()
        self._out: list[Any] = []
        self._out_ts: list[int] = []
        self.num_late_records_dropped = 0
        open_functions(self, backend)

    def _make_emitter(self) -> Callable[[Any, TimeWindow, Any], Any]:
        """A function (key, window, stored contents) -> iterable of outputs."""
        window_fn = None if self.window_function is None else \
            resolve_callable(self.window_function, "process")
        ctx = self._window_ctx
        if self.evictor is not None:
            return self._evicting_emitter(window_fn)
        if self.kind == PROCESS:
            process = resolve_callable(self.function, "process")

            def run_process(key: Any, window: TimeWindow, stored: Any) -> Any:
                ctx._window = window
                return process(key, ctx, list(stored))
            return run_process
        get_result = self.function.get_result if self.kind == AGGREGATE else None

        def run_incremental(key: Any, window: TimeWindow, stored: Any) -> Any:
            value = stored if get_result is None else get_result(stored)
            if window_fn is None:
                return (value,)
            ctx._window = window
            return window_fn(key, ctx, [value])
        return run_incremental

    def _evicting_emitter(self, window_fn: Callable[..., Any] | None
                          ) -> Callable[[Any, TimeWindow, Any], Any]:
        """Evict, apply the function to what is left, evict again, and keep the rest."""
        evictor = self.evictor
        assert evictor is not None
        ctx = self._window_ctx
        kind, function = self.kind, self.function

        def run_evicting(key: Any, window: TimeWindow, stored: Any) -> Any:
            pairs = evictor.evict_before(list(stored))
            values = [value for value, _ in pairs]
            ctx._window = window
            if kind == PROCESS:
                result = list(resolve_callable(function, "process")(key, ctx, values) or ())
            elif not values:
                result = []
            else:
                if kind == REDUCE:
                    value = functools.reduce(resolve_callable(function, "reduce"), values)
                else:
                    accumulator = function.create_accumulator()
                    for v in values:
                        accumulator = function.add(v, accumulator)
                    value = function.get_result(accumulator)
                result = [value] if window_fn is None else list(
                    window_fn(key, ctx, [value]) or ())
            kept = evictor.evict_after(pairs)
            contents = self._contents
            contents.set_current_namespace(window)
            if kept:
                contents.update(kept)
            else:
                contents.clear()
            return result
        return run_evicting

    # -- records ---------------------------------------------------------------------------

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        records = elements.records()
        keys = self.key.keys(elements)
        groups = key_groups_of_keys(keys, self.ctx.max_parallelism).tolist()
        if self._event_time:
            if elements.timestamps is None:
                msg = (f"'{self.name}' uses event-time windows, but the records have no "
                       "timestamps: call assign_timestamps_and_watermarks(...) upstream, or "
                       "use processing-time windows")
                raise UserError(msg)
            timestamps = elements.timestamps.tolist()
        else:
            timestamps = [self._timers.current_processing_time()] * len(records)
        set_current_key = self._set_current_key
        late: list[Any] = []
        late_stamps: list[int] = []
        for key, group, record, stamp in zip(keys, groups, records, timestamps, strict=True):
            set_current_key(key, group)
            if self._event_time and stamp == NO_TIMESTAMP:
                msg = (f"'{self.name}' uses event-time windows, but a record has no "
                       f"timestamp: {record!r:.80}")
                raise UserError(msg)
            assigned = self.assigner.assign_windows(record, stamp)
            windows: Sequence[TimeWindow | None] = assigned if self._sessions is None \
                else self._merge_sessions(assigned)
            for window in windows:
                if window is None or self._is_late(window):
                    if self.late_data_tag:
                        late.append(record)
                        late_stamps.append(stamp)
                    else:
                        self.num_late_records_dropped += 1
                    continue
                self._add(window, record if self.evictor is None else (record, stamp))
                ctx = self._trigger_ctx
                ctx.window = window
                result = self.trigger.on_element(record, stamp, window, ctx)
                self._apply(result, key, window)
                self._register_cleanup(window)
        self._flush()
        if late:
            assert self.output is not None
            self.output.emit_side(self.late_data_tag, Elements.from_records(
                late, None, np.array(late_stamps, dtype=np.int64)))

    def _add(self, window: TimeWindow, record: Any) -> None:
        contents = self._contents
        contents.set_current_namespace(window)
        contents.add(record)

    def _is_late(self, window: TimeWindow) -> bool:
        return self._event_time and self._cleanup_time(window) <= self._timers.current_watermark

    def _cleanup_time(self, window: TimeWindow) -> int:
        return end_of_time_cleanup(window, self.allowed_lateness_ms, self._event_time)

    def _register_cleanup(self, window: TimeWindow) -> None:
        time = self._cleanup_time(window)
        if time == MAX_WATERMARK:
            return  # the end of time needs no timer: the final watermark ends everything
        if self._event_time:
            self._timers.register_event_time_timer(window, time)
        else:
            self._timers.register_processing_time_timer(window, time)

    # -- sessions --------------------------------------------------------------------------

    def _merge_sessions(self, windows: list[TimeWindow]) -> list[TimeWindow | None]:
        """Merge each new window with the key's sessions; returns the session each record
        goes to (None: the merged session is already too late, nothing changed)."""
        assert self._sessions is not None
        sessions = list(self._sessions.value() or [])
        placed: list[TimeWindow | None] = []
        for window in windows:
            for merged, members in self.assigner.merge_windows([*sessions, window]):
                if window not in members:
                    continue
                if self._is_late(merged):
                    placed.append(None)
                    break
                existing = [m for m in members if m in sessions]
                if existing != [merged]:
                    self._merge_contents(merged, [m for m in existing if m != merged])
                sessions = [s for s in sessions if s not in members] + [merged]
                placed.append(merged)
                break
        self._sessions.update(sorted(sessions))
        return placed

    def _merge_contents(self, into: TimeWindow, sources: list[TimeWindow]) -> None:
        """Fold the contents of ``sources`` into window ``into`` and move the trigger."""
        contents = self._contents
        contents.set_current_namespace(into)
        merged = contents._read()
        for source in sorted(sources):
            contents.set_current_namespace(source)
            value = contents._read()
            contents.clear()
            ctx = self._trigger_ctx
            ctx.window = source
            self.trigger.clear(source, ctx)
            self._delete_cleanup(source)
            if value is MISSING:
                continue
            merged = value if merged is MISSING else self._combine(merged, value)
        if merged is not MISSING:
            contents.set_current_namespace(into)
            contents._write(merged)
        ctx = self._trigger_ctx
        ctx.window = into
        self.trigger.on_merge(into, ctx)

    def _combine(self, a: Any, b: Any) -> Any:
        if self.evictor is not None:
            return [*a, *b]
        if self.kind == REDUCE:
            return resolve_callable(self.function, "reduce")(a, b)
        if self.kind == AGGREGATE:
            return self.function.merge(a, b)
        return [*a, *b]

    def _delete_cleanup(self, window: TimeWindow) -> None:
        time = self._cleanup_time(window)
        if self._event_time:
            self._timers.delete_event_time_timer(window, time)
        else:
            self._timers.delete_processing_time_timer(window, time)

    # -- firing ----------------------------------------------------------------------------

    def _apply(self, result: TriggerResult, key: Any, window: TimeWindow) -> None:
        if result.is_fire():
            self._fire(key, window)
        if result.is_purge():
            contents = self._contents
            contents.set_current_namespace(window)
            contents.clear()

    def _fire(self, key: Any, window: TimeWindow) -> None:
        contents = self._contents
        contents.set_current_namespace(window)
        stored = contents._read()
        if stored is MISSING:
            return
        results = self._emit_fn(key, window, stored)
        if results is not None:
            before = len(self._out)
            self._out.extend(results)
            self._out_ts.extend([window.max_timestamp()] * (len(self._out) - before))

    def _flush(self) -> None:
        if self._out:
            assert self.output is not None
            self.output.emit(Elements.from_records(
                self._out, self.output_type, np.array(self._out_ts, dtype=np.int64)))
            self._out = []
            self._out_ts = []

    def on_event_time(self, timer: Timer) -> None:
        self._on_timer(timer, event_time=True)

    def on_processing_time(self, timer: Timer) -> None:
        self._on_timer(timer, event_time=False)

    def after_timers(self) -> None:
        """Processing-time timers fired: send their results as one batch."""
        self._flush()

    def _on_timer(self, timer: Timer, event_time: bool) -> None:
        window: TimeWindow = timer.namespace
        if self._sessions is not None and window not in (self._sessions.value() or []):
            return  # merged away since the timer was set
        ctx = self._trigger_ctx
        ctx.window = window
        if event_time:
            result = self.trigger.on_event_time(timer.timestamp, window, ctx)
        else:
            result = self.trigger.on_processing_time(timer.timestamp, window, ctx)
        self._apply(result, timer.key, window)
        if event_time == self._event_time and timer.timestamp == self._cleanup_time(window):
            self._clear_window(window)

    def _clear_window(self, window: TimeWindow) -> None:
        contents = self._contents
        contents.set_current_namespace(window)
        contents.clear()
        ctx = self._trigger_ctx
        ctx.window = window
        self.trigger.clear(window, ctx)
        clear = getattr(self.window_function or self.function, "clear", None)
        if (self.kind == PROCESS or self.window_function is not None) and callable(clear):
            self._window_ctx._window = window
            clear(self._window_ctx)
        if self._sessions is not None:
            sessions = [s for s in (self._sessions.value() or []) if s != window]
            self._sessions.update(sessions or None)


def _implements_merge(function: Any) -> bool:
    from weir.datastream.window.functions import AggregateFunction

    merge = getattr(type(function), "merge", None)
    return callable(merge) and merge is not AggregateFunction.merge
