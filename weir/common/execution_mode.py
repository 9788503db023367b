"""PyFlink's ``pyflink.common.execution_mode``: the DataSet API's execution mode, which
weir does not have (a job's mode is ``RuntimeExecutionMode``).

Example:
    >>> sorted(__unsupported__)
    ['ExecutionMode']
"""

from __future__ import annotations

from weir.unsupported import DATASET, refusing

__all__: list[str] = []

__unsupported__ = {"ExecutionMode": f"{DATASET}; use RuntimeExecutionMode"}
__getattr__ = refusing(__name__, __unsupported__)
