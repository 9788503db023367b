"""User function interfaces (PyFlink's ``pyflink.datastream.functions``).

Plain callables work everywhere a function is expected; the classes add ``open``/``close``
hooks and access to the :class:`RuntimeContext` (subtask index, keyed state). The window
functions are defined with the windows (:mod:`weir.datastream.window.functions`) and
named here too, as PyFlink names them; the async retry strategy and predicate with the
other strategies (:mod:`weir.datastream.async_retry_strategies`).

Example:
    >>> from weir.datastream.functions import MapFunction
    >>> class Upper(MapFunction):
    ...     def map(self, value):
    ...         return value.upper()
    >>> Upper().map("a")
    'A'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weir.core.errors import StateError
from weir.core.generics import TypeParameters
from weir.core.records import NO_TIMESTAMP
from weir.datastream.async_retry_strategies import AsyncRetryPredicate, AsyncRetryStrategy
from weir.datastream.output_tag import OutputTag
from weir.datastream.time_domain import TimeDomain
from weir.datastream.timerservice import OperatorClock, TimerService, non_keyed_timer_service
from weir.unsupported import CUSTOM_PARTITIONERS, SOURCES, refusing

if TYPE_CHECKING:
    from weir.datastream.window.functions import (
        AggregateFunction,
        AllWindowFunction,
        ProcessAllWindowFunction,
        ProcessWindowFunction,
        WindowFunction,
    )
    from weir.metrics.metricbase import MetricGroup
    from weir.state.backend import (
        AggregatingState,
        KeyedStateBackend,
        ListState,
        MapState,
        ReducingState,
        ValueState,
    )
    from weir.state.descriptors import (
        AggregatingStateDescriptor,
        ListStateDescriptor,
        MapStateDescriptor,
        ReducingStateDescriptor,
        StateDescriptor,
        ValueStateDescriptor,
    )
    from weir.state.operator_state import BroadcastState, ReadOnlyBroadcastState

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "BaseBroadcastProcessFunction",
    "BroadcastProcessFunction",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "FilterFunction",
    "FlatMapFunction",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "MapFunction",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessWindowFunction",
    "ReduceFunction",
    "RuntimeContext",
    "TimerService",
    "WindowFunction",
]

__unsupported__ = {
    "Partitioner": f"{CUSTOM_PARTITIONERS}: key_by the partition you want",
    "SourceFunction": SOURCES,
    "SinkFunction": "implement weir.Sink, or write with FileSink",
    "AsyncFunctionDescriptor": "it is PyFlink-internal; use AsyncDataStream",
    "AsyncBatchFunction": "batched async functions are not supported yet: use AsyncFunction",
    "AsyncBatchFunctionDescriptor": "batched async functions are not supported yet",
}

#: Names of this module defined with the windows, whose module imports this one.
_WINDOW_FUNCTIONS = frozenset({"AggregateFunction", "AllWindowFunction",
                               "ProcessAllWindowFunction", "ProcessWindowFunction",
                               "WindowFunction"})
_refuse = refusing(__name__, __unsupported__)


def __getattr__(name: str) -> Any:
    """The window functions, loaded on first use (their module imports :class:`Function`
    from here); PyFlink's functions weir lacks, refused."""
    if name in _WINDOW_FUNCTIONS:
        from weir.datastream.window import functions

        value = getattr(functions, name)
        globals()[name] = value
        return value
    return _refuse(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})



class _SideOutputs:
    """``ctx.output(tag, value)``: what a context collects for side outputs."""

    _side: list[tuple[str, Any, int | None]]
    #: The current record's timestamp (None: none yet), set by the operator.
    _timestamp: int | None = None

    def output(self, output_tag: OutputTag, value: Any) -> None:
        """Emit ``value`` to the side output ``output_tag`` (with the current record's
        timestamp)."""
        if not isinstance(output_tag, OutputTag):
            msg = f"output() needs an OutputTag, got {type(output_tag).__name__}"
            raise TypeError(msg)
        if not hasattr(self, "_side"):
            self._side = []
        self._side.append((output_tag.tag_id, value, self._timestamp))


