"""PyFlink's ``pyflink.datastream.time_characteristic``, deprecated in Flink 1.12.

Example:
    >>> TimeCharacteristic.EventTime.name
    'EventTime'
"""

from __future__ import annotations

import enum

__all__ = ["TimeCharacteristic"]


class TimeCharacteristic(enum.Enum):
    """Deprecated in Flink 1.12 and accepted for old programs: event time applies wherever
    timestamps and watermarks are assigned, processing time elsewhere; setting this
    changes nothing."""

    ProcessingTime = 0
    IngestionTime = 1
    EventTime = 2
