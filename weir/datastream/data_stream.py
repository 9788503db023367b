"""The streams (PyFlink's ``pyflink.datastream.data_stream``): ``DataStream``,
``KeyedStream`` and the windowed, connected and broadcast streams.

Example:
    >>> from weir import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> ds = env.from_collection(["a b", "b c"])
    >>> counts = (ds.flat_map(lambda line: [(w, 1) for w in line.split()])
    ...             .key_by(lambda t: t[0])
    ...             .reduce(lambda a, b: (a[0], a[1] + b[1])))
    >>> counts.get_name()
    'Keyed Reduce'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, overload

from weir.common.watermark_strategy import WatermarkStrategy
from weir.core.errors import InvalidJobError
from weir.core.row import Row
from weir.core.time import to_millis
from weir.core.types import TypeInformation, Types
from weir.datastream.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
)
from weir.datastream.graph import (
    BROADCAST,
    FORWARD,
    HASH,
    REBALANCE,
    PartitionerType,
    Transformation,
)
from weir.datastream.output_tag import OutputTag
from weir.datastream.slot_sharing_group import SlotSharingGroup, warn_no_effect
from weir.datastream.window.assigners import (
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    GlobalWindows,
    WindowAssigner,
    _CountWindows,
)
from weir.datastream.window.evictors import CountEvictor, Evictor
from weir.datastream.window.functions import WindowFunctionAdapter, as_window_function
from weir.datastream.window.triggers import (
    CountTrigger,
    FullSlidingCountTrigger,
    PurgingTrigger,
    Trigger,
)
from weir.operators.basic import (
    FilterBatchesOperator,
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    ProcessOperator,
)
from weir.operators.broadcast import BroadcastProcessOperator
from weir.operators.co import CoFunction, CoOperator
from weir.operators.event_time import TimestampsAndWatermarksOperator
from weir.operators.keyed import (
    FieldAggregateOperator,
    KeyedProcessOperator,
    ReduceOperator,
    field_value,
)
from weir.operators.keys import FieldKeySpec, KeyBy, KeySpec, key_spec
from weir.operators.sinks.collect import CollectSinkOperator
from weir.operators.sinks.printing import PrintSinkOperator
from weir.operators.vectorized import VectorizedAggregateOperator
from weir.operators.window.operator import (
    AGGREGATE,
    PROCESS,
    REDUCE,
    CountPerKey,
    FieldReducer,
    WindowOperator,
)
from weir.operators.window.vectorized import VectorizedWindowAggregateOperator
from weir.unsupported import CUSTOM_PARTITIONERS, refuse

if TYPE_CHECKING:
    from weir.common.time import TimeSpan
    from weir.core.execution import JobClient
    from weir.datastream.connectors.base import Sink
    from weir.datastream.stream_execution_environment import StreamExecutionEnvironment
    from weir.datastream.window.functions import (
        AggregateFunction,
        AllWindowFunction,
        ProcessAllWindowFunction,
        ProcessWindowFunction,
        WindowFunction,
    )
    from weir.state.descriptors import MapStateDescriptor
    from weir.taskexecutor.operator import StreamOperator


__all__ = ["AllWindowedStream", "BroadcastConnectedStream", "BroadcastStream", "CloseableIterator",
           "ConnectedStreams", "DataStream", "DataStreamSink", "KeyedStream", "WindowedStream"]

#: PyFlink's methods of a stream weir has no such thing for -> why.
_UNSUPPORTED_METHODS = {
    "set_uid_hash": "set uids with uid()",
    "partition_custom": f"{CUSTOM_PARTITIONERS}: key_by the partition you want instead",
    "cache": "cached intermediate results are not supported",
    "set_buffer_timeout": "the buffer timeout is per job: env.set_buffer_timeout(ms)",
}
#: The sink's share of them: what ``sink_to``/``add_sink``/``print`` return.
_UNSUPPORTED_SINK_METHODS = {name: _UNSUPPORTED_METHODS[name] for name in ("set_uid_hash",)}


class DataStream:
    """A stream of records produced by one transformation."""

    #: PyFlink's methods this class refuses, with why (read by ``weir.docgen``).
    __unsupported__ = _UNSUPPORTED_METHODS

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation) -> None:
        self._env = env
        self._t = transformation

    # -- naming and parallelism -------------------------------------------------------------

    def name(self, name: str) -> DataStream:
        """Set the operator's name (shown in `weir status` and metrics)."""
        self._t.name = name
        return self

    def get_name(self) -> str:
        return self._t.name

    def uid(self, uid: str) -> DataStream:
        """Set the operator's stable id: state is matched to operators by uid on restore."""
        self._t.uid = uid
        if self._t.operator is not None:
            self._t.operator.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        if parallelism < 1:
            msg = f"parallelism must be at least 1, got {parallelism}"
            raise ValueError(msg)
        self._t.parallelism = parallelism
        return self

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        if max_parallelism < 1:
            msg = f"max parallelism must be at least 1, got {max_parallelism}"
            raise ValueError(msg)
        self._t.max_parallelism = max_parallelism
        return self

    def force_non_parallel(self) -> DataStream:
        """Run this operator as one subtask (parallelism and max parallelism 1)."""
        return self.set_parallelism(1).set_max_parallelism(1)

    def start_new_chain(self) -> DataStream:
        """Begin a new chain (task) at this operator."""
        self._t.start_new_chain = True
        return self

    def disable_chaining(self) -> DataStream:
        """Chain this operator with neither its input nor its consumer."""
        self._t.disable_chaining = True
        return self

    def slot_sharing_group(self, slot_sharing_group: str | SlotSharingGroup) -> DataStream:
        """Accepted, without effect (see :mod:`weir.datastream.slot_sharing_group`)."""
        name = slot_sharing_group if isinstance(slot_sharing_group, str) \
            else slot_sharing_group.get_name()
        warn_no_effect(f"slot_sharing_group({name!r})")
        return self

    def set_description(self, description: str) -> DataStream:
        """A description of the operator, for people reading the program."""
        self._t.description = description
        return self

    def get_execution_environment(self) -> StreamExecutionEnvironment:
        return self._env

    def get_type(self) -> TypeInformation:
        """The declared type of the records (PICKLED_BYTE_ARRAY when none was declared:
        records then travel as Arrow columns inferred per batch, or pickles)."""
        declared = self._declared_type()
        return declared if declared is not None else Types.PICKLED_BYTE_ARRAY()

    def _declared_type(self) -> TypeInformation | None:
        t = self._t
        # Partitioning and union pass records on unchanged (union's inputs are alike).
        while t.kind in ("partition", "union") and t.inputs and not t.side_output:
            t = t.inputs[0]
        if t.kind == "source":
            return getattr(t.source, "type_info", None)
        return getattr(t.operator, "output_type", None)

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("_"):
            raise AttributeError(name)
        refuse(type(self).__name__, name, self.__unsupported__)

    def get_parallelism(self) -> int:
        return self._t.parallelism or self._env.get_parallelism()

    # -- per-record operators ---------------------------------------------------------------

    def _then(self, name: str, operator: StreamOperator) -> DataStream:
        t = Transformation(name=name, kind="operator", inputs=[self._t], operator=operator)
        return DataStream(self._env, t)

    def map(self, func: MapFunction | Callable[[Any], Any],
            output_type: TypeInformation | None = None) -> DataStream:
        """One output record per input record."""
        return self._then("Map", MapOperator("Map", func, output_type))

    def flat_map(self, func: FlatMapFunction | Callable[[Any], Iterable[Any]],
                 output_type: TypeInformation | None = None) -> DataStream:
        """Any number of output records per input record (the function returns an iterable)."""
        return self._then("Flat Map", FlatMapOperator("Flat Map", func, output_type))

    def filter(self, func: FilterFunction | Callable[[Any], bool]) -> DataStream:
        """Keep the records for which the function returns True."""
        return self._then("Filter", FilterOperator("Filter", func))

    def process(self, func: ProcessFunction, output_type: TypeInformation | None = None
                ) -> DataStream:
        """Apply a ProcessFunction (``process_element(value, ctx)`` yields outputs)."""
        return self._then("Process", ProcessOperator("Process", func, output_type))

    def assign_timestamps_and_watermarks(self, watermark_strategy: WatermarkStrategy
                                         ) -> DataStream:
        """Stamp each record with its event-time timestamp and emit watermarks, as the
        strategy says (see :class:`~weir.common.watermark_strategy.WatermarkStrategy`)."""
        if not isinstance(watermark_strategy, WatermarkStrategy):
            msg = ("assign_timestamps_and_watermarks expects a WatermarkStrategy, got "
                   f"{type(watermark_strategy).__name__}")
            raise TypeError(msg)
        name = "Timestamps/Watermarks"
        stream = self._then(name, TimestampsAndWatermarksOperator(name, watermark_strategy))
        # As in Flink, at its input's parallelism: a source's records keep their order.
        stream._t.inherits_parallelism = True
        return stream

    # -- vectorised operators ---------------------------------------------------------------

    def map_batches(self, func: Callable[[Any], Any]) -> DataStream:
        """``func(pyarrow.RecordBatch) -> RecordBatch | Table``, once per batch."""
        return self._then("Map Batches", MapBatchesOperator("Map Batches", func))

    def filter_batches(self, func: Callable[[Any], Any]) -> DataStream:
        """``func(pyarrow.RecordBatch) -> boolean mask``: keep the rows where it is True."""
        return self._then("Filter Batches", FilterBatchesOperator("Filter Batches", func))

    # -- partitioning -----------------------------------------------------------------------

    def _partition(self, name: str, partitioner: PartitionerType, key: KeySpec | None = None,
                   label: str = "") -> Transformation:
        return Transformation(name=name, kind="partition", inputs=[self._t],
                              partitioner=partitioner, key=key, ship_strategy=label)

    def key_by(self, key_selector: KeyBy, key_type: TypeInformation | None = None
               ) -> KeyedStream:
        """Partition by key: a column name or position (vectorised), a tuple, or a function.
        ``key_type`` (PyFlink's) is accepted: keys are hashed from their Python value."""
        spec = key_spec(key_selector)
        return KeyedStream(self._env, self._partition("Key By", HASH, spec), spec)

    def rebalance(self) -> DataStream:
        """Round-robin batches over the downstream subtasks."""
        return DataStream(self._env, self._partition("Rebalance", REBALANCE))

    def shuffle(self) -> DataStream:
        """Spread records evenly over the downstream subtasks (as rebalance does)."""
        return DataStream(self._env, self._partition("Shuffle", REBALANCE, label="SHUFFLE"))

    def rescale(self) -> DataStream:
        """Spread records over the downstream subtasks (as rebalance does)."""
        return DataStream(self._env, self._partition("Rescale", REBALANCE, label="RESCALE"))

    def forward(self) -> DataStream:
        """Send subtask i's records to downstream subtask i (equal parallelism)."""
        return DataStream(self._env, self._partition("Forward", FORWARD))

    def project(self, *field_indexes: int) -> DataStream:
        """Tuples of the given fields of each (tuple) record."""
        indexes = tuple(field_indexes)
        return self.map(lambda record: tuple(record[i] for i in indexes)).name("Projection")

    @overload
    def broadcast(self) -> DataStream: ...

    @overload
    def broadcast(self, broadcast_state_descriptor: MapStateDescriptor, /,
                  *broadcast_state_descriptors: MapStateDescriptor) -> BroadcastStream: ...

    def broadcast(self, *broadcast_state_descriptors: MapStateDescriptor
                  ) -> DataStream | BroadcastStream:
        """Send every record to every downstream subtask. With MapStateDescriptors, a
        BroadcastStream for the broadcast state pattern: ``connect`` it to a stream (keyed
        or not) and ``process`` with a (Keyed)BroadcastProcessFunction."""
        partitioned = DataStream(self._env, self._partition("Broadcast", BROADCAST))
        if broadcast_state_descriptors:
            return BroadcastStream(partitioned, list(broadcast_state_descriptors))
        return partitioned

    def union(self, *streams: DataStream) -> DataStream:
        """Merge streams (of the same kind of records) into one."""
        t = Transformation(name="Union", kind="union",
                           inputs=[self._t, *(s._t for s in streams)])
        return DataStream(self._env, t)

    def get_side_output(self, output_tag: OutputTag) -> DataStream:
        """The records this stream's operator emitted to ``output_tag`` (a process
        function's ``yield output_tag, value`` or ``ctx.output(output_tag, value)``; a
        window's late data)."""
        if not isinstance(output_tag, OutputTag):
            msg = f"get_side_output needs an OutputTag, got {type(output_tag).__name__}"
            raise TypeError(msg)
        if self._t.kind in ("partition", "union", "side"):
            msg = ("get_side_output reads the side output of an operator: call it on the "
                   "stream the process function (or window) returned")
            raise TypeError(msg)
        t = Transformation(name=f"Side Output {output_tag.tag_id}", kind="side",
                           inputs=[self._t], side_output=output_tag.tag_id)
        return DataStream(self._env, t)

    def window_all(self, window_assigner: WindowAssigner) -> AllWindowedStream:
        """Windows over the whole stream (not keyed; evaluated by one subtask)."""
        return AllWindowedStream(self, window_assigner)

    def count_window_all(self, size: int, slide: int | None = 0) -> AllWindowedStream:
        """Windows of ``size`` records of the whole stream (see ``count_window``)."""
        return self.window_all(_count_assigner(size, slide))

    @overload
    def connect(self, ds: BroadcastStream) -> BroadcastConnectedStream: ...

    @overload
    def connect(self, ds: DataStream) -> ConnectedStreams: ...

    def connect(self, ds: DataStream | BroadcastStream
                ) -> ConnectedStreams | BroadcastConnectedStream:
        """Connect two streams, possibly of different kinds of records, for one two-input
        function (``map``, ``flat_map``, ``process``; keyed when both streams are keyed,
        ``a.key_by(f).connect(b.key_by(g))``, or after ``connect(...).key_by(f, g)``); or a
        BroadcastStream, for the broadcast state pattern."""
        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds)
        if not isinstance(ds, DataStream):
            msg = f"connect expects a DataStream, got {type(ds).__name__}"
            raise TypeError(msg)
        if isinstance(self, KeyedStream) and isinstance(ds, KeyedStream):
            return ConnectedStreams(self, ds, (self._key, ds._key))
        return ConnectedStreams(self, ds)

    # -- sinks ------------------------------------------------------------------------------

    def _sink(self, name: str, operator: StreamOperator) -> DataStreamSink:
        t = Transformation(name=name, kind="sink", inputs=[self._t], operator=operator)
        self._env._add_sink(t)
        return DataStreamSink(self._env, t)

    def sink_to(self, sink: Sink) -> DataStreamSink:
        """Write to a sink (e.g. ``FileSink``)."""
        if not callable(getattr(sink, "create_operator", None)):
            msg = (f"sink_to takes a weir Sink (FileSink, DiscardingSink, ...), got "
                   f"{type(sink).__name__}: PyFlink's Java sinks (Kafka, JDBC and the like) "
                   "do not exist in weir")
            raise InvalidJobError(msg)
        name = f"Sink: {sink.name}"
        return self._sink(name, sink.create_operator(name))

    def add_sink(self, sink_func: Sink) -> DataStreamSink:
        """PyFlink's ``add_sink``, for a weir Sink (as ``sink_to``)."""
        return self.sink_to(sink_func)

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        """Print every record to the task's stdout (``N> record`` with parallelism > 1;
        ``sink_identifier:N> record`` with an identifier), written as PyFlink writes a
        record of the stream's declared type (``(a,1)`` for a ``Types.TUPLE``, ``+I[a, 1]``
        for a ``Types.ROW``; ``str(record)`` without a declared type)."""
        return self._sink(f"Sink: Print{' ' + sink_identifier if sink_identifier else ''}",
                          PrintSinkOperator("Print", sink_identifier=sink_identifier,
                                            type_info=self._declared_type()))

    def execute_and_collect(self, job_execution_name: str | None = None,
                            limit: int | None = None) -> CloseableIterator | list[Any]:
        """Run the job and iterate over this stream's records as they arrive; with
        ``limit``, as in PyFlink, return a list of the first ``limit`` records instead (all
        of them if the job ends with fewer), the job cancelled if it still runs.

        Example: ``sorted(ds.execute_and_collect())``. Use as a context manager, or
        ``close()`` the iterator, to stop early (the job is cancelled if still running).
        """
        if limit is not None and limit <= 0:
            msg = f"execute_and_collect: the limit must be greater than 0, got {limit}"
            raise ValueError(msg)
        t = Transformation(name="Sink: Collect", kind="sink", inputs=[self._t],
                           operator=CollectSinkOperator("Collect"))
        self._env._add_sink(t)
        client = self._env.execute_async(job_execution_name)
        if limit is None:
            return CloseableIterator(client.collect(), client)
        # The collect iterator cancels the job (if still running) once it stops.
        return list(client.collect(limit))


