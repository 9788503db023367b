"""Registration of TaskExecutors by resource id, fenced by registration ids (the resource
manager alone: a manual clock, no sockets)."""

from __future__ import annotations

import pytest

from tests.support.resource_manager import ResourceManagerHarness
from weir.jobmaster.resource_manager import (
    DuplicateTaskExecutorError,
)
from weir.proto import common_pb2

TIMEOUT_S = 10.0


def manager() -> ResourceManagerHarness:
    return ResourceManagerHarness(TIMEOUT_S)


def test_a_second_process_with_a_live_resource_id_is_refused_and_changes_nothing():
    m = manager()
    first = m.register("first")
    slots = m.rm.allocate("job", 1, spread=False)
    m.clock.advance(9_000)
    with pytest.raises(DuplicateTaskExecutorError) as refused:
        m.register("second", address="127.0.0.1:2000", slots=4)
    message = str(refused.value)
    assert "'te-1' is already registered and alive (127.0.0.1:1000, pid 100" in message
    assert "taskmanager.resource-id" in message and "\n" not in message
    assert m.rm.get("te-1") is first and m.rm.total_slots() == 2
    assert slots is not None and m.rm.free_slots() == 1      # the job keeps its slot
    assert m.lost == [] and len(m.channels) == 1 and not m.channels[0].closed


def test_the_registered_one_keeps_heartbeating_and_stays():
    m = manager()
    first = m.register("first")
    for _ in range(5):
        m.clock.advance(6_000)
        assert m.heartbeat(first.registration_id)
        m.rm.check_heartbeats()
        with pytest.raises(DuplicateTaskExecutorError):
            m.register("second")
    assert m.rm.get("te-1") is first and m.lost == []


def test_a_silent_registration_is_replaced_by_another_process():
    m = manager()
    first = m.register("first")
    m.clock.advance(10_500)  # timed out, before the periodic check noticed
    second = m.register("second", address="127.0.0.1:2000", slots=4)
    assert m.rm.get("te-1") is second and m.rm.total_slots() == 4
    assert second.registration_id != first.registration_id
    assert [(r, reason) for r, reason, _ in m.lost] == [("te-1", common_pb2.HEARTBEAT_TIMEOUT)]
    assert m.channels[0].closed
    assert not m.heartbeat(first.registration_id)       # the old one is fenced off
    assert m.heartbeat(second.registration_id)


def test_the_same_process_registering_again_replaces_its_registration():
    m = manager()
    first = m.register("same")
    again = m.register("same")
    assert m.rm.get("te-1") is again and again.registration_id != first.registration_id
    assert [(r, reason) for r, reason, _ in m.lost] == [("te-1",
                                                         common_pb2.TASK_EXECUTOR_LOST)]
    assert not m.heartbeat(first.registration_id) and m.heartbeat(again.registration_id)


def test_heartbeats_of_a_stale_registration_do_not_keep_it_alive():
    m = manager()
    first = m.register("same")
    m.register("same")
    for _ in range(3):
        m.clock.advance(4_000)
        assert not m.heartbeat(first.registration_id)   # a lingering old stream
        assert not m.heartbeat("")                      # no registration id at all
    m.rm.check_heartbeats()
    assert m.rm.get("te-1") is None
    assert m.lost[-1][:2] == ("te-1", common_pb2.HEARTBEAT_TIMEOUT)


def test_registration_ids_are_fresh_and_heartbeats_of_other_resources_are_refused():
    m = manager()
    one = m.register("a", resource_id="te-1")
    two = m.register("b", resource_id="te-2")
    assert one.registration_id != two.registration_id
    assert not m.heartbeat(one.registration_id, resource_id="te-2")
    assert not m.heartbeat(one.registration_id, resource_id="te-3")