class RuntimeContext:
    """What a function may learn about where it runs, the job's global parameters, its
    handle to keyed state, and its metric group.

    Example:
        >>> ctx = RuntimeContext("Map", 1, 4, 128, 0, job_parameters={"env": "prod"})
        >>> ctx.get_task_name_with_subtasks(), ctx.get_job_parameter("env", "dev")
        ('Map (2/4)', 'prod')
    """

    def __init__(self, task_name: str, subtask_index: int, parallelism: int,
                 max_parallelism: int, attempt_number: int,
                 state_store: KeyedStateBackend | None = None,
                 job_parameters: Mapping[str, str] | None = None,
                 metric_group: MetricGroup | None = None) -> None:
        self._task_name = task_name
        self._subtask_index = subtask_index
        self._parallelism = parallelism
        self._max_parallelism = max_parallelism
        self._attempt_number = attempt_number
        self._state_store = state_store
        self._job_parameters = dict(job_parameters or {})
        self._metric_group = metric_group

    def get_metrics_group(self) -> MetricGroup:
        """The task's root :class:`~weir.metrics.MetricGroup`: metrics registered in
        it (in ``open``, typically) are served on the Prometheus endpoint of the
        TaskExecutor running the task, labelled with the job, task and subtask, until the
        task ends. Outside a task (a RuntimeContext made by hand) the metrics work but
        nothing exports them.

        Example:
            >>> ctx = RuntimeContext("Map", 0, 1, 128, 0)
            >>> records = ctx.get_metrics_group().add_group("io").counter("records")
            >>> records.inc(3); records.get_count()
            3
            >>> ctx.get_metrics_group().get_metric_identifier("records")
            'weir_user_records'
        """
        if self._metric_group is None:
            from weir.metrics.metricbase import task_metric_group

            self._metric_group = task_metric_group(None, self._task_name, self._subtask_index)
        return self._metric_group

    def get_task_name(self) -> str:
        return self._task_name

    def get_task_name_with_subtasks(self) -> str:
        """The task's name with the subtask, as Flink writes it: ``"Map (2/4)"`` for the
        second of four subtasks."""
        return f"{self._task_name} ({self._subtask_index + 1}/{self._parallelism})"

    def get_job_parameter(self, key: str, default_value: str | None = None) -> str | None:
        """The global job parameter ``key`` (set with
        ``env.get_config().set_global_job_parameters({...})``), as a string;
        ``default_value`` when the job has no such parameter."""
        return self._job_parameters.get(key, default_value)

    def get_index_of_this_subtask(self) -> int:
        return self._subtask_index

    def get_number_of_parallel_subtasks(self) -> int:
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._max_parallelism

    def get_attempt_number(self) -> int:
        return self._attempt_number

    def _keyed_state(self, descriptor: StateDescriptor, kind: str) -> Any:
        """The backend's handle of ``descriptor``'s state, of the class of ``kind``
        (ValueState for "value", ...): the backend hands out handles untyped."""
        if self._state_store is None:
            msg = "keyed state is only available on a keyed stream (use key_by first)"
            raise StateError(msg)
        if descriptor.kind != kind:
            msg = (f"get_{kind}_state needs a {kind.capitalize()}StateDescriptor, got "
                   f"{type(descriptor).__name__}")
            raise TypeError(msg)
        return self._state_store.get_state(descriptor)

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        """Keyed ValueState; only available in functions applied to a keyed stream."""
        state: ValueState = self._keyed_state(descriptor, "value")
        return state

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        state: ListState = self._keyed_state(descriptor, "list")
        return state

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        state: MapState = self._keyed_state(descriptor, "map")
        return state

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState:
        state: ReducingState = self._keyed_state(descriptor, "reducing")
        return state

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor
                              ) -> AggregatingState:
        state: AggregatingState = self._keyed_state(descriptor, "aggregating")
        return state


