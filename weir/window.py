"""Windows on keyed streams, named as in PyFlink: assigners, triggers, window functions.

A *window assigner* puts each record in zero or more :class:`TimeWindow` s (tumbling,
sliding, session; by event time or processing time). A *trigger* decides when a window's
contents are evaluated (by default: when event time — or the wall clock — passes the end
of the window). The *window function* computes the result: ``reduce`` and ``aggregate``
fold records in as they arrive (one value per window and key is kept), ``process`` sees
every record of the window at once. ``allowed_lateness`` keeps a window's state that much
longer after it fired: a late record within it fires the window again with the updated
result; later ones are dropped (and counted).

Windows are half open, ``[start, end)``; a result carries the timestamp ``end - 1``.

Example:
    >>> w = TumblingEventTimeWindows.of(Time.seconds(10)).assign_windows(None, 12_500)
    >>> w, w[0].max_timestamp()
    ([TimeWindow(start=10000, end=20000)], 19999)
    >>> [x.start for x in SlidingEventTimeWindows.of(Time.seconds(10),
    ...                                               Time.seconds(5)).assign_windows(None, 12_500)]
    [10000, 5000]
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from weir.core.time import Time, to_millis
from weir.core.watermarks import MAX_WATERMARK
from weir.functions import Function

__all__ = [
    "AggregateFunction",
    "CountTrigger",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "ProcessWindowFunction",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "Time",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "WindowAssigner",
]


@dataclass(frozen=True, order=True)
class TimeWindow:
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


def window_start(timestamp: int, offset: int, size: int) -> int:
    """Start of the ``size`` window (aligned to ``offset``) holding ``timestamp``."""
    return timestamp - (timestamp - offset) % size


class WindowAssigner(ABC):
    """Assigns records to windows."""

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


def _positive_ms(value: Any, what: str) -> int:
    ms = to_millis(value)
    if ms <= 0:
        msg = f"the {what} must be positive, got {ms} ms"
        raise ValueError(msg)
    return ms


class _Tumbling(WindowAssigner):
    def __init__(self, size: Any, offset: Any = 0) -> None:
        self.size = _positive_ms(size, "window size")
        self.offset = to_millis(offset) % self.size

    @classmethod
    def of(cls, size: Any, offset: Any = 0) -> Any:
        """Windows of ``size`` (Duration, Time or ms), shifted by ``offset``."""
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
    def __init__(self, size: Any, slide: Any, offset: Any = 0) -> None:
        self.size = _positive_ms(size, "window size")
        self.slide = _positive_ms(slide, "window slide")
        self.offset = to_millis(offset) % self.slide

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = 0) -> Any:
        """Windows of ``size`` starting every ``slide`` (each record is in size/slide)."""
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


class _Session(WindowAssigner):
    def __init__(self, gap: Any) -> None:
        self.gap = _positive_ms(gap, "session gap")

    @classmethod
    def with_gap(cls, gap: Any) -> Any:
        """A session ends after ``gap`` without records of its key."""
        return cls(gap)

    def assign_windows(self, element: Any, timestamp: int) -> list[TimeWindow]:
        return [TimeWindow(timestamp, timestamp + self.gap)]

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
        return f"{type(self).__name__}.with_gap({self.gap} ms)"


class EventTimeSessionWindows(_Session):
    """Per-key sessions by record timestamp: windows closer than the gap merge."""

    def is_event_time(self) -> bool:
        return True


class ProcessingTimeSessionWindows(_Session):
    """Per-key sessions by the wall clock."""

    def is_event_time(self) -> bool:
        return False


# -- triggers -------------------------------------------------------------------------------


class TriggerResult(enum.Enum):
    """What a trigger decides: evaluate the window and/or drop its contents."""

    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    @property
    def is_fire(self) -> bool:
        return self.value[0]

    @property
    def is_purge(self) -> bool:
        return self.value[1]


class Trigger(ABC):
    """Decides when a window fires. The context (``ctx``) registers timers for the current
    key and window and reads the clocks: ``ctx.register_event_time_timer(t)``,
    ``ctx.register_processing_time_timer(t)``, ``ctx.delete_*``, ``ctx.current_watermark()``,
    ``ctx.current_processing_time()`` and ``ctx.get_partitioned_state(descriptor)`` (state
    per key and window)."""

    @abstractmethod
    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult: ...

    @abstractmethod
    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult: ...

    @abstractmethod
    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult: ...

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        msg = f"{type(self).__name__} does not support merging (session) windows"
        raise NotImplementedError(msg)

    def clear(self, window: TimeWindow, ctx: Any) -> None:  # noqa: B027 - optional hook
        """The window is purged: delete the timers and state the trigger set."""


class EventTimeTrigger(Trigger):
    """Fires when the watermark passes the window's end (and again for each late record
    within the allowed lateness)."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.current_watermark():
            return TriggerResult.FIRE  # late but allowed: fire again at once
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        if window.max_timestamp() > ctx.current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires when the wall clock passes the window's end."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        if window.max_timestamp() > ctx.current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


