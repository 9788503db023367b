"""Results of ``execute_and_collect``: sinks push batches, the client fetches them.

Bounded: when the client does not keep up, ``push`` waits and finally refuses, and the
sink retries, which backpressures the job.
"""

from __future__ import annotations

import threading
import time
from collections import deque


class CollectBuffer:
    """Thread-safe: sinks push from RPC threads, the client fetches from another."""

    def __init__(self, capacity: int) -> None:
        self._batches: deque[bytes] = deque()
        self._capacity = capacity
        self._cond = threading.Condition()
        self._closed = False

    def push(self, data: bytes, wait: float) -> bool:
        """Append a batch; False if there was no room within ``wait`` seconds."""
        deadline = time.monotonic() + wait
        with self._cond:
            while len(self._batches) >= self._capacity and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            if not self._closed and data:
                self._batches.append(data)
                self._cond.notify_all()
            return True

    def fetch(self, max_batches: int, wait: float) -> tuple[list[bytes], bool]:
        """Up to ``max_batches`` batches (waiting up to ``wait`` for the first) and whether
        everything was delivered (the job ended and nothing is left)."""
        deadline = time.monotonic() + wait
        with self._cond:
            while not self._batches and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            taken = []
            while self._batches and len(taken) < max_batches:
                taken.append(self._batches.popleft())
            self._cond.notify_all()
            return taken, self._closed and not self._batches

    def close(self) -> None:
        """The job ended: no more pushes; fetch reports the end once drained."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
