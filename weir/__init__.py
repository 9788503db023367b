"""weir: a distributed stream-processing engine built around fault tolerance.

Everything a job program needs is importable from here. Names are loaded on first use
(PEP 562), so that importing one module of the package — ``weir.core.time`` from ``state/``,
say — does not load the whole API, which itself depends on ``state/``.

Example:
    >>> from weir import StreamExecutionEnvironment, Row, Types
    >>> Row(user="u1", clicks=2).clicks
    2
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "AggregateFunction": "weir.window",
    "AggregatingState": "weir.state_api",
    "AggregatingStateDescriptor": "weir.state_api",
    "AllWindowFunction": "weir.window",
    "AllWindowedStream": "weir.datastream.data_stream",
    "AsyncDataStream": "weir.async_io",
    "AsyncFunction": "weir.functions",
    "AsyncRetryPredicate": "weir.async_io",
    "AsyncRetryStrategies": "weir.async_io",
    "AsyncRetryStrategy": "weir.async_io",
    "BaseBroadcastProcessFunction": "weir.functions",
    "BroadcastConnectedStream": "weir.datastream.data_stream",
    "BroadcastProcessFunction": "weir.functions",
    "BroadcastState": "weir.state.operator_state",
    "BroadcastStream": "weir.datastream.data_stream",
    "CheckpointConfig": "weir.checkpoint_config",
    "CheckpointListener": "weir.state.operator_state",
    "CheckpointStorage": "weir.state_backends",
    "CheckpointedFunction": "weir.state.operator_state",
    "CheckpointingMode": "weir.checkpoint_config",
    "CloseableIterator": "weir.datastream.data_stream",
    "CoFlatMapFunction": "weir.functions",
    "CoMapFunction": "weir.functions",
    "CoProcessFunction": "weir.functions",
    "CompletableFuture": "weir.core.execution",
    "ConfigError": "weir.core.errors",
    "Configuration": "weir.core.config",
    "ConnectedStreams": "weir.datastream.data_stream",
    "ContinuousEventTimeTrigger": "weir.window",
    "ContinuousProcessingTimeTrigger": "weir.window",
    "CountEvictor": "weir.window",
    "CountSlidingWindowAssigner": "weir.window",
    "CountTrigger": "weir.window",
    "CountTumblingWindowAssigner": "weir.window",
    "CountWindow": "weir.window",
    "DataStream": "weir.datastream.data_stream",
    "DataStreamSink": "weir.datastream.data_stream",
    "DiscardingSink": "weir.sinks",
    "Duration": "weir.core.time",
    "DynamicEventTimeSessionWindows": "weir.window",
    "DynamicProcessingTimeSessionWindows": "weir.window",
    "EmbeddedRocksDBStateBackend": "weir.state_backends",
    "Encoder": "weir.sinks",
    "EventTimeSessionWindows": "weir.window",
    "EventTimeTrigger": "weir.window",
    "Evictor": "weir.window",
    "ExecutionConfig": "weir.execution_config",
    "ExponentialBackoffDelayRetryStrategy": "weir.async_io",
    "ExternalizedCheckpointCleanup": "weir.checkpoint_config",
    "ExternalizedCheckpointRetention": "weir.checkpoint_config",
    "FileSink": "weir.sinks",
    "FileSource": "weir.sources.files",
    "FileSourceBuilder": "weir.sources.files",
    "FileSystemCheckpointStorage": "weir.state_backends",
    "FilterFunction": "weir.functions",
    "FixedDelayRetryStrategy": "weir.async_io",
    "FlatMapFunction": "weir.functions",
    "FsStateBackend": "weir.state_backends",
    "FunctionInitializationContext": "weir.state.operator_state",
    "FunctionSnapshotContext": "weir.state.operator_state",
    "GlobalWindow": "weir.window",
    "GlobalWindows": "weir.window",
    "HashMapStateBackend": "weir.state_backends",
    "Instant": "weir.core.time",
    "InvalidJobError": "weir.core.errors",
    "JobClient": "weir.core.execution",
    "JobExecutionError": "weir.core.errors",
    "JobExecutionResult": "weir.core.execution",
    "JobManagerCheckpointStorage": "weir.state_backends",
    "JobStatus": "weir.core.execution",
    "MemorySize": "weir.slot_sharing_group",
    "KeySelector": "weir.functions",
    "KeyedBroadcastProcessFunction": "weir.functions",
    "KeyedCoProcessFunction": "weir.functions",
    "KeyedProcessFunction": "weir.functions",
    "KeyedStream": "weir.datastream.data_stream",
    "ListState": "weir.state_api",
    "ListStateDescriptor": "weir.state_api",
    "MapFunction": "weir.functions",
    "MapState": "weir.state_api",
    "MapStateDescriptor": "weir.state_api",
    "MemoryStateBackend": "weir.state_backends",
    "MetricGroup": "weir.metric_group",
    "NeverTrigger": "weir.window",
    "NoRetryStrategy": "weir.async_io",
    "NumberSequenceSource": "weir.sources.collection",
    "OperatorListState": "weir.state.operator_state",
    "OperatorStateStore": "weir.state.operator_state",
    "OutputFileConfig": "weir.sinks",
    "OutputTag": "weir.functions",
    "ProcessAllWindowFunction": "weir.window",
    "ProcessFunction": "weir.functions",
    "ProcessWindowFunction": "weir.window",
    "ProcessingTimeSessionWindows": "weir.window",
    "ProcessingTimeTrigger": "weir.window",
    "PurgingTrigger": "weir.window",
    "ReadOnlyBroadcastState": "weir.state.operator_state",
    "ReduceFunction": "weir.functions",
    "ReducingState": "weir.state_api",
    "ReducingStateDescriptor": "weir.state_api",
    "RestartStrategies": "weir.state_backends",
    "RestartStrategyConfiguration": "weir.state_backends",
    "RocksDBStateBackend": "weir.state_backends",
    "RollingPolicy": "weir.sinks",
    "Row": "weir.core.row",
    "RowKind": "weir.core.row",
    "RuntimeContext": "weir.functions",
    "RuntimeExecutionMode": "weir.execution_config",
    "SessionWindowTimeGapExtractor": "weir.window",
    "Sink": "weir.sinks",
    "SlotSharingGroup": "weir.slot_sharing_group",
    "SlidingEventTimeWindows": "weir.window",
    "SlidingProcessingTimeWindows": "weir.window",
    "Source": "weir.core.source",
    "SourceReader": "weir.core.source",
    "SplitAssignment": "weir.core.source",
    "SplitEnumerator": "weir.core.source",
    "StateBackend": "weir.state_backends",
    "StateTtlConfig": "weir.state_api",
    "StreamExecutionEnvironment": "weir.environment",
    "StreamFormat": "weir.sources.files",
    "Time": "weir.core.time",
    "TimeCharacteristic": "weir.execution_config",
    "TimeDomain": "weir.functions",
    "TimeEvictor": "weir.window",
    "TimeWindow": "weir.window",
    "TimerService": "weir.functions",
    "TimestampAssigner": "weir.watermarks",
    "Trigger": "weir.window",
    "TriggerResult": "weir.window",
    "TumblingEventTimeWindows": "weir.window",
    "TumblingProcessingTimeWindows": "weir.window",
    "TypeInformation": "weir.core.types",
    "Types": "weir.core.types",
    "UserError": "weir.core.errors",
    "ValueState": "weir.state_api",
    "ValueStateDescriptor": "weir.state_api",
    "WatermarkStrategy": "weir.watermarks",
    "WeirError": "weir.core.errors",
    "Window": "weir.window",
    "WindowAssigner": "weir.window",
    "WindowFunction": "weir.window",
    "WindowedStream": "weir.datastream.data_stream",
    "async_retry_predicates": "weir.async_io",
}

__all__ = sorted(_EXPORTS)

# PyFlink's module paths (weir.common.typeinfo, weir.datastream.functions, ...).
from weir.core import pyflink_paths as _pyflink_paths  # noqa: E402

_pyflink_paths.install()


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module 'weir' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from weir.async_io import (
        AsyncDataStream as AsyncDataStream,
    )
    from weir.async_io import (
        AsyncRetryPredicate as AsyncRetryPredicate,
    )
    from weir.async_io import (
        AsyncRetryStrategies as AsyncRetryStrategies,
    )
    from weir.async_io import (
        AsyncRetryStrategy as AsyncRetryStrategy,
    )
    from weir.async_io import (
        ExponentialBackoffDelayRetryStrategy as ExponentialBackoffDelayRetryStrategy,
    )
    from weir.async_io import (
        FixedDelayRetryStrategy as FixedDelayRetryStrategy,
    )
    from weir.async_io import (
        NoRetryStrategy as NoRetryStrategy,
    )
    from weir.async_io import (
        async_retry_predicates as async_retry_predicates,
    )
    from weir.checkpoint_config import (
        CheckpointConfig as CheckpointConfig,
    )
    from weir.checkpoint_config import (
        CheckpointingMode as CheckpointingMode,
    )
    from weir.checkpoint_config import (
        ExternalizedCheckpointCleanup as ExternalizedCheckpointCleanup,
    )
    from weir.checkpoint_config import (
        ExternalizedCheckpointRetention as ExternalizedCheckpointRetention,
    )
    from weir.core.config import (
        Configuration as Configuration,
    )
    from weir.core.errors import (
        ConfigError as ConfigError,
    )
    from weir.core.errors import (
        InvalidJobError as InvalidJobError,
    )
    from weir.core.errors import (
        JobExecutionError as JobExecutionError,
    )
    from weir.core.errors import (
        UserError as UserError,
    )
    from weir.core.errors import (
        WeirError as WeirError,
    )
    from weir.core.execution import (
        CompletableFuture as CompletableFuture,
    )
    from weir.core.execution import (
        JobClient as JobClient,
    )
    from weir.core.execution import (
        JobExecutionResult as JobExecutionResult,
    )
    from weir.core.execution import (
        JobStatus as JobStatus,
    )
    from weir.core.row import (
        Row as Row,
    )
    from weir.core.row import (
        RowKind as RowKind,
    )
    from weir.core.source import (
        Source as Source,
    )
    from weir.core.source import (
        SourceReader as SourceReader,
    )
    from weir.core.source import (
        SplitAssignment as SplitAssignment,
    )
    from weir.core.source import (
        SplitEnumerator as SplitEnumerator,
    )
    from weir.core.time import (
        Duration as Duration,
    )
    from weir.core.time import (
        Instant as Instant,
    )
    from weir.core.time import (
        Time as Time,
    )
    from weir.core.types import (
        TypeInformation as TypeInformation,
    )
    from weir.core.types import (
        Types as Types,
    )
    from weir.datastream.data_stream import (
        AllWindowedStream as AllWindowedStream,
    )
    from weir.datastream.data_stream import (
        BroadcastConnectedStream as BroadcastConnectedStream,
    )
    from weir.datastream.data_stream import (
        BroadcastStream as BroadcastStream,
    )
    from weir.datastream.data_stream import (
        CloseableIterator as CloseableIterator,
    )
    from weir.datastream.data_stream import (
        ConnectedStreams as ConnectedStreams,
    )
    from weir.datastream.data_stream import (
        DataStream as DataStream,
    )
    from weir.datastream.data_stream import (
        DataStreamSink as DataStreamSink,
    )
    from weir.datastream.data_stream import (
        KeyedStream as KeyedStream,
    )
    from weir.datastream.data_stream import (
        WindowedStream as WindowedStream,
    )
    from weir.environment import (
        StreamExecutionEnvironment as StreamExecutionEnvironment,
    )
    from weir.execution_config import (
        ExecutionConfig as ExecutionConfig,
    )
    from weir.execution_config import (
        RuntimeExecutionMode as RuntimeExecutionMode,
    )
    from weir.execution_config import (
        TimeCharacteristic as TimeCharacteristic,
    )
    from weir.functions import (
        AsyncFunction as AsyncFunction,
    )
    from weir.functions import (
        BaseBroadcastProcessFunction as BaseBroadcastProcessFunction,
    )
    from weir.functions import (
        BroadcastProcessFunction as BroadcastProcessFunction,
    )
    from weir.functions import (
        CoFlatMapFunction as CoFlatMapFunction,
    )
    from weir.functions import (
        CoMapFunction as CoMapFunction,
    )
    from weir.functions import (
        CoProcessFunction as CoProcessFunction,
    )
    from weir.functions import (
        FilterFunction as FilterFunction,
    )
    from weir.functions import (
        FlatMapFunction as FlatMapFunction,
    )
    from weir.functions import (
        KeyedBroadcastProcessFunction as KeyedBroadcastProcessFunction,
    )
    from weir.functions import (
        KeyedCoProcessFunction as KeyedCoProcessFunction,
    )
    from weir.functions import (
        KeyedProcessFunction as KeyedProcessFunction,
    )
    from weir.functions import (
        KeySelector as KeySelector,
    )
    from weir.functions import (
        MapFunction as MapFunction,
    )
    from weir.functions import (
        OutputTag as OutputTag,
    )
    from weir.functions import (
        ProcessFunction as ProcessFunction,
    )
    from weir.functions import (
        ReduceFunction as ReduceFunction,
    )
    from weir.functions import (
        RuntimeContext as RuntimeContext,
    )
    from weir.functions import (
        TimeDomain as TimeDomain,
    )
    from weir.functions import (
        TimerService as TimerService,
    )
    from weir.metric_group import (
        MetricGroup as MetricGroup,
    )
    from weir.sinks import (
        DiscardingSink as DiscardingSink,
    )
    from weir.sinks import (
        Encoder as Encoder,
    )
    from weir.sinks import (
        FileSink as FileSink,
    )
    from weir.sinks import (
        OutputFileConfig as OutputFileConfig,
    )
    from weir.sinks import (
        RollingPolicy as RollingPolicy,
    )
    from weir.sinks import (
        Sink as Sink,
    )
    from weir.slot_sharing_group import (
        MemorySize as MemorySize,
    )
    from weir.slot_sharing_group import (
        SlotSharingGroup as SlotSharingGroup,
    )
    from weir.sources.collection import (
        NumberSequenceSource as NumberSequenceSource,
    )
    from weir.sources.files import (
        FileSource as FileSource,
    )
    from weir.sources.files import (
        FileSourceBuilder as FileSourceBuilder,
    )
    from weir.sources.files import (
        StreamFormat as StreamFormat,
    )
    from weir.state.operator_state import (
        BroadcastState as BroadcastState,
    )
    from weir.state.operator_state import (
        CheckpointedFunction as CheckpointedFunction,
    )
    from weir.state.operator_state import (
        CheckpointListener as CheckpointListener,
    )
    from weir.state.operator_state import (
        FunctionInitializationContext as FunctionInitializationContext,
    )
    from weir.state.operator_state import (
        FunctionSnapshotContext as FunctionSnapshotContext,
    )
    from weir.state.operator_state import (
        OperatorListState as OperatorListState,
    )
    from weir.state.operator_state import (
        OperatorStateStore as OperatorStateStore,
    )
    from weir.state.operator_state import (
        ReadOnlyBroadcastState as ReadOnlyBroadcastState,
    )
    from weir.state_api import (
        AggregatingState as AggregatingState,
    )
    from weir.state_api import (
        AggregatingStateDescriptor as AggregatingStateDescriptor,
    )
    from weir.state_api import (
        ListState as ListState,
    )
    from weir.state_api import (
        ListStateDescriptor as ListStateDescriptor,
    )
    from weir.state_api import (
        MapState as MapState,
    )
    from weir.state_api import (
        MapStateDescriptor as MapStateDescriptor,
    )
    from weir.state_api import (
        ReducingState as ReducingState,
    )
    from weir.state_api import (
        ReducingStateDescriptor as ReducingStateDescriptor,
    )
    from weir.state_api import (
        StateTtlConfig as StateTtlConfig,
    )
    from weir.state_api import (
        ValueState as ValueState,
    )
    from weir.state_api import (
        ValueStateDescriptor as ValueStateDescriptor,
    )
    from weir.state_backends import (
        CheckpointStorage as CheckpointStorage,
    )
    from weir.state_backends import (
        EmbeddedRocksDBStateBackend as EmbeddedRocksDBStateBackend,
    )
    from weir.state_backends import (
        FileSystemCheckpointStorage as FileSystemCheckpointStorage,
    )
    from weir.state_backends import (
        FsStateBackend as FsStateBackend,
    )
    from weir.state_backends import (
        HashMapStateBackend as HashMapStateBackend,
    )
    from weir.state_backends import (
        JobManagerCheckpointStorage as JobManagerCheckpointStorage,
    )
    from weir.state_backends import (
        MemoryStateBackend as MemoryStateBackend,
    )
    from weir.state_backends import (
        RestartStrategies as RestartStrategies,
    )
    from weir.state_backends import (
        RestartStrategyConfiguration as RestartStrategyConfiguration,
    )
    from weir.state_backends import (
        RocksDBStateBackend as RocksDBStateBackend,
    )
    from weir.state_backends import (
        StateBackend as StateBackend,
    )
    from weir.watermarks import (
        TimestampAssigner as TimestampAssigner,
    )
    from weir.watermarks import (
        WatermarkStrategy as WatermarkStrategy,
    )
    from weir.window import (
        AggregateFunction as AggregateFunction,
    )
    from weir.window import (
        AllWindowFunction as AllWindowFunction,
    )
    from weir.window import (
        ContinuousEventTimeTrigger as ContinuousEventTimeTrigger,
    )
    from weir.window import (
        ContinuousProcessingTimeTrigger as ContinuousProcessingTimeTrigger,
    )
    from weir.window import (
        CountEvictor as CountEvictor,
    )
    from weir.window import (
        CountSlidingWindowAssigner as CountSlidingWindowAssigner,
    )
    from weir.window import (
        CountTrigger as CountTrigger,
    )
    from weir.window import (
        CountTumblingWindowAssigner as CountTumblingWindowAssigner,
    )
    from weir.window import (
        CountWindow as CountWindow,
    )
    from weir.window import (
        DynamicEventTimeSessionWindows as DynamicEventTimeSessionWindows,
    )
    from weir.window import (
        DynamicProcessingTimeSessionWindows as DynamicProcessingTimeSessionWindows,
    )
    from weir.window import (
        EventTimeSessionWindows as EventTimeSessionWindows,
    )
    from weir.window import (
        EventTimeTrigger as EventTimeTrigger,
    )
    from weir.window import (
        Evictor as Evictor,
    )
    from weir.window import (
        GlobalWindow as GlobalWindow,
    )
    from weir.window import (
        GlobalWindows as GlobalWindows,
    )
    from weir.window import (
        NeverTrigger as NeverTrigger,
    )
    from weir.window import (
        ProcessAllWindowFunction as ProcessAllWindowFunction,
    )
    from weir.window import (
        ProcessingTimeSessionWindows as ProcessingTimeSessionWindows,
    )
    from weir.window import (
        ProcessingTimeTrigger as ProcessingTimeTrigger,
    )
    from weir.window import (
        ProcessWindowFunction as ProcessWindowFunction,
    )
    from weir.window import (
        PurgingTrigger as PurgingTrigger,
    )
    from weir.window import (
        SessionWindowTimeGapExtractor as SessionWindowTimeGapExtractor,
    )
    from weir.window import (
        SlidingEventTimeWindows as SlidingEventTimeWindows,
    )
    from weir.window import (
        SlidingProcessingTimeWindows as SlidingProcessingTimeWindows,
    )
    from weir.window import (
        TimeEvictor as TimeEvictor,
    )
    from weir.window import (
        TimeWindow as TimeWindow,
    )
    from weir.window import (
        Trigger as Trigger,
    )
    from weir.window import (
        TriggerResult as TriggerResult,
    )
    from weir.window import (
        TumblingEventTimeWindows as TumblingEventTimeWindows,
    )
    from weir.window import (
        TumblingProcessingTimeWindows as TumblingProcessingTimeWindows,
    )
    from weir.window import (
        Window as Window,
    )
    from weir.window import (
        WindowAssigner as WindowAssigner,
    )
    from weir.window import (
        WindowFunction as WindowFunction,
    )
