"""weir: a distributed stream-processing engine built around fault tolerance.

Everything a job program needs is importable from here.

Example:
    >>> from weir import StreamExecutionEnvironment, Row, Types
    >>> Row(user="u1", clicks=2).clicks
    2
"""

from weir.config import Configuration
from weir.datastream import CloseableIterator, DataStream, DataStreamSink, KeyedStream
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

__version__ = "0.1.0"

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "CloseableIterator",
    "ConfigError",
    "Configuration",
    "DataStream",
    "DataStreamSink",
    "DiscardingSink",
    "Duration",
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
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "Row",
    "RuntimeContext",
    "Sink",
    "Source",
    "SourceReader",
    "SplitAssignment",
    "SplitEnumerator",
    "StateTtlConfig",
    "StreamExecutionEnvironment",
    "Time",
    "TypeInformation",
    "Types",
    "UserError",
    "ValueState",
    "ValueStateDescriptor",
    "WeirError",
]
