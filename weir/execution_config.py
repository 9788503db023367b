"""Execution settings named as in PyFlink: ``RuntimeExecutionMode``, ``TimeCharacteristic``
and the ``ExecutionConfig`` of ``env.get_config()``. Each writes the configuration option
weir reads (``execution.runtime-mode``, ``pipeline.auto-watermark-interval``, ...), so a
program may use either.

Example:
    >>> from weir import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.get_config().set_auto_watermark_interval(50).get_auto_watermark_interval()
    50
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from weir.core import options
from weir.unsupported import EXECUTION_CONFIG, refuse

if TYPE_CHECKING:
    from weir.environment import StreamExecutionEnvironment


class RuntimeExecutionMode(enum.Enum):
    """STREAMING (the default), BATCH (bounded inputs, run stage by stage; keyed
    aggregations emit only final values), or AUTOMATIC: BATCH when every source is
    bounded, else STREAMING."""

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2


class TimeCharacteristic(enum.Enum):
    """Deprecated in Flink 1.12 and accepted for old programs: event time applies wherever
    timestamps and watermarks are assigned, processing time elsewhere; setting this
    changes nothing."""

    ProcessingTime = 0
    IngestionTime = 1
    EventTime = 2


class ExecutionConfig:
    """``env.get_config()``: a view on the environment and its configuration."""

    def __init__(self, env: StreamExecutionEnvironment) -> None:
        self._env = env

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return refuse(type(self).__name__, name, EXECUTION_CONFIG)

    def set_auto_watermark_interval(self, interval: int) -> ExecutionConfig:
        """Milliseconds between the watermarks ``assign_timestamps_and_watermarks`` emits
        (``pipeline.auto-watermark-interval``)."""
        self._env.get_configuration().set_raw(options.AUTO_WATERMARK_INTERVAL.key,
                                              f"{int(interval)} ms")
        return self

    def get_auto_watermark_interval(self) -> int:
        seconds = self._env.get_configuration().get(options.AUTO_WATERMARK_INTERVAL)
        return round(float(seconds) * 1000)

    def set_parallelism(self, parallelism: int) -> ExecutionConfig:
        self._env.set_parallelism(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._env.get_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> ExecutionConfig:
        self._env.set_max_parallelism(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._env.get_max_parallelism()

    def enable_object_reuse(self) -> ExecutionConfig:
        """Accepted; records cross operators as Python objects or Arrow batches anyway."""
        return self

    def disable_object_reuse(self) -> ExecutionConfig:
        return self

    def set_global_job_parameters(self, global_job_parameters_dict: Mapping[str, Any]
                                  ) -> ExecutionConfig:
        """Parameters every user function reads at run time with
        ``runtime_context.get_job_parameter(key, default_value)``. As in PyFlink, values
        that are not strings are stored as ``str(value)``, and the dict replaces any
        parameters set before (``pipeline.global-job-parameters``).

        Example:
            >>> from weir import StreamExecutionEnvironment
            >>> config = StreamExecutionEnvironment.get_execution_environment().get_config()
            >>> config.set_global_job_parameters({"threshold": 5}).get_global_job_parameters()
            {'threshold': '5'}
        """
        parameters = {str(key): value if isinstance(value, str) else str(value)
                      for key, value in global_job_parameters_dict.items()}
        self._env.get_configuration().set_raw(options.GLOBAL_JOB_PARAMETERS.key,
                                              json.dumps(parameters, sort_keys=True))
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        """The job's global parameters (empty when none were set)."""
        return options.job_parameters(self._env.get_configuration())
