"""Results of ``execute_and_collect``: sinks push batches, the client fetches them.

Bounded: when the client does not keep up, ``push`` waits and finally refuses, and the
sink retries, which backpressures the job. Every batch and every fetch fits in one gRPC
message (:data:`weir.core.rpc.MAX_MESSAGE_BYTES`): sinks split what they push, and a fetch
takes no more batches than one response holds.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from weir.core import rpc

#: Room left in a FetchCollectResponse for its other fields (status, failure message and
#: traceback), so that the batches plus these stay within one message.
FETCH_ENVELOPE_BYTES = 64 * 1024


def fetch_budget() -> int:
    """Bytes of batches one fetch may return; read at call time, so that a lowered
    :data:`~weir.core.rpc.MAX_MESSAGE_BYTES` applies at once."""
    return max(1, rpc.MAX_MESSAGE_BYTES - FETCH_ENVELOPE_BYTES)


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

    def fetch(self, max_batches: int, wait: float,
              max_bytes: int | None = None) -> tuple[list[bytes], bool]:
        """Up to ``max_batches`` batches of at most ``max_bytes`` together (waiting up to
        ``wait`` for the first) and whether everything was delivered (the job ended and
        nothing is left). The first batch is taken even if it alone exceeds ``max_bytes``:
        pushes are bounded by the same message limit, and refusing it would stall results."""
        deadline = time.monotonic() + wait
        with self._cond:
            while not self._batches and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            taken: list[bytes] = []
            size = 0
            while self._batches and len(taken) < max_batches:
                if taken and max_bytes is not None and \
                        size + len(self._batches[0]) > max_bytes:
                    break
                size += len(self._batches[0])
                taken.append(self._batches.popleft())
            self._cond.notify_all()
            return taken, self._closed and not self._batches

    def close(self) -> None:
        """The job ended: no more pushes; fetch reports the end once drained."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