class KeyedStream(DataStream):
    """A stream partitioned by key; aggregations on it keep state per key."""

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation,
                 key: KeySpec) -> None:
        super().__init__(env, transformation)
        self._key = key

    def _keyed(self, name: str, operator: StreamOperator) -> DataStream:
        return self._then(name, operator)

    # A keyed stream is partitioned by its key: PyFlink refuses to repartition it.

    @staticmethod
    def _keeps_its_partitioning() -> NoReturn:
        msg = "Cannot override partitioning for KeyedStream."
        raise InvalidJobError(msg)

    def shuffle(self) -> DataStream:
        """Refused, as in PyFlink: a keyed stream stays partitioned by its key."""
        self._keeps_its_partitioning()

    def rebalance(self) -> DataStream:
        """Refused, as in PyFlink: a keyed stream stays partitioned by its key."""
        self._keeps_its_partitioning()

    def rescale(self) -> DataStream:
        """Refused, as in PyFlink: a keyed stream stays partitioned by its key."""
        self._keeps_its_partitioning()

    def forward(self) -> DataStream:
        """Refused, as in PyFlink: a keyed stream stays partitioned by its key."""
        self._keeps_its_partitioning()

    @overload
    def broadcast(self) -> DataStream: ...

    @overload
    def broadcast(self, broadcast_state_descriptor: MapStateDescriptor, /,
                  *broadcast_state_descriptors: MapStateDescriptor) -> BroadcastStream: ...

    def broadcast(self, *broadcast_state_descriptors: MapStateDescriptor
                  ) -> DataStream | BroadcastStream:
        """Without descriptors, refused as in PyFlink (a keyed stream stays partitioned by
        its key). With MapStateDescriptors, a BroadcastStream of this stream's records, as
        weir always allowed (PyFlink refuses this too)."""
        if not broadcast_state_descriptors:
            self._keeps_its_partitioning()
        return super().broadcast(*broadcast_state_descriptors)

    # A keyed stream is no operator of its own: PyFlink refuses to name or configure it.

    @staticmethod
    def _no_operator(what: str) -> NoReturn:
        msg = (f"{what} KeyedStream is not supported: set it on the operator that follows "
               f"key_by")
        raise InvalidJobError(msg)

    def name(self, name: str) -> DataStream:
        """Refused, as in PyFlink (name the operator after ``key_by``)."""
        self._no_operator("Set name for")

    def get_name(self) -> str:
        self._no_operator("Get name of")

    def uid(self, uid: str) -> DataStream:
        """Refused, as in PyFlink (give the operator after ``key_by`` its uid)."""
        self._no_operator("Set uid for")

    def set_parallelism(self, parallelism: int) -> DataStream:
        self._no_operator("Set parallelism for")

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        self._no_operator("Set max parallelism for")

    def force_non_parallel(self) -> DataStream:
        self._no_operator("Set force non-parallel for")

    def start_new_chain(self) -> DataStream:
        self._no_operator("Start new chain for")

    def disable_chaining(self) -> DataStream:
        self._no_operator("Disable chaining for")

    def slot_sharing_group(self, slot_sharing_group: str | SlotSharingGroup) -> DataStream:
        self._no_operator("Setting slot sharing group for")

    def execute_and_collect(self, job_execution_name: str | None = None,
                            limit: int | None = None) -> CloseableIterator | list[Any]:
        """As in PyFlink, a keyed stream's records come back with their keys:
        ``Row(f0=key, f1=record)`` (``print()`` prints the records alone)."""
        key = self._key
        with_keys = DataStream(self._env, self._t).map(
            lambda record: Row(f0=key.get_key(record), f1=record))
        return with_keys.execute_and_collect(job_execution_name, limit)

    # Per-record functions on a keyed stream get keyed state through their runtime context
    # (Flink's rich functions on a KeyedStream).

    def map(self, func: MapFunction | Callable[[Any], Any],
            output_type: TypeInformation | None = None) -> DataStream:
        """One output per record; a MapFunction's ``open(runtime_context)`` may ask for
        keyed state, scoped to each record's key."""
        return self._then("Map", MapOperator("Map", func, output_type, key=self._key))

    def flat_map(self, func: FlatMapFunction | Callable[[Any], Iterable[Any]],
                 output_type: TypeInformation | None = None) -> DataStream:
        return self._then("Flat Map", FlatMapOperator("Flat Map", func, output_type,
                                                      key=self._key))

    def filter(self, func: FilterFunction | Callable[[Any], bool]) -> DataStream:
        return self._then("Filter", FilterOperator("Filter", func, key=self._key))

    def reduce(self, func: ReduceFunction | Callable[[Any, Any], Any]) -> DataStream:
        """Running reduction per key: the updated value is emitted for every record."""
        return self._keyed("Keyed Reduce", ReduceOperator("Keyed Reduce", self._key, func,
                                                          self._declared_type()))

    def _aggregate(self, kind: str, field: str | int | None) -> DataStream:
        name = f"Keyed {kind.capitalize()}"
        column = self._key.column if isinstance(self._key, FieldKeySpec) else None
        if isinstance(column, str) and (field is None or isinstance(field, str)):
            return self._keyed(name, VectorizedAggregateOperator(name, column, kind, field))
        if kind == "count":
            key = self._key
            return self.map(lambda r: (key.get_key(r), 1)).key_by(0).sum(1).name(name)
        return self._keyed(name, FieldAggregateOperator(name, self._key, kind,
                                                        0 if field is None else field))

    def sum(self, position_to_sum: str | int = 0) -> DataStream:
        """Running sum of a field (position or name) per key (vectorised when keyed by a
        column name)."""
        return self._aggregate("sum", position_to_sum)

    def min(self, position_to_min: str | int = 0) -> DataStream:
        return self._aggregate("min", position_to_min)

    def max(self, position_to_max: str | int = 0) -> DataStream:
        return self._aggregate("max", position_to_max)

    def count(self) -> DataStream:
        """Running count per key: (key, count) for every record."""
        return self._aggregate("count", None)

    def min_by(self, position_to_min_by: str | int = 0) -> DataStream:
        """Per key, the record with the smallest field so far (the first on ties)."""
        return self.reduce(_by(position_to_min_by, smaller=True)).name("Keyed Min By")

    def max_by(self, position_to_max_by: str | int = 0) -> DataStream:
        """Per key, the record with the largest field so far (the first on ties)."""
        return self.reduce(_by(position_to_max_by, smaller=False)).name("Keyed Max By")

    def process(self, func: KeyedProcessFunction | ProcessFunction,
                output_type: TypeInformation | None = None) -> DataStream:
        """Apply a KeyedProcessFunction: keyed state via ``open(runtime_context)``, timers
        via ``ctx.timer_service()`` firing ``on_timer``."""
        return self._keyed("Keyed Process",
                           KeyedProcessOperator("Keyed Process", self._key, func, output_type))

    def window(self, window_assigner: WindowAssigner) -> WindowedStream:
        """Group each key's records into windows (tumbling, sliding, session; by event or
        processing time; or count windows), evaluated by the function given next."""
        if not isinstance(window_assigner, WindowAssigner):
            msg = ("window expects a WindowAssigner (e.g. TumblingEventTimeWindows.of(...)), "
                   f"got {type(window_assigner).__name__}")
            raise TypeError(msg)
        if isinstance(window_assigner, _CountWindows):
            return _count_windows(WindowedStream(self, GlobalWindows.create()),
                                  window_assigner)
        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int | None = 0) -> WindowedStream:
        """Windows of ``size`` records per key, evaluated when full (an incomplete last
        window is not); with a ``slide`` other than 0, a window of ``size`` records starts
        every ``slide`` records, as in PyFlink (Java's countWindow also fires windows that
        are not yet full; PyFlink's and weir's do not)."""
        return self.window(_count_assigner(size, slide))


