"""Client side of the JobMaster's Dispatcher service: submit, watch, cancel, collect results.

Example:
    >>> from weir.client.cluster_client import JobMasterClient
    >>> client = JobMasterClient("127.0.0.1:6123")   # no call is made until used
    >>> client.address
    '127.0.0.1:6123'
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import Message

from weir.core.errors import JobExecutionError, UserError
from weir.core.execution import JobClient
from weir.core.ids import JobId
from weir.core.records import Elements
from weir.core.rpc import create_channel, translate_rpc_error
from weir.core.tls import TlsFiles
from weir.operators.sinks.collect import from_ipc
from weir.proto import (
    checkpoint_pb2,
    common_pb2,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    jobgraph_pb2,
    jobmaster_pb2,
)

TERMINAL_JOB_STATES = {common_pb2.JOB_FINISHED, common_pb2.JOB_FAILED, common_pb2.JOB_CANCELED}


def job_status_name(status: common_pb2.JobStatus) -> str:
    """``JOB_RUNNING`` -> ``RUNNING``."""
    return common_pb2.JobStatus.Name(status).removeprefix("JOB_")


def state_name(state: common_pb2.ExecutionState) -> str:
    return common_pb2.ExecutionState.Name(state)


#: How long a client waits for a savepoint (the JobMaster ends it sooner: twice the
#: checkpoint timeout at most, 10 minutes by default).
SAVEPOINT_TIMEOUT_S = 3600.0


class JobMasterClient:
    """A connection to one JobMaster. Every call has a timeout; errors become UserErrors."""

    def __init__(self, address: str, token: str | None = None, timeout: float = 60.0,
                 tls: TlsFiles | None = None) -> None:
        self.address = address
        self._token = token
        self._tls = tls
        self._timeout = timeout
        self._channel: grpc.Channel | None = None
        self._stub: dispatcher_pb2_grpc.DispatcherStub | None = None

    @property
    def stub(self) -> dispatcher_pb2_grpc.DispatcherStub:
        if self._stub is None:
            self._channel = create_channel(self.address, self._token, tls=self._tls)
            self._stub = dispatcher_pb2_grpc.DispatcherStub(self._channel)
        return self._stub

    def _call(self, method: str, request: Message, timeout: float | None = None) -> Any:
        """Call the Dispatcher's ``method``: its response (the generated stubs are untyped:
        callers name the response type). Raises the UserError a failed call means."""
        try:
            return getattr(self.stub, method)(request, timeout=timeout or self._timeout,
                                              wait_for_ready=False)
        except grpc.RpcError as err:
            raise translate_rpc_error(err, self.address) from None

    def submit_job(self, graph: jobgraph_pb2.JobGraph) -> JobId:
        response: dispatcher_pb2.SubmitJobResponse = self._call(
            "SubmitJob", dispatcher_pb2.SubmitJobRequest(job_graph=graph))
        return JobId(response.job_id)

    def list_jobs(self) -> list[jobmaster_pb2.JobSummary]:
        response: dispatcher_pb2.ListJobsResponse = self._call(
            "ListJobs", dispatcher_pb2.ListJobsRequest())
        return list(response.jobs)

    def job_details(self, job_id: JobId) -> jobmaster_pb2.JobDetails:
        details: jobmaster_pb2.JobDetails = self._call(
            "GetJobDetails", dispatcher_pb2.JobIdRequest(job_id=job_id))
        return details

    def checkpoints(self, job_id: JobId) -> dispatcher_pb2.CheckpointHistory:
        history: dispatcher_pb2.CheckpointHistory = self._call(
            "GetCheckpoints", dispatcher_pb2.JobIdRequest(job_id=job_id))
        return history

    def cancel_job(self, job_id: JobId) -> None:
        self._call("CancelJob", dispatcher_pb2.JobIdRequest(job_id=job_id))

    def trigger_savepoint(self, job_id: JobId, target_directory: str = "",
                          savepoint_format: checkpoint_pb2.SavepointFormat =
                          checkpoint_pb2.SAVEPOINT_CANONICAL, terminate: bool = False,
                          drain: bool = False) -> str:
        """Take a savepoint (``terminate``: stop the job with it); returns its directory.
        Waits as long as the JobMaster does (it bounds the savepoint by the checkpoint
        timeout); a failed savepoint raises a UserError saying why."""
        request = jobmaster_pb2.SavepointRequest(
            job_id=job_id, target_directory=target_directory, format=savepoint_format,
            terminate=terminate, drain=drain)
        response: dispatcher_pb2.SavepointResponse = self._call(
            "TriggerSavepoint", request, timeout=SAVEPOINT_TIMEOUT_S)
        return response.path

    def rescale_job(self, job_id: JobId, parallelism: int,
                    per_operator: dict[str, int] | None = None) -> jobmaster_pb2.JobChange:
        """Redeploy the job at another parallelism from a checkpoint taken now."""
        request = dispatcher_pb2.RescaleRequest(job_id=job_id, parallelism=parallelism,
                                               operator_parallelism=per_operator or {})
        change: jobmaster_pb2.JobChange = self._call("RescaleJob", request,
                                                     timeout=SAVEPOINT_TIMEOUT_S)
        return change

    def update_job(self, job_id: JobId, graph: jobgraph_pb2.JobGraph,
                   allow_non_restored_state: bool = False) -> jobmaster_pb2.JobChange:
        """Replace the running job's program by ``graph`` (hot update), keeping its state
        (matched by operator uid)."""
        request = dispatcher_pb2.UpdateJobRequest(
            job_id=job_id, job_graph=graph, allow_non_restored_state=allow_non_restored_state)
        change: jobmaster_pb2.JobChange = self._call("UpdateJob", request,
                                                     timeout=SAVEPOINT_TIMEOUT_S)
        return change

    def dispose_savepoint(self, path: str) -> None:
        self._call("DisposeSavepoint", dispatcher_pb2.DisposeSavepointRequest(path=path),
                   timeout=SAVEPOINT_TIMEOUT_S)

    def cluster_overview(self, timeout: float | None = None) -> dispatcher_pb2.ClusterOverview:
        overview: dispatcher_pb2.ClusterOverview = self._call(
            "GetClusterOverview", dispatcher_pb2.ClusterOverviewRequest(), timeout=timeout)
        return overview

    def fetch_collect(self, job_id: JobId, wait_ms: int = 1000,
                      max_batches: int = 16) -> dispatcher_pb2.FetchCollectResponse:
        request = dispatcher_pb2.FetchCollectRequest(job_id=job_id, wait_ms=wait_ms,
                                                    max_batches=max_batches)
        response: dispatcher_pb2.FetchCollectResponse = self._call(
            "FetchCollectResults", request, timeout=self._timeout + wait_ms / 1e3)
        return response

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None


def failure_text(details: jobmaster_pb2.JobDetails) -> str:
    failure = details.failure
    if not failure.message:
        return "no failure recorded"
    reason = common_pb2.FailureReason.Name(failure.reason)
    where = f" in {failure.task}" if failure.task else ""
    return f"{reason}{where}: {failure.message}"


class ClusterJobClient(JobClient):
    """Handle of a submitted job: status, cancellation, waiting and collected results."""

    def __init__(self, client: JobMasterClient, job_id: JobId,
                 on_done: list[Callable[[], None]] | None = None,
                 show_progress: bool = False) -> None:
        self.client = client
        self.job_id: JobId = job_id
        self._on_done = list(on_done or [])
        self._done_lock = threading.Lock()
        #: The job's status once :meth:`wait` or :meth:`collect` saw it end.
        self._final_status: str | None = None
        self._progress: _ProgressPrinter | None = (
            _ProgressPrinter(self) if show_progress else None)

    def status_name(self) -> str:
        if self._final_status is not None:
            # An in-process cluster is gone once its job ended: answer from memory.
            return self._final_status
        return job_status_name(self.client.job_details(self.job_id).summary.status)

    def cancel_job(self) -> None:
        self.client.cancel_job(self.job_id)

    def savepoint(self, directory: str | None, terminate: bool, drain: bool) -> str:
        return self.client.trigger_savepoint(self.job_id, directory or "",
                                             terminate=terminate, drain=drain)

    def wait(self, timeout: float | None = None, poll_interval: float = 0.2) -> (
            jobmaster_pb2.JobDetails):
        """Block until the job ends; raises JobExecutionError unless it FINISHED."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._progress:
            self._progress.start()
        try:
            while True:
                details = self.client.job_details(self.job_id)
                if details.summary.status in TERMINAL_JOB_STATES:
                    self._final_status = job_status_name(details.summary.status)
                    break
                if deadline is not None and time.monotonic() > deadline:
                    msg = f"job {self.job_id} did not end within {timeout} s"
                    raise TimeoutError(msg)
                time.sleep(poll_interval)
        finally:
            self._finish()
        self._raise_unless_finished(details)
        return details

    def _raise_unless_finished(self, details: jobmaster_pb2.JobDetails) -> None:
        if details.summary.status != common_pb2.JOB_FINISHED:
            raise JobExecutionError(self.job_id, job_status_name(details.summary.status),
                                    failure_text(details))

    def collect(self, limit: int | None = None) -> Iterator[Any]:
        """Records of the job's collect sink, as they arrive; ends when the job finished."""
        if self._progress:
            self._progress.start()
        count = 0
        try:
            while True:
                response = self.client.fetch_collect(self.job_id)
                for data in response.arrow_ipc:
                    for batch in from_ipc(data):
                        for record in Elements.from_arrow(batch).records():
                            yield record
                            count += 1
                            if limit is not None and count >= limit:
                                return
                if response.end_of_results:
                    if response.status in TERMINAL_JOB_STATES:
                        self._final_status = job_status_name(response.status)
                    if response.status != common_pb2.JOB_FINISHED:
                        details = self.client.job_details(self.job_id)
                        self._raise_unless_finished(details)
                    return
        finally:
            self.close()

    def close(self) -> None:
        """Cancel the job if it still runs (an abandoned collect), then run cleanups."""
        try:
            details = self.client.job_details(self.job_id)
            if details.summary.status not in TERMINAL_JOB_STATES:
                self.client.cancel_job(self.job_id)
        except UserError:
            pass
        self._finish()

    def _finish(self) -> None:
        if self._progress:
            self._progress.stop()
        with self._done_lock:
            callbacks, self._on_done = self._on_done, []
        for callback in callbacks:
            callback()


