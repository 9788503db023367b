"""The DataStream API: ``DataStream`` and ``KeyedStream``, named as in PyFlink.

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

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from weir.graph import BROADCAST, HASH, REBALANCE, Transformation
from weir.keys import FieldKeySpec, KeySpec, key_spec
from weir.operators.basic import (
    FilterBatchesOperator,
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    ProcessOperator,
)
from weir.operators.keyed import FieldAggregateOperator, KeyedProcessOperator, ReduceOperator
from weir.operators.sinks import CollectSinkOperator, PrintSinkOperator
from weir.operators.vectorized import VectorizedAggregateOperator
from weir.types import TypeInformation

if TYPE_CHECKING:
    from weir.environment import StreamExecutionEnvironment
    from weir.sinks import Sink


class DataStream:
    """A stream of records produced by one transformation."""

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

    def get_parallelism(self) -> int:
        return self._t.parallelism or self._env.get_parallelism()

    # -- per-record operators ---------------------------------------------------------------

    def _then(self, name: str, operator: Any) -> DataStream:
        t = Transformation(name=name, kind="operator", inputs=[self._t], operator=operator)
        return DataStream(self._env, t)

    def map(self, func: Callable[[Any], Any] | Any,
            output_type: TypeInformation | None = None) -> DataStream:
        """One output record per input record."""
        return self._then("Map", MapOperator("Map", func, output_type))

    def flat_map(self, func: Callable[[Any], Any] | Any,
                 output_type: TypeInformation | None = None) -> DataStream:
        """Any number of output records per input record (the function returns an iterable)."""
        return self._then("Flat Map", FlatMapOperator("Flat Map", func, output_type))

    def filter(self, func: Callable[[Any], bool] | Any) -> DataStream:
        """Keep the records for which the function returns True."""
        return self._then("Filter", FilterOperator("Filter", func))

    def process(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        """Apply a ProcessFunction (``process_element(value, ctx)`` yields outputs)."""
        return self._then("Process", ProcessOperator("Process", func, output_type))

    # -- vectorised operators ---------------------------------------------------------------

    def map_batches(self, func: Callable[[Any], Any]) -> DataStream:
        """``func(pyarrow.RecordBatch) -> RecordBatch | Table``, once per batch."""
        return self._then("Map Batches", MapBatchesOperator("Map Batches", func))

    def filter_batches(self, func: Callable[[Any], Any]) -> DataStream:
        """``func(pyarrow.RecordBatch) -> boolean mask``: keep the rows where it is True."""
        return self._then("Filter Batches", FilterBatchesOperator("Filter Batches", func))

    # -- partitioning -----------------------------------------------------------------------

    def _partition(self, name: str, partitioner: int, key: KeySpec | None = None) -> Transformation:
        return Transformation(name=name, kind="partition", inputs=[self._t],
                              partitioner=partitioner, key=key)

    def key_by(self, key_selector: Any) -> KeyedStream:
        """Partition by key: a column name or position (vectorised), a tuple, or a function."""
        spec = key_spec(key_selector)
        return KeyedStream(self._env, self._partition("Key By", HASH, spec), spec)

    def rebalance(self) -> DataStream:
        """Round-robin batches over the downstream subtasks."""
        return DataStream(self._env, self._partition("Rebalance", REBALANCE))

    def broadcast(self) -> DataStream:
        """Send every record to every downstream subtask."""
        return DataStream(self._env, self._partition("Broadcast", BROADCAST))

    def union(self, *streams: DataStream) -> DataStream:
        """Merge streams (of the same kind of records) into one."""
        t = Transformation(name="Union", kind="union",
                           inputs=[self._t, *(s._t for s in streams)])
        return DataStream(self._env, t)

    # -- sinks ------------------------------------------------------------------------------

    def _sink(self, name: str, operator: Any) -> DataStreamSink:
        t = Transformation(name=name, kind="sink", inputs=[self._t], operator=operator)
        self._env._add_sink(t)
        return DataStreamSink(self._env, t)

    def sink_to(self, sink: Sink) -> DataStreamSink:
        """Write to a sink (e.g. ``FileSink``)."""
        name = f"Sink: {sink.name}"
        return self._sink(name, sink.create_operator(name))

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        """Print every record to the task's stdout (``N> record`` with parallelism > 1)."""
        return self._sink(f"Sink: Print{' ' + sink_identifier if sink_identifier else ''}",
                          PrintSinkOperator("Print"))

    def execute_and_collect(self, job_execution_name: str | None = None,
                            limit: int | None = None) -> CloseableIterator:
        """Run the job and iterate over this stream's records as they arrive.

        Example: ``sorted(ds.execute_and_collect())``. Use as a context manager, or
        ``close()`` the iterator, to stop early (the job is cancelled if still running).
        """
        t = Transformation(name="Sink: Collect", kind="sink", inputs=[self._t],
                           operator=CollectSinkOperator("Collect"))
        self._env._add_sink(t)
        client = self._env.execute_async(job_execution_name)
        return CloseableIterator(client.collect(limit), client)


class KeyedStream(DataStream):
    """A stream partitioned by key; aggregations on it keep state per key."""

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation,
                 key: KeySpec) -> None:
        super().__init__(env, transformation)
        self._key = key

    def _keyed(self, name: str, operator: Any) -> DataStream:
        return self._then(name, operator)

    def reduce(self, func: Callable[[Any, Any], Any] | Any) -> DataStream:
        """Running reduction per key: the updated value is emitted for every record."""
        return self._keyed("Keyed Reduce", ReduceOperator("Keyed Reduce", self._key, func))

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

    def sum(self, field: str | int = 0) -> DataStream:
        """Running sum of ``field`` per key (vectorised when keyed by a column name)."""
        return self._aggregate("sum", field)

    def min(self, field: str | int = 0) -> DataStream:
        return self._aggregate("min", field)

    def max(self, field: str | int = 0) -> DataStream:
        return self._aggregate("max", field)

    def count(self) -> DataStream:
        """Running count per key: (key, count) for every record."""
        return self._aggregate("count", None)

    def process(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        """Apply a KeyedProcessFunction, with keyed ValueState via ``open(runtime_context)``."""
        return self._keyed("Keyed Process",
                           KeyedProcessOperator("Keyed Process", self._key, func, output_type))


class DataStreamSink:
    """The end of a stream: naming and parallelism of the sink."""

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation) -> None:
        self._env = env
        self._t = transformation

    def name(self, name: str) -> DataStreamSink:
        self._t.name = name
        return self

    def uid(self, uid: str) -> DataStreamSink:
        self._t.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        self._t.parallelism = parallelism
        return self


class CloseableIterator:
    """Iterator over collected results; closing it cancels a job that still runs."""

    def __init__(self, records: Iterator[Any], client: Any) -> None:
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