def _count_assigner(size: int, slide: int | None) -> _CountWindows:
    # PyFlink's default slide is 0 (tumbling); weir's used to be None: both mean tumbling.
    if not slide:
        return CountTumblingWindowAssigner.of(size)
    return CountSlidingWindowAssigner.of(size, slide)


def _count_windows(windowed: WindowedStream, assigner: _CountWindows) -> WindowedStream:
    """A WindowedStream over GlobalWindows made into the assigner's count windows
    (``window_all`` reaches it through a keyed stream of one key).
    GlobalWindows stays the assigner so that the operator's name (and derived uid) is the
    one ``count_window`` always gave."""
    if assigner.slide == 0:
        return windowed.trigger(PurgingTrigger.of(CountTrigger.of(assigner.size)))
    return windowed.evictor(CountEvictor.of(assigner.size)).trigger(
        FullSlidingCountTrigger(assigner.size, assigner.slide))


def _by(field: str | int, smaller: bool) -> Callable[[Any, Any], Any]:
    def pick(kept: Any, new: Any) -> Any:
        a, b = field_value(kept, field), field_value(new, field)
        return new if (b < a if smaller else b > a) else kept
    return pick


def _all_key(record: Any) -> int:
    """The one key of a non-keyed window (``window_all``)."""
    return 0


