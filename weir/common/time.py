"""Durations and instants (PyFlink's ``pyflink.common.time``), defined in
:mod:`weir.core.time`, where the runtime reads them too (state time-to-live).

Example:
    >>> Time.seconds(10).to_milliseconds(), Duration.of_minutes(1).to_milliseconds()
    (10000, 60000)
"""

from __future__ import annotations

import datetime

from weir.core.time import Duration, Instant, Time

__all__ = ["Duration", "Instant", "Time"]

#: A span of time as weir takes it wherever PyFlink takes a Time or a Duration: either of
#: those, a ``datetime.timedelta``, or a number of milliseconds (``to_millis`` reads them).
TimeSpan = Time | datetime.timedelta | float
