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

from weir.core.generics import TypeParameters
from weir.core.records import MAX_WATERMARK
from weir.core.time import Time, to_millis
from weir.functions import Function

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountEvictor",
    "CountSlidingWindowAssigner",
    "CountTrigger",
    "CountTumblingWindowAssigner",
    "CountWindow",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "Evictor",
    "GlobalWindow",
    "GlobalWindows",
    "NeverTrigger",
    "ProcessAllWindowFunction",
    "ProcessWindowFunction",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SessionWindowTimeGapExtractor",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "Time",
    "TimeEvictor",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "Window",
    "WindowAssigner",
    "WindowFunction",
]


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


def _offset_ms(offset: Any) -> int:
    # PyFlink's of(size, offset=None) passes None for "no offset".
    return 0 if offset is None else to_millis(offset)


def _positive_ms(value: Any, what: str) -> int:
    ms = to_millis(value)
    if ms <= 0:
        msg = f"the {what} must be positive, got {ms} ms"
        raise ValueError(msg)
    return ms


class _Tumbling(WindowAssigner):
    def __init__(self, size: Any, offset: Any = 0) -> None:
        self.size = _positive_ms(size, "window size")
        self.offset = _offset_ms(offset) % self.size

    @classmethod
    def of(cls, size: Any, offset: Any = None) -> Any:
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
    def __init__(self, size: Any, slide: Any, offset: Any = 0) -> None:
        self.size = _positive_ms(size, "window size")
        self.slide = _positive_ms(slide, "window slide")
        self.offset = _offset_ms(offset) % self.slide

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = None) -> Any:
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


def _checked_extractor(extractor: Any) -> Any:
    if not (callable(extractor) or callable(getattr(extractor, "extract", None))):
        msg = ("with_dynamic_gap needs a SessionWindowTimeGapExtractor or a function, "
               f"got {type(extractor).__name__}")
        raise TypeError(msg)
    return extractor


class _Session(WindowAssigner):
    def __init__(self, gap: Any, extractor: Any = None) -> None:
        self.gap = _positive_ms(gap, "session gap") if extractor is None else 0
        self.extractor = extractor

    @classmethod
    def with_gap(cls, gap: Any) -> Any:
        """A session ends after ``gap`` without records of its key."""
        return cls(gap)

    @classmethod
    def with_dynamic_gap(cls, extractor: SessionWindowTimeGapExtractor | Any) -> Any:
        """Each record sets the gap after it: ``extractor.extract(element)`` ms (a
        SessionWindowTimeGapExtractor, or a function of the element)."""
        return cls(0, _checked_extractor(extractor))

    def assign_windows(self, element: Any, timestamp: int) -> list[TimeWindow]:
        gap = self.gap
        if self.extractor is not None:
            extract = getattr(self.extractor, "extract", self.extractor)
            gap = _positive_ms(extract(element), "dynamic session gap")
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

    def __init__(self, session_window_time_gap_extractor: Any) -> None:
        super().__init__(0, _checked_extractor(session_window_time_gap_extractor))

    @classmethod
    def with_dynamic_gap(cls, extractor: SessionWindowTimeGapExtractor | Any) -> Any:
        """Each record sets the gap after it (see ``EventTimeSessionWindows``)."""
        return cls(extractor)


class DynamicProcessingTimeSessionWindows(ProcessingTimeSessionWindows):
    """PyFlink's name for processing-time sessions whose gap each record sets:
    ``DynamicProcessingTimeSessionWindows.with_dynamic_gap(extractor)`` is
    ``ProcessingTimeSessionWindows.with_dynamic_gap(extractor)``."""

    def __init__(self, session_window_time_gap_extractor: Any) -> None:
        super().__init__(0, _checked_extractor(session_window_time_gap_extractor))

    @classmethod
    def with_dynamic_gap(cls, extractor: SessionWindowTimeGapExtractor | Any) -> Any:
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


# -- triggers -------------------------------------------------------------------------------