class Function(ABC, TypeParameters):
    """Base of rich functions: ``open`` runs once before the first record, ``close`` last.

    Function classes may be written with type parameters, as PyFlink code does
    (``ProcessWindowFunction[tuple, str, str, TimeWindow]``): the parameters document,
    and the class is the same.
    """

    def open(self, runtime_context: RuntimeContext) -> None:
        """Called on the task thread before any record."""

    def close(self) -> None:
        """Called on the task thread after the last record, also on failure."""


class MapFunction(Function):
    @abstractmethod
    def map(self, value: Any) -> Any: ...


class FlatMapFunction(Function):
    @abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any]: ...


class FilterFunction(Function):
    @abstractmethod
    def filter(self, value: Any) -> bool: ...


class ReduceFunction(Function):
    @abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any: ...


class KeySelector(Function):
    @abstractmethod
    def get_key(self, value: Any) -> Any: ...


class ProcessFunction(Function):
    """A function that may emit any number of records per input record."""

    class Context(_SideOutputs):
        def __init__(self, timer_service: TimerService | None = None) -> None:
            self.current_key: Any = None
            self._timestamp: int | None = None
            self._timer_service = timer_service

        def timestamp(self) -> int | None:
            """The event-time timestamp of the current record (None if it has none)."""
            return None if self._timestamp == NO_TIMESTAMP else self._timestamp

        def timer_service(self) -> TimerService:
            """The current processing time and watermark; setting timers needs a keyed
            stream (a KeyedProcessFunction), as in Flink."""
            if self._timer_service is None:  # a context made outside an operator
                self._timer_service = non_keyed_timer_service(OperatorClock())
            return self._timer_service

    @abstractmethod
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None:
        ...


class KeyedProcessFunction(Function):
    """Process function on a keyed stream, with keyed state and timers.

    Example:
        >>> from weir import KeyedProcessFunction, ValueStateDescriptor
        >>> class CountPerKey(KeyedProcessFunction):
        ...     def open(self, runtime_context):
        ...         self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        ...     def process_element(self, value, ctx):
        ...         n = (self.count.value() or 0) + 1
        ...         self.count.update(n)
        ...         if n == 1:   # report the key's count a minute of event time later
        ...             ctx.timer_service().register_event_time_timer(ctx.timestamp() + 60_000)
        ...     def on_timer(self, timestamp, ctx):
        ...         yield ctx.get_current_key(), self.count.value()
    """

    class Context(_SideOutputs):
        def __init__(self, timer_service: TimerService | None = None) -> None:
            self._key: Any = None
            self._timestamp: int | None = None
            self._timer_service = timer_service

        def get_current_key(self) -> Any:
            return self._key

        def timestamp(self) -> int | None:
            """The current record's event-time timestamp (None if it has none); in
            ``on_timer``, the timer's timestamp."""
            return None if self._timestamp == NO_TIMESTAMP else self._timestamp

        def timer_service(self) -> TimerService:
            if self._timer_service is None:
                msg = "timers are only available on a keyed stream"
                raise StateError(msg)
            return self._timer_service

    class OnTimerContext(Context):
        def __init__(self, timer_service: TimerService | None = None) -> None:
            super().__init__(timer_service)
            self._time_domain = TimeDomain.EVENT_TIME

        def time_domain(self) -> TimeDomain:
            """Whether the firing timer was an event-time or a processing-time one."""
            return self._time_domain

    @abstractmethod
    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> (
            Iterable[Any] | None):
        ...

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> (
            Iterable[Any] | None):
        """A timer of the current key fired (may yield outputs)."""
        return None


class CoMapFunction(Function):
    """Maps the two inputs of connected streams: ``map1`` for the first stream's records,
    ``map2`` for the second's, one output each.

    Example:
        >>> class Tag(CoMapFunction):
        ...     def map1(self, value):
        ...         return ("order", value)
        ...     def map2(self, value):
        ...         return ("payment", value)
        >>> Tag().map2(7)
        ('payment', 7)
    """

    @abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(Function):
    """``flat_map1`` / ``flat_map2``: any number of outputs per record of either input."""

    @abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any] | None: ...


