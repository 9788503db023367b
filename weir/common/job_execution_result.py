"""What ``env.execute()`` returns (PyFlink's ``pyflink.common.job_execution_result``),
defined with the executor contract in :mod:`weir.core.execution`.

Example:
    >>> JobExecutionResult("a1b2", 1.5).get_net_runtime()
    1500
"""

from __future__ import annotations

from weir.core.execution import JobExecutionResult

__all__ = ["JobExecutionResult"]