class TriggerResult(enum.Enum):
    """What a trigger decides: evaluate the window and/or drop its contents."""

    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    def is_fire(self) -> bool:
        """Whether the window function runs (FIRE, FIRE_AND_PURGE)."""
        return self.value[0]

    def is_purge(self) -> bool:
        """Whether the window's contents are dropped (PURGE, FIRE_AND_PURGE)."""
        return self.value[1]


class Trigger(ABC, TypeParameters):
    """Decides when a window fires (``Trigger[T, TimeWindow]`` reads as in PyFlink).

    The context (``ctx``) registers timers for the current key and window and reads the
    clocks: ``ctx.register_event_time_timer(t)``, ``ctx.register_processing_time_timer(t)``,
    ``ctx.delete_*``, ``ctx.current_watermark()``, ``ctx.current_processing_time()`` (also
    under PyFlink's names ``get_current_watermark()`` and ``get_current_processing_time()``)
    and ``ctx.get_partitioned_state(descriptor)`` (state per key and window)."""

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

    def clear(self, window: TimeWindow, ctx: Any) -> None:
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

    @classmethod
    def create(cls) -> EventTimeTrigger:
        """PyFlink's factory: the same as ``EventTimeTrigger()``."""
        return cls()


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

    @classmethod
    def create(cls) -> ProcessingTimeTrigger:
        """PyFlink's factory: the same as ``ProcessingTimeTrigger()``."""
        return cls()


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

    #: The name of the count's state (per key and window).
    _counter_name = "count-trigger"

    def _counter(self, ctx: Any) -> Any:
        from weir.state.descriptors import ReducingStateDescriptor

        return ctx.get_partitioned_state(
            ReducingStateDescriptor(self._counter_name, lambda a, b: a + b))

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


class FullSlidingCountTrigger(CountTrigger):
    """Fires PyFlink's sliding count windows: a window of ``size`` records starts every
    ``slide`` records of a key and is evaluated once, when full (a CountEvictor keeps its
    records). Windows that never fill up are never evaluated, as in PyFlink.

    >>> trigger = FullSlidingCountTrigger(3, 2)
    >>> [n for n in range(1, 10) if trigger.fires_after(n)]
    [3, 5, 7, 9]
    """

    _counter_name = "sliding-count-trigger"

    def __init__(self, size: int, slide: int) -> None:
        super().__init__(size)
        self.size = size
        self.slide = slide

    def fires_after(self, seen: int) -> bool:
        """Whether the ``seen``-th record of a key completes a window."""
        return seen >= self.size and (seen - self.size) % self.slide == 0

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult:
        counter = self._counter(ctx)
        counter.add(1)
        return TriggerResult.FIRE if self.fires_after(counter.get()) else TriggerResult.CONTINUE


