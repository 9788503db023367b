"""heartbeat.rpc-failure-threshold: calls in a row that cannot reach a heartbeat target make
it lost before heartbeat.timeout (the counter and the resource manager alone: a manual
clock, no sockets, no sleeps)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tests.support.resource_manager import ResourceManagerHarness
from weir.core import options
from weir.core.clock import ManualClock
from weir.core.config import Configuration
from weir.core.errors import ConfigError
from weir.core.heartbeat import DISABLED, RpcFailureThreshold, RpcOutcome, classify
from weir.jobmaster.resource_manager import (
    ResourceManager,
    RpcOutcomeInterceptor,
)
from weir.proto import common_pb2, jobmaster_pb2

UNREACHABLE, REACHED, INCONCLUSIVE = (RpcOutcome.UNREACHABLE, RpcOutcome.REACHED,
                                      RpcOutcome.INCONCLUSIVE)
INTERVAL_MS = 1000
TIMEOUT_S = 10.0


# -- the counter -------------------------------------------------------------------------


def counter(threshold: int = 2) -> tuple[RpcFailureThreshold, ManualClock]:
    clock = ManualClock(50_000)
    return RpcFailureThreshold(threshold, INTERVAL_MS, clock), clock


def test_the_threshold_th_failure_one_interval_apart_makes_the_target_unreachable_once():
    failures, clock = counter(3)
    verdicts = []
    for _ in range(5):
        verdicts.append(failures.record(UNREACHABLE))
        clock.advance(INTERVAL_MS)
    assert verdicts == [False, False, True, False, False]  # reported once, not per failure
    assert failures.failures == 5 and failures.unreachable


def test_failures_within_one_interval_are_one_outage_seen_again():
    failures, clock = counter(2)
    # A deployment of four tasks fails four times at once: one observation.
    assert [failures.record(UNREACHABLE) for _ in range(4)] == [False] * 4
    clock.advance(INTERVAL_MS - 1)
    assert not failures.record(UNREACHABLE) and failures.failures == 1
    clock.advance(1)
    assert failures.record(UNREACHABLE) and failures.failures == 2


def test_an_answer_starts_the_count_again_and_inconclusive_outcomes_change_nothing():
    failures, clock = counter(2)
    failures.record(UNREACHABLE)
    clock.advance(INTERVAL_MS)
    failures.record(REACHED)                      # the target answered: not in a row
    assert failures.failures == 0 and not failures.unreachable
    assert not failures.record(UNREACHABLE)
    clock.advance(INTERVAL_MS)
    assert not failures.record(INCONCLUSIVE)      # slow is not gone ...
    assert failures.failures == 1                 # ... nor an answer
    assert failures.record(UNREACHABLE)
    failures.record(REACHED)
    clock.advance(INTERVAL_MS)
    assert not failures.record(UNREACHABLE)       # lost and back: counted afresh
    clock.advance(INTERVAL_MS)
    assert failures.record(UNREACHABLE)


def test_a_threshold_of_one_decides_on_the_first_failure_and_minus_one_never():
    one, _ = counter(1)
    assert one.record(UNREACHABLE) and one.unreachable
    off, clock = counter(DISABLED)
    for _ in range(10):
        assert not off.record(UNREACHABLE)
        clock.advance(INTERVAL_MS)
    assert not off.enabled and not off.unreachable


@pytest.mark.parametrize("threshold", [0, -2])
def test_a_threshold_below_one_other_than_minus_one_is_refused(threshold: int):
    with pytest.raises(ValueError, match="-1 \\(off\\) or at least 1"):
        RpcFailureThreshold(threshold, INTERVAL_MS, ManualClock())


@pytest.mark.parametrize(("code", "outcome"), [
    (None, REACHED), (grpc.StatusCode.OK, REACHED),
    (grpc.StatusCode.NOT_FOUND, REACHED),           # e.g. a trigger for a finished task
    (grpc.StatusCode.FAILED_PRECONDITION, REACHED),
    (grpc.StatusCode.UNAUTHENTICATED, REACHED),     # refused, but by the target itself
    (grpc.StatusCode.UNAVAILABLE, UNREACHABLE),
    (grpc.StatusCode.DEADLINE_EXCEEDED, INCONCLUSIVE),
    (grpc.StatusCode.CANCELLED, INCONCLUSIVE),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, INCONCLUSIVE),
])
def test_only_unavailable_means_unreachable(code: grpc.StatusCode | None, outcome: RpcOutcome):
    assert classify(code) is outcome


def test_the_option_defaults_to_flinks_two_and_accepts_minus_one():
    assert Configuration().get(options.HEARTBEAT_RPC_FAILURE_THRESHOLD) == 2
    conf = Configuration.from_pairs({"heartbeat.rpc-failure-threshold": "-1"})
    assert conf.get(options.HEARTBEAT_RPC_FAILURE_THRESHOLD) == DISABLED
    with pytest.raises(ConfigError, match=r"heartbeat\.rpc-failure-threshold.*-1 \(off\)"):
        Configuration.from_pairs({"heartbeat.rpc-failure-threshold": "0"})


# -- the JobMaster's calls to a TaskExecutor ----------------------------------------------


def manager(threshold: int = 2) -> ResourceManagerHarness:
    return ResourceManagerHarness(TIMEOUT_S, ManualClock(50_000), {
        "rpc_failure_threshold": threshold, "heartbeat_interval": INTERVAL_MS / 1000})


def test_calls_that_cannot_reach_a_task_executor_remove_it_before_the_timeout():
    m = manager()
    record = m.register()
    m.outcome(record, grpc.StatusCode.UNAVAILABLE)
    m.outcome(record, grpc.StatusCode.UNAVAILABLE)    # the same burst
    assert m.rm.get("te-1") is record and m.lost == []
    m.clock.advance(INTERVAL_MS)
    m.outcome(record, grpc.StatusCode.UNAVAILABLE)
    assert m.rm.get("te-1") is None and record.channel.closed
    assert m.rm.total_slots() == 0
    [(resource_id, reason, message)] = m.lost
    assert resource_id == "te-1" and reason == common_pb2.TASK_EXECUTOR_LOST
    assert "2 calls to it in a row could not reach it (UNAVAILABLE; " \
           "heartbeat.rpc-failure-threshold 2)" in message
    assert m.clock() / 1000 - record.last_heartbeat < TIMEOUT_S   # long before the timeout


def test_slow_calls_and_answers_in_between_do_not_remove_it():
    m = manager()
    record = m.register()
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, None,
                 grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND,
                 grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                 grpc.StatusCode.DEADLINE_EXCEEDED):
        m.outcome(record, code)
        m.clock.advance(INTERVAL_MS)
    assert m.rm.get("te-1") is record and m.lost == []


def test_outcomes_of_a_replaced_registration_do_not_count_against_its_successor():
    m = manager()
    old = m.register("a")
    m.outcome(old, grpc.StatusCode.UNAVAILABLE)
    new = m.register("a")             # the same process registered again
    m.lost.clear()
    m.clock.advance(INTERVAL_MS)
    m.outcome(old, grpc.StatusCode.UNAVAILABLE)   # a late failure of the old stub's calls
    m.clock.advance(INTERVAL_MS)
    m.outcome(new, grpc.StatusCode.UNAVAILABLE)
    assert m.rm.get("te-1") is new and m.lost == []
    m.clock.advance(INTERVAL_MS)
    m.outcome(new, grpc.StatusCode.UNAVAILABLE)
    assert m.rm.get("te-1") is None and len(m.lost) == 1


def test_outcomes_after_the_task_executor_is_gone_are_ignored():
    m = manager()
    record = m.register()
    m.rm.remove("te-1", common_pb2.TASK_EXECUTOR_LOST, "its connection closed")
    for _ in range(3):
        m.outcome(record, grpc.StatusCode.UNAVAILABLE)
        m.clock.advance(INTERVAL_MS)
    assert len(m.lost) == 1     # only the removal itself


def test_minus_one_leaves_unreachable_task_executors_to_the_heartbeat_timeout():
    m = manager(threshold=DISABLED)
    record = m.register()
    for _ in range(5):
        m.outcome(record, grpc.StatusCode.UNAVAILABLE)
        m.clock.advance(INTERVAL_MS)
    assert m.rm.get("te-1") is record
    m.clock.advance(int(TIMEOUT_S * 1000))
    m.rm.check_heartbeats()
    assert m.lost[0][1] == common_pb2.HEARTBEAT_TIMEOUT


# -- the interceptor that feeds it ---------------------------------------------------------


class FakeCall:
    """A finished call as gRPC's futures present it to done-callbacks."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def add_done_callback(self, fn: Any) -> None:
        fn(self)