class AllWindowedStream:
    """Windows over a whole (non-keyed) stream, evaluated by one subtask as Flink does
    (``window_all``, ``count_window_all``)."""

    def __init__(self, stream: DataStream, assigner: WindowAssigner) -> None:
        self._windowed = stream.key_by(_all_key).window(assigner)

    def trigger(self, trigger: Trigger) -> AllWindowedStream:
        self._windowed.trigger(trigger)
        return self

    def allowed_lateness(self, time_ms: TimeSpan) -> AllWindowedStream:
        self._windowed.allowed_lateness(time_ms)
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> AllWindowedStream:
        self._windowed.side_output_late_data(output_tag)
        return self

    def evictor(self, evictor: Evictor) -> AllWindowedStream:
        self._windowed.evictor(evictor)
        return self

    @staticmethod
    def _one(stream: DataStream) -> DataStream:
        return stream.set_parallelism(1)

    def reduce(self, reduce_function: ReduceFunction | Callable[[Any, Any], Any],
               window_function: AllWindowFunction | ProcessAllWindowFunction | None = None,
               output_type: TypeInformation | None = None) -> DataStream:
        """Fold each window's records with ``reduce_function(a, b)`` as they arrive; with
        an AllWindowFunction or ProcessAllWindowFunction, it gets the reduced value (and
        the window) at the end."""
        return self._one(self._windowed._apply(
            "Reduce", REDUCE, reduce_function, as_window_function(window_function, keyed=False),
            output_type))

    def aggregate(self, aggregate_function: AggregateFunction,
                  window_function: AllWindowFunction | ProcessAllWindowFunction | None = None,
                  accumulator_type: TypeInformation | None = None,
                  output_type: TypeInformation | None = None) -> DataStream:
        """Fold each window's records into an accumulator (an AggregateFunction); with an
        AllWindowFunction or ProcessAllWindowFunction, it gets the result (and the window)
        at the end. ``accumulator_type`` is accepted, as in PyFlink."""
        return self._one(self._windowed._apply(
            "Aggregate", AGGREGATE, aggregate_function,
            as_window_function(window_function, keyed=False), output_type))

    def apply(self, window_function: AllWindowFunction,
              output_type: TypeInformation | None = None) -> DataStream:
        """An AllWindowFunction: ``apply(window, inputs)``."""
        return self._one(self._windowed._apply(
            "Apply", PROCESS, WindowFunctionAdapter(window_function, "apply_all"),
            None, output_type))

    def process(self, process_window_function: ProcessAllWindowFunction,
                output_type: TypeInformation | None = None) -> DataStream:
        """A ProcessAllWindowFunction: ``process(context, elements)``."""
        return self._one(self._windowed._apply(
            "Process", PROCESS, WindowFunctionAdapter(process_window_function,
                                                       "process_all"), None, output_type))


