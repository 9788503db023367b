"""When a heartbeat target counts as unreachable: Flink's ``heartbeat.rpc-failure-threshold``.

``heartbeat.timeout`` waits for a peer that merely went silent. A peer whose calls fail
outright (connection refused or reset, a TLS handshake that cannot succeed) is known to be
gone much sooner; :class:`RpcFailureThreshold` counts such failures in a row and says when
there were enough. It does no I/O and reads time only from the clock it is given, so the
JobMaster's main thread, the TaskExecutor's heartbeat watchdog and unit tests drive it
alike.

Example:
    >>> from weir.core.clock import ManualClock
    >>> clock = ManualClock()
    >>> failures = RpcFailureThreshold(2, window_ms=1000, clock=clock)
    >>> failures.record(RpcOutcome.UNREACHABLE)
    False
    >>> clock.advance(1000)
    >>> failures.record(RpcOutcome.UNREACHABLE)
    True
"""

from __future__ import annotations

import enum
import time

import grpc

from weir.core.clock import Clock

#: ``heartbeat.rpc-failure-threshold`` value that turns the mechanism off (Flink's -1).
DISABLED = -1


class RpcOutcome(enum.Enum):
    """What one call tells about its target's reachability."""

    #: The target answered, whatever it answered: it is there.
    REACHED = "reached"
    #: The call could not reach the target at all.
    UNREACHABLE = "unreachable"
    #: Says nothing either way: slow, cancelled by the caller, or refused before sending.
    INCONCLUSIVE = "inconclusive"


def classify(code: grpc.StatusCode | None) -> RpcOutcome:
    """The outcome of a finished gRPC call with status ``code`` (None counts as OK).

    Only UNAVAILABLE counts as unreachable: gRPC reports it when no connection can be made
    or kept (refused, reset, TLS failure, a server shutting down). DEADLINE_EXCEEDED means
    slow, not gone: a busy peer (a long garbage collection, a big deployment) must get the
    whole ``heartbeat.timeout``, as Flink counts only ``RecipientUnreachableException``.
    CANCELLED is the caller's own doing, and RESOURCE_EXHAUSTED may be the client's own
    message limit; any other status was sent by the target.

    Example:
        >>> classify(grpc.StatusCode.UNAVAILABLE), classify(grpc.StatusCode.NOT_FOUND)
        (<RpcOutcome.UNREACHABLE: 'unreachable'>, <RpcOutcome.REACHED: 'reached'>)
    """
    if code is None or code == grpc.StatusCode.OK:
        return RpcOutcome.REACHED
    if code == grpc.StatusCode.UNAVAILABLE:
        return RpcOutcome.UNREACHABLE
    if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                grpc.StatusCode.RESOURCE_EXHAUSTED):
        return RpcOutcome.INCONCLUSIVE
    return RpcOutcome.REACHED


def monotonic_ms() -> int:
    """A monotonic clock in milliseconds: failure spacing must not jump with the wall
    clock."""
    return time.monotonic_ns() // 1_000_000


class RpcFailureThreshold:
    """Consecutive failed calls to one heartbeat target, and whether they reached
    ``threshold``.

    A failure less than ``window_ms`` (the heartbeat interval) after the last one counted is
    the same outage seen again and does not count: calls issued together (a deployment of
    several tasks) fail together, and a gRPC channel that could not connect fails every
    call at once until its reconnect back-off ends. So, as with Flink's one heartbeat RPC
    per interval, ``threshold`` failures span at least ``threshold - 1`` intervals. An
    answer from the target starts the count again; an inconclusive outcome changes
    nothing. ``threshold`` :data:`DISABLED` never reports a target unreachable.

    Not thread-safe: one owner thread records (the JobMaster's main thread, a
    TaskExecutor's heartbeat watchdog).
    """

    def __init__(self, threshold: int, window_ms: int, clock: Clock = monotonic_ms) -> None:
        if threshold != DISABLED and threshold < 1:
            msg = f"threshold must be {DISABLED} (off) or at least 1, not {threshold}"
            raise ValueError(msg)
        self.threshold = threshold
        self._window_ms = window_ms
        self._clock = clock
        self._failures = 0
        self._last_counted_ms: int | None = None

    @property
    def enabled(self) -> bool:
        return self.threshold != DISABLED

    @property
    def failures(self) -> int:
        """Failures counted since the target last answered."""
        return self._failures

    @property
    def unreachable(self) -> bool:
        return self.enabled and self._failures >= self.threshold

    def record(self, outcome: RpcOutcome) -> bool:
        """Note one call's outcome; True exactly when this failure makes the target
        unreachable (once: later failures return False until an answer resets the count)."""
        if outcome is RpcOutcome.REACHED:
            self._failures = 0
            self._last_counted_ms = None
            return False
        if outcome is RpcOutcome.INCONCLUSIVE or not self.enabled:
            return False
        now = self._clock()
        if self._last_counted_ms is not None and now - self._last_counted_ms < self._window_ms:
            return False
        self._last_counted_ms = now
        self._failures += 1
        return self._failures == self.threshold
