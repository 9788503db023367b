"""One thread that runs delayed callbacks, instead of a thread per delay.

``threading.Timer`` starts a thread for every delay: a peer that makes a daemon wait for
many things at once (held partition requests, request retries) would make it start as many
threads. A :class:`TimerThread` keeps the pending callbacks in a heap and runs them, in
deadline order, on its one thread (started on first use). Callbacks must be short: they
run one after another.

Example:
    >>> import threading
    >>> timers = TimerThread("example-timers")
    >>> done = threading.Event()
    >>> _ = timers.schedule(0.01, done.set)
    >>> done.wait(5)
    True
    >>> timers.close()
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class DelayedCall:
    """A callback scheduled on a :class:`TimerThread`; ``cancel()`` keeps it from running
    (if it has not yet). Not a keyed timer of an operator (``weir.state.timers.Timer``)."""

    __slots__ = ("callback", "cancelled", "deadline")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class TimerThread:
    """Runs callbacks after their delay on one daemon thread. Thread-safe; ``close`` drops
    what is pending and joins the thread."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._heap: list[tuple[float, int, DelayedCall]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> DelayedCall:
        timer = DelayedCall(time.monotonic() + max(0.0, delay_s), callback)
        with self._cond:
            if self._closed:
                timer.cancel()
                return timer
            heapq.heappush(self._heap, (timer.deadline, next(self._order), timer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return timer

    def __len__(self) -> int:
        """Callbacks pending (cancelled ones until their deadline passes)."""
        with self._cond:
            return len(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (
                        not self._heap or self._heap[0][0] > time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                if self._closed:
                    return
                _, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            try:
                timer.callback()
            except Exception:  # one broken callback must not stop the others
                log.exception("a timer callback of %s failed", self._name)

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
