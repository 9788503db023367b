"""PyFlink's module paths under ``weir``: ``pyflink.datastream.functions`` is
``weir.datastream.functions``, ``pyflink.common.typeinfo`` is ``weir.common.typeinfo``, and
so on, so that porting a PyFlink program means changing ``pyflink`` to ``weir`` in its
imports and nothing else.

:data:`MODULES` lists every such path with the public names PyFlink's module of that path
has. A name weir has resolves, when first used, to the one object the top-level ``weir``
package exports (no mirror module holds code of its own, and ``weir.X`` and
``weir.datastream.functions.X`` are the same object). A name weir knowingly does not have
raises :class:`UnsupportedFeatureError`, whose one line names the feature and what to use
instead (:data:`REASONS`); importing from a Java connector's module (:data:`JAVA_MODULES`)
or from the Table API (:data:`UNSUPPORTED_PACKAGES`) does the same for every name. The
paths are created on import by a finder on ``sys.meta_path`` (:func:`install`), except
``weir.datastream``, a real package.

Example:
    >>> from weir.datastream.functions import MapFunction
    >>> from weir import MapFunction as Same
    >>> MapFunction is Same
    True
    >>> try:
    ...     from weir.datastream.connectors.kafka import KafkaSource
    ... except UnsupportedFeatureError as err:
    ...     print(str(err).split(":")[0])
    KafkaSource (weir.datastream.connectors.kafka) is not supported by weir
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from weir.core.errors import InvalidJobError


class UnsupportedFeatureError(InvalidJobError, ImportError):
    """A PyFlink name weir does not have, imported from one of PyFlink's module paths.

    An ImportError, so ``from ... import`` raises it as it is (with its message), and an
    InvalidJobError, so ``weir run`` reports it in one line, as it does any job that
    cannot be built.
    """


_FILES = ("read Parquet, CSV or JSON lines with FileSource(path, format=...) and write "
          "with FileSink(path, format=...)")
_SCHEMAS = ("serialization schemas belong to Java connectors: records travel as Arrow "
            "columns or pickles")
_SERIALIZERS = "records travel as Arrow columns or pickles: there are no type serializers"
_JAVA_OBJECT = "it wraps a Java object, and weir runs no JVM"
_SOURCES = ("implement weir.Source (FLIP-27 style) or read with from_collection, "
            "from_sequence, FileSource or from_spark")

#: PyFlink name -> why weir does not have it and what to use instead.
REASONS: dict[str, str] = {
    "TypeSerializer": _SERIALIZERS,
    "TimeWindowSerializer": _SERIALIZERS,
    "CountWindowSerializer": _SERIALIZERS,
    **{name: _SCHEMAS for name in (
        "SerializationSchema", "DeserializationSchema", "SimpleStringSchema",
        "JsonRowSerializationSchema", "JsonRowDeserializationSchema",
        "CsvRowSerializationSchema", "CsvRowDeserializationSchema",
        "AvroRowSerializationSchema", "AvroRowDeserializationSchema")},
    "ExecutionMode": "it belongs to the removed DataSet API; use RuntimeExecutionMode",
    "InputDependencyConstraint": "it belongs to the removed DataSet API",
    "JobID": "job ids are strings (JobClient.get_job_id())",
    "AssignerWithPeriodicWatermarksWrapper": "it is PyFlink-internal; use WatermarkStrategy",
    "ConfigOptions": "set options by key: Configuration().set_string(key, value)",
    "ConfigOption": "set options by key: Configuration().set_string(key, value)",
    "InputFormat": _FILES,
    "BulkWriterFactory": _FILES,
    "CustomStateBackend": "state backends are hashmap and rocksdb (HashMapStateBackend, "
                          "EmbeddedRocksDBStateBackend)",
    "PredefinedOptions": "RocksDB is tuned through state.backend.rocksdb.* options",
    "CustomCheckpointStorage": "checkpoints go to file:// or s3:// "
                               "(FileSystemCheckpointStorage)",
    "MergingWindowAssigner": "custom merging window assigners are not supported yet; use "
                             "(Dynamic)EventTimeSessionWindows / ProcessingTimeSessionWindows",
    "Partitioner": "custom partitioners are not supported yet: key_by the partition you want",
    "SourceFunction": _SOURCES,
    "SinkFunction": "implement weir.Sink, or write with FileSink",
    "AsyncFunctionDescriptor": "it is PyFlink-internal; use AsyncDataStream",
    "ExternalTypeInfo": "it carries Table API data types; declare records with Types.*",
    "AsyncBatchFunction": "batched async functions are not supported yet: use AsyncFunction",
    "AsyncBatchFunctionDescriptor": "batched async functions are not supported yet",
    "DeliveryGuarantee": "it configures Java sinks; weir's FileSink is exactly once",
    "StreamTransformer": "it is PyFlink-internal",
    "SupportsPreprocessing": "it is PyFlink-internal",
    "StreamingFileSink": "it is deprecated in Flink; use FileSink.for_row_format",
    "BulkFormat": _FILES,
    "FileCompactor": "file compaction is not supported: size parts with the rolling policy",
    "FileCompactStrategy": "file compaction is not supported: size parts with the rolling "
                           "policy",
    "FileEnumeratorProvider": "weir's enumerator lists the files, skips hidden ones and "
                              "splits large files itself",
    "FileSplitAssignerProvider": "splits go to the subtasks that ask for them",
    "BucketAssigner": "every part is written under the base path",
    **{name: _FILES for name in (
        "CsvSchema", "CsvSchemaBuilder", "CsvReaderFormat", "CsvBulkWriters",
        "AvroParquetReaders", "AvroParquetWriters", "ParquetColumnarRowInputFormat",
        "ParquetBulkWriters")},
    "MetricGroupType": "it is PyFlink-internal; use RuntimeContext.get_metrics_group()",
    "GenericMetricGroup": "it is PyFlink-internal; use RuntimeContext.get_metrics_group()",
}

_CHECKPOINTING = ["CheckpointingMode", "CheckpointConfig", "ExternalizedCheckpointCleanup",
                  "ExternalizedCheckpointRetention"]
_STATE_BACKENDS = ["StateBackend", "HashMapStateBackend", "EmbeddedRocksDBStateBackend",
                   "MemoryStateBackend", "FsStateBackend", "RocksDBStateBackend",
                   "CustomStateBackend", "PredefinedOptions"]
_CHECKPOINT_STORAGE = ["CheckpointStorage", "JobManagerCheckpointStorage",
                       "FileSystemCheckpointStorage", "CustomCheckpointStorage"]
_STREAMS = ["DataStream", "KeyedStream", "WindowedStream", "AllWindowedStream",
            "ConnectedStreams", "BroadcastStream", "BroadcastConnectedStream",
            "DataStreamSink", "CloseableIterator"]
_FUNCTIONS = ["RuntimeContext", "MapFunction", "CoMapFunction", "FlatMapFunction",
              "CoFlatMapFunction", "ReduceFunction", "AggregateFunction", "KeySelector",
              "FilterFunction", "Partitioner", "SourceFunction", "SinkFunction",
              "ProcessFunction", "CoProcessFunction", "KeyedProcessFunction",
              "KeyedCoProcessFunction", "TimerService", "WindowFunction", "AllWindowFunction",
              "ProcessWindowFunction", "ProcessAllWindowFunction",
              "BaseBroadcastProcessFunction", "BroadcastProcessFunction",
              "KeyedBroadcastProcessFunction", "AsyncFunction", "AsyncFunctionDescriptor",
              "AsyncBatchFunction", "AsyncBatchFunctionDescriptor", "AsyncRetryPredicate",
              "AsyncRetryStrategy"]
_WINDOWS = ["Window", "TimeWindow", "CountWindow", "GlobalWindow",
            "TumblingProcessingTimeWindows", "TumblingEventTimeWindows",
            "SlidingProcessingTimeWindows", "SlidingEventTimeWindows",
            "ProcessingTimeSessionWindows", "EventTimeSessionWindows",
            "DynamicProcessingTimeSessionWindows", "DynamicEventTimeSessionWindows",
            "WindowAssigner", "MergingWindowAssigner", "CountTumblingWindowAssigner",
            "CountSlidingWindowAssigner", "TriggerResult", "Trigger", "EventTimeTrigger",
            "ProcessingTimeTrigger", "ContinuousEventTimeTrigger",
            "ContinuousProcessingTimeTrigger", "NeverTrigger", "PurgingTrigger",
            "CountTrigger", "TimeWindowSerializer", "CountWindowSerializer",
            "SessionWindowTimeGapExtractor", "GlobalWindows", "CountEvictor", "TimeEvictor",
            "Evictor"]
_FILE_SYSTEM = ["FileCompactor", "FileCompactStrategy", "OutputFileConfig", "FileSource",
                "FileSourceBuilder", "FileSink", "StreamingFileSink", "StreamFormat",
                "BulkFormat", "FileEnumeratorProvider", "FileSplitAssignerProvider",
                "RollingPolicy", "BucketAssigner"]
_TYPE_INFOS = ["BasicType", "BasicTypeInfo", "InstantTypeInfo", "SqlTimeTypeInfo",
               "PrimitiveArrayTypeInfo", "BasicArrayTypeInfo", "ObjectArrayTypeInfo",
               "PickledBytesTypeInfo", "RowTypeInfo", "TupleTypeInfo", "DateTypeInfo",
               "TimeTypeInfo", "TimestampTypeInfo", "ListTypeInfo", "MapTypeInfo",
               "LocalTimeTypeInfo"]
_METRICS = ["Metric", "Counter", "Meter", "Distribution"]
_SERIALIZATION = ["SerializationSchema", "DeserializationSchema", "SimpleStringSchema",
                  "Encoder", "BulkWriterFactory"]

#: Module path under weir -> the public names PyFlink's module of that path has.
MODULES: dict[str, list[str]] = {
    "weir.common": [
        "Configuration", "ExecutionConfig", "TypeInformation", "TypeSerializer", "Types",
        *_SERIALIZATION[:3], "JsonRowSerializationSchema", "JsonRowDeserializationSchema",
        "CsvRowSerializationSchema", "CsvRowDeserializationSchema",
        "AvroRowSerializationSchema", "AvroRowDeserializationSchema", "Encoder",
        "CompletableFuture", "ExecutionMode", "InputDependencyConstraint", "JobClient",
        "JobExecutionResult", "JobID", "JobStatus", "RestartStrategies",
        "RestartStrategyConfiguration", "Row", "RowKind", "WatermarkStrategy", "Duration",
        "Time", "Instant", "TimestampAssigner"],
    "weir.common.typeinfo": ["TypeInformation", "Types", *_TYPE_INFOS, "ExternalTypeInfo"],
    "weir.common.types": ["Row", "RowKind"],
    "weir.common.time": ["Duration", "Instant", "Time"],
    "weir.common.watermark_strategy": ["WatermarkStrategy", "TimestampAssigner",
                                       "AssignerWithPeriodicWatermarksWrapper"],
    "weir.common.configuration": ["Configuration"],
    "weir.common.serialization": _SERIALIZATION,
    "weir.common.restart_strategy": ["RestartStrategies", "RestartStrategyConfiguration"],
    "weir.common.job_client": ["JobClient"],
    "weir.common.job_status": ["JobStatus"],
    "weir.common.job_execution_result": ["JobExecutionResult"],
    "weir.common.execution_config": ["ExecutionConfig"],
    "weir.common.execution_mode": ["ExecutionMode"],
    "weir.common.io": ["InputFormat"],
    "weir.common.completable_future": ["CompletableFuture"],
    "weir.common.job_id": ["JobID"],
    "weir.common.config_options": ["ConfigOptions", "ConfigOption"],
    "weir.datastream": [
        "StreamExecutionEnvironment", *_STREAMS, *_FUNCTIONS, *_CHECKPOINTING,
        *_STATE_BACKENDS, *_CHECKPOINT_STORAGE, "RuntimeExecutionMode", *_WINDOWS,
        "TimeCharacteristic", "TimeDomain", "SlotSharingGroup", "MemorySize", "OutputTag",
        "AsyncDataStream"],
    "weir.datastream.functions": _FUNCTIONS,
    "weir.datastream.state": [
        "ValueStateDescriptor", "ValueState", "ListStateDescriptor", "ListState",
        "MapStateDescriptor", "MapState", "ReducingStateDescriptor", "ReducingState",
        "AggregatingStateDescriptor", "AggregatingState", "ReadOnlyBroadcastState",
        "BroadcastState", "StateTtlConfig", "OperatorStateStore"],
    "weir.datastream.window": _WINDOWS,
    "weir.datastream.output_tag": ["OutputTag"],
    "weir.datastream.execution_mode": ["RuntimeExecutionMode"],
    "weir.datastream.checkpointing_mode": ["CheckpointingMode"],
    "weir.datastream.checkpoint_config": ["CheckpointConfig", "ExternalizedCheckpointCleanup"],
    "weir.datastream.checkpoint_storage": _CHECKPOINT_STORAGE,
    "weir.datastream.state_backend": _STATE_BACKENDS,
    "weir.datastream.stream_execution_environment": ["StreamExecutionEnvironment"],
    "weir.datastream.time_characteristic": ["TimeCharacteristic"],
    "weir.datastream.time_domain": ["TimeDomain"],
    "weir.datastream.timerservice": ["TimerService"],
    "weir.datastream.async_data_stream": ["AsyncDataStream"],
    "weir.datastream.async_retry_strategies": [
        "AsyncRetryStrategy", "RetryPredicate", "NoRetryStrategy", "FixedDelayRetryStrategy",
        "ExponentialBackoffDelayRetryStrategy"],
    "weir.datastream.async_retry_predicates": [
        "empty_result_predicate", "has_exception_predicate", "exception_type_predicate"],
    "weir.datastream.externalized_checkpoint_retention": ["ExternalizedCheckpointRetention"],
    "weir.datastream.slot_sharing_group": ["MemorySize", "SlotSharingGroup"],
    "weir.datastream.data_stream": _STREAMS,
    "weir.datastream.connectors": ["Source", "Sink", "DeliveryGuarantee", *_FILE_SYSTEM,
                                   "NumberSequenceSource"],
    "weir.datastream.connectors.base": ["Source", "Sink", "StreamTransformer",
                                        "SupportsPreprocessing", "DeliveryGuarantee"],
    "weir.datastream.connectors.file_system": _FILE_SYSTEM,
    "weir.datastream.connectors.number_seq": ["NumberSequenceSource"],
    "weir.datastream.formats": [],
    "weir.datastream.formats.base": ["InputFormat"],
    "weir.datastream.formats.csv": [
        "CsvSchema", "CsvSchemaBuilder", "CsvReaderFormat", "CsvBulkWriters",
        "CsvRowDeserializationSchema", "CsvRowSerializationSchema"],
    "weir.datastream.formats.json": ["JsonRowDeserializationSchema",
                                     "JsonRowSerializationSchema"],
    "weir.datastream.formats.parquet": [
        "AvroParquetReaders", "AvroParquetWriters", "ParquetColumnarRowInputFormat",
        "ParquetBulkWriters"],
    "weir.metrics": ["MetricGroup", *_METRICS],
    "weir.metrics.metricbase": ["MetricGroup", "MetricGroupType", "GenericMetricGroup",
                                *_METRICS],
}

#: Where a module's names come from when not from ``weir`` itself ("module:attribute").
ORIGINS: dict[str, str] = {
    "weir.datastream.async_retry_predicates": "weir.async_io:async_retry_predicates",
    # PyFlink's type classes and metric classes stay out of the top-level namespace (a
    # ``from weir import *`` must not shadow collections.Counter, say).
    "weir.common.typeinfo": "weir.core.types",
    "weir.metrics": "weir.metric_group",
    "weir.metrics.metricbase": "weir.metric_group",
}

#: Names whose weir object has another name.
ALIASES: dict[str, str] = {"RetryPredicate": "AsyncRetryPredicate"}

#: PyFlink's Java connector and format modules -> (the feature, what to use instead).
JAVA_MODULES: dict[str, tuple[str, str]] = {
    "weir.datastream.connectors.kafka": ("the Kafka connector", _SOURCES),
    "weir.datastream.connectors.dynamic_kafka": ("the dynamic Kafka connector", _SOURCES),
    "weir.datastream.connectors.pulsar": ("the Pulsar connector", _SOURCES),
    "weir.datastream.connectors.kinesis": ("the Kinesis connector", _SOURCES),
    "weir.datastream.connectors.pubsub": ("the Pub/Sub connector", _SOURCES),
    "weir.datastream.connectors.rabbitmq": ("the RabbitMQ connector", _SOURCES),
    "weir.datastream.connectors.hybrid_source": ("the hybrid source", _SOURCES),
    "weir.datastream.connectors.elasticsearch": (
        "the Elasticsearch connector", "write with FileSink or implement weir.Sink"),
    "weir.datastream.connectors.jdbc": ("the JDBC connector",
                                        "write with FileSink or implement weir.Sink"),
    "weir.datastream.connectors.cassandra": ("the Cassandra connector",
                                             "write with FileSink or implement weir.Sink"),
    "weir.datastream.formats.avro": ("the Avro format", _FILES),
    "weir.datastream.formats.orc": ("the ORC format", _FILES),
}


#: PyFlink packages weir has no part of, with every module below them -> (the feature,
#: what to use instead).
UNSUPPORTED_PACKAGES: dict[str, tuple[str, str]] = {
    "weir.table": ("Table API or SQL",
                   "write the job with the DataStream API (weir.datastream); Spark SQL can "
                   "prepare its input (from_spark)"),
    "weir.java_gateway": ("Java gateway (Py4J)", "it runs no JVM: use Python only"),
}


def _unsupported_package(module: str) -> str | None:
    """The package of :data:`UNSUPPORTED_PACKAGES` that ``module`` is or lies in."""
    for package in UNSUPPORTED_PACKAGES:
        if module == package or module.startswith(package + "."):
            return package
    return None


def refusal(module: str) -> str | None:
    """Why a name of PyFlink's ``module`` (under ``weir``) does not exist, or None when
    the module is not one weir refuses as a whole.

    >>> refusal("weir.table.expressions").split(";")[0]
    'weir has no Table API or SQL'
    """
    if module in JAVA_MODULES:
        feature, instead = JAVA_MODULES[module]
        return f"{feature} is a Java connector and weir runs no JVM; {instead}"
    package = _unsupported_package(module)
    if package is None:
        return None
    feature, instead = UNSUPPORTED_PACKAGES[package]
    return f"weir has no {feature}; {instead}"


def _origin(module: str) -> Any:
    path = ORIGINS.get(module, "weir")
    name, _, attribute = path.partition(":")
    target = importlib.import_module(name)
    return getattr(target, attribute) if attribute else target


def mirror(module: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the PyFlink path ``module`` (a key of
    :data:`MODULES`)."""
    names = MODULES[module]

    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's __getattr__
        if name in names:
            reason = REASONS.get(name)
            if reason is not None:
                msg = f"{name} ({module}) is not supported by weir: {reason}"
                raise UnsupportedFeatureError(msg)
            return getattr(_origin(module), ALIASES.get(name, name))
        msg = f"module {module!r} has no attribute {name!r}"
        raise AttributeError(msg)

    def __dir__() -> list[str]:  # noqa: N807 - a module's __dir__
        return sorted(n for n in names if n not in REASONS)

    return __getattr__, __dir__


