"""Async I/O (PyFlink's ``pyflink.datastream.async_data_stream``):
``AsyncDataStream.unordered_wait``/``ordered_wait`` run an
:class:`~weir.datastream.functions.AsyncFunction` (``async def async_invoke(value)``) on many
records at once, each call bounded by a timeout, at most ``capacity`` in flight per
subtask, and retried as an
:class:`~weir.datastream.async_retry_strategies.AsyncRetryStrategy` says. The operator
that runs the calls is :mod:`weir.operators.async_wait`.

Example:
    >>> import asyncio
    >>> from weir.common.time import Time
    >>> from weir.datastream.functions import AsyncFunction
    >>> from weir.datastream.stream_execution_environment import StreamExecutionEnvironment
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

from typing import TYPE_CHECKING

from weir.core.time import to_millis
from weir.datastream.async_retry_strategies import NO_RETRY, AsyncRetryStrategy
from weir.datastream.functions import AsyncFunction
from weir.operators.async_wait import AsyncWaitOperator

if TYPE_CHECKING:
    from weir.common.time import TimeSpan
    from weir.core.types import TypeInformation
    from weir.datastream.data_stream import DataStream

__all__ = ["AsyncDataStream"]


class AsyncDataStream:
    """Apply an AsyncFunction to a stream (PyFlink's ``AsyncDataStream``)."""

    @staticmethod
    def _wait(data_stream: DataStream, async_function: AsyncFunction, timeout: TimeSpan,
              capacity: int, output_type: TypeInformation | None, ordered: bool,
              retry: AsyncRetryStrategy) -> DataStream:
        name = "Async Wait (ordered)" if ordered else "Async Wait"
        operator = AsyncWaitOperator(name, async_function, to_millis(timeout), capacity,
                                     ordered, retry, output_type)
        return data_stream._then(name, operator)

    @staticmethod
    def unordered_wait(data_stream: DataStream, async_function: AsyncFunction,
                       timeout: TimeSpan, capacity: int = 100,
                       output_type: TypeInformation | None = None) -> DataStream:
        """Results as their calls complete (watermarks still order them: every call
        started before a watermark completes before it passes)."""
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity,
                                     output_type, False, NO_RETRY)

    @staticmethod
    def ordered_wait(data_stream: DataStream, async_function: AsyncFunction,
                     timeout: TimeSpan, capacity: int = 100,
                     output_type: TypeInformation | None = None) -> DataStream:
        """Results in the order of their input records."""
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity,
                                     output_type, True, NO_RETRY)

    @staticmethod
    def unordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction,
                                  timeout: TimeSpan, async_retry_strategy: AsyncRetryStrategy,
                                  capacity: int = 100,
                                  output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity,
                                     output_type, False, async_retry_strategy)

    @staticmethod
    def ordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction,
                                timeout: TimeSpan, async_retry_strategy: AsyncRetryStrategy,
                                capacity: int = 100,
                                output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity,
                                     output_type, True, async_retry_strategy)