def test_the_interceptor_reports_every_calls_status_and_hands_back_the_call():
    reported: list[grpc.StatusCode | None] = []
    interceptor = RpcOutcomeInterceptor(reported.append)
    for code in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE):
        call = FakeCall(code)
        returned = interceptor.intercept_unary_unary(
            lambda details, request, c=call: c, "details", "request")
        assert returned is call                   # the caller's future, untouched
    assert reported == [grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE]


def test_a_task_executors_stub_reports_to_the_owner_thread_with_its_registration():
    handed: list[Any] = []
    rm = ResourceManager(None, TIMEOUT_S, lambda *lost: None, lambda: None,
                         rpc_failure_threshold=2, dispatch=handed.append)
    record = rm.register(jobmaster_pb2.RegisterTaskExecutorRequest(
        resource_id="te-1", rpc_address="127.0.0.1:1", num_slots=1, instance_id="a"))
    try:
        seen: list[tuple[str, str, grpc.StatusCode | None]] = []
        rm.rpc_outcome = lambda *args: seen.append(args)  # type: ignore[method-assign]
        # The stub's calls go through the interceptor (creating it opened no connection) ...
        assert type(record.stub.CancelTask).__module__ == "grpc._interceptor"
        # ... whose reporter hands the outcome over instead of touching the manager.
        rm._reporter(record)(grpc.StatusCode.UNAVAILABLE)
        assert seen == [] and len(handed) == 1
        handed[0]()
        assert seen == [("te-1", record.registration_id, grpc.StatusCode.UNAVAILABLE)]
    finally:
        rm.close()
