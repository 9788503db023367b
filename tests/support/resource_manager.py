"""The JobMaster's resource manager without sockets or sleeps: connections to TaskExecutors
are :class:`FakeChannel` records and time is a :class:`~weir.core.clock.ManualClock`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from weir.core.clock import ManualClock
from weir.jobmaster.resource_manager import ResourceManager, TaskExecutorRecord
from weir.proto import jobmaster_pb2


@dataclass
class FakeChannel:
    """A channel to a TaskExecutor that only remembers being closed."""

    address: str = ""
    closed: bool = False

    def close(self) -> None:
        self.closed = True


@dataclass
class ResourceManagerHarness:
    """A ResourceManager (``rm``) on ``clock``; TaskExecutors it declares lost are appended
    to ``lost`` as (resource id, reason, message), the channels it opens to ``channels``.
    ``options`` go to the ResourceManager (e.g. ``rpc_failure_threshold``)."""

    timeout_s: float = 10.0
    clock: ManualClock = field(default_factory=ManualClock)
    options: dict[str, Any] = field(default_factory=dict)
    lost: list[tuple[str, int, str]] = field(default_factory=list)
    channels: list[FakeChannel] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rm = ResourceManager(None, self.timeout_s, lambda *lost: self.lost.append(lost),
                                  lambda: None, clock=lambda: self.clock() / 1000,
                                  connect=self._connect, **self.options)

    def _connect(self, address: str, token: str | None) -> tuple[FakeChannel, None]:
        self.channels.append(FakeChannel(address))
        return self.channels[-1], None

    def register(self, instance: str = "a", address: str = "127.0.0.1:1000", slots: int = 2,
                 resource_id: str = "te-1") -> TaskExecutorRecord:
        """TaskExecutor ``resource_id`` (process ``instance``) registers."""
        return self.rm.register(jobmaster_pb2.RegisterTaskExecutorRequest(
            resource_id=resource_id, rpc_address=address, num_slots=slots,
            instance_id=instance, pid=100))

    def heartbeat(self, registration_id: str, resource_id: str = "te-1") -> bool:
        return self.rm.heartbeat(resource_id, jobmaster_pb2.TaskExecutorHeartbeat(
            resource_id=resource_id, registration_id=registration_id))

    def outcome(self, record: TaskExecutorRecord, code: grpc.StatusCode | None) -> None:
        """A call to ``record``'s TaskExecutor ended with ``code`` (None: answered)."""
        self.rm.rpc_outcome(record.resource_id, record.registration_id, code)