class WindowedStream:
    """A keyed stream cut into windows; the window function makes it a DataStream again.

    Example:
        >>> from weir import StreamExecutionEnvironment, TumblingEventTimeWindows, Time
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> sums = (env.from_collection([("a", 1)]).key_by(lambda r: r[0])
        ...         .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        ...         .reduce(lambda x, y: (x[0], x[1] + y[1])))
        >>> sums.get_name()
        'Window(TumblingEventTimeWindows.of(10000 ms), Reduce)'
    """

    def __init__(self, keyed: KeyedStream, assigner: WindowAssigner) -> None:
        self._keyed = keyed
        self._assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness_ms = 0
        self._late_tag = ""
        self._evictor: Evictor | None = None

    def trigger(self, trigger: Trigger) -> WindowedStream:
        """Replace the assigner's default trigger."""
        if not isinstance(trigger, Trigger):
            msg = f"trigger expects a Trigger, got {type(trigger).__name__}"
            raise TypeError(msg)
        self._trigger = trigger
        return self

    def allowed_lateness(self, time_ms: TimeSpan) -> WindowedStream:
        """Keep windows this long (ms, Duration or Time) after they fired, for late records."""
        lateness = to_millis(time_ms)
        if lateness < 0:
            msg = f"allowed lateness must not be negative, got {lateness} ms"
            raise ValueError(msg)
        self._lateness_ms = lateness
        return self

    def evictor(self, evictor: Evictor) -> WindowedStream:
        """Remove records from each window when it fires (CountEvictor, TimeEvictor)."""
        if not isinstance(evictor, Evictor):
            msg = f"evictor expects an Evictor, got {type(evictor).__name__}"
            raise TypeError(msg)
        self._evictor = evictor
        return self

    def apply(self, window_function: WindowFunction,
              output_type: TypeInformation | None = None) -> DataStream:
        """A WindowFunction: ``apply(key, window, inputs)`` yields each window's outputs."""
        return self._apply("Apply", PROCESS, WindowFunctionAdapter(window_function, "apply"),
                           None, output_type)

    def side_output_late_data(self, output_tag: OutputTag) -> WindowedStream:
        """Send records too late for their window (past the allowed lateness) to this
        side output instead of dropping them: ``result.get_side_output(output_tag)``."""
        if not isinstance(output_tag, OutputTag):
            msg = f"side_output_late_data needs an OutputTag, got {type(output_tag).__name__}"
            raise TypeError(msg)
        self._late_tag = output_tag.tag_id
        return self

    def _apply(self, what: str, kind: str, function: Any, window_function: Any = None,
               output_type: TypeInformation | None = None) -> DataStream:
        # The functions are the user's (or adapters of them), of the form ``kind`` says:
        # the window operator checks them by their methods.
        name = f"Window({self._assigner!r}, {what})"
        operator = WindowOperator(name, self._keyed._key, self._assigner, kind, function,
                                  window_function, self._trigger, self._lateness_ms,
                                  output_type, self._late_tag, self._evictor)
        return self._keyed._keyed(name, operator)

    def reduce(self, reduce_function: ReduceFunction | Callable[[Any, Any], Any],
               window_function: ProcessWindowFunction | WindowFunction | None = None,
               output_type: TypeInformation | None = None) -> DataStream:
        """Fold each window's records with ``reduce_function(a, b)`` as they arrive; with
        a ProcessWindowFunction or WindowFunction, it gets the reduced value (and the
        window) at the end."""
        return self._apply("Reduce", REDUCE, reduce_function,
                           as_window_function(window_function, keyed=True), output_type)

    def aggregate(self, aggregate_function: AggregateFunction,
                  window_function: ProcessWindowFunction | WindowFunction | None = None,
                  accumulator_type: TypeInformation | None = None,
                  output_type: TypeInformation | None = None) -> DataStream:
        """Fold each window's records into an accumulator (an AggregateFunction); with a
        window function, it gets the result (and the window) at the end. As in PyFlink,
        ``accumulator_type`` is accepted (accumulators are Python objects)."""
        return self._apply("Aggregate", AGGREGATE, aggregate_function,
                           as_window_function(window_function, keyed=True), output_type)

    def process(self, process_window_function: ProcessWindowFunction,
                output_type: TypeInformation | None = None) -> DataStream:
        """Evaluate each window with all its records (a ProcessWindowFunction)."""
        return self._apply("Process", PROCESS, process_window_function, None, output_type)

    def _builtin(self, kind: str, field: str | int | None) -> DataStream:
        column = self._keyed._key.column if isinstance(self._keyed._key, FieldKeySpec) \
            else None
        if isinstance(column, str) and (field is None or isinstance(field, str)) and \
                not self._assigner.is_merging() and self._trigger is None and \
                self._evictor is None:
            name = f"Window({self._assigner!r}, {kind.capitalize()})"
            operator = VectorizedWindowAggregateOperator(name, column, self._assigner, kind,
                                                         field, self._lateness_ms)
            return self._keyed._keyed(name, operator)
        key = self._keyed._key
        if kind == "count":
            return self._apply("Count", AGGREGATE, CountPerKey(key))
        return self._apply(kind.capitalize(), REDUCE,
                           FieldReducer(kind, 0 if field is None else field))

    def sum(self, position_to_sum: str | int = 0) -> DataStream:
        """Sum of a field per key and window. Keyed by a column name, vectorised: emits
        Rows ``(key column, window_start, window_end, field)`` without per-record Python."""
        return self._builtin("sum", position_to_sum)

    def min(self, position_to_min: str | int = 0) -> DataStream:
        return self._builtin("min", position_to_min)

    def max(self, position_to_max: str | int = 0) -> DataStream:
        return self._builtin("max", position_to_max)

    def count(self) -> DataStream:
        """Records per key and window: ``(key, count)``, or vectorised Rows
        ``(key column, window_start, window_end, count)``."""
        return self._builtin("count", None)


