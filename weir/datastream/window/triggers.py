"""Triggers decide when a window's contents are evaluated: by default when event time —
or the wall clock — passes the end of the window (:class:`EventTimeTrigger`,
:class:`ProcessingTimeTrigger`), or every so many records (:class:`CountTrigger`).

Example:
    >>> [r.name for r in TriggerResult if r.is_fire()]
    ['FIRE', 'FIRE_AND_PURGE']
    >>> PurgingTrigger.of(CountTrigger.of(3)).nested.count
    3
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Self

from weir.core.generics import TypeParameters
from weir.datastream.window.windows import TimeWindow, positive_ms

if TYPE_CHECKING:
    from weir.common.time import TimeSpan
    from weir.state.backend import ReducingState, ValueState
    from weir.state.descriptors import StateDescriptor

__all__ = ["ContinuousEventTimeTrigger", "ContinuousProcessingTimeTrigger", "CountTrigger",
           "EventTimeTrigger", "NeverTrigger", "ProcessingTimeTrigger", "PurgingTrigger",
           "Trigger", "TriggerResult"]


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

    class TriggerContext(ABC):
        """What a trigger's methods get as ``ctx`` (PyFlink's ``Trigger.TriggerContext``):
        the clocks, timers of the current key and window, and state per key and window.
        The window operator passes its own implementation."""

        @abstractmethod
        def current_watermark(self) -> int:
            """The operator's event time: the last watermark it received."""

        @abstractmethod
        def current_processing_time(self) -> int:
            """The wall clock, epoch milliseconds."""

        def get_current_watermark(self) -> int:
            """PyFlink's name of :meth:`current_watermark`."""
            return self.current_watermark()

        def get_current_processing_time(self) -> int:
            """PyFlink's name of :meth:`current_processing_time`."""
            return self.current_processing_time()

        @abstractmethod
        def register_event_time_timer(self, time: int) -> None:
            """Call ``on_event_time`` once the watermark reaches ``time``."""

        @abstractmethod
        def register_processing_time_timer(self, time: int) -> None:
            """Call ``on_processing_time`` once the wall clock reaches ``time``."""

        @abstractmethod
        def delete_event_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def delete_processing_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def get_partitioned_state(self, state_descriptor: StateDescriptor) -> Any:
            """The handle of ``state_descriptor``'s state of the current key and window."""

    @abstractmethod
    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult: ...

    @abstractmethod
    def on_event_time(self, time: int, window: TimeWindow,
                      ctx: Trigger.TriggerContext) -> TriggerResult: ...

    @abstractmethod
    def on_processing_time(self, time: int, window: TimeWindow,
                           ctx: Trigger.TriggerContext) -> TriggerResult: ...

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        msg = f"{type(self).__name__} does not support merging (session) windows"
        raise NotImplementedError(msg)

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        """The window is purged: delete the timers and state the trigger set."""


class EventTimeTrigger(Trigger):
    """Fires when the watermark passes the window's end (and again for each late record
    within the allowed lateness)."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.current_watermark():
            return TriggerResult.FIRE  # late but allowed: fire again at once
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow,
                      ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow,
                           ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        if window.max_timestamp() > ctx.current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())

    @classmethod
    def create(cls) -> EventTimeTrigger:
        """PyFlink's factory: the same as ``EventTimeTrigger()``."""
        return cls()


class ProcessingTimeTrigger(Trigger):
    """Fires when the wall clock passes the window's end."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow,
                      ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow,
                           ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        if window.max_timestamp() > ctx.current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
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

    def _counter(self, ctx: Trigger.TriggerContext) -> ReducingState:
        from weir.state.descriptors import ReducingStateDescriptor

        counter: ReducingState = ctx.get_partitioned_state(
            ReducingStateDescriptor(self._counter_name, lambda a, b: a + b))
        return counter

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        counter = self._counter(ctx)
        counter.add(1)
        if counter.get() >= self.count:
            counter.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow,
                      ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow,
                           ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
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
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        counter = self._counter(ctx)
        counter.add(1)
        return TriggerResult.FIRE if self.fires_after(counter.get()) else TriggerResult.CONTINUE


class NeverTrigger(Trigger):
    """Never fires: the default of GlobalWindows."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow,
                      ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow,
                           ctx: Trigger.TriggerContext) -> TriggerResult:
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
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: TimeWindow,
                      ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: TimeWindow,
                           ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested.can_merge()

    def on_merge(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        self.nested.on_merge(window, ctx)

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        self.nested.clear(window, ctx)


class _ContinuousTrigger(Trigger):
    """Fires every ``interval`` (of its clock) while the window is open, and at its end."""

    event_time = True

    def __init__(self, interval: TimeSpan) -> None:
        self.interval = positive_ms(interval, "trigger interval")

    @classmethod
    def of(cls, interval: TimeSpan) -> Self:
        return cls(interval)

    def _next(self, ctx: Trigger.TriggerContext) -> ValueState:
        from weir.state.descriptors import ValueStateDescriptor

        state: ValueState = ctx.get_partitioned_state(
            ValueStateDescriptor(f"{type(self).__name__}-next"))
        return state

    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        if self.event_time:
            ctx.register_event_time_timer(time)
        else:
            ctx.register_processing_time_timer(time)

    def _schedule(self, now: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        state = self._next(ctx)
        if state.value() is None:
            start = now - now % self.interval
            fire_at = min(start + self.interval, window.max_timestamp())
            state.update(fire_at)
            self._register(ctx, fire_at)

    def _on_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        state = self._next(ctx)
        if state.value() == time:
            state.clear()
            self._schedule(time, window, ctx)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
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
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        self._schedule(timestamp, window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow,
                      ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._on_time(time, window, ctx)

    def on_processing_time(self, time: int, window: TimeWindow,
                           ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of the wall clock within the window."""

    event_time = False

    def on_element(self, element: Any, timestamp: int, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        self._schedule(ctx.current_processing_time(), window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow,
                      ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow,
                           ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._on_time(time, window, ctx)
