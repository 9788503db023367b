"""Window assigners put each record in zero or more windows: tumbling, sliding and session
windows by event time or processing time, global windows, and PyFlink's count window
assigners.

Example:
    >>> from weir.common.time import Time
    >>> w = TumblingEventTimeWindows.of(Time.seconds(10)).assign_windows(None, 12_500)
    >>> w, w[0].max_timestamp()
    ([TimeWindow(start=10000, end=20000)], 19999)
    >>> [x.start for x in SlidingEventTimeWindows.of(Time.seconds(10),
    ...                                               Time.seconds(5)).assign_windows(None, 12_500)]
    [10000, 5000]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Self, TypeAlias

from weir.core.generics import TypeParameters
from weir.core.time import to_millis
from weir.datastream.window.triggers import (
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
)
from weir.datastream.window.windows import GLOBAL_WINDOW, TimeWindow, positive_ms

if TYPE_CHECKING:
    from weir.common.time import TimeSpan

__all__ = ["CountSlidingWindowAssigner", "CountTumblingWindowAssigner",
           "DynamicEventTimeSessionWindows", "DynamicProcessingTimeSessionWindows",
           "EventTimeSessionWindows", "GlobalWindows", "ProcessingTimeSessionWindows",
           "SessionWindowTimeGapExtractor", "SlidingEventTimeWindows",
           "SlidingProcessingTimeWindows", "TumblingEventTimeWindows",
           "TumblingProcessingTimeWindows", "WindowAssigner"]


def window_start(timestamp: int, offset: int, size: int) -> int:
    """Start of the ``size`` window (aligned to ``offset``) holding ``timestamp``."""
    return timestamp - (timestamp - offset) % size


class WindowAssigner(ABC, TypeParameters):
    """Assigns records to windows (``WindowAssigner[T, TimeWindow]`` reads as in PyFlink)."""

    @abstractmethod
    def assign_windows(self, element: Any, timestamp: int) -> list[TimeWindow]:
        """The windows of a record with this timestamp (event or processing time)."""

    @abstractmethod
    def is_event_time(self) -> bool: ...

    def default_trigger(self) -> Trigger:
        return EventTimeTrigger() if self.is_event_time() else ProcessingTimeTrigger()

    def is_merging(self) -> bool:
        return False

    def merge_windows(self, windows: Iterable[TimeWindow]
                      ) -> list[tuple[TimeWindow, list[TimeWindow]]]:
        """Merging assigners: groups of windows that become one (result, members)."""
        msg = f"{type(self).__name__} does not merge windows"
        raise NotImplementedError(msg)


def _offset_ms(offset: TimeSpan | None) -> int:
    # PyFlink's of(size, offset=None) passes None for "no offset".
    return 0 if offset is None else to_millis(offset)


class _Tumbling(WindowAssigner):
    def __init__(self, size: TimeSpan, offset: TimeSpan | None = 0) -> None:
        self.size = positive_ms(size, "window size")
        self.offset = _offset_ms(offset) % self.size

    @classmethod
    def of(cls, size: TimeSpan, offset: TimeSpan | None = None) -> Self:
        """Windows of ``size`` (Duration, Time or ms), shifted by ``offset`` (None: 0)."""
        return cls(size, offset)

    def assign_windows(self, element: Any, timestamp: int) -> list[TimeWindow]:
        start = window_start(timestamp, self.offset, self.size)
        return [TimeWindow(start, start + self.size)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}.of({self.size} ms)"


class TumblingEventTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping windows by record timestamp."""

    def is_event_time(self) -> bool:
        return True


class TumblingProcessingTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping windows by the wall clock when a record is processed."""

    def is_event_time(self) -> bool:
        return False


class _Sliding(WindowAssigner):
    def __init__(self, size: TimeSpan, slide: TimeSpan, offset: TimeSpan | None = 0) -> None:
        self.size = positive_ms(size, "window size")
        self.slide = positive_ms(slide, "window slide")
        self.offset = _offset_ms(offset) % self.slide

    @classmethod
    def of(cls, size: TimeSpan, slide: TimeSpan, offset: TimeSpan | None = None) -> Self:
        """Windows of ``size`` starting every ``slide`` (each record is in size/slide),
        shifted by ``offset`` (None: 0)."""
        return cls(size, slide, offset)

    def assign_windows(self, element: Any, timestamp: int) -> list[TimeWindow]:
        last = window_start(timestamp, self.offset, self.slide)
        windows = []
        start = last
        while start > timestamp - self.size:
            windows.append(TimeWindow(start, start + self.size))
            start -= self.slide
        return windows

    def __repr__(self) -> str:
        return f"{type(self).__name__}.of({self.size} ms, {self.slide} ms)"


class SlidingEventTimeWindows(_Sliding):
    """Overlapping windows of a fixed size by record timestamp."""

    def is_event_time(self) -> bool:
        return True


class SlidingProcessingTimeWindows(_Sliding):
    """Overlapping windows of a fixed size by the wall clock."""

    def is_event_time(self) -> bool:
        return False


class SessionWindowTimeGapExtractor(ABC):
    """The session gap a record sets (``with_dynamic_gap``), in milliseconds."""

    @abstractmethod
    def extract(self, element: Any) -> int: ...


def _checked_extractor(extractor: GapExtractor) -> GapExtractor:
    if not (callable(extractor) or callable(getattr(extractor, "extract", None))):
        msg = ("with_dynamic_gap needs a SessionWindowTimeGapExtractor or a function, "
               f"got {type(extractor).__name__}")
        raise TypeError(msg)
    return extractor


#: What sets a dynamic session gap: an extractor, or a function of the element (ms).
GapExtractor: TypeAlias = "SessionWindowTimeGapExtractor | Callable[[Any], TimeSpan]"


class _Session(WindowAssigner):
    def __init__(self, gap: TimeSpan, extractor: GapExtractor | None = None) -> None:
        self.gap = positive_ms(gap, "session gap") if extractor is None else 0
        self.extractor = extractor

    @classmethod
    def with_gap(cls, gap: TimeSpan) -> Self:
        """A session ends after ``gap`` without records of its key."""
        return cls(gap)

    @classmethod
    def with_dynamic_gap(cls, extractor: GapExtractor) -> Self:
        """Each record sets the gap after it: ``extractor.extract(element)`` ms (a
        SessionWindowTimeGapExtractor, or a function of the element)."""
        return cls(0, _checked_extractor(extractor))

    def assign_windows(self, element: Any, timestamp: int) -> list[TimeWindow]:
        gap = self.gap
        extractor = self.extractor
        if isinstance(extractor, SessionWindowTimeGapExtractor):
            gap = positive_ms(extractor.extract(element), "dynamic session gap")
        elif extractor is not None:  # a function, or an object with extract() all the same
            extract = getattr(extractor, "extract", extractor)
            gap = positive_ms(extract(element), "dynamic session gap")
        return [TimeWindow(timestamp, timestamp + gap)]

    def is_merging(self) -> bool:
        return True

    def merge_windows(self, windows: Iterable[TimeWindow]
                      ) -> list[tuple[TimeWindow, list[TimeWindow]]]:
        merged: list[tuple[TimeWindow, list[TimeWindow]]] = []
        for window in sorted(windows):
            if merged and merged[-1][0].intersects(window):
                cover, members = merged[-1]
                merged[-1] = (cover.cover(window), [*members, window])
            else:
                merged.append((window, [window]))
        return merged

    def __repr__(self) -> str:
        if self.extractor is not None:
            return f"{type(self).__name__}.with_dynamic_gap()"
        return f"{type(self).__name__}.with_gap({self.gap} ms)"


class GlobalWindows(WindowAssigner):
    """Every record of a key in one window that never ends (``GLOBAL_WINDOW``): it fires
    only by its trigger (the default never fires), as count windows use it."""

    @classmethod
    def create(cls) -> GlobalWindows:
        return cls()

    def assign_windows(self, element: Any, timestamp: int) -> list[TimeWindow]:
        return [GLOBAL_WINDOW]

    def is_event_time(self) -> bool:
        return False

    def default_trigger(self) -> Trigger:
        return NeverTrigger()

    def __repr__(self) -> str:
        return "GlobalWindows.create()"


class EventTimeSessionWindows(_Session):
    """Per-key sessions by record timestamp: windows closer than the gap merge."""

    def is_event_time(self) -> bool:
        return True


class ProcessingTimeSessionWindows(_Session):
    """Per-key sessions by the wall clock."""

    def is_event_time(self) -> bool:
        return False


class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """PyFlink's name for event-time sessions whose gap each record sets:
    ``DynamicEventTimeSessionWindows.with_dynamic_gap(extractor)`` is
    ``EventTimeSessionWindows.with_dynamic_gap(extractor)``."""

    def __init__(self, session_window_time_gap_extractor: GapExtractor) -> None:
        super().__init__(0, _checked_extractor(session_window_time_gap_extractor))

    @classmethod
    def with_dynamic_gap(cls, extractor: GapExtractor) -> Self:
        """Each record sets the gap after it (see ``EventTimeSessionWindows``)."""
        return cls(extractor)


class DynamicProcessingTimeSessionWindows(ProcessingTimeSessionWindows):
    """PyFlink's name for processing-time sessions whose gap each record sets:
    ``DynamicProcessingTimeSessionWindows.with_dynamic_gap(extractor)`` is
    ``ProcessingTimeSessionWindows.with_dynamic_gap(extractor)``."""

    def __init__(self, session_window_time_gap_extractor: GapExtractor) -> None:
        super().__init__(0, _checked_extractor(session_window_time_gap_extractor))

    @classmethod
    def with_dynamic_gap(cls, extractor: GapExtractor) -> Self:
        """Each record sets the gap after it (see ``ProcessingTimeSessionWindows``)."""
        return cls(extractor)


class _CountWindows(GlobalWindows):
    """Count windows named as PyFlink's assigners. ``window(assigner)`` and
    ``window_all(assigner)`` build them as ``count_window(size, slide)`` does (GlobalWindows
    with a count trigger, plus an evictor when sliding), so the job is the same either way."""

    size: int
    slide: int

    def default_trigger(self) -> Trigger:
        if self.slide == 0:
            return PurgingTrigger.of(CountTrigger.of(self.size))
        return CountTrigger.of(self.slide)


class CountTumblingWindowAssigner(_CountWindows):
    """Windows of ``size`` records per key: ``key_by(...).window(
    CountTumblingWindowAssigner.of(size))`` is ``key_by(...).count_window(size)``."""

    def __init__(self, window_size: int) -> None:
        self.size = _positive_count(window_size, "window size")
        self.slide = 0

    @classmethod
    def of(cls, window_size: int) -> CountTumblingWindowAssigner:
        return cls(window_size)

    def __repr__(self) -> str:
        return f"CountTumblingWindowAssigner.of({self.size})"


class CountSlidingWindowAssigner(_CountWindows):
    """Windows of ``size`` records per key, one starting every ``slide`` records, each
    evaluated once full (PyFlink's semantics: a window that never fills is never
    evaluated): ``window(CountSlidingWindowAssigner.of(size, slide))`` is
    ``count_window(size, slide)``."""

    def __init__(self, window_size: int, window_slide: int) -> None:
        self.size = _positive_count(window_size, "window size")
        self.slide = _positive_count(window_slide, "window slide")

    @classmethod
    def of(cls, window_size: int, window_slide: int) -> CountSlidingWindowAssigner:
        return cls(window_size, window_slide)

    def __repr__(self) -> str:
        return f"CountSlidingWindowAssigner.of({self.size}, {self.slide})"


def _positive_count(value: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        msg = f"the count {what} must be a positive number of records, got {value!r}"
        raise ValueError(msg)
    return value
