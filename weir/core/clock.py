"""Clocks: a clock is a callable returning epoch milliseconds, injected wherever time
decides behaviour (timers, checkpoint intervals and timeouts, restart delays), so that
tests drive time instead of sleeping.

Example:
    >>> clock = ManualClock(1_000)
    >>> clock()
    1000
    >>> clock.advance(250)
    >>> clock()
    1250
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: The type of a clock: returns the current time in epoch milliseconds.
Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """The system's wall clock, in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to (for tests)."""

    def __init__(self, start_ms: int = 0) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        """Move the clock forward by ``ms`` milliseconds."""
        if ms < 0:
            msg = f"a clock never goes back (asked to advance by {ms} ms)"
            raise ValueError(msg)
        self.now_ms += ms
