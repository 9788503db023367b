"""The Dispatcher service: what clients call (submit, list, details, cancel, collect
results, overview, checkpoints, savepoints, rescale and update).

A thin layer: it turns each request into a call of :class:`~weir.jobmaster.daemon.JobMaster`
and the result into a response, and ends a call whose operation raised a domain error with
that error's status (``status_codes``). Handlers run on the gRPC server's threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from weir.core.ids import JobId
from weir.core.rpc import SMALL_MESSAGE_BYTES, method_limits
from weir.jobmaster.status_codes import domain_errors
from weir.proto import dispatcher_pb2, dispatcher_pb2_grpc, jobmaster_pb2

if TYPE_CHECKING:
    from weir.jobmaster.daemon import JobMaster

#: The longest a client's fetch of collect results waits for a batch.
MAX_FETCH_WAIT_MS = 30_000
#: Batches a fetch returns at most when the client names no number.
DEFAULT_FETCH_BATCHES = 16


def request_limits() -> dict[str, int]:
    """What each Dispatcher RPC may receive (see weir.core.rpc.create_server).

    A submitted or updated job's pickled JobGraph carries bulk data (functions may capture
    data) and keeps the server's limit (MAX_MESSAGE_BYTES); every other client request is
    a small query or command.

    Example:
        >>> request_limits()["/weir.Dispatcher/ListJobs"] == SMALL_MESSAGE_BYTES
        True
        >>> "/weir.Dispatcher/SubmitJob" in request_limits()
        False
    """
    service = dispatcher_pb2.DESCRIPTOR.services_by_name["Dispatcher"]
    return method_limits(service, SMALL_MESSAGE_BYTES, SubmitJob=None, UpdateJob=None)


def add_to_server(servicer: DispatcherServicer, server: grpc.Server) -> None:
    """Serve ``servicer`` on ``server`` (before it starts)."""
    dispatcher_pb2_grpc.add_DispatcherServicer_to_server(servicer, server)


class DispatcherServicer(dispatcher_pb2_grpc.DispatcherServicer):
    """The Dispatcher RPCs of one JobMaster.

    Example (what ``JobMaster.start`` does)::

        add_to_server(DispatcherServicer(jobmaster), server)
    """

    def __init__(self, jm: JobMaster) -> None:
        self._jm = jm

    def SubmitJob(  # noqa: N802
            self, request: dispatcher_pb2.SubmitJobRequest,
            context: grpc.ServicerContext) -> dispatcher_pb2.SubmitJobResponse:
        with domain_errors(context):
            return dispatcher_pb2.SubmitJobResponse(
                job_id=self._jm.submit_job(request.job_graph))

    def ListJobs(  # noqa: N802
            self, request: dispatcher_pb2.ListJobsRequest,
            context: grpc.ServicerContext) -> dispatcher_pb2.ListJobsResponse:
        return dispatcher_pb2.ListJobsResponse(jobs=self._jm.list_jobs())

    def GetJobDetails(  # noqa: N802
            self, request: dispatcher_pb2.JobIdRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.JobDetails:
        with domain_errors(context):
            return self._jm.job_details(JobId(request.job_id))

    def CancelJob(  # noqa: N802
            self, request: dispatcher_pb2.JobIdRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.Ack:
        with domain_errors(context):
            self._jm.cancel_job(JobId(request.job_id))
        return jobmaster_pb2.Ack()

    def FetchCollectResults(  # noqa: N802
            self, request: dispatcher_pb2.FetchCollectRequest,
            context: grpc.ServicerContext) -> dispatcher_pb2.FetchCollectResponse:
        wait_s = min(max(request.wait_ms, 0), MAX_FETCH_WAIT_MS) / 1000
        with domain_errors(context):
            return self._jm.fetch_collect(JobId(request.job_id),
                                          request.max_batches or DEFAULT_FETCH_BATCHES, wait_s)

    def GetClusterOverview(  # noqa: N802
            self, request: dispatcher_pb2.ClusterOverviewRequest,
            context: grpc.ServicerContext) -> dispatcher_pb2.ClusterOverview:
        return self._jm.cluster_overview()

    def GetCheckpoints(  # noqa: N802
            self, request: dispatcher_pb2.JobIdRequest,
            context: grpc.ServicerContext) -> dispatcher_pb2.CheckpointHistory:
        with domain_errors(context):
            return self._jm.checkpoint_history(JobId(request.job_id))

    def TriggerSavepoint(  # noqa: N802
            self, request: jobmaster_pb2.SavepointRequest,
            context: grpc.ServicerContext) -> dispatcher_pb2.SavepointResponse:
        with domain_errors(context):
            return dispatcher_pb2.SavepointResponse(path=self._jm.trigger_savepoint(request))

    def DisposeSavepoint(  # noqa: N802
            self, request: dispatcher_pb2.DisposeSavepointRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.Ack:
        with domain_errors(context):
            self._jm.dispose_savepoint(request.path)
        return jobmaster_pb2.Ack()

    def RescaleJob(  # noqa: N802
            self, request: dispatcher_pb2.RescaleRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.JobChange:
        with domain_errors(context):
            return self._jm.rescale_job(JobId(request.job_id), request.parallelism,
                                        dict(request.operator_parallelism))

    def UpdateJob(  # noqa: N802
            self, request: dispatcher_pb2.UpdateJobRequest,
            context: grpc.ServicerContext) -> jobmaster_pb2.JobChange:
        with domain_errors(context):
            return self._jm.update_job(JobId(request.job_id), request.job_graph,
                                       request.allow_non_restored_state)