class ConnectedStreams:
    """Two streams connected for one two-input function (PyFlink's ConnectedStreams).

    Example:
        >>> from weir import CoMapFunction, StreamExecutionEnvironment
        >>> class Tag(CoMapFunction):
        ...     def map1(self, value): return ("number", value)
        ...     def map2(self, value): return ("word", value)
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> numbers, words = env.from_collection([1, 2]), env.from_collection(["a"])
        >>> numbers.connect(words).map(Tag()).get_name()
        'Co-Map'
    """

    def __init__(self, stream1: DataStream, stream2: DataStream,
                 keys: tuple[KeySpec, KeySpec] | None = None) -> None:
        self.stream1 = stream1
        self.stream2 = stream2
        self._keys = keys

    def key_by(self, key_selector1: KeyBy, key_selector2: KeyBy,
               key_type: TypeInformation | None = None) -> ConnectedStreams:
        """Partition both inputs by key (each with its own selector, both giving keys of
        one kind): the function then has keyed state and, in ``process``, timers."""
        first = self.stream1.key_by(key_selector1)
        second = self.stream2.key_by(key_selector2)
        return ConnectedStreams(first, second, (first._key, second._key))

    def _co(self, name: str, fn: CoFunction, style: str,
            output_type: TypeInformation | None) -> DataStream:
        operator = CoOperator(name, fn, style, self._keys, output_type)
        t = Transformation(name=name, kind="operator", inputs=[self.stream1._t,
                                                               self.stream2._t],
                           operator=operator, two_input=True)
        return DataStream(self.stream1._env, t)

    def map(self, func: CoMapFunction, output_type: TypeInformation | None = None
            ) -> DataStream:
        """A CoMapFunction: ``map1`` for the first stream's records, ``map2`` for the
        second's."""
        return self._co("Co-Map", func, "map", output_type)

    def flat_map(self, func: CoFlatMapFunction, output_type: TypeInformation | None = None
                 ) -> DataStream:
        """A CoFlatMapFunction: ``flat_map1`` / ``flat_map2`` yield any number of outputs."""
        return self._co("Co-Flat Map", func, "flat_map", output_type)

    def process(self, func: CoProcessFunction | KeyedCoProcessFunction,
                output_type: TypeInformation | None = None) -> DataStream:
        """A CoProcessFunction, or after ``key_by`` a KeyedCoProcessFunction (keyed state,
        timers firing ``on_timer``)."""
        if self._keys is None and isinstance(func, KeyedCoProcessFunction):
            msg = ("a KeyedCoProcessFunction needs keyed inputs: call "
                   "connect(...).key_by(key_selector1, key_selector2) first")
            raise TypeError(msg)
        name = "Keyed Co-Process" if self._keys is not None else "Co-Process"
        return self._co(name, func, "process", output_type)


