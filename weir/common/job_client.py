"""A submitted job's handle (PyFlink's ``pyflink.common.job_client``), defined with the
executor contract in :mod:`weir.core.execution`: the client floor implements it.

Example:
    >>> JobClient.get_job_status.__doc__.split(" (")[0]
    "The job's status"
"""

from __future__ import annotations

from weir.core.execution import JobClient

__all__ = ["JobClient"]
