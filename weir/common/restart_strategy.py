"""PyFlink's restart strategy objects (``pyflink.common.restart_strategy``), for
``env.set_restart_strategy``: each sets weir's ``restart-strategy.*`` options, which the
JobMaster declares and reads.

Example:
    >>> RestartStrategies.no_restart().options()["restart-strategy.type"]
    'none'
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from weir.common.time import TimeSpan
from weir.core.config import Option
from weir.core.time import to_millis
from weir.jobmaster import options as jm_options

__all__ = ["RestartStrategies", "RestartStrategyConfiguration"]


class RestartStrategyConfiguration:
    """A restart strategy's options (``restart-strategy.*``), as ``RestartStrategies``
    builds them. Two configurations are equal when they are of the same kind and set the
    same options, so ``env.get_restart_strategy() == RestartStrategies.no_restart()``
    holds after ``env.set_restart_strategy(RestartStrategies.no_restart())``.
    """

    def __init__(self, options: dict[str, str]) -> None:
        self._options = options

    def options(self) -> dict[str, str | None]:
        """The options to set: this strategy's, and None (unset) for every other
        ``restart-strategy.*`` key, so that a strategy replaces the one set before instead of
        leaving its settings behind."""
        return {**dict.fromkeys(_restart_keys()), **self._options}

    def get_description(self) -> str:
        """One line saying what a failed job does (as Flink's web interface shows it)."""
        return ", ".join(f"{key}={value}" for key, value in self._options.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RestartStrategyConfiguration) and \
            type(other) is type(self) and other._options == self._options

    def __hash__(self) -> int:
        return hash((type(self).__name__, frozenset(self._options.items())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._options!r})"


def _restart_keys() -> list[str]:
    """Every ``restart-strategy.*`` option key (the JobMaster declares them)."""
    return [value.key for value in vars(jm_options).values()
            if isinstance(value, Option) and value.key.startswith("restart-strategy.")]


def _ms(value: TimeSpan) -> str:
    return f"{to_millis(value)} ms"


def _span(option: Option[Any], options: dict[str, str]) -> timedelta:
    """The duration ``options`` set for ``option`` (else its default), as PyFlink's getters
    give durations."""
    seconds = option.parse(options[option.key]) if option.key in options \
        else option.default_value()
    return timedelta(seconds=float(seconds))


class RestartStrategies:
    """PyFlink's restart strategy builders, and its configuration classes.

    Example:
        >>> strategy = RestartStrategies.fixed_delay_restart(3, 10_000)
        >>> strategy.get_restart_attempts(), strategy.get_delay_between_attempts_interval()
        (3, datetime.timedelta(seconds=10))
        >>> strategy == RestartStrategies.FixedDelayRestartStrategyConfiguration(3, 10_000)
        True
    """

    class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
        """A failed job fails for good (``restart-strategy.type: none``)."""

        def __init__(self) -> None:
            super().__init__({jm_options.RESTART_STRATEGY.key: "none"})

        def get_description(self) -> str:
            return "no restart: a failure fails the job"

    class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart up to ``restart_attempts`` times, ``delay_between_attempts_interval``
        (milliseconds, a timedelta or a Duration) after each failure."""

        def __init__(self, restart_attempts: int,
                     delay_between_attempts_interval: TimeSpan) -> None:
            super().__init__({
                jm_options.RESTART_STRATEGY.key: "fixed-delay",
                jm_options.FIXED_DELAY_ATTEMPTS.key: str(int(restart_attempts)),
                jm_options.FIXED_DELAY_DELAY.key: _ms(delay_between_attempts_interval)})

        def get_restart_attempts(self) -> int:
            return int(self._options[jm_options.FIXED_DELAY_ATTEMPTS.key])

        def get_delay_between_attempts_interval(self) -> timedelta:
            return _span(jm_options.FIXED_DELAY_DELAY, self._options)

        def get_description(self) -> str:
            return (f"fixed delay: up to {self.get_restart_attempts()} restarts, "
                    f"{self._options[jm_options.FIXED_DELAY_DELAY.key]} after each failure")

    class FailureRateRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart ``delay_between_attempts_interval`` after a failure, unless more than
        ``max_failure_rate`` failures happened within ``failure_interval``."""

        def __init__(self, max_failure_rate: int, failure_interval: TimeSpan,
                     delay_between_attempts_interval: TimeSpan) -> None:
            super().__init__({
                jm_options.RESTART_STRATEGY.key: "failure-rate",
                jm_options.FAILURE_RATE_MAX_FAILURES.key: str(int(max_failure_rate)),
                jm_options.FAILURE_RATE_INTERVAL.key: _ms(failure_interval),
                jm_options.FAILURE_RATE_DELAY.key: _ms(delay_between_attempts_interval)})

        def get_max_failure_rate(self) -> int:
            return int(self._options[jm_options.FAILURE_RATE_MAX_FAILURES.key])

        def get_failure_interval(self) -> timedelta:
            return _span(jm_options.FAILURE_RATE_INTERVAL, self._options)

        def get_delay_between_attempts_interval(self) -> timedelta:
            return _span(jm_options.FAILURE_RATE_DELAY, self._options)

        def get_description(self) -> str:
            return (f"failure rate: restart unless more than {self.get_max_failure_rate()} "
                    f"failures within {self._options[jm_options.FAILURE_RATE_INTERVAL.key]}, "
                    f"{self._options[jm_options.FAILURE_RATE_DELAY.key]} after each failure")

    class ExponentialDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart after a delay that starts at ``initial_backoff`` and grows by
        ``backoff_multiplier`` up to ``max_backoff``; it starts over once the job ran
        ``reset_backoff_threshold`` without failing, and varies randomly by up to
        ``jitter_factor`` (the options' defaults where None)."""

        def __init__(self, initial_backoff: TimeSpan, max_backoff: TimeSpan,
                     backoff_multiplier: float, reset_backoff_threshold: TimeSpan | None = None,
                     jitter_factor: float | None = None) -> None:
            options = {
                jm_options.RESTART_STRATEGY.key: "exponential-delay",
                jm_options.EXPONENTIAL_INITIAL_BACKOFF.key: _ms(initial_backoff),
                jm_options.EXPONENTIAL_MAX_BACKOFF.key: _ms(max_backoff),
                jm_options.EXPONENTIAL_MULTIPLIER.key: str(float(backoff_multiplier))}
            if reset_backoff_threshold is not None:
                options[jm_options.EXPONENTIAL_RESET_THRESHOLD.key] = \
                    _ms(reset_backoff_threshold)
            if jitter_factor is not None:
                options[jm_options.EXPONENTIAL_JITTER.key] = str(float(jitter_factor))
            super().__init__(options)

        def get_initial_backoff(self) -> timedelta:
            return _span(jm_options.EXPONENTIAL_INITIAL_BACKOFF, self._options)

        def get_max_backoff(self) -> timedelta:
            return _span(jm_options.EXPONENTIAL_MAX_BACKOFF, self._options)

        def get_backoff_multiplier(self) -> float:
            return float(self._options[jm_options.EXPONENTIAL_MULTIPLIER.key])

        def get_reset_backoff_threshold(self) -> timedelta:
            return _span(jm_options.EXPONENTIAL_RESET_THRESHOLD, self._options)

        def get_jitter_factor(self) -> float:
            jitter = self._options.get(jm_options.EXPONENTIAL_JITTER.key)
            return float(jitter) if jitter is not None \
                else float(jm_options.EXPONENTIAL_JITTER.default_value())

        def get_description(self) -> str:
            return (f"exponential delay: from {self.get_initial_backoff()} up to "
                    f"{self.get_max_backoff()}, times {self.get_backoff_multiplier()} after "
                    f"each failure")

    class FallbackRestartStrategyConfiguration(RestartStrategyConfiguration):
        """The cluster's restart strategy: the job sets no ``restart-strategy.*`` option of
        its own (and unsets any set before), so the cluster's configuration decides."""

        def __init__(self) -> None:
            super().__init__({})

        def get_description(self) -> str:
            return "the cluster's restart strategy"

    @staticmethod
    def no_restart() -> RestartStrategies.NoRestartStrategyConfiguration:
        return RestartStrategies.NoRestartStrategyConfiguration()

    @staticmethod
    def fall_back_restart() -> RestartStrategies.FallbackRestartStrategyConfiguration:
        """Use the restart strategy the cluster is configured with (set nothing job-wide)."""
        return RestartStrategies.FallbackRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts: TimeSpan
                            ) -> RestartStrategies.FixedDelayRestartStrategyConfiguration:
        return RestartStrategies.FixedDelayRestartStrategyConfiguration(
            restart_attempts, delay_between_attempts)

    @staticmethod
    def failure_rate_restart(failure_rate: int, failure_interval: TimeSpan, delay_interval: TimeSpan
                             ) -> RestartStrategies.FailureRateRestartStrategyConfiguration:
        return RestartStrategies.FailureRateRestartStrategyConfiguration(
            failure_rate, failure_interval, delay_interval)

    @staticmethod
    def exponential_delay_restart(
            initial_backoff: TimeSpan, max_backoff: TimeSpan, backoff_multiplier: float,
            reset_backoff_threshold: TimeSpan | None = None, jitter_factor: float | None = None
    ) -> RestartStrategies.ExponentialDelayRestartStrategyConfiguration:
        return RestartStrategies.ExponentialDelayRestartStrategyConfiguration(
            initial_backoff, max_backoff, backoff_multiplier, reset_backoff_threshold,
            jitter_factor)
