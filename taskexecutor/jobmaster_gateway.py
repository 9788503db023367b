"""The TaskExecutor's calls to the JobMaster's JobMasterGateway service (and its one call
to the Dispatcher, the liveness probe). Every unary call has a timeout."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import grpc

from weir.core import rpc
from weir.core.errors import InternalError
from weir.core.ids import CheckpointId, ExecutionAttemptId, JobId
from weir.core.rpc import SMALL_MESSAGE_BYTES, create_channel, keep_until_done
from weir.core.tls import TlsFiles
from weir.proto import (
    checkpoint_pb2,
    common_pb2,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    jobgraph_pb2,
    jobmaster_pb2,
    jobmaster_pb2_grpc,
)

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 10.0
#: Room left in a CollectBatch for its other fields (ids, flags), so the payload plus these
#: stay within one message.
COLLECT_ENVELOPE_BYTES = 64 * 1024
#: Longest failure message a task reports (the traceback is cut to 8000 characters already).
MAX_ERROR_MESSAGE_CHARS = 64 * 1024


def collect_payload_limit() -> int:
    """Bytes of Arrow IPC one collect message may carry: the RPC message limit less the
    envelope, read at call time so that a lowered :data:`weir.core.rpc.MAX_MESSAGE_BYTES`
    applies at once."""
    return max(1, rpc.MAX_MESSAGE_BYTES - COLLECT_ENVELOPE_BYTES)


class HeartbeatCall(Protocol):
    """The heartbeat stream of one registration, as the TaskExecutor uses the gRPC call
    (grpc's stubs leave ``cancel`` untyped)."""

    def __iter__(self) -> Iterator[jobmaster_pb2.JobMasterHeartbeat]:
        """The JobMaster's heartbeats; raises grpc.RpcError when the stream breaks."""

    def cancel(self) -> bool:
        """Close the stream (any thread)."""


class JobMasterGateway:
    """Thread-safe wrapper of the JobMasterGateway stub used by the TaskExecutor and its
    tasks."""

    def __init__(self, address: str, token: str | None, tls: TlsFiles | None = None) -> None:
        self.address = address
        self._token = token
        self._tls = tls
        self.channel = create_channel(address, token, tls=tls)
        # The generated stubs carry no annotations: their calls answer Any.
        self.stub = jobmaster_pb2_grpc.JobMasterGatewayStub(self.channel)

    def register(self, request: jobmaster_pb2.RegisterTaskExecutorRequest,
                 timeout: float = RPC_TIMEOUT_S) -> jobmaster_pb2.RegisterTaskExecutorResponse:
        response: jobmaster_pb2.RegisterTaskExecutorResponse = self.stub.RegisterTaskExecutor(
            request, timeout=timeout)
        return response

    def heartbeats(self, outgoing: Iterator[jobmaster_pb2.TaskExecutorHeartbeat]
                   ) -> HeartbeatCall:
        """Open the heartbeat stream of the current registration (heartbeat thread): sends
        ``outgoing``; the call iterates over the JobMaster's heartbeats, ends with
        grpc.RpcError when the stream breaks, and ``cancel()`` closes it."""
        call: HeartbeatCall = self.stub.Heartbeat(outgoing)
        return call

    def probe(self, deadline: float) -> grpc.StatusCode:
        """Ask the JobMaster something harmless, over a connection of its own, within
        ``deadline`` seconds; returns the call's status.

        The heartbeat stream went silent, and the stream's connection may be the dead part
        (half-open after the JobMaster's host went away, or cut by a middlebox) while the
        address itself refuses at once. gRPC shares one connection among channels with
        equal arguments, so this channel's smaller send limit (a query is all it sends)
        also keeps it off the heartbeat's connection; closing it after each probe makes the
        next one connect afresh instead of inheriting a reconnect back-off. The question is
        the Dispatcher's cluster overview: served on the same port, answered by the
        JobMaster's main thread.
        """
        channel = create_channel(self.address, self._token, max_send_bytes=SMALL_MESSAGE_BYTES,
                                 tls=self._tls)
        try:
            stub = dispatcher_pb2_grpc.DispatcherStub(channel)
            stub.GetClusterOverview(dispatcher_pb2.ClusterOverviewRequest(), timeout=deadline)
        except grpc.RpcError as err:
            return err.code()
        finally:
            channel.close()
        return grpc.StatusCode.OK

    def disconnect(self, resource_id: str, registration_id: str, reason: str,
                   timeout: float) -> None:
        """Tell the JobMaster this TaskExecutor shuts down (``reason``), waiting at most
        ``timeout`` seconds for it to have failed over the tasks here. Raises
        grpc.RpcError when it cannot be told in time."""
        self.stub.DisconnectTaskExecutor(jobmaster_pb2.DisconnectTaskExecutorRequest(
            resource_id=resource_id, registration_id=registration_id, reason=reason),
            timeout=timeout)

    def update_task_state(self, update: jobmaster_pb2.TaskExecutionStateUpdate,
                          attempts: int = 5) -> bool:
        """Report a state change; retried a few times because the JobMaster must learn
        terminal states. Returns False if it could not be delivered."""
        if len(update.error.message) > MAX_ERROR_MESSAGE_CHARS:
            # An exception's text is unbounded (it may print a whole batch); past the
            # JobMaster's limit for this RPC the terminal state would never arrive.
            update.error.message = (update.error.message[:MAX_ERROR_MESSAGE_CHARS]
                                    + " ... (truncated)")
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
                       callback: Callable[[jobmaster_pb2.SplitResponse | None,
                                           BaseException | None], None],
                       checkpoint_passed: int = 0) -> None:
        """Ask the enumerator for splits without blocking; ``callback`` runs on an RPC
        thread. ``checkpoint_passed``: the newest checkpoint this reader emitted the barrier
        of (the enumerator hands out nothing to a reader behind its snapshot)."""
        request = jobmaster_pb2.SplitRequest(job_id=tdd.job_id, vertex_id=tdd.vertex_id,
                                             subtask_index=tdd.subtask_index,
                                             attempt_id=tdd.attempt_id,
                                             checkpoint_passed=checkpoint_passed)
        future = self.stub.RequestSplits.future(request, timeout=RPC_TIMEOUT_S * 3)

        def done(f: grpc.Future[jobmaster_pb2.SplitResponse]) -> None:
            try:
                callback(f.result(), None)
            except grpc.RpcError as err:
                callback(None, ConnectionError(
                    f"split request to the JobMaster failed: {err.code()}: {err.details()}"))

        keep_until_done(future, done)

    def push_collect(self, job_id: JobId, subtask_index: int, attempt_id: ExecutionAttemptId,
                     data: bytes, end: bool, cancelled: threading.Event) -> None:
        """Hand one payload of results to the JobMaster (task thread); blocks, and so
        backpressures the task, while the JobMaster's buffer is full.

        ``data`` is at most :func:`collect_payload_limit` bytes (the collect sink splits
        larger batches). Raises InternalError for a larger payload, and ConnectionError
        when the task is cancelled meanwhile, when the JobMaster cannot be reached, or when
        it refuses the message as too large (its limit is lower than this process's).
        """
        limit = collect_payload_limit()
        if len(data) > limit:
            msg = (f"a collect payload of {len(data):,} bytes exceeds the {limit:,} bytes one "
                   "message may carry: the collect sink must split it")
            raise InternalError(msg)
        batch = jobmaster_pb2.CollectBatch(job_id=job_id, subtask_index=subtask_index,
                                           attempt_id=attempt_id, arrow_ipc=data,
                                           end_of_stream=end)
        while True:
            try:
                ack = self.stub.PushCollectBatch(batch, timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as err:
                if cancelled.is_set():
                    msg = "cancelled while sending results"
                    raise ConnectionError(msg) from None
                if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    msg = (f"the JobMaster refused a result message of {len(data):,} bytes as "
                           f"too large ({err.details()}): its gRPC message limit is lower "
                           f"than this TaskExecutor's {rpc.MAX_MESSAGE_BYTES:,} bytes; run "
                           "the same weir version on every daemon")
                    raise ConnectionError(msg) from None
                msg = f"sending results to the JobMaster failed: {err.details()}"
                raise ConnectionError(msg) from None
            if ack.accepted:
                return
            # The JobMaster waited for room before answering: asking again is no busy loop.
            if cancelled.is_set():
                msg = "cancelled while sending results"
                raise ConnectionError(msg)

    def acknowledge_checkpoint(self, job_id: JobId, attempt_id: ExecutionAttemptId,
                               checkpoint_id: CheckpointId,
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

    def decline_checkpoint(self, job_id: JobId, attempt_id: ExecutionAttemptId,
                           checkpoint_id: CheckpointId,
                           reason: checkpoint_pb2.CheckpointFailureReason, message: str
                           ) -> None:
        """Decline a checkpoint without blocking (any thread)."""
        keep_until_done(self.stub.DeclineCheckpoint.future(
            jobmaster_pb2.DeclineCheckpointRequest(
                job_id=job_id, attempt_id=attempt_id, checkpoint_id=checkpoint_id,
                reason=reason, message=message[:2000]), timeout=RPC_TIMEOUT_S))

    def report_end_of_data(self, job_id: JobId, attempt_id: ExecutionAttemptId) -> None:
        """A source read all its input (without blocking; any thread)."""
        keep_until_done(self.stub.ReportEndOfData.future(
            jobmaster_pb2.EndOfDataReport(job_id=job_id, attempt_id=attempt_id),
            timeout=RPC_TIMEOUT_S))

    def close(self) -> None:
        self.channel.close()