class CoProcessFunction(Function):
    """Processes the records of two connected (not keyed) streams; the outputs of
    ``process_element1``/``process_element2`` take the timestamp of their record."""

    class Context(ProcessFunction.Context):
        pass

    @abstractmethod
    def process_element1(self, value: Any, ctx: CoProcessFunction.Context) -> (
            Iterable[Any] | None): ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: CoProcessFunction.Context) -> (
            Iterable[Any] | None): ...


class KeyedCoProcessFunction(Function):
    """Processes two streams keyed alike (``connect(...).key_by(k1, k2)``): keyed state
    shared by both inputs' records of a key, and timers, as in a KeyedProcessFunction.

    Example:
        >>> from weir import ValueStateDescriptor
        >>> class Join(KeyedCoProcessFunction):
        ...     def open(self, runtime_context):
        ...         self.order = runtime_context.get_state(ValueStateDescriptor("order"))
        ...     def process_element1(self, order, ctx):
        ...         self.order.update(order)
        ...     def process_element2(self, payment, ctx):
        ...         if self.order.value() is not None:
        ...             yield self.order.value(), payment
    """

    class Context(KeyedProcessFunction.Context):
        pass

    class OnTimerContext(KeyedProcessFunction.OnTimerContext):
        pass

    @abstractmethod
    def process_element1(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> (
            Iterable[Any] | None): ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> (
            Iterable[Any] | None): ...

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext) -> (
            Iterable[Any] | None):
        """A timer of the current key fired (may yield outputs)."""
        return None


class _BroadcastStates:
    """What a broadcast function's contexts share: the operator's broadcast states."""

    _broadcast: dict[str, BroadcastState]
    _writable = False

    def get_broadcast_state(self, state_descriptor: MapStateDescriptor
                            ) -> BroadcastState | ReadOnlyBroadcastState:
        """The broadcast state of ``state_descriptor`` (one given to ``broadcast(...)``):
        writable in ``process_broadcast_element``, read-only elsewhere."""
        from weir.state.operator_state import ReadOnlyBroadcastState

        state = self._broadcast.get(state_descriptor.name)
        if state is None:
            known = ", ".join(sorted(self._broadcast)) or "none"
            msg = (f"no broadcast state {state_descriptor.name!r}: pass its descriptor to "
                   f"broadcast(...) (this stream's: {known})")
            raise KeyError(msg)
        return state if self._writable else ReadOnlyBroadcastState(state)


class BaseBroadcastProcessFunction(Function):
    """What BroadcastProcessFunction and KeyedBroadcastProcessFunction share (PyFlink's
    base of both): contexts that give the record's timestamp, the current processing time
    and watermark, side outputs and the broadcast state (read-only in ``ReadOnlyContext``,
    writable in ``Context``)."""

    class BaseContext(ABC):
        """The clocks of every broadcast function's context (its ``timer_service()``'s)."""

        @abstractmethod
        def timer_service(self) -> TimerService:
            """Given by the (keyed or not) process function context each concrete context
            mixes in first."""

        def current_processing_time(self) -> int:
            """The wall clock, epoch milliseconds."""
            return self.timer_service().current_processing_time()

        def current_watermark(self) -> int:
            """The operator's event time: the last watermark it received."""
            return self.timer_service().current_watermark()

    class ReadOnlyContext(BaseContext, _BroadcastStates):
        """The context of ``process_element``: broadcast state is read-only."""

    class Context(ReadOnlyContext):
        """The context of ``process_broadcast_element``: broadcast state is writable."""

        _writable = True


