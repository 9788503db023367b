"""What the DataStream API shares with the rest of PyFlink (PyFlink's ``pyflink.common``):
configuration, types and rows, time, watermark strategies, restart strategies, the job
client and its results; and weir's errors a job program may catch.

Each name is defined in a module below (or, where the runtime needs it too, in
``weir.core``, which those modules name); this package names them all, as PyFlink's does.

Example:
    >>> from weir.common import Row, Types, WatermarkStrategy
    >>> Row(user="u1", clicks=2).clicks, str(Types.LONG())
    (2, 'Long')
"""

from __future__ import annotations

from weir.common import execution_mode as _execution_mode
from weir.common import job_id as _job_id
from weir.common import serialization as _serialization
from weir.common.completable_future import CompletableFuture
from weir.common.configuration import Configuration
from weir.common.execution_config import ExecutionConfig
from weir.common.job_client import JobClient
from weir.common.job_execution_result import JobExecutionResult
from weir.common.job_status import JobStatus
from weir.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from weir.common.serialization import Encoder
from weir.common.time import Duration, Instant, Time
from weir.common.typeinfo import TypeInformation, Types
from weir.common.types import Row, RowKind
from weir.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from weir.core.errors import ConfigError, InvalidJobError, JobExecutionError, UserError, WeirError
from weir.unsupported import DATASET, SCHEMAS, SERIALIZERS, refusing

# With weir's own errors a job program may catch (the CLI prints them as one line).
__all__ = [
    "CompletableFuture",
    "ConfigError",
    "Configuration",
    "Duration",
    "Encoder",
    "ExecutionConfig",
    "Instant",
    "InvalidJobError",
    "JobClient",
    "JobExecutionError",
    "JobExecutionResult",
    "JobStatus",
    "RestartStrategies",
    "RestartStrategyConfiguration",
    "Row",
    "RowKind",
    "Time",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "UserError",
    "WatermarkStrategy",
    "WeirError",
]

__unsupported__ = {
    **_serialization.__unsupported__,
    **_execution_mode.__unsupported__,
    **_job_id.__unsupported__,
    "TypeSerializer": SERIALIZERS,
    **dict.fromkeys(["JsonRowSerializationSchema", "JsonRowDeserializationSchema",
                     "CsvRowSerializationSchema", "CsvRowDeserializationSchema",
                     "AvroRowSerializationSchema", "AvroRowDeserializationSchema"], SCHEMAS),
    "InputDependencyConstraint": DATASET,
}
__getattr__ = refusing(__name__, __unsupported__)