class _ProgressPrinter:
    """Prints one status line every few seconds while a job runs (stderr)."""

    def __init__(self, job: ClusterJobClient, interval: float = 2.0) -> None:
        self._job = job
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(self._interval):
            try:
                details = self._job.client.job_details(self._job.job_id)
            except UserError:
                continue
            print(progress_line(details, time.monotonic() - started), file=sys.stderr,
                  flush=True)


def progress_line(details: jobmaster_pb2.JobDetails, elapsed: float) -> str:
    running = finished = 0
    records_in = records_out = 0
    for vertex in details.vertices:
        for sub in vertex.subtasks:
            running += sub.state == common_pb2.RUNNING
            finished += sub.state == common_pb2.FINISHED
    # Vertices are ordered upstream first; records entering a source task were read by it.
    sources = [v for v in details.vertices if v.name.startswith("Source")]
    for vertex in sources or details.vertices[:1]:
        records_out += sum(s.metrics.records_in for s in vertex.subtasks)
    last = details.vertices[-1] if details.vertices else None
    if last is not None:
        records_in = sum(s.metrics.records_in for s in last.subtasks)
    total = details.summary.tasks_total
    recovery = ""
    if details.summary.restarts:
        recovery = f"; restarts {details.summary.restarts}"
    if details.last_checkpoint_id:
        recovery += f"; checkpoint {details.last_checkpoint_id}"
    return (f"[{elapsed:6.1f}s] job {details.summary.job_id[:8]} "
            f"{job_status_name(details.summary.status)}: tasks {running} running, "
            f"{finished}/{total} finished; {records_out:,} records read, "
            f"{records_in:,} reached the last operator{recovery}")
