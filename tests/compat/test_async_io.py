"""Async I/O as PyFlink programs use it (imports aside): AsyncDataStream.unordered_wait
and ordered_wait with AsyncFunctions (coroutines) running concurrently per subtask,
timeouts, retries; the calls in flight at a checkpoint are called again on restore."""

from __future__ import annotations

import asyncio
import threading
from functools import partial

import pytest

from tests.support.operators import CollectingOutput
from weir import (
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryStrategies,
    StreamExecutionEnvironment,
    Time,
    async_retry_predicates,
)
from weir.core.records import Elements
from weir.datastream.async_retry_strategies import NO_RETRY
from weir.operators.async_wait import AsyncWaitOperator
from weir.taskexecutor.operator import OperatorContext, StateContext

pytestmark = pytest.mark.usefixtures("runs_on")


class Concurrent(AsyncFunction):
    """Reports how many calls were in flight when each one finished its wait."""

    def open(self, runtime_context):
        self.in_flight = 0
        self.peak = 0

    async def async_invoke(self, value):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        return [(value, self.peak)]


class SlowFirst(AsyncFunction):
    """Earlier records take longer: unordered results would come back reversed."""

    async def async_invoke(self, value):
        await asyncio.sleep(0.02 * (10 - value))
        return [value]


class HangsOnThree(AsyncFunction):
    async def async_invoke(self, value):
        if value == 3:
            await asyncio.Event().wait()  # never set
        return [value]

    def timeout(self, value):
        return [f"timeout-{value}"]


class FailsTwice(AsyncFunction):
    def open(self, runtime_context):
        self.attempts = {}

    async def async_invoke(self, value):
        self.attempts[value] = self.attempts.get(value, 0) + 1
        if self.attempts[value] < 3:
            raise ConnectionError("service unavailable")
        return [(value, self.attempts[value])]


def _env() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    return env


def test_unordered_wait_runs_calls_concurrently_up_to_the_capacity() -> None:
    env = _env()
    got = list(AsyncDataStream.unordered_wait(
        env.from_collection(list(range(40))), Concurrent(), Time.seconds(10),
        capacity=8).execute_and_collect())
    assert sorted(v for v, _ in got) == list(range(40))
    peak = max(p for _, p in got)
    assert 1 < peak <= 8


def test_ordered_wait_keeps_the_input_order() -> None:
    got = AsyncDataStream.ordered_wait(_env().from_collection(list(range(10))), SlowFirst(),
                                       Time.seconds(10), capacity=10)
    assert list(got.execute_and_collect()) == list(range(10))


def test_a_call_that_times_out_gives_the_timeout_result() -> None:
    got = AsyncDataStream.unordered_wait(_env().from_collection([1, 2, 3, 4]),
                                         HangsOnThree(), Time.milliseconds(200))
    assert sorted(map(str, got.execute_and_collect())) == ["1", "2", "4", "timeout-3"]


def test_failed_calls_are_retried_as_the_strategy_says() -> None:
    strategy = (AsyncRetryStrategies.FixedDelayRetryStrategyBuilder(3, 10)
                .if_exception(async_retry_predicates.HAS_EXCEPTION_PREDICATE).build())
    got = AsyncDataStream.unordered_wait_with_retry(
        _env().from_collection([1, 2]), FailsTwice(), Time.seconds(10), strategy)
    assert sorted(got.execute_and_collect()) == [(1, 3), (2, 3)]


class ServiceTimesOutOnce(AsyncFunction):
    """The remote service's own timeout, raised once per record: an attempt's failure."""

    def open(self, runtime_context):
        self.attempts = {}

    async def async_invoke(self, value):
        self.attempts[value] = self.attempts.get(value, 0) + 1
        if self.attempts[value] == 1:
            raise TimeoutError("the service did not answer")
        return [f"ok-{value}"]

    def timeout(self, value):
        return [f"timeout-{value}"]


class AlwaysFails(AsyncFunction):
    async def async_invoke(self, value):
        raise ConnectionError("service unavailable")

    def timeout(self, value):
        return [f"timeout-{value}"]


def test_a_timeout_error_raised_by_the_function_is_retried_not_a_timeout() -> None:
    strategy = (AsyncRetryStrategies.FixedDelayRetryStrategyBuilder(2, 10)
                .if_exception(partial(async_retry_predicates.exception_type_predicate,
                                      expected_error_type=TimeoutError))
                .build())
    got = AsyncDataStream.unordered_wait_with_retry(
        _env().from_collection([1, 2, 3]), ServiceTimesOutOnce(), Time.seconds(10), strategy)
    assert sorted(got.execute_and_collect()) == ["ok-1", "ok-2", "ok-3"]


def test_the_timeout_covers_every_attempt_of_a_record() -> None:
    # Each attempt fails at once; retries 100 ms apart would go on for 10 s, but the
    # record's 300 ms timeout ends them and gives the timeout result.
    strategy = (AsyncRetryStrategies.FixedDelayRetryStrategyBuilder(100, 100)
                .if_exception(async_retry_predicates.HAS_EXCEPTION_PREDICATE).build())
    got = AsyncDataStream.unordered_wait_with_retry(
        _env().from_collection([1, 2]), AlwaysFails(), Time.milliseconds(300), strategy)
    assert sorted(got.execute_and_collect()) == ["timeout-1", "timeout-2"]


class Gated(AsyncFunction):
    """Calls complete once the gate (shared in this process) opens."""

    gate = threading.Event()

    async def async_invoke(self, value):
        while not self.gate.is_set():
            await asyncio.sleep(0.005)
        return [value * 10]


def _opened(operator: AsyncWaitOperator, context: StateContext) -> CollectingOutput:
    out = CollectingOutput()
    operator.setup(OperatorContext("task", 0, 1, 128), out)
    operator.initialize_state(context)
    operator.open()
    return out


def test_calls_in_flight_at_a_checkpoint_are_called_again_on_restore() -> None:
    Gated.gate.clear()
    first = AsyncWaitOperator("Async Wait", Gated(), 10_000, 10, True, NO_RETRY)
    _opened(first, StateContext())
    first.process(Elements.from_records([1, 2, 3]))
    snapshot = first.snapshot_state(1, 0, None)
    first.close()  # the task failed: its calls are lost with it
    second = AsyncWaitOperator("Async Wait", Gated(), 10_000, 10, True, NO_RETRY)
    out = _opened(second, StateContext(checkpoint_id=1,
                                       operator_state=[snapshot.operator_state]))
    Gated.gate.set()
    second.finish()
    second.close()
    assert out.records == [10, 20, 30]
