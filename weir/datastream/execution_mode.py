"""How a job runs: streaming or batch (PyFlink's ``pyflink.datastream.execution_mode``).

Example:
    >>> from weir.datastream.stream_execution_environment import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.set_runtime_mode(RuntimeExecutionMode.BATCH).get_configuration().to_dict()[
    ...     "execution.runtime-mode"]
    'BATCH'
"""

from __future__ import annotations

import enum

__all__ = ["RuntimeExecutionMode"]


class RuntimeExecutionMode(enum.Enum):
    """STREAMING (the default), BATCH (bounded inputs, run stage by stage; keyed
    aggregations emit only final values), or AUTOMATIC: BATCH when every source is
    bounded, else STREAMING."""

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2