class NeverTrigger(Trigger):
    """Never fires: the default of GlobalWindows."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE


class PurgingTrigger(Trigger):
    """Another trigger whose every FIRE also purges the window (FIRE_AND_PURGE)."""

    def __init__(self, nested: Trigger) -> None:
        if not isinstance(nested, Trigger):
            msg = f"PurgingTrigger.of needs a Trigger, got {type(nested).__name__}"
            raise TypeError(msg)
        self.nested = nested

    @classmethod
    def of(cls, nested: Trigger) -> PurgingTrigger:
        return cls(nested)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested.can_merge()

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        self.nested.on_merge(window, ctx)

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        self.nested.clear(window, ctx)


class _ContinuousTrigger(Trigger):
    """Fires every ``interval`` (of its clock) while the window is open, and at its end."""

    event_time = True

    def __init__(self, interval: Any) -> None:
        self.interval = _positive_ms(interval, "trigger interval")

    @classmethod
    def of(cls, interval: Any) -> Any:
        return cls(interval)

    def _next(self, ctx: Any) -> Any:
        from weir.state.descriptors import ValueStateDescriptor

        return ctx.get_partitioned_state(ValueStateDescriptor(f"{type(self).__name__}-next"))

    def _register(self, ctx: Any, time: int) -> None:
        if self.event_time:
            ctx.register_event_time_timer(time)
        else:
            ctx.register_processing_time_timer(time)

    def _schedule(self, now: int, window: TimeWindow, ctx: Any) -> None:
        state = self._next(ctx)
        if state.value() is None:
            start = now - now % self.interval
            fire_at = min(start + self.interval, window.max_timestamp())
            state.update(fire_at)
            self._register(ctx, fire_at)

    def _on_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        state = self._next(ctx)
        if state.value() == time:
            state.clear()
            self._schedule(time, window, ctx)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        state = self._next(ctx)
        fire_at = state.value()
        if fire_at is not None:
            if self.event_time:
                ctx.delete_event_time_timer(fire_at)
            else:
                ctx.delete_processing_time_timer(fire_at)
        state.clear()


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time within the window, and at its end."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        self._schedule(timestamp, window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return self._on_time(time, window, ctx)

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of the wall clock within the window."""

    event_time = False

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Any) -> TriggerResult:
        self._schedule(ctx.current_processing_time(), window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return self._on_time(time, window, ctx)


# -- evictors ---------------------------------------------------------------------------


class Evictor(ABC):
    """Removes records from a window when it fires: before the window function sees them
    (``evict_before``) or after (``evict_after``). A window with an evictor keeps every
    record (with its timestamp) and applies the function when it fires, as Flink's
    evicting windows do. Both take and return ``(record, timestamp)`` pairs, oldest first."""

    def __init__(self, do_evict_after: bool = False) -> None:
        self.do_evict_after = do_evict_after

    @abstractmethod
    def _keep(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]: ...

    def evict_before(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        return records if self.do_evict_after else self._keep(records)

    def evict_after(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        return self._keep(records) if self.do_evict_after else records


class CountEvictor(Evictor):
    """Keeps the last ``max_count`` records of a window."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        super().__init__(do_evict_after)
        if max_count < 1:
            msg = f"a CountEvictor keeps at least 1 record, got {max_count}"
            raise ValueError(msg)
        self.max_count = max_count

    @classmethod
    def of(cls, max_count: int, do_evict_after: bool = False) -> CountEvictor:
        return cls(max_count, do_evict_after)

    def _keep(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        return records[-self.max_count:]


class TimeEvictor(Evictor):
    """Keeps the records of a window at most ``window_size`` older than its newest one."""

    def __init__(self, window_size: Any, do_evict_after: bool = False) -> None:
        super().__init__(do_evict_after)
        self.window_size = _positive_ms(window_size, "evictor window size")

    @classmethod
    def of(cls, window_size: Any, do_evict_after: bool = False) -> TimeEvictor:
        return cls(window_size, do_evict_after)

    def _keep(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        if not records:
            return records
        newest = max(stamp for _, stamp in records)
        return [(r, stamp) for r, stamp in records if stamp >= newest - self.window_size]


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

    class Context(ABC, TypeParameters):
        """What ``process`` gets as ``context`` (for annotations, also as PyFlink's
        ``ProcessWindowFunction.Context[TimeWindow]``: the runtime passes its own
        implementation)."""

        @abstractmethod
        def window(self) -> TimeWindow: ...

        @abstractmethod
        def current_watermark(self) -> int: ...

        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def window_state(self) -> Any: ...

        @abstractmethod
        def global_state(self) -> Any: ...

    @abstractmethod
    def process(self, key: Any, context: ProcessWindowFunction.Context,
                elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        """The window is purged: delete per-window state it kept."""


class WindowFunction(Function):
    """Evaluates a whole window: ``apply(key, window, inputs)`` yields the outputs
    (``WindowedStream.apply``)."""

    @abstractmethod
    def apply(self, key: Any, window: TimeWindow, inputs: Iterable[Any]) -> Iterable[Any]: ...


class AllWindowFunction(Function):
    """A window of a non-keyed stream (``window_all(...).apply``):
    ``apply(window, inputs)`` yields the outputs."""

    @abstractmethod
    def apply(self, window: TimeWindow, inputs: Iterable[Any]) -> Iterable[Any]: ...


class ProcessAllWindowFunction(Function):
    """A window of a non-keyed stream: ``process(context, elements)`` yields the outputs;
    ``context.window()`` is the window. With ``reduce``/``aggregate`` of ``window_all``,
    ``elements`` holds the one pre-aggregated value."""

    class Context(ABC, TypeParameters):
        """What ``process`` gets as ``context`` (for annotations, also as
        ``ProcessAllWindowFunction.Context[TimeWindow]``): ``window()``, the clocks, and
        ``window_state()``/``global_state()`` for state per window or across windows."""

        @abstractmethod
        def window(self) -> TimeWindow: ...

        @abstractmethod
        def current_watermark(self) -> int: ...

        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def window_state(self) -> Any: ...

        @abstractmethod
        def global_state(self) -> Any: ...

    @abstractmethod
    def process(self, context: ProcessAllWindowFunction.Context,
                elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: ProcessAllWindowFunction.Context) -> None:
        """The window is purged: delete per-window state it kept."""


class WindowFunctionAdapter(ProcessWindowFunction):
    """A WindowFunction, AllWindowFunction or ProcessAllWindowFunction run as the
    ProcessWindowFunction the window operator calls (all-window ones see no key)."""

    def __init__(self, function: Any, style: str) -> None:
        method = "process" if style == "process_all" else "apply"
        if not callable(getattr(function, method, None)):
            kinds = {"apply": "WindowFunction", "apply_all": "AllWindowFunction",
                     "process_all": "ProcessAllWindowFunction"}
            msg = f"expected a {kinds[style]} (with {method}()), got {type(function).__name__}"
            raise TypeError(msg)
        self.function = function
        self.style = style

    def open(self, runtime_context: Any) -> None:
        if isinstance(self.function, Function):
            self.function.open(runtime_context)

    def close(self) -> None:
        if isinstance(self.function, Function):
            self.function.close()

    def process(self, key: Any, context: Any, elements: Iterable[Any]) -> Iterable[Any]:
        if self.style == "apply":
            return self.function.apply(key, context.window(), elements)  # type: ignore[no-any-return]
        if self.style == "apply_all":
            return self.function.apply(context.window(), elements)  # type: ignore[no-any-return]
        return self.function.process(context, elements)  # type: ignore[no-any-return]

    def clear(self, context: Any) -> None:
        # Only ProcessAllWindowFunction has the hook; (All)WindowFunctions keep no state.
        clear = getattr(self.function, "clear", None)
        if self.style == "process_all" and callable(clear):
            clear(context)


def as_window_function(function: Any, keyed: bool) -> Any:
    """The function the window operator calls with a window's pre-aggregated value
    (``reduce``/``aggregate`` with a window function): a ProcessWindowFunction (or plain
    function of ``(key, context, elements)``) as it is; a WindowFunction, or on a
    non-keyed stream an AllWindowFunction/ProcessAllWindowFunction, adapted."""
    if function is None:
        return None
    if keyed:
        if isinstance(function, WindowFunction) or (
                not isinstance(function, ProcessWindowFunction)
                and callable(getattr(function, "apply", None))
                and not callable(getattr(function, "process", None))):
            return WindowFunctionAdapter(function, "apply")
        return function
    if isinstance(function, ProcessAllWindowFunction) or (
            not isinstance(function, AllWindowFunction)
            and callable(getattr(function, "process", None))):
        return WindowFunctionAdapter(function, "process_all")
    if isinstance(function, AllWindowFunction) or callable(getattr(function, "apply", None)):
        return WindowFunctionAdapter(function, "apply_all")
    msg = ("the window function of window_all(...).reduce/aggregate must be an "
           f"AllWindowFunction or a ProcessAllWindowFunction, got {type(function).__name__}")
    raise TypeError(msg)


def end_of_time_cleanup(window: TimeWindow, allowed_lateness: int, event_time: bool) -> int:
    """When a window's state is dropped: its end (+ lateness for event time), capped."""
    if not event_time:
        return window.max_timestamp()
    cleanup = window.max_timestamp() + allowed_lateness
    return cleanup if cleanup >= window.max_timestamp() and cleanup < MAX_WATERMARK \
        else MAX_WATERMARK
