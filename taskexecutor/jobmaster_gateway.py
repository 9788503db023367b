"""The TaskExecutor's calls to the JobMaster. Every call has a timeout."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from weir.core.rpc import create_channel, keep_until_done
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2, jobmaster_pb2, jobmaster_pb2_grpc

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 10.0


class JobMasterGateway:
    """Thread-safe wrapper of the JobMaster stub used by the TaskExecutor and its tasks."""

    def __init__(self, address: str, token: str | None) -> None:
        self.address = address
        self.channel = create_channel(address, token)
        self.stub = jobmaster_pb2_grpc.JobMasterServiceStub(self.channel)

    def register(self, request: jobmaster_pb2.RegisterTaskExecutorRequest,
                 timeout: float = RPC_TIMEOUT_S) -> jobmaster_pb2.RegisterTaskExecutorResponse:
        return self.stub.RegisterTaskExecutor(request, timeout=timeout)

    def update_task_state(self, update: jobmaster_pb2.TaskExecutionStateUpdate,
                          attempts: int = 5) -> bool:
        """Report a state change; retried a few times because the JobMaster must learn
        terminal states. Returns False if it could not be delivered."""
        for attempt in range(attempts):
            try:
                self.stub.UpdateTaskExecutionState(update, timeout=RPC_TIMEOUT_S)
                return True
            except grpc.RpcError as err:
                log.warning("reporting %s of %s failed (%s), attempt %d",
                            common_pb2.ExecutionState.Name(update.state), update.attempt_id,
                            err.code(), attempt + 1)
                time.sleep(min(2.0, 0.2 * 2 ** attempt))
        return False

    def request_splits(self, tdd: jobgraph_pb2.TaskDeploymentDescriptor,
                       callback: Callable[[Any, BaseException | None], None],
                       checkpoint_passed: int = 0) -> None:
        """Ask the enumerator for splits without blocking; ``callback`` runs on an RPC
        thread. ``checkpoint_passed``: the newest checkpoint this reader emitted the barrier
        of (the enumerator hands out nothing to a reader behind its snapshot)."""
        request = jobmaster_pb2.SplitRequest(job_id=tdd.job_id, vertex_id=tdd.vertex_id,
                                             subtask_index=tdd.subtask_index,
                                             attempt_id=tdd.attempt_id,
                                             checkpoint_passed=checkpoint_passed)
        future = self.stub.RequestSplits.future(request, timeout=RPC_TIMEOUT_S * 3)

        def done(f: Any) -> None:
            try:
                callback(f.result(), None)
            except grpc.RpcError as err:
                callback(None, ConnectionError(
                    f"split request to the JobMaster failed: {err.code()}: {err.details()}"))

        keep_until_done(future, done)

    def push_collect(self, job_id: str, subtask_index: int, attempt_id: str, data: bytes,
                     end: bool, cancelled: threading.Event) -> None:
        """Hand results to the JobMaster; waits (and so backpressures) while its buffer is
        full. Gives up only when the task is cancelled."""
        batch = jobmaster_pb2.CollectBatch(job_id=job_id, subtask_index=subtask_index,
                                           attempt_id=attempt_id, arrow_ipc=data,
                                           end_of_stream=end)
        while True:
            try:
                self.stub.PushCollectBatch(batch, timeout=RPC_TIMEOUT_S)
                return
            except grpc.RpcError as err:
                if cancelled.is_set():
                    msg = "cancelled while sending results"
                    raise ConnectionError(msg) from None
                if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    msg = f"sending results to the JobMaster failed: {err.details()}"
                    raise ConnectionError(msg) from None

    def acknowledge_checkpoint(self, job_id: str, attempt_id: str, checkpoint_id: int,
                               state: checkpoint_pb2.TaskStateSnapshot,
                               metrics: checkpoint_pb2.CheckpointTaskMetrics) -> None:
        """Report a subtask's part of a checkpoint (upload thread; retried a few times: a
        lost acknowledgement costs the whole checkpoint)."""
        request = jobmaster_pb2.AcknowledgeCheckpointRequest(
            job_id=job_id, attempt_id=attempt_id, checkpoint_id=checkpoint_id, state=state,
            metrics=metrics)
        for attempt in range(3):
            try:
                self.stub.AcknowledgeCheckpoint(request, timeout=RPC_TIMEOUT_S)
                return
            except grpc.RpcError as err:
                log.warning("acknowledging checkpoint %d of %s failed (%s), attempt %d",
                            checkpoint_id, attempt_id, err.code(), attempt + 1)
                time.sleep(0.2 * 2 ** attempt)

    def decline_checkpoint(self, job_id: str, attempt_id: str, checkpoint_id: int,
                           reason: int, message: str) -> None:
        """Decline a checkpoint without blocking (any thread)."""
        keep_until_done(self.stub.DeclineCheckpoint.future(
            jobmaster_pb2.DeclineCheckpointRequest(
                job_id=job_id, attempt_id=attempt_id, checkpoint_id=checkpoint_id,
                reason=reason, message=message[:2000]), timeout=RPC_TIMEOUT_S))

    def report_end_of_data(self, job_id: str, attempt_id: str) -> None:
        """A source read all its input (without blocking; any thread)."""
        keep_until_done(self.stub.ReportEndOfData.future(
            jobmaster_pb2.EndOfDataReport(job_id=job_id, attempt_id=attempt_id),
            timeout=RPC_TIMEOUT_S))

    def close(self) -> None:
        self.channel.close()
