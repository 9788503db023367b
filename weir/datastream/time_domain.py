"""Which clock a timer follows (PyFlink's ``pyflink.datastream.time_domain``).

Example:
    >>> [d.name for d in TimeDomain]
    ['EVENT_TIME', 'PROCESSING_TIME']
"""

from __future__ import annotations

import enum

__all__ = ["TimeDomain"]


class TimeDomain(enum.Enum):
    """Which clock a timer follows."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1