def _refuse_all(module: str, why: str) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's __getattr__
        if name.startswith("__"):
            raise AttributeError(name)
        msg = f"{name} ({module}) is not supported by weir: {why}"
        raise UnsupportedFeatureError(msg)

    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Creates the modules of :data:`MODULES`, :data:`JAVA_MODULES` and
    :data:`UNSUPPORTED_PACKAGES` on import."""

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in _REAL:
            return None
        if _unsupported_package(fullname) is not None:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        if fullname not in MODULES and fullname not in JAVA_MODULES:
            return None
        prefix = fullname + "."
        package = any(m.startswith(prefix) for m in (*MODULES, *JAVA_MODULES))
        return importlib.util.spec_from_loader(fullname, self, is_package=package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        pyflink = name.replace("weir", "pyflink", 1)
        why = refusal(name)
        if why is not None:
            module.__doc__ = f"PyFlink's ``{pyflink}``: not in weir ({why.split(';')[0]})."
            module.__getattr__ = _refuse_all(name, why)  # type: ignore[attr-defined]
            return
        module.__doc__ = f"PyFlink's ``{pyflink}``: the same names, from weir."
        module.__all__ = [n for n in MODULES[name] if n not in REASONS]  # type: ignore[attr-defined]
        module.__getattr__, module.__dir__ = mirror(name)  # type: ignore[attr-defined]


#: Paths that are real modules: ``weir.datastream``'s ``__init__`` calls :func:`mirror`
#: itself, and ``data_stream`` defines the streams.
_REAL = frozenset({"weir.datastream", "weir.datastream.data_stream"})
_FINDER = _Finder()


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
