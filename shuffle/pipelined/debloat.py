"""Buffer debloating (as Flink's BufferDebloater): size buffers to the consumer's throughput.

Fed on the consuming task's thread: every consumed buffer adds its bytes; every period the
gate's throughput (an exponential moving average) gives the amount of data that takes
``target`` to consume, spread over the buffers that can be in flight. The new size is
announced to the producers only when it differs by more than the threshold.

Example:
    >>> d = BufferDebloater(target=1.0, period=0.2, samples=5, threshold=0.25,
    ...                     min_size=256, max_size=32768, buffers_in_flight=10)
    >>> d.on_consumed(20_000); d.tick(now=0.2)   # 100 kB/s -> 10 kB per buffer
    10000
"""

from __future__ import annotations

import time


class BufferDebloater:
    """Pure logic; the gate feeds it and acts on what ``tick`` returns."""

    def __init__(self, target: float, period: float, samples: int, threshold: float,
                 min_size: int, max_size: int, buffers_in_flight: int) -> None:
        self.target = target
        self.period = period
        self._alpha = 2.0 / (samples + 1)
        self.threshold = threshold
        self.min_size = min_size
        self.max_size = max_size
        self.buffers_in_flight = max(1, buffers_in_flight)
        self.buffer_size = max_size
        self.throughput: float | None = None
        self._bytes = 0
        self._last_tick: float | None = None

    def on_consumed(self, size: int) -> None:
        self._bytes += size

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if self._last_tick is None:
            self._last_tick = now - self.period if self._bytes else now
        return now - self._last_tick >= self.period

    def tick(self, now: float | None = None) -> int | None:
        """Close a measurement period; returns the new buffer size to announce, or None."""
        now = time.monotonic() if now is None else now
        last = self._last_tick if self._last_tick is not None else now - self.period
        elapsed = max(now - last, 1e-6)
        self._last_tick = now
        sample = self._bytes / elapsed
        self._bytes = 0
        self.throughput = sample if self.throughput is None else (
            self._alpha * sample + (1 - self._alpha) * self.throughput)
        wanted = int(self.throughput * self.target / self.buffers_in_flight)
        wanted = max(self.min_size, min(self.max_size, wanted))
        if abs(wanted - self.buffer_size) <= self.threshold * self.buffer_size:
            return None
        self.buffer_size = wanted
        return wanted

    def estimated_time_to_consume_ms(self, queued_bytes: int) -> float:
        if not self.throughput:
            return 0.0
        return queued_bytes / self.throughput * 1000.0
