"""PyFlink's ``pyflink.common.job_id``: weir's job ids are strings
(``JobClient.get_job_id()``).

Example:
    >>> sorted(__unsupported__)
    ['JobID']
"""

from __future__ import annotations

from weir.unsupported import refusing

__all__: list[str] = []

__unsupported__ = {"JobID": "job ids are strings (JobClient.get_job_id())"}
__getattr__ = refusing(__name__, __unsupported__)
