"""Restart strategies: whether, and after how long, a failed job restarts (Flink's
``RestartBackoffTimeStrategy``). I/O-free, with an injected clock: the scheduler reports
each failure with :meth:`RestartStrategy.notify_failure` and asks :meth:`can_restart` and
:meth:`backoff_ms`.

Example:
    >>> from weir.core.clock import ManualClock
    >>> clock = ManualClock(0)
    >>> strategy = FixedDelayRestartStrategy(attempts=2, delay_ms=1000, clock=clock)
    >>> strategy.notify_failure(); strategy.can_restart(), strategy.backoff_ms()
    (True, 1000)
    >>> strategy.notify_failure(); strategy.notify_failure(); strategy.can_restart()
    False
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import deque

from weir.core.clock import Clock, wall_clock_ms
from weir.core.config import Configuration, Option, Seconds
from weir.jobmaster import options as jm_options


class RestartStrategy(ABC):
    """Decides restarts; fed one :meth:`notify_failure` per failure, in time order."""

    #: The name shown in messages ("fixed-delay", ...).
    name = "none"

    def __init__(self, clock: Clock = wall_clock_ms) -> None:
        self._clock = clock

    @abstractmethod
    def notify_failure(self) -> None:
        """The job failed now."""

    @abstractmethod
    def can_restart(self) -> bool:
        """Whether the job may restart after the failures reported so far."""

    def backoff_ms(self) -> int:
        """How long to wait before the restart."""
        return 0

    def describe(self) -> str:
        """Why the job does not restart any more (when ``can_restart`` is False)."""
        return f"restart strategy {self.name} allows no (further) restart"

    def summary(self) -> str:
        """The strategy and its settings in words, as Flink's job configuration shows it."""
        return "Restart deactivated."


class NoRestartStrategy(RestartStrategy):
    name = "none"

    def notify_failure(self) -> None:
        return

    def can_restart(self) -> bool:
        return False

    def describe(self) -> str:
        return ("restart-strategy.type is none (checkpointing is off, or it was chosen): "
                "the job fails at its first failure")


class FixedDelayRestartStrategy(RestartStrategy):
    """At most ``attempts`` restarts, each ``delay_ms`` after its failure."""

    name = "fixed-delay"

    def __init__(self, attempts: int, delay_ms: int, clock: Clock = wall_clock_ms) -> None:
        super().__init__(clock)
        self.attempts = attempts
        self.delay_ms = delay_ms
        self.failures = 0

    def notify_failure(self) -> None:
        self.failures += 1

    def can_restart(self) -> bool:
        return self.failures <= self.attempts

    def backoff_ms(self) -> int:
        return self.delay_ms

    def summary(self) -> str:
        return (f"Restart with fixed delay ({self.delay_ms} ms). #{self.attempts} restart "
                "attempts.")

    def describe(self) -> str:
        return (f"restart strategy fixed-delay allows {self.attempts} restart(s) "
                "(restart-strategy.fixed-delay.attempts) and they are used up")


class FailureRateRestartStrategy(RestartStrategy):
    """Restarts while at most ``max_failures`` failures fall within ``interval_ms``."""

    name = "failure-rate"

    def __init__(self, max_failures: int, interval_ms: int, delay_ms: int,
                 clock: Clock = wall_clock_ms) -> None:
        super().__init__(clock)
        self.max_failures = max_failures
        self.interval_ms = interval_ms
        self.delay_ms = delay_ms
        self._failures: deque[int] = deque()

    def notify_failure(self) -> None:
        self._failures.append(self._clock())

    def can_restart(self) -> bool:
        now = self._clock()
        while self._failures and self._failures[0] <= now - self.interval_ms:
            self._failures.popleft()
        return len(self._failures) <= self.max_failures

    def backoff_ms(self) -> int:
        return self.delay_ms

    def summary(self) -> str:
        return (f"Failure rate restart with maximum of {self.max_failures} failures within "
                f"interval {self.interval_ms} ms and fixed delay {self.delay_ms} ms.")

    def describe(self) -> str:
        return (f"restart strategy failure-rate allows {self.max_failures} failure(s) per "
                f"{self.interval_ms / 1000:g} s and the job failed more often")


