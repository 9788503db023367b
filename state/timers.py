"""Keyed timers (event time and processing time), stored in the keyed state backend.

A timer is (timestamp, key, namespace); registering the same one twice keeps one. Timers
live in the backend as ordinary keyed state — one state per time domain, the timestamp in
the namespace — so a snapshot of the backend holds them, they move with their key group on
rescaling, and they are restored with the rest. The queue that orders them by time is an
in-memory heap over the same timers, rebuilt from the backend by :meth:`restore`.

Event-time timers fire, in timestamp order, when the operator's watermark reaches them;
processing-time timers when the task's wall clock does (through the task's
:class:`~weir.core.processing_time.ProcessingTimeService`, on the task thread). Before
a timer fires, the backend's current key is set to the timer's key, so the callback reads
and writes that key's state.

Example:
    >>> from weir.state.heap import HeapKeyedStateBackend
    >>> from weir.state.key_groups import KeyGroupRange
    >>> from weir.core.processing_time import ProcessingTimeService
    >>> fired = []
    >>> class Target:
    ...     def on_event_time(self, timer): fired.append((timer.key, timer.timestamp))
    ...     def on_processing_time(self, timer): pass
    >>> backend = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> timers = InternalTimerService("window", backend, ProcessingTimeService(), Target())
    >>> backend.set_current_key("ann"); timers.register_event_time_timer(None, 20)
    >>> backend.set_current_key("bob"); timers.register_event_time_timer(None, 10)
    >>> timers.advance_watermark(15), fired
    (1, [('bob', 10)])
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Protocol

from weir.core.processing_time import ProcessingTimeService, ScheduledTimer
from weir.core.records import MIN_WATERMARK
from weir.state.backend import KeyedStateBackend
from weir.state.descriptors import ValueStateDescriptor

EVENT_TIME = "event-time"
PROCESSING_TIME = "processing-time"


@dataclass(frozen=True)
class Timer:
    timestamp: int
    key: Any
    key_group: int
    namespace: Any


class Triggerable(Protocol):
    """What a timer service calls when its timers fire. A target may also define
    ``after_timers()``, called once after the processing-time timers due at a wall-clock
    wake-up fired (to send their results as one batch)."""

    def on_event_time(self, timer: Timer) -> None: ...

    def on_processing_time(self, timer: Timer) -> None: ...


class _TimerQueue:
    """The timers of one time domain: durable in the backend, ordered in a heap."""

    def __init__(self, backend: KeyedStateBackend, state_name: str) -> None:
        self._backend = backend
        self.state_name = state_name
        self._store = backend.get_state(ValueStateDescriptor(state_name))
        self._heap: list[tuple[int, int, Timer]] = []
        # The timers in the heap that are still registered: deleting one only forgets it
        # here (and in the backend); the heap entry is skipped when it comes up.
        self._live: set[tuple[int, Any, Any]] = set()
        self._sequence = itertools.count()

    def add(self, namespace: Any, timestamp: int) -> bool:
        """Register for the backend's current key; False if it was registered already."""
        backend = self._backend
        identity = (timestamp, backend.current_key, namespace)
        if identity in self._live:
            return False
        self._live.add(identity)
        timer = Timer(timestamp, backend.current_key, backend.current_key_group, namespace)
        heapq.heappush(self._heap, (timestamp, next(self._sequence), timer))
        self._store.set_current_namespace((timestamp, namespace))
        self._store.update(True)
        return True

    def add_many(self, keys: list[Any], key_groups: list[int], namespace: Any,
                 timestamp: int) -> list[int]:
        """Register one timer per key (key groups given) without changing the backend's
        current key; one batched write. Returns the positions of the new ones."""
        fresh = []
        live = self._live
        heap = self._heap
        for i, (key, group) in enumerate(zip(keys, key_groups, strict=True)):
            identity = (timestamp, key, namespace)
            if identity in live:
                continue
            live.add(identity)
            heapq.heappush(heap, (timestamp, next(self._sequence),
                                  Timer(timestamp, key, group, namespace)))
            fresh.append(i)
        if fresh:
            self._backend.put_many(self.state_name, [key_groups[i] for i in fresh],
                                   [keys[i] for i in fresh], (timestamp, namespace),
                                   [True] * len(fresh))
        return fresh

    def delete(self, namespace: Any, timestamp: int) -> None:
        identity = (timestamp, self._backend.current_key, namespace)
        if identity in self._live:
            self._live.discard(identity)
            self._store.set_current_namespace((timestamp, namespace))
            self._store.clear()

    def pop_due(self, time: int) -> Timer | None:
        """Remove and return the earliest timer at or before ``time``; sets the backend's
        current key to the timer's."""
        heap = self._heap
        while heap and heap[0][0] <= time:
            _, _, timer = heapq.heappop(heap)
            identity = (timer.timestamp, timer.key, timer.namespace)
            if identity not in self._live:
                continue
            self._live.discard(identity)
            self._backend.set_current_key(timer.key, timer.key_group)
            self._store.set_current_namespace((timer.timestamp, timer.namespace))
            self._store.clear()
            return timer
        return None

    def earliest(self) -> int | None:
        heap = self._heap
        while heap and (heap[0][0], heap[0][2].key, heap[0][2].namespace) not in self._live:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def restore(self) -> int:
        """Rebuild the heap from the timers in the backend; returns how many there are."""
        self._heap.clear()
        self._live.clear()
        for key_group, key, (timestamp, namespace) in self._backend.namespaced_keys(
                self.state_name):
            self._live.add((timestamp, key, namespace))
            heapq.heappush(self._heap, (timestamp, next(self._sequence),
                                        Timer(timestamp, key, key_group, namespace)))
        return len(self._live)

    def __len__(self) -> int:
        return len(self._live)


