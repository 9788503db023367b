"""weir: a distributed stream-processing engine built around fault tolerance.

Everything a job program needs is importable from here.

Example:
    >>> from weir import StreamExecutionEnvironment, Row, Types
    >>> Row(user="u1", clicks=2).clicks
    2
"""

from weir.config import Configuration
from weir.datastream import (
    CloseableIterator,
    DataStream,
    DataStreamSink,
    KeyedStream,
    WindowedStream,
)
from weir.environment import JobExecutionResult, StreamExecutionEnvironment
from weir.errors import (
    ConfigError,
    InvalidJobError,
    JobExecutionError,
    UserError,
    WeirError,
)
from weir.functions import (
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from weir.row import Row
from weir.sinks import DiscardingSink, FileSink, Sink
from weir.sources.api import Source, SourceReader, SplitAssignment, SplitEnumerator
from weir.sources.files import FileSource
from weir.state_api import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)
from weir.time import Duration, Time
from weir.types import TypeInformation, Types
from weir.watermarks import TimestampAssigner, WatermarkStrategy
from weir.window import (
    AggregateFunction,
    CountTrigger,
    EventTimeSessionWindows,
    EventTimeTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)

__version__ = "0.1.0"

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "CloseableIterator",
    "ConfigError",
    "Configuration",
    "CountTrigger",
    "DataStream",
    "DataStreamSink",
    "DiscardingSink",
    "Duration",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "FileSink",
    "FileSource",
    "FilterFunction",
    "FlatMapFunction",
    "InvalidJobError",
    "JobExecutionError",
    "JobExecutionResult",
    "KeySelector",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListState",
    "ListStateDescriptor",
    "MapFunction",
    "MapState",
    "MapStateDescriptor",
    "ProcessFunction",
    "ProcessWindowFunction",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "Row",
    "RuntimeContext",
    "Sink",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "Source",
    "SourceReader",
    "SplitAssignment",
    "SplitEnumerator",
    "StateTtlConfig",
    "StreamExecutionEnvironment",
    "Time",
    "TimeDomain",
    "TimeWindow",
    "TimerService",
    "TimestampAssigner",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "TypeInformation",
    "Types",
    "UserError",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "WeirError",
    "WindowAssigner",
    "WindowedStream",
]