class ExponentialDelayRestartStrategy(RestartStrategy):
    """Delays grow from ``initial_ms`` by ``multiplier`` up to ``max_ms``, with random
    ``jitter``; a job that ran ``reset_threshold_ms`` without failing starts over."""

    name = "exponential-delay"

    def __init__(self, initial_ms: int, max_ms: int, multiplier: float, jitter: float,
                 reset_threshold_ms: int, attempts: int = 2**31 - 1,
                 clock: Clock = wall_clock_ms, rng: random.Random | None = None) -> None:
        super().__init__(clock)
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.multiplier = multiplier
        self.jitter = jitter
        self.reset_threshold_ms = reset_threshold_ms
        self.attempts = attempts
        self._rng = rng or random.Random()
        self._current_ms = 0
        self._last_failure_ms: int | None = None
        self.failures = 0

    def notify_failure(self) -> None:
        now = self._clock()
        last = self._last_failure_ms
        if last is None or now - last >= self.reset_threshold_ms:
            self._current_ms = self.initial_ms
            self.failures = 0
        else:
            self._current_ms = min(int(self._current_ms * self.multiplier), self.max_ms)
        self.failures += 1
        self._last_failure_ms = now

    def can_restart(self) -> bool:
        return self.failures <= self.attempts

    def backoff_ms(self) -> int:
        spread = self._current_ms * self.jitter
        jittered = self._current_ms + self._rng.uniform(-spread, spread)
        return max(0, min(round(jittered), self.max_ms))

    def summary(self) -> str:
        return (f"Restart with exponential delay: starting at {self.initial_ms} ms, "
                f"increasing by {self.multiplier:g}, with maximum {self.max_ms} ms. Delay "
                f"resets after {self.reset_threshold_ms} ms with jitter {self.jitter:g}.")

    def describe(self) -> str:
        return (f"restart strategy exponential-delay allows {self.attempts} restart(s) "
                "before a reset (restart-strategy.exponential-delay."
                "attempts-before-reset-backoff) and they are used up")


#: Flink accepts these spellings of each strategy.
_ALIASES = {"none": "none", "off": "none", "disable": "none",
            "fixed-delay": "fixed-delay", "fixeddelay": "fixed-delay",
            "failure-rate": "failure-rate", "failurerate": "failure-rate",
            "exponential-delay": "exponential-delay", "exponentialdelay": "exponential-delay"}


def create_restart_strategy(config: Configuration, checkpointing: bool,
                            clock: Clock = wall_clock_ms) -> RestartStrategy:
    """The strategy ``restart-strategy.type`` names; unset: exponential-delay with
    checkpointing on, none without (as Flink 2 decides)."""
    configured = config.get(jm_options.RESTART_STRATEGY)
    if configured is None:
        configured = "exponential-delay" if checkpointing else "none"
    kind = _ALIASES[configured]

    def ms(option: Option[Seconds]) -> int:
        return round(config.get(option) * 1000)

    if kind == "none":
        return NoRestartStrategy(clock)
    if kind == "fixed-delay":
        return FixedDelayRestartStrategy(config.get(jm_options.FIXED_DELAY_ATTEMPTS),
                                         ms(jm_options.FIXED_DELAY_DELAY), clock)
    if kind == "failure-rate":
        return FailureRateRestartStrategy(config.get(jm_options.FAILURE_RATE_MAX_FAILURES),
                                          ms(jm_options.FAILURE_RATE_INTERVAL),
                                          ms(jm_options.FAILURE_RATE_DELAY), clock)
    return ExponentialDelayRestartStrategy(
        ms(jm_options.EXPONENTIAL_INITIAL_BACKOFF), ms(jm_options.EXPONENTIAL_MAX_BACKOFF),
        config.get(jm_options.EXPONENTIAL_MULTIPLIER), config.get(jm_options.EXPONENTIAL_JITTER),
        ms(jm_options.EXPONENTIAL_RESET_THRESHOLD), config.get(jm_options.EXPONENTIAL_ATTEMPTS),
        clock)
