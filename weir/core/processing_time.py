"""Processing-time callbacks of one task, run on its mailbox thread.

Operators register a callback for a wall-clock time (epoch milliseconds); the task loop calls
:meth:`ProcessingTimeService.fire_due` on every turn and sleeps no longer than
:meth:`ProcessingTimeService.seconds_until_next` — so callbacks run on the thread that owns
the operators, between batches, never concurrently with them (Flink runs its processing-time
timers as mailbox mails for the same reason). The clock is injectable, so tests drive time.

Example:
    >>> now = [1_000]
    >>> service = ProcessingTimeService(clock_ms=lambda: now[0])
    >>> fired = []
    >>> _ = service.register_timer(1_500, fired.append)
    >>> service.fire_due(), fired
    (0, [])
    >>> now[0] = 2_000
    >>> service.fire_due(), fired
    (1, [1500])
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable

from weir.core.clock import wall_clock_ms

#: How long one unit of a task's work (a chunk of records, a run of timers) should take
#: before the task turns its loop again (mails, priority events, cancellation).
TIME_SLICE_S = 0.002


class TimeSlice:
    """The time the task's current unit of work may take before it yields to the loop.

    The task starts a slice before each unit; work that may go on for long — firing many
    timers — asks :meth:`expired` as it goes and, once it is, stops after what it just did
    and continues on a later turn. ``unlimited``: the task is ending its input and needs
    the work done now.

    Example:
        >>> now = [0.0]
        >>> budget = TimeSlice(0.002, clock=lambda: now[0])
        >>> budget.start(); budget.expired()
        False
        >>> now[0] = 0.003; budget.expired()
        True
    """

    def __init__(self, seconds: float = TIME_SLICE_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds = seconds
        self.unlimited = False
        self._clock = clock
        self._deadline = math.inf

    def start(self) -> None:
        self._deadline = self._clock() + self.seconds

    def expired(self) -> bool:
        return not self.unlimited and self._clock() >= self._deadline


class ScheduledTimer:
    """A registered callback; ``cancel()`` keeps it from running."""

    __slots__ = ("callback", "cancelled", "timestamp")

    def __init__(self, timestamp: int, callback: Callable[[int], None]) -> None:
        self.timestamp = timestamp
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ProcessingTimeService:
    """Callbacks at wall-clock times; not thread-safe: the task thread alone uses it."""

    def __init__(self, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._clock_ms = clock_ms
        self._queue: list[tuple[int, int, ScheduledTimer]] = []
        self._sequence = itertools.count()
        #: The task's current unit of work: long runs of timers yield when it expired.
        self.time_slice = TimeSlice()

    def current_time_ms(self) -> int:
        return self._clock_ms()

    def register_timer(self, timestamp: int, callback: Callable[[int], None]) -> ScheduledTimer:
        """Run ``callback(timestamp)`` on the task thread once the clock reaches ``timestamp``."""
        timer = ScheduledTimer(timestamp, callback)
        heapq.heappush(self._queue, (timestamp, next(self._sequence), timer))
        return timer

    def fire_due(self) -> int:
        """Run the callbacks whose time has come (in time order), until the task's time
        slice expired (at least one); returns how many ran. What is left is due at the
        next call.

        A callback registering a timer that is already due runs in the same call: the
        clock is read once, so a callback re-registering "now" cannot loop forever.
        """
        now = self._clock_ms()
        fired = 0
        queue = self._queue
        time_slice = self.time_slice
        while queue and queue[0][0] <= now:
            _, _, timer = heapq.heappop(queue)
            if not timer.cancelled:
                fired += 1
                timer.callback(timer.timestamp)
                if time_slice.expired():
                    break
        return fired

    def seconds_until_next(self) -> float | None:
        """Seconds until the next callback is due (0 when overdue), None when none waits."""
        while self._queue and self._queue[0][2].cancelled:
            heapq.heappop(self._queue)
        if not self._queue:
            return None
        return max(0.0, (self._queue[0][0] - self._clock_ms()) / 1000)

    def __len__(self) -> int:
        return sum(1 for _, _, t in self._queue if not t.cancelled)
