"""The windows themselves: :class:`TimeWindow` (an interval of event or processing time),
and PyFlink's :class:`CountWindow` and :class:`GlobalWindow`.

Windows are half open, ``[start, end)``; a result carries the timestamp ``end - 1``.

Example:
    >>> TimeWindow(10_000, 20_000).max_timestamp()
    19999
    >>> GlobalWindow.get() == GlobalWindow(), CountWindow(3) == CountWindow(3)
    (True, True)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from weir.core.generics import TypeParameters
from weir.core.records import MAX_WATERMARK
from weir.core.time import to_millis

if TYPE_CHECKING:
    from weir.common.time import TimeSpan

__all__ = ["CountWindow", "GlobalWindow", "TimeWindow", "Window"]


class Window(ABC, TypeParameters):
    """A group of records with a largest timestamp: once the watermark passes it, every
    record of the window has arrived (:class:`TimeWindow`, :class:`CountWindow`,
    :class:`GlobalWindow`)."""

    @abstractmethod
    def max_timestamp(self) -> int:
        """The largest timestamp a record of this window can have."""


@dataclass(frozen=True, order=True)
class TimeWindow(Window):
    """The half-open interval ``[start, end)`` of epoch milliseconds."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        """The largest timestamp inside the window (``end - 1``)."""
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))


@dataclass(frozen=True, order=True)
class CountWindow(Window):
    """PyFlink's window of a count window assigner, named by a number (``id``).

    weir builds count windows from :class:`GlobalWindows` with a count trigger (and
    evictor), so the window a count-window function sees is :data:`GLOBAL_WINDOW`; this
    class exists for programs that name or construct it.
    """

    id: int

    def max_timestamp(self) -> int:
        return MAX_WATERMARK


class GlobalWindow(Window):
    """PyFlink's single window of ``GlobalWindows``: every instance is the same window.

    At run time weir represents it as :data:`GLOBAL_WINDOW`, a :class:`TimeWindow` spanning
    all of time (so that window state and timers have one kind of namespace).
    """

    @staticmethod
    def get() -> GlobalWindow:
        return GlobalWindow()

    def max_timestamp(self) -> int:
        return MAX_WATERMARK

    def __eq__(self, other: object) -> bool:
        return type(other) is GlobalWindow

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "GlobalWindow"


#: The one window of GlobalWindows: all of time (its results carry no useful timestamp).
GLOBAL_WINDOW = TimeWindow(-(1 << 63) + 1, MAX_WATERMARK)


def positive_ms(value: TimeSpan, what: str) -> int:
    """Milliseconds of the span ``value`` (Duration, Time or ms), which must be positive."""
    ms = to_millis(value)
    if ms <= 0:
        msg = f"the {what} must be positive, got {ms} ms"
        raise ValueError(msg)
    return ms
