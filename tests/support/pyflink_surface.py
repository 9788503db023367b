"""PyFlink's public surface, as weir's compatibility tests check it: every module path of
PyFlink under ``weir`` (``pyflink.common.typeinfo`` is ``weir.common.typeinfo``) with the
names PyFlink's module has, which of them weir knowingly lacks, and PyFlink's Java
connector modules.

This is test data about PyFlink: weir's own modules declare their names (``__all__``) and
what they lack (``__unsupported__``) themselves.
"""

from __future__ import annotations

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

#: PyFlink's module paths under weir -> the public names PyFlink's module of that path has.
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

#: PyFlink names weir knowingly lacks: in any of these modules, each fails in one line
#: naming the feature and what to use instead.
UNSUPPORTED = frozenset({
    "AssignerWithPeriodicWatermarksWrapper", "AsyncBatchFunction",
    "AsyncBatchFunctionDescriptor", "AsyncFunctionDescriptor", "AvroParquetReaders",
    "AvroParquetWriters", "AvroRowDeserializationSchema", "AvroRowSerializationSchema",
    "BucketAssigner", "BulkFormat", "BulkWriterFactory", "ConfigOption", "ConfigOptions",
    "CountWindowSerializer", "CsvBulkWriters", "CsvReaderFormat", "CsvRowDeserializationSchema",
    "CsvRowSerializationSchema", "CsvSchema", "CsvSchemaBuilder", "CustomCheckpointStorage",
    "CustomStateBackend", "DeliveryGuarantee", "DeserializationSchema", "ExecutionMode",
    "ExternalTypeInfo", "FileCompactStrategy", "FileCompactor", "FileEnumeratorProvider",
    "FileSplitAssignerProvider", "GenericMetricGroup", "InputDependencyConstraint",
    "InputFormat", "JobID", "JsonRowDeserializationSchema", "JsonRowSerializationSchema",
    "MergingWindowAssigner", "MetricGroupType", "ParquetBulkWriters",
    "ParquetColumnarRowInputFormat", "Partitioner", "PredefinedOptions", "SerializationSchema",
    "SimpleStringSchema", "SinkFunction", "SourceFunction", "StreamTransformer",
    "StreamingFileSink", "SupportsPreprocessing", "TimeWindowSerializer", "TypeSerializer",
})

#: Modules whose names are not all top-level ``weir`` names: PyFlink's type and metric
#: classes (``from weir import *`` must not shadow collections.Counter) and functions.
NOT_TOP_LEVEL = frozenset({"weir.common.typeinfo", "weir.metrics", "weir.metrics.metricbase",
                           "weir.datastream.async_retry_predicates"})

#: Names whose weir object has another name.
ALIASES = {"RetryPredicate": "AsyncRetryPredicate"}

#: PyFlink's Java connector and format modules -> the feature they are.
JAVA_MODULES = {
    "weir.datastream.connectors.kafka": "the Kafka connector",
    "weir.datastream.connectors.dynamic_kafka": "the dynamic Kafka connector",
    "weir.datastream.connectors.pulsar": "the Pulsar connector",
    "weir.datastream.connectors.kinesis": "the Kinesis connector",
    "weir.datastream.connectors.pubsub": "the Pub/Sub connector",
    "weir.datastream.connectors.rabbitmq": "the RabbitMQ connector",
    "weir.datastream.connectors.hybrid_source": "the hybrid source",
    "weir.datastream.connectors.elasticsearch": "the Elasticsearch connector",
    "weir.datastream.connectors.jdbc": "the JDBC connector",
    "weir.datastream.connectors.cassandra": "the Cassandra connector",
    "weir.datastream.formats.avro": "the Avro format",
    "weir.datastream.formats.orc": "the ORC format",
}
