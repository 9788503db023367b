"""Combines the watermarks of a task's input channels into the task's watermark.

Flink's rules (``StatusWatermarkValve``): a channel's watermark only moves forward; the
task's watermark is the minimum over the channels that are *active* and *aligned*; an idle
channel does not hold it back; a channel that becomes active again rejoins the minimum only
once its watermark caught up with the task's (until then it would move event time back);
when every channel is idle the task's output goes idle too. A channel whose producer ended
counts as having reached the end of time.

Example:
    >>> valve = StatusWatermarkValve(2)
    >>> valve.input_watermark(0, 10) is None    # channel 1 has not said anything yet
    True
    >>> valve.input_watermark(1, 7)
    7
    >>> valve.input_status(1, idle=True)        # only channel 0 counts now
    (10, None)
"""

from __future__ import annotations

from weir.core.records import MAX_WATERMARK, MIN_WATERMARK


class StatusWatermarkValve:
    """Per-channel watermarks and idleness; methods return what to pass downstream."""

    def __init__(self, num_channels: int) -> None:
        self.num_channels = num_channels
        self._watermarks = [MIN_WATERMARK] * num_channels
        self._idle = [False] * num_channels
        self._aligned = [True] * num_channels
        self.watermark = MIN_WATERMARK
        self.idle = False

    def input_watermark(self, channel: int, watermark: int) -> int | None:
        """A watermark arrived on ``channel``; returns the task's new watermark, if any."""
        if self._idle[channel] or watermark <= self._watermarks[channel]:
            return None
        self._watermarks[channel] = watermark
        if not self._aligned[channel] and watermark >= self.watermark:
            self._aligned[channel] = True
        return self._advance()

    def input_status(self, channel: int, idle: bool) -> tuple[int | None, bool | None]:
        """A channel went idle or active: returns (new watermark or None, new output
        status or None)."""
        if self._idle[channel] == idle:
            return None, None
        self._idle[channel] = idle
        if idle:
            self._aligned[channel] = False
            if all(self._idle):
                self.idle = True
                return None, True
            return self._advance(), None
        # Active again: it rejoins the minimum once it catches up with the task.
        self._aligned[channel] = self._watermarks[channel] >= self.watermark
        if self.idle:
            self.idle = False
            return self._advance(), False
        return None, None

    def channel_finished(self, channel: int) -> int | None:
        """The channel's producer ended: it no longer holds event time back."""
        self._idle[channel] = False
        self._aligned[channel] = True
        self._watermarks[channel] = MAX_WATERMARK
        return self._advance()

    def _advance(self) -> int | None:
        counted = [w for w, idle, aligned in zip(self._watermarks, self._idle, self._aligned,
                                                 strict=True) if aligned and not idle]
        if not counted:
            return None
        low = min(counted)
        if low > self.watermark:
            self.watermark = low
            return low
        return None
