"""The JobMaster's main thread: all coordination state is touched by this one thread.

RPC handlers hand work over with ``call`` (and wait, with a timeout) or ``submit``;
timers are scheduled onto the same thread. So the resource manager, the schedulers and
the execution graphs need no locks.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from weir.jobmaster.errors import JobMasterStoppingError

log = logging.getLogger(__name__)
T = TypeVar("T")


class MainThreadExecutor:
    """A single worker thread with a bounded queue and a timer heap.

    Example:
        >>> main = MainThreadExecutor("example"); main.start()
        >>> main.call(lambda: 1 + 1)
        2
        >>> main.stop()
    """

    def __init__(self, name: str, capacity: int = 10_000) -> None:
        self._queue: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue(
            capacity)
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_lock = threading.Lock()
        self._seq = itertools.count()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        """Its thread runs (any thread; False before ``start`` and after it ended)."""
        return self._thread.is_alive()

    def in_main_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, fn: Callable[[], T], timeout: float = 10.0) -> Future[T]:
        future: Future[T] = Future()
        if self._stopped.is_set():
            future.set_exception(JobMasterStoppingError("the JobMaster is shutting down"))
            return future
        self._queue.put((fn, future), timeout=timeout)
        if self._stopped.is_set():
            # stop() may have drained the queue before our put: fail rather than hang.
            self._fail_pending()
        return future

    def call(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run ``fn`` on the main thread and return its result (runs inline if already there)."""
        if self.in_main_thread():
            return fn()
        return self.submit(fn, timeout).result(timeout)

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the main thread after ``delay`` seconds."""
        with self._timer_lock:
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), fn))
        if not self.in_main_thread():
            # Wake the loop to re-plan its sleep; if the queue is full it wakes anyway.
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait((lambda: None, Future()))

    def _next_timeout(self) -> float:
        with self._timer_lock:
            if not self._timers:
                return 0.5
            return max(0.0, min(0.5, self._timers[0][0] - time.monotonic()))

    def _due_timers(self) -> list[Callable[[], None]]:
        now = time.monotonic()
        due = []
        with self._timer_lock:
            while self._timers and self._timers[0][0] <= now:
                due.append(heapq.heappop(self._timers)[2])
        return due

    def _run(self) -> None:
        while not self._stopped.is_set():
            for timer in self._due_timers():
                self._run_one(timer, None)
            try:
                item = self._queue.get(timeout=self._next_timeout())
            except queue.Empty:
                continue
            if item is None:
                break
            self._run_one(*item)

    def _run_one(self, fn: Callable[[], Any], future: Future[Any] | None) -> None:
        try:
            result = fn()
        except BaseException as err:  # handed to the caller; logged if nobody waits
            if future is not None:
                future.set_exception(err)
            else:
                log.exception("timer on the main thread failed")
            return
        if future is not None:
            future.set_result(result)

    def stop(self) -> None:
        """Stop the thread; work still queued fails with RuntimeError instead of hanging."""
        self._stopped.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout=5)
        self._fail_pending()

    def _fail_pending(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None and not item[1].done():
                item[1].set_exception(JobMasterStoppingError("the JobMaster is shutting down"))
