"""The JobMasterGateway service: what TaskExecutors call (registration, heartbeats, task
states, split requests, collect results, checkpoint reports, shutdown).

A thin layer: it turns each request into a call of :class:`~weir.jobmaster.daemon.JobMaster`
and the result into a response, and ends a call whose operation raised a domain error with
that error's status (``status_codes``). Handlers run on the gRPC server's threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import grpc

from weir.core.ids import ExecutionAttemptId, JobId, ResourceId
from weir.core.rpc import SMALL_MESSAGE_BYTES, method_limits
from weir.jobmaster.status_codes import domain_errors
from weir.proto import jobmaster_pb2, jobmaster_pb2_grpc

if TYPE_CHECKING:
    from weir.jobmaster.daemon import JobMaster

log = logging.getLogger(__name__)

#: Largest checkpoint acknowledgement: one subtask's keyed state handles travel as JSON (a
#: few hundred bytes a state file and key-group range), so an incremental RocksDB backend
#: with tens of thousands of files stays well inside.
ACKNOWLEDGE_MESSAGE_BYTES = 64 * 1024 * 1024


def request_limits() -> dict[str, int]:
    """What each JobMasterGateway RPC may receive (see weir.core.rpc.create_server).

    Collect batches carry bulk data and keep the server's limit (MAX_MESSAGE_BYTES; the
    collect path splits results under it). Checkpoint acknowledgements carry state handles,
    not state. Everything else (registration, heartbeats, task state updates, split
    requests) is control traffic.

    Example:
        >>> request_limits()["/weir.JobMasterGateway/Heartbeat"] == SMALL_MESSAGE_BYTES
        True
        >>> "/weir.JobMasterGateway/PushCollectBatch" in request_limits()
        False
    """
    service = jobmaster_pb2.DESCRIPTOR.services_by_name["JobMasterGateway"]
    return method_limits(service, SMALL_MESSAGE_BYTES, PushCollectBatch=None,
                         AcknowledgeCheckpoint=ACKNOWLEDGE_MESSAGE_BYTES)


def add_to_server(servicer: JobMasterGatewayServicer, server: grpc.Server) -> None:
    """Serve ``servicer`` on ``server`` (before it starts)."""
    jobmaster_pb2_grpc.add_JobMasterGatewayServicer_to_server(servicer, server)


class JobMasterGatewayServicer(jobmaster_pb2_grpc.JobMasterGatewayServicer):
    """The JobMasterGateway RPCs of one JobMaster.

    Example (what ``JobMaster.start`` does)::

        add_to_server(JobMasterGatewayServicer(jobmaster), server)
    """

    def __init__(self, jm: JobMaster) -> None:
        self._jm = jm

    def RegisterTaskExecutor(  # noqa: N802
            self, request: jobmaster_pb2.RegisterTaskExecutorRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.RegisterTaskExecutorResponse:
        with domain_errors(context):
            record = self._jm.register_task_executor(request)
        return jobmaster_pb2.RegisterTaskExecutorResponse(
            jobmaster_id=self._jm.jobmaster_id,
            heartbeat_interval_ms=int(self._jm.heartbeat_interval * 1000),
            heartbeat_timeout_ms=int(self._jm.heartbeat_timeout * 1000),
            registration_id=record.registration_id)

    def Heartbeat(  # noqa: N802
            self, request_iterator: Iterator[jobmaster_pb2.TaskExecutorHeartbeat],
            context: grpc.ServicerContext) -> Iterator[jobmaster_pb2.JobMasterHeartbeat]:
        """One TaskExecutor's stream: its first heartbeat attaches the stream to its
        registration; a reader thread notes each further one, and every heartbeat interval
        the JobMaster answers with the attempts the TaskExecutor is to cancel. The stream's
        end, however it comes, makes the TaskExecutor lost (unless a newer stream of it is
        attached by then)."""
        jm = self._jm
        try:
            first = next(request_iterator)
        except (StopIteration, grpc.RpcError):
            return
        resource_id = ResourceId(first.resource_id)
        with domain_errors(context):
            stream_id = jm.attach_heartbeats(first)
        context.add_callback(lambda: jm.heartbeats_ended(resource_id, stream_id))
        done = threading.Event()
        unknown: list[list[ExecutionAttemptId]] = [[]]

        def read() -> None:
            try:
                for message in request_iterator:
                    attempts = jm.heartbeat(resource_id, message)
                    if attempts is None:
                        log.info("ending the heartbeat stream of %s: its registration was "
                                 "replaced or removed", resource_id)
                        break
                    unknown[0] = attempts
            except Exception:  # the stream ended or broke: heartbeats_ended handles it
                log.debug("heartbeat stream of %s ended", resource_id)
            finally:
                done.set()

        reader = threading.Thread(target=read, name=f"heartbeat-{resource_id}", daemon=True)
        reader.start()
        while context.is_active() and not done.is_set() and not jm.stopped.is_set():
            attempts, unknown[0] = unknown[0], []
            yield jobmaster_pb2.JobMasterHeartbeat(jobmaster_id=jm.jobmaster_id,
                                                   unknown_attempts=attempts)
            done.wait(jm.heartbeat_interval)

    def UpdateTaskExecutionState(  # noqa: N802
            self, request: jobmaster_pb2.TaskExecutionStateUpdate,
            context: grpc.ServicerContext) -> jobmaster_pb2.Ack:
        self._jm.update_task_state(request)
        return jobmaster_pb2.Ack()

    def RequestSplits(  # noqa: N802
            self, request: jobmaster_pb2.SplitRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.SplitResponse:
        with domain_errors(context):
            return self._jm.request_splits(request)

    def PushCollectBatch(  # noqa: N802
            self, request: jobmaster_pb2.CollectBatch,
            context: grpc.ServicerContext) -> jobmaster_pb2.CollectAck:
        # A full buffer is an answer, not an error: RESOURCE_EXHAUSTED is what gRPC itself
        # reports for a message over the size limit, which retrying can never cure.
        with domain_errors(context):
            return jobmaster_pb2.CollectAck(accepted=self._jm.push_collect(request))

    def AcknowledgeCheckpoint(  # noqa: N802
            self, request: jobmaster_pb2.AcknowledgeCheckpointRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.Ack:
        self._jm.acknowledge_checkpoint(request)
        return jobmaster_pb2.Ack()

    def DeclineCheckpoint(  # noqa: N802
            self, request: jobmaster_pb2.DeclineCheckpointRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.Ack:
        self._jm.decline_checkpoint(request)
        return jobmaster_pb2.Ack()

    def ReportEndOfData(  # noqa: N802
            self, request: jobmaster_pb2.EndOfDataReport,
            context: grpc.ServicerContext) -> jobmaster_pb2.Ack:
        self._jm.report_end_of_data(JobId(request.job_id),
                                    ExecutionAttemptId(request.attempt_id))
        return jobmaster_pb2.Ack()

    def DisconnectTaskExecutor(  # noqa: N802
            self, request: jobmaster_pb2.DisconnectTaskExecutorRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.Ack:
        with domain_errors(context):
            self._jm.disconnect_task_executor(request)
        return jobmaster_pb2.Ack()
