"""Registered TaskExecutors, their slots and their liveness. Main thread only.

A resource id names one live TaskExecutor. The same process (same instance id) registering
again replaces its old registration (its heartbeat stream broke); another process is
refused while the registered one is alive (a heartbeat within ``heartbeat.timeout``), and
replaces it once it timed out, so a restarted process keeps its id. Every registration gets a fresh
registration id that its heartbeats must carry, so a replaced registration's heartbeat
stream cannot keep its successor alive or speak for it.

A TaskExecutor whose heartbeat says it is unhealthy (``unhealthy_reason``: it can no longer
do its work, e.g. its data server stopped accepting connections) is removed at once with
that reason: no slot of it is offered again, and its tasks fail over.

A TaskExecutor shutting down (SIGTERM) says so first (``disconnect``): it is removed at
once, as a lost one is, so that its tasks fail over now rather than after
``heartbeat.timeout``, with its shutdown as the reason.

Besides its heartbeat stream, a TaskExecutor is lost when ``heartbeat.rpc-failure-threshold``
of the JobMaster's own calls to it in a row cannot reach it (``weir.core.heartbeat``): its
stream may be fine while its RPC address is not (a firewall, a TLS certificate that does not
name its host, a server that died inside a live process), and every deployment there would
fail until the timeout that never comes.
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
from google.protobuf.message import Message

from weir.core.clock import wall_clock_ms
from weir.core.errors import UserError
from weir.core.heartbeat import DISABLED, RpcFailureThreshold, classify
from weir.core.ids import AllocationId, CheckpointId, ExecutionAttemptId, JobId, ResourceId
from weir.core.rpc import create_channel
from weir.core.tls import TlsFiles
from weir.proto import common_pb2, dispatcher_pb2, jobmaster_pb2, taskexecutor_pb2_grpc

log = logging.getLogger(__name__)

#: Longest shutdown reason of a TaskExecutor kept (it reaches every job's failure history).
MAX_REASON_CHARS = 200


@dataclass
class Slot:
    resource_id: ResourceId
    index: int
    job_id: JobId | None = None

    @property
    def allocation_id(self) -> AllocationId:
        """``<resource id>:<slot index>``: the TaskExecutor finds the slot in it."""
        return AllocationId(f"{self.resource_id}:{self.index}")


@dataclass
class TaskExecutorHistory:
    """What the JobMaster counted for one resource id, across its registrations."""

    registrations: int = 0
    task_failures: int = 0


#: Resource ids whose history is kept; the oldest is forgotten beyond it (TaskExecutors
#: without a fixed resource id get a new one each start).
HISTORIES_KEPT = 1024


@dataclass
class TaskExecutorRecord:
    """What the JobMaster knows of one TaskExecutor."""

    resource_id: ResourceId
    rpc_address: str
    data_address: str
    metrics_url: str
    pid: int
    slots: list[Slot]
    channel: grpc.Channel
    stub: taskexecutor_pb2_grpc.TaskExecutorServiceStub
    #: When the last heartbeat (or the registration) arrived, on the manager's clock.
    last_heartbeat: float
    #: The registering process (random per process; empty from older TaskExecutors).
    instance_id: str = ""
    #: This registration; heartbeats carrying another one are refused.
    registration_id: str = field(default_factory=lambda: secrets.token_hex(8))
    #: Identifies the current heartbeat stream, so a stale stream's end is ignored.
    stream_id: int = 0
    metrics: dict[ExecutionAttemptId, jobmaster_pb2.TaskMetrics] = field(default_factory=dict)
    #: Task-local state it offered on registration: (job id, owner, checkpoint id).
    local_state: set[tuple[JobId, str, CheckpointId]] = field(default_factory=set)
    #: The JobMaster's calls to it that could not reach it, in a row (None: not counted).
    rpc_failures: RpcFailureThreshold | None = None
    #: When this registration arrived (epoch ms).
    registered_at_ms: int = field(default_factory=wall_clock_ms)
    #: Registrations of its resource id and tasks failed on it (shared by the records of
    #: one resource id: the counts outlive a restart of the process).
    history: TaskExecutorHistory = field(default_factory=lambda: TaskExecutorHistory())

    @property
    def free_slots(self) -> int:
        return sum(1 for s in self.slots if s.job_id is None)

    def to_info(self) -> dispatcher_pb2.TaskExecutorInfo:
        return dispatcher_pb2.TaskExecutorInfo(
            resource_id=self.resource_id, rpc_address=self.rpc_address,
            data_address=self.data_address, slots_total=len(self.slots),
            slots_free=self.free_slots, metrics_url=self.metrics_url, pid=self.pid,
            registered_at_ms=self.registered_at_ms,
            registrations=self.history.registrations, tasks_running=len(self.metrics),
            task_failures=self.history.task_failures)


class DuplicateTaskExecutorError(UserError):
    """A TaskExecutor registered with the resource id of another one that is alive; the
    message names both and the fix (a resource id of its own, or waiting for the other)."""


def _connect(address: str, token: str | None, tls: TlsFiles | None = None
             ) -> tuple[grpc.Channel, taskexecutor_pb2_grpc.TaskExecutorServiceStub]:
    channel = create_channel(address, token, tls=tls)
    return channel, taskexecutor_pb2_grpc.TaskExecutorServiceStub(channel)


if TYPE_CHECKING:
    # The stubs make the interceptor generic in its messages; the class itself is not.
    _UnaryUnaryInterceptor = grpc.UnaryUnaryClientInterceptor[Message, Message]
else:
    _UnaryUnaryInterceptor = grpc.UnaryUnaryClientInterceptor


class RpcOutcomeInterceptor(_UnaryUnaryInterceptor):
    """Hands the status code of every finished unary call to ``report`` (on the gRPC thread
    that completes it), so that whoever makes calls to a TaskExecutor (the scheduler, the
    checkpoint coordinator) feeds its reachability without knowing about it."""

    def __init__(self, report: Callable[[grpc.StatusCode | None], None]) -> None:
        self._report = report

    def intercept_unary_unary(
            self,
            continuation: Callable[[grpc.ClientCallDetails, Message], grpc.CallFuture[Message]],
            client_call_details: grpc.ClientCallDetails, request: Message
            ) -> grpc.CallFuture[Message]:
        call = continuation(client_call_details, request)
        # The callback is handed the call itself (grpc's stubs type it as a plain Future).
        call.add_done_callback(lambda _: self._report(call.code()))
        return call


class ResourceManager:
    """Slot pool and TaskExecutor registry.

    ``on_lost(resource_id, reason_code, message)`` is called when a TaskExecutor goes away;
    ``on_slots_available()`` when new slots appear. ``clock`` (seconds, monotonic) decides
    heartbeat timeouts; ``connect(address, token)`` returns the channel and stub to a
    TaskExecutor (lazily connected: registering does no I/O).

    With ``dispatch`` (runs a function on the thread that owns this manager) and a
    ``rpc_failure_threshold`` other than -1, the outcome of every call through a
    TaskExecutor's stub reaches :meth:`rpc_outcome`, and that many calls in a row that
    cannot reach it, at least ``heartbeat_interval`` apart, remove it.

    Example:
        >>> from weir.proto import jobmaster_pb2
        >>> rm = ResourceManager(None, 10.0, lambda *lost: None, lambda: None)
        >>> record = rm.register(jobmaster_pb2.RegisterTaskExecutorRequest(
        ...     resource_id="te-1", rpc_address="127.0.0.1:1", num_slots=2, instance_id="a"))
        >>> rm.free_slots(), len(record.registration_id) > 0
        (2, True)
        >>> rm.close()
    """

    def __init__(self, token: str | None, heartbeat_timeout: float,
                 on_lost: Callable[[ResourceId, common_pb2.FailureReason, str], None],
                 on_slots_available: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic,
                 connect: Callable[[str, str | None], tuple[
                     grpc.Channel, taskexecutor_pb2_grpc.TaskExecutorServiceStub]] | None = None,
                 tls: TlsFiles | None = None, *,
                 rpc_failure_threshold: int = DISABLED, heartbeat_interval: float = 1.0,
                 dispatch: Callable[[Callable[[], None]], object] | None = None) -> None:
        self._token = token
        self._timeout = heartbeat_timeout
        self._rpc_failure_threshold = rpc_failure_threshold
        self._interval = heartbeat_interval
        self._dispatch = dispatch
        self._on_lost = on_lost
        self._on_slots_available = on_slots_available
        self._clock = clock
        self._connect = connect or functools.partial(_connect, tls=tls)
        self.task_executors: dict[ResourceId, TaskExecutorRecord] = {}
        self._histories: dict[ResourceId, TaskExecutorHistory] = {}
        self._departing = False

    def register(self, request: jobmaster_pb2.RegisterTaskExecutorRequest) -> TaskExecutorRecord:
        """Register a TaskExecutor and offer its slots; returns the new registration.

        Raises DuplicateTaskExecutorError, and changes nothing, when another process holds
        the resource id and is alive.
        """
        resource_id = ResourceId(request.resource_id)
        old = self.task_executors.get(resource_id)
        if old is not None:
            silent = self._clock() - old.last_heartbeat
            if request.instance_id and request.instance_id == old.instance_id:
                # The same process again (its heartbeat stream broke): start over cleanly.
                self.remove(resource_id, common_pb2.TASK_EXECUTOR_LOST,
                            "it registered again (its heartbeat stream ended)")
            elif silent > self._timeout:
                self.remove(resource_id, common_pb2.HEARTBEAT_TIMEOUT,
                            f"no heartbeat for {silent:.1f} s, and another process "
                            "registered with its resource id")
            else:
                msg = (f"a TaskExecutor with resource id '{request.resource_id}' is already "
                       f"registered and alive ({old.rpc_address}, pid {old.pid}, last "
                       f"heartbeat {silent:.1f} s ago): give every TaskExecutor its own "
                       "taskmanager.resource-id, or start this one once the other has "
                       f"stopped (or sent no heartbeat for heartbeat.timeout, "
                       f"{self._timeout:g} s)")
                raise DuplicateTaskExecutorError(msg)
        channel, stub = self._connect(request.rpc_address, self._token)
        record = TaskExecutorRecord(
            resource_id=resource_id, rpc_address=request.rpc_address,
            data_address=request.data_address, metrics_url=request.metrics_url,
            pid=request.pid,
            slots=[Slot(resource_id, i) for i in range(request.num_slots)],
            channel=channel, stub=stub, last_heartbeat=self._clock(),
            instance_id=request.instance_id,
            local_state={(JobId(e.job_id), e.owner, CheckpointId(e.checkpoint_id))
                         for e in request.local_state},
            rpc_failures=RpcFailureThreshold(
                self._rpc_failure_threshold, round(self._interval * 1000),
                clock=lambda: round(self._clock() * 1000)))
        if self._dispatch is not None and self._rpc_failure_threshold != DISABLED:
            # Every call the scheduler and the checkpoint coordinator make through this stub
            # then tells whether the TaskExecutor can still be reached.
            record.stub = taskexecutor_pb2_grpc.TaskExecutorServiceStub(grpc.intercept_channel(
                channel, RpcOutcomeInterceptor(self._reporter(record))))
        record.history = self._history(resource_id)
        record.history.registrations += 1
        self.task_executors[record.resource_id] = record
        log.info("TaskExecutor %s registered (%s, %d slots)", record.resource_id,
                 record.rpc_address, request.num_slots)
        self._on_slots_available()
        return record

    def heartbeat(self, resource_id: ResourceId, message: jobmaster_pb2.TaskExecutorHeartbeat
                  ) -> bool:
        """Note a heartbeat; False (and ignored) unless it is of the current registration.
        One reporting the TaskExecutor unhealthy removes it (and is False too: its heartbeat
        stream ends)."""
        record = self.task_executors.get(resource_id)
        if record is None or message.registration_id != record.registration_id:
            return False
        if message.unhealthy_reason:
            # Its slots must not be offered again, and the tasks it runs cannot be served
            # by it (a dead data server): the same as losing it, with its own reason.
            self.remove(resource_id, common_pb2.TASK_EXECUTOR_LOST,
                        f"it reported itself unhealthy: {message.unhealthy_reason}")
            return False
        record.last_heartbeat = self._clock()
        record.metrics = {ExecutionAttemptId(m.attempt_id): m for m in message.task_metrics}
        return True

    def _history(self, resource_id: ResourceId) -> TaskExecutorHistory:
        history = self._histories.pop(resource_id, None) or TaskExecutorHistory()
        self._histories[resource_id] = history  # now the newest
        while len(self._histories) > HISTORIES_KEPT:
            del self._histories[next(iter(self._histories))]
        return history

    def note_task_failure(self, resource_id: ResourceId) -> None:
        """A task deployed to ``resource_id`` failed there (an unknown id is ignored)."""
        record = self.task_executors.get(resource_id)
        if record is not None:
            record.history.task_failures += 1

    def _reporter(self, record: TaskExecutorRecord) -> Callable[[grpc.StatusCode | None], None]:
        """Where ``record``'s calls report their outcome: any thread, handed to the owner's."""
        dispatch = self._dispatch
        assert dispatch is not None
        resource_id, registration_id = record.resource_id, record.registration_id

        def report(code: grpc.StatusCode | None) -> None:
            try:
                dispatch(lambda: self.rpc_outcome(resource_id, registration_id, code))
            except Exception:  # a full main queue: losing one outcome only delays a
                # verdict, and a gRPC callback thread must not raise.
                log.debug("dropped the outcome of a call to %s", resource_id)

        return report

    def rpc_outcome(self, resource_id: ResourceId, registration_id: str,
                    code: grpc.StatusCode | None) -> None:
        """Note how a call to a TaskExecutor ended (status ``code``; None: OK); the call that
        completes ``heartbeat.rpc-failure-threshold`` unreachable ones in a row removes it.
        Outcomes of a replaced registration are ignored: its calls went to another process."""
        record = self.task_executors.get(resource_id)
        if record is None or record.registration_id != registration_id or \
                record.rpc_failures is None:
            return
        failures = record.rpc_failures
        if failures.record(classify(code)):
            name = code.name if code is not None else "OK"
            self.remove(resource_id, common_pb2.TASK_EXECUTOR_LOST,
                        f"{failures.failures} calls to it in a row could not reach it "
                        f"({name}; heartbeat.rpc-failure-threshold {failures.threshold})")

    def check_heartbeats(self) -> None:
        now = self._clock()
        for record in list(self.task_executors.values()):
            silent = now - record.last_heartbeat
            if silent > self._timeout:
                self.remove(record.resource_id, common_pb2.HEARTBEAT_TIMEOUT,
                            f"no heartbeat for {silent:.1f} s (heartbeat.timeout "
                            f"{self._timeout:.0f} s)")

    def disconnect(self, resource_id: ResourceId, registration_id: str, reason: str) -> bool:
        """The TaskExecutor ``resource_id`` is shutting down (``reason``, e.g. "SIGTERM"):
        remove it now, its tasks failing over as for a lost one. Returns False, changing
        nothing, unless ``registration_id`` is its current registration (a replaced
        registration must not remove its successor; an unknown one is gone already)."""
        record = self.task_executors.get(resource_id)
        if record is None or record.registration_id != registration_id:
            return False
        reason = " ".join(reason.split())[:MAX_REASON_CHARS] or "no reason given"
        self._drop(resource_id, common_pb2.TASK_EXECUTOR_LOST,
                   f"TaskExecutor {resource_id} ({record.rpc_address}) shut down ({reason})",
                   departure=True)
        return True

    def expect_departures(self) -> None:
        """The TaskExecutors are about to be stopped on purpose (an in-process cluster
        shutting down): their going is logged as such, not as a loss."""
        self._departing = True

    def remove(self, resource_id: ResourceId, reason: common_pb2.FailureReason, message: str
               ) -> None:
        """Remove a TaskExecutor that was lost (``message`` says how) and fail over its
        tasks; an unknown one is ignored."""
        record = self.task_executors.get(resource_id)
        if record is not None:
            self._drop(resource_id, reason, f"TaskExecutor {resource_id} "
                       f"({record.rpc_address}) was lost: {message}")

    def _drop(self, resource_id: ResourceId, reason: common_pb2.FailureReason, message: str,
              departure: bool = False) -> None:
        record = self.task_executors.pop(resource_id)
        if self._departing:
            log.info("TaskExecutor %s (%s) stopped", resource_id, record.rpc_address)
        elif departure:
            log.info("%s", message)
        else:
            log.warning("%s", message)
        record.channel.close()
        self._on_lost(resource_id, reason, message)

    def total_slots(self) -> int:
        return sum(len(r.slots) for r in self.task_executors.values())

    def free_slots(self) -> int:
        return sum(r.free_slots for r in self.task_executors.values())

    def allocate(self, job_id: JobId, count: int, spread: bool,
                 preferred: list[ResourceId | None] | None = None) -> list[Slot] | None:
        """``count`` free slots for ``job_id``, or None (nothing allocated) if not enough.

        ``preferred[i]`` names the TaskExecutor slot i should be on if it has a free slot
        (it holds that slot's task-local state); the other slots are chosen as usual.
        """
        if self.free_slots() < count:
            return None
        chosen: list[Slot | None] = [None] * count
        for i, resource_id in enumerate((preferred or [])[:count]):
            record = self.task_executors.get(resource_id) if resource_id else None
            slot = next((s for s in record.slots if s.job_id is None), None) \
                if record is not None else None
            if slot is not None:
                slot.job_id = job_id
                chosen[i] = slot
        records = sorted(self.task_executors.values(), key=lambda r: r.resource_id)
        for i in range(count):
            if chosen[i] is not None:
                continue
            if spread:
                # Round robin over TaskExecutors, most free slots first, as Flink's
                # cluster.evenly-spread-out-slots.
                records.sort(key=lambda r: -r.free_slots)
            slot = next(s for r in records for s in r.slots if s.job_id is None)
            slot.job_id = job_id
            chosen[i] = slot
        return [slot for slot in chosen if slot is not None]

    def release(self, job_id: JobId) -> None:
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

    def holders(self, job_id: JobId, owner: str, checkpoint_id: CheckpointId
                ) -> list[ResourceId]:
        """TaskExecutors that offered a local copy of ``owner``'s state in that checkpoint."""
        return sorted(r.resource_id for r in self.task_executors.values()
                      if (job_id, owner, checkpoint_id) in r.local_state)

    def get(self, resource_id: ResourceId) -> TaskExecutorRecord | None:
        return self.task_executors.get(resource_id)

    def close(self) -> None:
        for record in self.task_executors.values():
            record.channel.close()
        self.task_executors.clear()
