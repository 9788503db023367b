"""When an async call is tried again (PyFlink's ``pyflink.datastream.async_retry_strategies``,
with its ``AsyncRetryStrategy`` and ``AsyncRetryPredicate``, which PyFlink names in
``pyflink.datastream.functions``): a strategy allows a number of retries, waits before
each, and retries a call whose result or exception its predicates accept.

Example:
    >>> from weir.datastream.async_retry_predicates import empty_result_predicate
    >>> retry = (AsyncRetryStrategies.FixedDelayRetryStrategyBuilder(2, 100)
    ...          .if_result(empty_result_predicate).build())
    >>> retry.can_retry(2), retry.can_retry(3), retry.get_backoff_time_millis(1)
    (True, False, 100)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["AsyncRetryPredicate", "AsyncRetryStrategies", "AsyncRetryStrategy",
           "ExponentialBackoffDelayRetryStrategy", "FixedDelayRetryStrategy",
           "NoRetryStrategy", "RetryPredicate"]


class AsyncRetryPredicate:
    """When a call is tried again: ``result_predicate()`` tests a call's result (its list
    of outputs), ``exception_predicate()`` the exception it raised; either may be None
    (never retry on that)."""

    def __init__(self, result_predicate: Callable[[Any], bool] | None,
                 exception_predicate: Callable[[BaseException], bool] | None) -> None:
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def result_predicate(self) -> Callable[[Any], bool] | None:
        return self._result_predicate

    def exception_predicate(self) -> Callable[[BaseException], bool] | None:
        return self._exception_predicate


class AsyncRetryStrategy:
    """When and how often an async call is tried again: up to ``max_attempts`` calls in
    all, waiting ``backoff_ms(attempt)`` before attempt ``attempt + 1``, if the result
    satisfies ``result_predicate`` or the exception ``exception_predicate``.

    PyFlink's factories are here too: :meth:`fixed_delay`, :meth:`exponential_backoff`
    and :meth:`no_restart`. As in Flink, ``max_attempts`` counts the retries after the
    first call (the builders' too). The operator asks only ``can_retry``,
    ``get_backoff_time_millis`` and ``get_retry_predicate``, so a subclass written for
    PyFlink (overriding those three) works as well.

    Example:
        >>> from weir.datastream import async_retry_predicates
        >>> retry = AsyncRetryStrategy.fixed_delay(
        ...     2, 100, result_predicate=async_retry_predicates.empty_result_predicate)
        >>> [retry.can_retry(attempt) for attempt in (1, 2, 3)]
        [True, True, False]
    """

    def __init__(self, max_attempts: int, backoff: Callable[[int], int],
                 result_predicate: Callable[[Any], bool] | None = None,
                 exception_predicate: Callable[[BaseException], bool] | None = None) -> None:
        if max_attempts < 0:
            msg = f"an async retry strategy cannot retry {max_attempts} times"
            raise ValueError(msg)
        self.max_attempts = max_attempts
        self.backoff_ms = backoff
        self.result_predicate = result_predicate
        self.exception_predicate = exception_predicate

    def can_retry(self, current_attempts: int) -> bool:
        """Whether another call may follow call number ``current_attempts`` (the first
        call is number 1): at most ``max_attempts`` retries."""
        return current_attempts <= self.max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        """How long to wait after call number ``current_attempts`` before the next."""
        return int(self.backoff_ms(current_attempts))

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        """What results and exceptions are worth another call."""
        return AsyncRetryPredicate(self.result_predicate, self.exception_predicate)

    def retries_result(self, result: Any) -> bool:
        predicate = self.get_retry_predicate().result_predicate()
        return predicate is not None and bool(predicate(result))

    def retries_exception(self, error: BaseException) -> bool:
        predicate = self.get_retry_predicate().exception_predicate()
        return predicate is not None and bool(predicate(error))

    @staticmethod
    def no_restart() -> AsyncRetryStrategy:
        """Never try a call again (PyFlink's name)."""
        return NO_RETRY

    @staticmethod
    def fixed_delay(max_attempts: int, backoff_time_millis: int,
                    result_predicate: Callable[[Any], bool] | None = None,
                    exception_predicate: Callable[[BaseException], bool] | None = None
                    ) -> AsyncRetryStrategy:
        """Retry up to ``max_attempts`` times (after the first call), ``backoff_time_millis``
        apart, when a predicate says so."""
        return FixedDelayRetryStrategy(max_attempts, backoff_time_millis, result_predicate,
                                       exception_predicate)

    @staticmethod
    def exponential_backoff(max_attempts: int, initial_delay: int, max_retry_delay: int,
                            multiplier: float,
                            result_predicate: Callable[[Any], bool] | None = None,
                            exception_predicate: Callable[[BaseException], bool] | None = None
                            ) -> AsyncRetryStrategy:
        """Retry up to ``max_attempts`` times (after the first call), waiting
        ``initial_delay`` ms before the first retry and ``multiplier`` times longer before
        each next one, at most ``max_retry_delay`` ms, when a predicate says so."""
        return ExponentialBackoffDelayRetryStrategy(max_attempts, initial_delay,
                                                    max_retry_delay, multiplier,
                                                    result_predicate, exception_predicate)


def _require_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            msg = f"{name} should be greater than zero, got {value}"
            raise ValueError(msg)


def _fixed_delay_ms(delay_ms: int, attempt: int) -> int:
    return delay_ms


def _exponential_delay_ms(initial_delay: int, max_retry_delay: int, multiplier: float,
                          attempt: int) -> int:
    # PyFlink's sequence: the initial delay, then each previous delay times the
    # multiplier, capped at the maximum (the cap applies from the second retry on).
    delay: float = initial_delay
    for _ in range(attempt - 1):
        delay = min(delay * multiplier, max_retry_delay)
    return int(delay)


class FixedDelayRetryStrategy(AsyncRetryStrategy):
    """PyFlink's fixed-delay strategy (:meth:`AsyncRetryStrategy.fixed_delay`):
    ``max_attempts`` counts the retries after the first call."""

    def __init__(self, max_attempts: int, backoff_time_millis: int,
                 result_predicate: Callable[[Any], bool] | None = None,
                 exception_predicate: Callable[[BaseException], bool] | None = None) -> None:
        _require_positive(max_attempts=max_attempts, backoff_time_millis=backoff_time_millis)
        super().__init__(max_attempts, partial(_fixed_delay_ms, int(backoff_time_millis)),
                         result_predicate, exception_predicate)


class ExponentialBackoffDelayRetryStrategy(AsyncRetryStrategy):
    """PyFlink's exponential-backoff strategy (:meth:`AsyncRetryStrategy.exponential_backoff`):
    ``max_attempts`` counts the retries after the first call."""

    def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int,
                 multiplier: float, result_predicate: Callable[[Any], bool] | None = None,
                 exception_predicate: Callable[[BaseException], bool] | None = None) -> None:
        _require_positive(max_attempts=max_attempts, initial_delay=initial_delay,
                          max_retry_delay=max_retry_delay, multiplier=multiplier)
        super().__init__(max_attempts, partial(_exponential_delay_ms, initial_delay,
                                               max_retry_delay, multiplier),
                         result_predicate, exception_predicate)


class NoRetryStrategy(AsyncRetryStrategy):
    """Never retries (PyFlink's ``NoRetryStrategy``; :meth:`AsyncRetryStrategy.no_restart`)."""

    def __init__(self) -> None:
        super().__init__(0, _no_delay)


def _no_delay(attempt: int) -> int:
    return 0


NO_RETRY = NoRetryStrategy()


class _Builder:
    def __init__(self, max_attempts: int, backoff: Callable[[int], int]) -> None:
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._result: Callable[[Any], bool] | None = None
        self._exception: Callable[[BaseException], bool] | None = None

    def if_result(self, result_predicate: Callable[[Any], bool]) -> _Builder:
        """Retry when the result satisfies this (e.g. EMPTY_RESULT_PREDICATE)."""
        self._result = result_predicate
        return self

    def if_exception(self, exception_predicate: Callable[[BaseException], bool]) -> _Builder:
        """Retry when the call raised an exception satisfying this."""
        self._exception = exception_predicate
        return self

    def build(self) -> AsyncRetryStrategy:
        return AsyncRetryStrategy(self._max_attempts, self._backoff, self._result,
                                  self._exception)


class AsyncRetryStrategies:
    """Builders of retry strategies (PyFlink's ``AsyncRetryStrategies``)."""

    NO_RETRY_STRATEGY = NO_RETRY

    class FixedDelayRetryStrategyBuilder(_Builder):
        """``max_attempts`` retries, ``backoff_time_millis`` apart."""

        def __init__(self, max_attempts: int, backoff_time_millis: int) -> None:
            super().__init__(max_attempts, partial(_fixed_delay_ms, int(backoff_time_millis)))

    class ExponentialBackoffDelayRetryStrategyBuilder(_Builder):
        """``max_attempts`` retries, ``initial_delay`` times ``multiplier`` per retry, at
        most ``max_retry_delay`` apart."""

        def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int,
                     multiplier: float) -> None:
            super().__init__(max_attempts, partial(_exponential_delay_ms, initial_delay,
                                                   max_retry_delay, multiplier))


#: PyFlink's name of :class:`AsyncRetryPredicate` in this module.
RetryPredicate = AsyncRetryPredicate
