"""A job's status (PyFlink's ``pyflink.common.job_status``), defined with the executor
contract in :mod:`weir.core.execution`.

Example:
    >>> JobStatus("FINISHED").is_globally_terminal_state()
    True
"""

from __future__ import annotations

from weir.core.execution import JobStatus

__all__ = ["JobStatus"]