class BroadcastProcessFunction(BaseBroadcastProcessFunction):
    """The broadcast state pattern on a non-keyed stream: ``process_element`` sees each
    record of the stream with read-only broadcast state, ``process_broadcast_element``
    each broadcast record with writable broadcast state.

    Example:
        >>> from weir import MapStateDescriptor
        >>> RULES = MapStateDescriptor("rules")
        >>> class Filter(BroadcastProcessFunction):
        ...     def process_element(self, value, ctx):
        ...         if ctx.get_broadcast_state(RULES).contains(value):
        ...             yield value
        ...     def process_broadcast_element(self, value, ctx):
        ...         ctx.get_broadcast_state(RULES).put(value, True)
    """

    class ReadOnlyContext(ProcessFunction.Context, BaseBroadcastProcessFunction.ReadOnlyContext):
        def __init__(self, broadcast: dict[str, BroadcastState] | None = None,
                     timer_service: TimerService | None = None) -> None:
            ProcessFunction.Context.__init__(self, timer_service)
            self._broadcast = broadcast or {}

    class Context(ReadOnlyContext, BaseBroadcastProcessFunction.Context):
        _writable = True

    @abstractmethod
    def process_element(self, value: Any, ctx: BroadcastProcessFunction.ReadOnlyContext
                        ) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: BroadcastProcessFunction.Context
                                  ) -> Iterable[Any] | None: ...


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction):
    """The broadcast state pattern on a keyed stream: as BroadcastProcessFunction, with
    keyed state and timers for the keyed records, and ``ctx.apply_to_keyed_state`` for
    broadcast records to visit every key's state."""

    class ReadOnlyContext(KeyedProcessFunction.Context,
                          BaseBroadcastProcessFunction.ReadOnlyContext):
        def __init__(self, timer_service: TimerService | None = None,
                     broadcast: dict[str, BroadcastState] | None = None) -> None:
            KeyedProcessFunction.Context.__init__(self, timer_service)
            self._broadcast = broadcast or {}

    class Context(ReadOnlyContext, BaseBroadcastProcessFunction.Context):
        _writable = True

        def __init__(self, timer_service: TimerService | None = None,
                     broadcast: dict[str, BroadcastState] | None = None,
                     backend: KeyedStateBackend | None = None) -> None:
            super().__init__(timer_service, broadcast)
            self._backend = backend

        def apply_to_keyed_state(self, state_descriptor: StateDescriptor,
                                 function: Callable[[Any, Any], object]) -> None:
            """Call ``function(key, state)`` for every key that has ``state_descriptor``'s
            state in this subtask, the state scoped to that key."""
            backend = self._backend
            if backend is None:  # a context made outside an operator
                msg = "apply_to_keyed_state needs a keyed stream"
                raise StateError(msg)
            state = backend.get_state(state_descriptor)
            for key in list(backend.keys(state_descriptor.name)):
                backend.set_current_key(key)
                function(key, state)

    class OnTimerContext(ReadOnlyContext):
        def __init__(self, timer_service: TimerService | None = None,
                     broadcast: dict[str, BroadcastState] | None = None) -> None:
            super().__init__(timer_service, broadcast)
            self._time_domain = TimeDomain.EVENT_TIME

        def time_domain(self) -> TimeDomain:
            return self._time_domain

    @abstractmethod
    def process_element(self, value: Any,
                        ctx: KeyedBroadcastProcessFunction.ReadOnlyContext
                        ) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_broadcast_element(self, value: Any,
                                  ctx: KeyedBroadcastProcessFunction.Context
                                  ) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: KeyedBroadcastProcessFunction.OnTimerContext
                 ) -> Iterable[Any] | None:
        """A timer of the current key fired (may yield outputs)."""
        return None


class AsyncFunction(Function):
    """A function called asynchronously (``AsyncDataStream``): ``async_invoke`` is a
    coroutine returning the outputs of one record (a list); many run at once. ``timeout``
    is called instead when a call takes longer than the timeout (by default the task fails
    with a TimeoutError)."""

    @abstractmethod
    async def async_invoke(self, value: Any) -> Iterable[Any] | None: ...

    def timeout(self, value: Any) -> Iterable[Any] | None:
        msg = f"the async call for {value!r:.80} timed out"
        raise TimeoutError(msg)


def resolve_callable(fn: object, method: str) -> Callable[..., Any]:
    """The callable to apply: ``fn.method`` for function objects, ``fn`` for callables
    (the user's: what they take and return is theirs)."""
    bound: object = getattr(fn, method, None)
    if isinstance(fn, Function) and callable(bound):
        return bound
    if callable(fn):
        return fn
    msg = f"expected a callable or an object with a '{method}' method, got {type(fn).__name__}"
    raise TypeError(msg)
