"""What a function's context says about time, and the timers of a keyed function (PyFlink's
``pyflink.datastream.timerservice``).

Example:
    >>> clock = OperatorClock(lambda: 1_000)
    >>> service = TimerService(clock)
    >>> service.current_processing_time(), service.current_watermark() < 0
    (1000, True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from weir.core.clock import wall_clock_ms
from weir.core.errors import UserError
from weir.core.records import NO_TIMESTAMP

if TYPE_CHECKING:
    from weir.state.timers import InternalTimerService

__all__ = ["TimerService"]


class OperatorClock:
    """The clocks of an operator without timers, for its function's timer service: the
    wall clock, and ``current_watermark``, which the operator sets to each watermark it
    receives (the smallest watermark until the first)."""

    def __init__(self, processing_time: Callable[[], int] = wall_clock_ms) -> None:
        self._processing_time = processing_time
        self.current_watermark = NO_TIMESTAMP

    def current_processing_time(self) -> int:
        return self._processing_time()


class TimerService:
    """Timers and clocks of a keyed function; timers belong to the current key.

    ``timers`` is the operator's timer service, or an :class:`OperatorClock` for a function
    on a non-keyed stream, whose timer service tells the time but refuses timers (as
    Flink's does: a timer belongs to a key).
    """

    def __init__(self, timers: InternalTimerService | OperatorClock) -> None:
        self._timers = timers

    def current_processing_time(self) -> int:
        """The wall clock, epoch milliseconds."""
        return int(self._timers.current_processing_time())

    def current_watermark(self) -> int:
        """The operator's event time: the last watermark it received."""
        return int(self._timers.current_watermark)

    def register_event_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` once the watermark reaches ``timestamp``."""
        self._keyed("setting").register_event_time_timer(None, timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` once the wall clock reaches ``timestamp``."""
        self._keyed("setting").register_processing_time_timer(None, timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._keyed("deleting").delete_event_time_timer(None, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._keyed("deleting").delete_processing_time_timer(None, timestamp)

    def _keyed(self, what: str) -> InternalTimerService:
        """The operator's timers; raises UserError on a non-keyed stream."""
        if isinstance(self._timers, OperatorClock):
            msg = (f"{what} timers is only supported on a keyed stream: key_by(...) the "
                   "stream and process it with a KeyedProcessFunction (a timer belongs to "
                   "a key)")
            raise UserError(msg)
        return self._timers


def non_keyed_timer_service(clock: OperatorClock) -> TimerService:
    """The timer service a non-keyed function's context gives: ``clock``'s time, no timers."""
    return TimerService(clock)