class InternalTimerService:
    """Event-time and processing-time timers of one operator (see the module docstring)."""

    def __init__(self, name: str, backend: KeyedStateBackend,
                 processing_time: ProcessingTimeService, target: Triggerable) -> None:
        self._backend = backend
        self._processing_time = processing_time
        self._target = target
        self._event = _TimerQueue(backend, f"_timers/{name}/{EVENT_TIME}")
        self._processing = _TimerQueue(backend, f"_timers/{name}/{PROCESSING_TIME}")
        self.current_watermark = MIN_WATERMARK
        self._wakeup: ScheduledTimer | None = None

    def current_processing_time(self) -> int:
        return self._processing_time.current_time_ms()

    def register_event_time_timer(self, namespace: Any, timestamp: int) -> None:
        self._event.add(namespace, int(timestamp))

    def register_event_time_timers(self, keys: list[Any], key_groups: list[int],
                                   namespace: Any, timestamp: int) -> None:
        """One event-time timer for each key (vectorised operators: one batched write)."""
        self._event.add_many(keys, key_groups, namespace, int(timestamp))

    def register_processing_time_timers(self, keys: list[Any], key_groups: list[int],
                                        namespace: Any, timestamp: int) -> None:
        if self._processing.add_many(keys, key_groups, namespace, int(timestamp)):
            self._schedule(int(timestamp))

    def delete_event_time_timer(self, namespace: Any, timestamp: int) -> None:
        self._event.delete(namespace, int(timestamp))

    def register_processing_time_timer(self, namespace: Any, timestamp: int) -> None:
        timestamp = int(timestamp)
        if self._processing.add(namespace, timestamp):
            self._schedule(timestamp)

    def delete_processing_time_timer(self, namespace: Any, timestamp: int) -> None:
        self._processing.delete(namespace, int(timestamp))

    def advance_watermark(self, watermark: int) -> int:
        """Fire every event-time timer at or before ``watermark``; returns how many fired."""
        self.current_watermark = watermark
        fired = 0
        while (timer := self._event.pop_due(watermark)) is not None:
            fired += 1
            self._target.on_event_time(timer)
        return fired

    def advance_watermark_in_slice(self, watermark: int) -> bool:
        """Fire the event-time timers at or before ``watermark`` until the task's time slice
        expired (at least one); True once none is left. The caller calls again, on a later
        turn of the task, until then (and forwards the watermark only after)."""
        self.current_watermark = watermark
        time_slice = self._processing_time.time_slice
        while (timer := self._event.pop_due(watermark)) is not None:
            self._target.on_event_time(timer)
            if time_slice.expired():
                earliest = self._event.earliest()
                return earliest is None or earliest > watermark
        return True

    def _schedule(self, timestamp: int) -> None:
        """Make sure the wall clock wakes us by ``timestamp`` (one wake-up at a time, for
        the earliest timer, as Flink's timer service does)."""
        if self._wakeup is not None and not self._wakeup.cancelled:
            if self._wakeup.timestamp <= timestamp:
                return
            self._wakeup.cancel()
        self._wakeup = self._processing_time.register_timer(timestamp, self._on_wall_clock)

    def _on_wall_clock(self, _: int) -> None:
        self._wakeup = None
        self.fire_processing_time(self._processing_time.current_time_ms())
        after = getattr(self._target, "after_timers", None)
        if after is not None:
            after()

    def fire_processing_time(self, now: int) -> int:
        """Fire the processing-time timers at or before ``now`` until the task's time slice
        expired (at least one; all when it is unlimited); returns how many fired. What is
        left fires on a later turn (its wake-up is due at once)."""
        fired = 0
        time_slice = self._processing_time.time_slice
        while (timer := self._processing.pop_due(now)) is not None:
            fired += 1
            self._target.on_processing_time(timer)
            if time_slice.expired():
                break
        earliest = self._processing.earliest()
        if earliest is not None:
            self._schedule(earliest)
        return fired

    def earliest_processing_time_timer(self) -> int | None:
        return self._processing.earliest()

    def restore(self) -> tuple[int, int]:
        """Rebuild the queues after the backend was restored: (event-time, processing-time)
        timers found. Processing-time timers that are due fire on the next turn."""
        events = self._event.restore()
        processing = self._processing.restore()
        earliest = self._processing.earliest()
        if earliest is not None:
            self._schedule(earliest)
        return events, processing

    def num_event_time_timers(self) -> int:
        return len(self._event)

    def num_processing_time_timers(self) -> int:
        return len(self._processing)

    def close(self) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