class CountTrigger(Trigger):
    """Fires every ``count`` records of a window (the count is per key and window)."""

    def __init__(self, count: int) -> None:
        if count < 1:
            msg = f"the count must be at least 1, got {count}"
            raise ValueError(msg)
        self.count = count

    @classmethod
    def of(cls, count: int) -> CountTrigger:
        return cls(count)

    def _counter(self, ctx: Any) -> Any:
        from weir.state.descriptors import ReducingStateDescriptor

        return ctx.get_partitioned_state(
            ReducingStateDescriptor("count-trigger", lambda a, b: a + b))

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult:
        counter = self._counter(ctx)
        counter.add(1)
        if counter.get() >= self.count:
            counter.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        self._counter(ctx).clear()


# -- window functions ---------------------------------------------------------------------


class AggregateFunction(Function):
    """Incremental aggregation: an accumulator per window and key.

    Example:
        >>> class Average(AggregateFunction):
        ...     def create_accumulator(self): return (0, 0)
        ...     def add(self, value, acc): return acc[0] + value, acc[1] + 1
        ...     def get_result(self, acc): return acc[0] / acc[1]
        ...     def merge(self, a, b): return a[0] + b[0], a[1] + b[1]
        >>> avg = Average()
        >>> avg.get_result(avg.add(3, avg.add(1, avg.create_accumulator())))
        2.0
    """

    @abstractmethod
    def create_accumulator(self) -> Any: ...

    @abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any: ...

    @abstractmethod
    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, a: Any, b: Any) -> Any:
        """Combine two accumulators (needed by session windows)."""
        msg = f"{type(self).__name__} does not implement merge(), which session windows need"
        raise NotImplementedError(msg)


class ProcessWindowFunction(Function):
    """Evaluates a whole window: ``process(key, context, elements)`` yields the outputs.

    ``context.window()`` is the window; ``context.current_watermark()`` and
    ``context.current_processing_time()`` the clocks; ``context.window_state()`` and
    ``context.global_state()`` give keyed state per window or across the key's windows.
    With ``reduce``/``aggregate``, ``elements`` holds the one pre-aggregated value.
    """

    @abstractmethod
    def process(self, key: Any, context: Any, elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: Any) -> None:
        """The window is purged: delete per-window state it kept."""


def end_of_time_cleanup(window: TimeWindow, allowed_lateness: int, event_time: bool) -> int:
    """When a window's state is dropped: its end (+ lateness for event time), capped."""
    if not event_time:
        return window.max_timestamp()
    cleanup = window.max_timestamp() + allowed_lateness
    return cleanup if cleanup >= window.max_timestamp() and cleanup < MAX_WATERMARK \
        else MAX_WATERMARK
