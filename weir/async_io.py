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
from typing import TYPE_CHECKING, Any

from weir.core.time import Time, to_millis
from weir.functions import AsyncFunction

if TYPE_CHECKING:
    from weir.core.types import TypeInformation
    from weir.datastream import DataStream

__all__ = ["AsyncDataStream", "AsyncFunction", "AsyncRetryStrategies", "AsyncRetryStrategy",
           "async_retry_predicates"]


class AsyncRetryStrategy:
    """When and how often an async call is tried again: up to ``max_attempts`` calls in
    all, waiting ``backoff_ms(attempt)`` before attempt ``attempt + 1``, if the result
    satisfies ``result_predicate`` or the exception ``exception_predicate``."""

    def __init__(self, max_attempts: int, backoff: Callable[[int], int],
                 result_predicate: Callable[[Any], bool] | None = None,
                 exception_predicate: Callable[[BaseException], bool] | None = None) -> None:
        if max_attempts < 1:
            msg = f"an async retry strategy needs at least 1 attempt, got {max_attempts}"
            raise ValueError(msg)
        self.max_attempts = max_attempts
        self.backoff_ms = backoff
        self.result_predicate = result_predicate
        self.exception_predicate = exception_predicate

    def retries_result(self, result: Any) -> bool:
        return self.result_predicate is not None and bool(self.result_predicate(result))

    def retries_exception(self, error: BaseException) -> bool:
        return self.exception_predicate is not None and bool(self.exception_predicate(error))


NO_RETRY = AsyncRetryStrategy(1, lambda attempt: 0)


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
        def __init__(self, max_attempts: int, backoff_time_millis: int) -> None:
            super().__init__(max_attempts, lambda attempt: int(backoff_time_millis))

    class ExponentialBackoffDelayRetryStrategyBuilder(_Builder):
        def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int,
                     multiplier: float) -> None:
            super().__init__(max_attempts, lambda attempt: int(min(
                max_retry_delay, initial_delay * multiplier ** (attempt - 1))))


class async_retry_predicates:  # noqa: N801 - PyFlink's module name
    """Common retry predicates."""

    EMPTY_RESULT_PREDICATE: Callable[[Any], bool] = staticmethod(  # type: ignore[assignment]
        lambda result: not result)
    HAS_EXCEPTION_PREDICATE: Callable[[BaseException], bool] = staticmethod(  # type: ignore[assignment]
        lambda error: True)


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
