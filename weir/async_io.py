"""Async I/O, named as in PyFlink: ``AsyncDataStream.unordered_wait``/``ordered_wait``
run an :class:`AsyncFunction` (``async def async_invoke(value)``) on many records at
once, each call bounded by a timeout, at most ``capacity`` in flight per subtask, and
retried as an :class:`AsyncRetryStrategy` says.

Example:
    >>> import asyncio
    >>> from weir import StreamExecutionEnvironment
    >>> class Lookup(AsyncFunction):
    ...     async def async_invoke(self, value):
    ...         await asyncio.sleep(0.001)   # a call to a service
    ...         return [(value, value * 10)]
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> looked_up = AsyncDataStream.unordered_wait(
    ...     env.from_collection([1, 2, 3]), Lookup(), Time.seconds(5), capacity=10)
    >>> sorted(looked_up.execute_and_collect())
    [(1, 10), (2, 20), (3, 30)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from weir.core.time import Time, to_millis
from weir.functions import AsyncFunction

if TYPE_CHECKING:
    from weir.core.types import TypeInformation
    from weir.datastream.data_stream import DataStream

__all__ = ["AsyncDataStream", "AsyncFunction", "AsyncRetryPredicate", "AsyncRetryStrategies",
           "AsyncRetryStrategy", "ExponentialBackoffDelayRetryStrategy",
           "FixedDelayRetryStrategy", "async_retry_predicates"]


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


class async_retry_predicates:  # noqa: N801 - PyFlink's module name
    """Common retry predicates: PyFlink's ``empty_result_predicate``,
    ``has_exception_predicate`` and ``exception_type_predicate``, and the constants
    weir had first."""

    EMPTY_RESULT_PREDICATE: Callable[[Any], bool] = staticmethod(  # type: ignore[assignment]
        lambda result: not result)
    HAS_EXCEPTION_PREDICATE: Callable[[BaseException], bool] = staticmethod(  # type: ignore[assignment]
        lambda error: True)

    @staticmethod
    def empty_result_predicate(result: Any) -> bool:
        """True for a call that returned no outputs (None or an empty list)."""
        return result is None or len(result) == 0

    @staticmethod
    def has_exception_predicate(error: BaseException | None) -> bool:
        """True for a call that raised."""
        return error is not None

    @staticmethod
    def exception_type_predicate(error: BaseException | None,
                                 expected_error_type: type[BaseException]) -> bool:
        """True if the call raised an ``expected_error_type``; bind the type to use it as
        an exception predicate (``functools.partial`` or a lambda)."""
        return isinstance(error, expected_error_type)


class AsyncDataStream:
    """Apply an AsyncFunction to a stream (PyFlink's ``AsyncDataStream``)."""

    @staticmethod
    def _wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Any,
              capacity: int, output_type: TypeInformation | None, ordered: bool,
              retry: AsyncRetryStrategy) -> DataStream:
        from weir.operators.async_wait import AsyncWaitOperator

        name = "Async Wait (ordered)" if ordered else "Async Wait"
        operator = AsyncWaitOperator(name, async_function, to_millis(timeout), capacity,
                                     ordered, retry, output_type)
        return data_stream._then(name, operator)

    @staticmethod
    def unordered_wait(data_stream: DataStream, async_function: AsyncFunction,
                       timeout: Time | Any, capacity: int = 100,
                       output_type: TypeInformation | None = None) -> DataStream:
        """Results as their calls complete (watermarks still order them: every call
        started before a watermark completes before it passes)."""
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity,
                                     output_type, False, NO_RETRY)

    @staticmethod
    def ordered_wait(data_stream: DataStream, async_function: AsyncFunction,
                     timeout: Time | Any, capacity: int = 100,
                     output_type: TypeInformation | None = None) -> DataStream:
        """Results in the order of their input records."""
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity,
                                     output_type, True, NO_RETRY)

    @staticmethod
    def unordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction,
                                  timeout: Time | Any, async_retry_strategy: AsyncRetryStrategy,
                                  capacity: int = 100,
                                  output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity,
                                     output_type, False, async_retry_strategy)

    @staticmethod
    def ordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction,
                                timeout: Time | Any, async_retry_strategy: AsyncRetryStrategy,
                                capacity: int = 100,
                                output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity,
                                     output_type, True, async_retry_strategy)


def results_of(value: Any) -> Iterable[Any]:
    """What an async call returned, as outputs (None: none)."""
    return () if value is None else value
