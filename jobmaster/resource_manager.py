"""Registered TaskExecutors, their slots and their liveness. Main thread only."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from weir.core.rpc import create_channel
from weir.proto import jobmaster_pb2, taskexecutor_pb2_grpc

log = logging.getLogger(__name__)


@dataclass
class Slot:
    resource_id: str
    index: int
    job_id: str | None = None

    @property
    def allocation_id(self) -> str:
        return f"{self.resource_id}:{self.index}"


@dataclass
class TaskExecutorRecord:
    """What the JobMaster knows of one TaskExecutor."""

    resource_id: str
    rpc_address: str
    data_address: str
    metrics_url: str
    pid: int
    slots: list[Slot]
    channel: grpc.Channel
    stub: taskexecutor_pb2_grpc.TaskExecutorServiceStub
    last_heartbeat: float = field(default_factory=time.monotonic)
    #: Identifies the current heartbeat stream, so a stale stream's end is ignored.
    stream_id: int = 0
    metrics: dict[str, jobmaster_pb2.TaskMetrics] = field(default_factory=dict)

    @property
    def free_slots(self) -> int:
        return sum(1 for s in self.slots if s.job_id is None)

    def to_info(self) -> jobmaster_pb2.TaskExecutorInfo:
        return jobmaster_pb2.TaskExecutorInfo(
            resource_id=self.resource_id, rpc_address=self.rpc_address,
            data_address=self.data_address, slots_total=len(self.slots),
            slots_free=self.free_slots, metrics_url=self.metrics_url, pid=self.pid)


class ResourceManager:
    """Slot pool and TaskExecutor registry.

    ``on_lost(resource_id, reason_code, message)`` is called when a TaskExecutor goes away;
    ``on_slots_available()`` when new slots appear.
    """

    def __init__(self, token: str | None, heartbeat_timeout: float,
                 on_lost: Callable[[str, int, str], None],
                 on_slots_available: Callable[[], None]) -> None:
        self._token = token
        self._timeout = heartbeat_timeout
        self._on_lost = on_lost
        self._on_slots_available = on_slots_available
        self.task_executors: dict[str, TaskExecutorRecord] = {}

    def register(self, request: jobmaster_pb2.RegisterTaskExecutorRequest) -> TaskExecutorRecord:
        from weir.proto import common_pb2

        if request.resource_id in self.task_executors:
            # A restarted process with the same id: its old incarnation is gone.
            self.remove(request.resource_id, common_pb2.TASK_EXECUTOR_LOST,
                        "it registered again (restarted)")
        channel = create_channel(request.rpc_address, self._token)
        record = TaskExecutorRecord(
            resource_id=request.resource_id, rpc_address=request.rpc_address,
            data_address=request.data_address, metrics_url=request.metrics_url,
            pid=request.pid,
            slots=[Slot(request.resource_id, i) for i in range(request.num_slots)],
            channel=channel, stub=taskexecutor_pb2_grpc.TaskExecutorServiceStub(channel))
        self.task_executors[record.resource_id] = record
        log.info("TaskExecutor %s registered (%s, %d slots)", record.resource_id,
                 record.rpc_address, request.num_slots)
        self._on_slots_available()
        return record

    def heartbeat(self, resource_id: str, message: jobmaster_pb2.TaskExecutorHeartbeat) -> bool:
        record = self.task_executors.get(resource_id)
        if record is None:
            return False
        record.last_heartbeat = time.monotonic()
        record.metrics = {m.attempt_id: m for m in message.task_metrics}
        return True

    def check_heartbeats(self) -> None:
        from weir.proto import common_pb2

        now = time.monotonic()
        for record in list(self.task_executors.values()):
            silent = now - record.last_heartbeat
            if silent > self._timeout:
                self.remove(record.resource_id, common_pb2.HEARTBEAT_TIMEOUT,
                            f"no heartbeat for {silent:.1f} s (heartbeat.timeout "
                            f"{self._timeout:.0f} s)")

    def remove(self, resource_id: str, reason: int, message: str) -> None:
        record = self.task_executors.pop(resource_id, None)
        if record is None:
            return
        log.warning("TaskExecutor %s (%s) lost: %s", resource_id, record.rpc_address, message)
        record.channel.close()
        self._on_lost(resource_id, reason,
                      f"TaskExecutor {resource_id} ({record.rpc_address}) was lost: {message}")

    def total_slots(self) -> int:
        return sum(len(r.slots) for r in self.task_executors.values())

    def free_slots(self) -> int:
        return sum(r.free_slots for r in self.task_executors.values())

    def allocate(self, job_id: str, count: int, spread: bool) -> list[Slot] | None:
        """``count`` free slots for ``job_id``, or None (nothing allocated) if not enough."""
        if self.free_slots() < count:
            return None
        chosen: list[Slot] = []
        records = sorted(self.task_executors.values(), key=lambda r: r.resource_id)
        if spread:
            # Round robin over TaskExecutors, most free slots first, as Flink's
            # cluster.evenly-spread-out-slots.
            while len(chosen) < count:
                records.sort(key=lambda r: -r.free_slots)
                slot = next(s for s in records[0].slots if s.job_id is None)
                slot.job_id = job_id
                chosen.append(slot)
        else:
            for record in records:
                for slot in record.slots:
                    if slot.job_id is None and len(chosen) < count:
                        slot.job_id = job_id
                        chosen.append(slot)
        return chosen

    def release(self, job_id: str) -> None:
        freed = False
        for record in self.task_executors.values():
            for slot in record.slots:
                if slot.job_id == job_id:
                    slot.job_id = None
                    freed = True
        if freed:
            self._on_slots_available()

    def release_slots(self, slots: list[Slot]) -> None:
        """Free some of a job's slots (a finished stage of a batch job)."""
        for slot in slots:
            slot.job_id = None
        if slots:
            self._on_slots_available()

    def get(self, resource_id: str) -> TaskExecutorRecord | None:
        return self.task_executors.get(resource_id)

    def close(self) -> None:
        for record in self.task_executors.values():
            record.channel.close()
        self.task_executors.clear()