class BroadcastStream:
    """A stream broadcast with broadcast state descriptors (``ds.broadcast(descriptor)``)."""

    def __init__(self, stream: DataStream, descriptors: list[MapStateDescriptor]) -> None:
        for descriptor in descriptors:
            if getattr(descriptor, "kind", None) != "map":
                msg = (f"broadcast state needs MapStateDescriptors, got "
                       f"{type(descriptor).__name__}")
                raise TypeError(msg)
        self.stream = stream
        self.descriptors = descriptors


class BroadcastConnectedStream:
    """A stream (keyed or not) connected with a BroadcastStream.

    Example:
        >>> from weir import (BroadcastProcessFunction, MapStateDescriptor,
        ...                   StreamExecutionEnvironment)
        >>> RULES = MapStateDescriptor("rules")
        >>> class Allowed(BroadcastProcessFunction):
        ...     def process_element(self, value, ctx):
        ...         if ctx.get_broadcast_state(RULES).contains(value):
        ...             yield value
        ...     def process_broadcast_element(self, value, ctx):
        ...         ctx.get_broadcast_state(RULES).put(value, True)
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> words, allowed = env.from_collection(["a", "b"]), env.from_collection(["a"])
        >>> words.connect(allowed.broadcast(RULES)).process(Allowed()).get_name()
        'Broadcast Process'
    """

    def __init__(self, stream: DataStream, broadcast: BroadcastStream) -> None:
        self.stream = stream
        self.broadcast_stream = broadcast

    def process(self, func: BroadcastProcessFunction | KeyedBroadcastProcessFunction,
                output_type: TypeInformation | None = None) -> DataStream:
        """A BroadcastProcessFunction, or on a keyed stream a KeyedBroadcastProcessFunction."""
        key = self.stream._key if isinstance(self.stream, KeyedStream) else None
        if key is None and isinstance(func, KeyedBroadcastProcessFunction):
            msg = ("a KeyedBroadcastProcessFunction needs a keyed stream: "
                   "ds.key_by(...).connect(broadcast_stream)")
            raise TypeError(msg)
        name = "Keyed Broadcast Process" if key is not None else "Broadcast Process"
        operator = BroadcastProcessOperator(name, func, self.broadcast_stream.descriptors,
                                            key, output_type)
        t = Transformation(name=name, kind="operator",
                           inputs=[self.stream._t, self.broadcast_stream.stream._t],
                           operator=operator, two_input=True)
        return DataStream(self.stream._env, t)


class DataStreamSink:
    """The end of a stream: naming, parallelism and chaining of the sink.

    Example:
        >>> from weir import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> sink = env.from_collection([1]).print().name("out").set_description("stdout")
        >>> sink.disable_chaining() is sink
        True
    """

    #: PyFlink's methods this class refuses, with why (read by ``weir.docgen``).
    __unsupported__ = _UNSUPPORTED_SINK_METHODS

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation) -> None:
        self._env = env
        self._t = transformation

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("_"):
            raise AttributeError(name)
        refuse(type(self).__name__, name, self.__unsupported__)

    def name(self, name: str) -> DataStreamSink:
        self._t.name = name
        return self

    def uid(self, uid: str) -> DataStreamSink:
        self._t.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        self._t.parallelism = parallelism
        return self

    def set_description(self, description: str) -> DataStreamSink:
        """A description of the sink, for people reading the program."""
        self._t.description = description
        return self

    def disable_chaining(self) -> DataStreamSink:
        """Run the sink in a task of its own, not chained to the operator before it."""
        self._t.disable_chaining = True
        return self

    def slot_sharing_group(self, slot_sharing_group: str | SlotSharingGroup
                           ) -> DataStreamSink:
        """Accepted, without effect (see :mod:`weir.datastream.slot_sharing_group`)."""
        name = slot_sharing_group if isinstance(slot_sharing_group, str) \
            else slot_sharing_group.get_name()
        warn_no_effect(f"slot_sharing_group({name!r})")
        return self


class CloseableIterator:
    """Iterator over collected results; closing it cancels a job that still runs."""

    def __init__(self, records: Iterator[Any], client: JobClient) -> None:
        self._records = records
        self._client = client

    def __iter__(self) -> CloseableIterator:
        return self

    def __next__(self) -> Any:
        return next(self._records)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> CloseableIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
