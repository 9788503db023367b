"""The JobMaster daemon: gRPC service, dispatcher of jobs, resource manager, heartbeats,
and, with high availability, the job store its jobs are recovered from after a restart
(``high_availability``, ``job_recovery``).

Every piece of coordination state lives on the main thread (see ``main_thread``); RPC
handlers only hand work to it, except the collect path, whose buffer is thread-safe so
that a slow client never blocks the main thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import cloudpickle
import grpc
from prometheus_client import CollectorRegistry

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import ConfigError, StateError, StorageError, UserError
from weir.core.metric_names import JOB_METRICS, JOBMASTER_METRICS, families
from weir.core.metrics import CallbackCollector, MetricsServer
from weir.core.rpc import SMALL_MESSAGE_BYTES, create_server, method_limits
from weir.core.secrets import auth_token
from weir.core.tls import TlsFiles
from weir.jobmaster import options as jm_options
from weir.jobmaster.checkpointing import JobCheckpointing
from weir.jobmaster.collect import FETCH_ENVELOPE_BYTES, fetch_budget
from weir.jobmaster.high_availability import POINTER_NAME, JobStore, create_job_store
from weir.jobmaster.job_change import JobChangeRefusedError, rescaled_graph, updated_graph
from weir.jobmaster.job_recovery import JobRecovery
from weir.jobmaster.jobgraph_validation import JobGraphValidationError, validate_job_graph
from weir.jobmaster.main_thread import MainThreadExecutor
from weir.jobmaster.resource_manager import DuplicateTaskExecutorError, ResourceManager
from weir.jobmaster.savepoints import (
    SnapshotMismatchError,
    check_state_matches,
    dispose_savepoint,
    load_snapshot,
)
from weir.jobmaster.scheduler import JobScheduler
from weir.proto import checkpoint_pb2, common_pb2, jobmaster_pb2, jobmaster_pb2_grpc
from weir.shuffle.loader import load_shuffle_service_factory

log = logging.getLogger(__name__)


class JobExistsError(UserError):
    """A job was submitted with the id of a job the JobMaster knows."""


class JobNotStoredError(UserError):
    """High availability is on and a submitted job's graph could not be stored: the job
    was not submitted."""


#: How long a submission waits for its graph to be stored (high availability).
STORE_TIMEOUT_S = 120.0


#: Largest checkpoint acknowledgement: one subtask's keyed state handles travel as JSON (a
#: few hundred bytes a state file and key-group range), so an incremental RocksDB backend
#: with tens of thousands of files stays well inside.
ACKNOWLEDGE_MESSAGE_BYTES = 64 * 1024 * 1024


def request_limits() -> dict[str, int]:
    """What each JobMaster RPC may receive (see weir.core.rpc.create_server).

    Only two carry bulk data, and they keep the server's limit (MAX_MESSAGE_BYTES): a
    submitted job's pickled JobGraph (functions may capture data), and collect batches
    (the collect path splits results under that limit). Checkpoint acknowledgements carry
    state handles, not state. Everything else (registration, heartbeats, task state
    updates, split requests, client queries) is control traffic.
    """
    service = jobmaster_pb2.DESCRIPTOR.services_by_name["JobMasterService"]
    return method_limits(service, SMALL_MESSAGE_BYTES, SubmitJob=None, UpdateJob=None,
                         PushCollectBatch=None,
                         AcknowledgeCheckpoint=ACKNOWLEDGE_MESSAGE_BYTES)


class JobMaster:
    """The JobMaster process (or an in-process instance in a mini cluster).

    Example:
        >>> jm = JobMaster(Configuration.from_pairs({"jobmaster.rpc.port": "0"}))
        >>> jm.address   # known after start()
        ''
    """

    def __init__(self, configuration: Configuration) -> None:
        self.configuration = configuration
        #: High availability (None: off): submitted jobs and their checkpoint pointers.
        #: First: a bad high-availability.* setting fails before anything starts.
        self.job_store: JobStore | None = create_job_store(configuration)
        #: Ids of jobs whose graph is being stored, not registered yet (high availability).
        self._reserved: set[str] = set()
        self.jobmaster_id = secrets.token_hex(8)
        self._token = auth_token(configuration)
        self._tls = TlsFiles.from_conf(configuration)
        self._interval = configuration.get(options.HEARTBEAT_INTERVAL)
        self._timeout = configuration.get(options.HEARTBEAT_TIMEOUT)
        self.main = MainThreadExecutor("jobmaster-main")
        self.resources = ResourceManager(
            self._token, self._timeout, self._on_te_lost, self._on_slots_available,
            tls=self._tls,
            rpc_failure_threshold=configuration.get(options.HEARTBEAT_RPC_FAILURE_THRESHOLD),
            heartbeat_interval=self._interval,
            # Outcomes arrive on gRPC callback threads, which must not wait for room in a
            # full main queue: a dropped outcome only delays a verdict.
            dispatch=lambda fn: self.main.submit(fn, timeout=0))
        self.shuffle_master = load_shuffle_service_factory(configuration).create_shuffle_master(
            configuration)
        self.jobs: OrderedDict[str, JobScheduler] = OrderedDict()
        #: Storage I/O of checkpoints (metadata writes, deletions, restore checks).
        self.io = ThreadPoolExecutor(4, thread_name_prefix="jobmaster-io")
        self._stream_ids = iter(range(1, 1 << 62))
        self._stopped = threading.Event()
        self._server: grpc.Server | None = None
        self._metrics: MetricsServer | None = None
        self._started = time.monotonic()
        self.address = ""
        self.metrics_url = ""

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.main.start()
        host = self.configuration.get(jm_options.RPC_BIND_HOST)
        self._server, port = create_server(
            host, self.configuration.get(jm_options.RPC_PORT), self._token,
            lambda s: jobmaster_pb2_grpc.add_JobMasterServiceServicer_to_server(
                _Servicer(self), s), max_workers=64, limits=request_limits(), tls=self._tls)
        self.address = f"{host}:{port}"
        registry = CollectorRegistry()
        registry.register(CallbackCollector(self._collect_metrics))
        self._metrics = MetricsServer(self.configuration.get(options.METRICS_HOST),
                                      self.configuration.get(options.METRICS_PORT), registry)
        self.metrics_url = self._metrics.url
        self._schedule_heartbeat_check()
        log.info("JobMaster started at %s (metrics %s)", self.address, self.metrics_url)
        if self.job_store is not None:
            log.info("high availability: jobs are kept in %s; recovering the stored ones",
                     self.job_store.uri)
            JobRecovery(self.job_store, self.main, self.io, self.create_job,
                        self.add_recovered, self._stopped.is_set).start()

    def _schedule_heartbeat_check(self) -> None:
        def check() -> None:
            if not self._stopped.is_set():
                self.resources.check_heartbeats()
                self.main.schedule(self._interval / 2, check)

        self.main.schedule(self._interval / 2, check)

    def expect_taskexecutors_to_stop(self) -> None:
        """Its TaskExecutors are being stopped with it (an in-process cluster): their
        connections closing is no failure to warn about."""
        if not self._stopped.is_set():
            self.main.call(self.resources.expect_departures, timeout=10)

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.job_store is not None:
            # Not cancelled: ending a job would delete its stored graph and checkpoints. Its
            # tasks stop when their TaskExecutors lose this JobMaster, and the next
            # JobMaster recovers it (as Flink suspends jobs on a JobManager shutdown).
            log.info("high availability: the jobs stay stored in %s for the next JobMaster",
                     self.job_store.uri)
        else:
            try:
                self.main.call(self._cancel_all_jobs, timeout=10)
            except Exception:  # shutting down: log and go on stopping
                log.exception("cancelling jobs at shutdown failed")
        if self._server is not None:
            self._server.stop(grace=1).wait(5)
        if self._metrics is not None:
            self._metrics.stop()
        self.main.call(self.resources.close, timeout=10)
        self.main.stop()
        self.io.shutdown(wait=True, cancel_futures=True)
        log.info("JobMaster stopped")

    def _cancel_all_jobs(self) -> None:
        for job in self.jobs.values():
            job.cancel()

    @property
    def stopped(self) -> threading.Event:
        return self._stopped

    # -- callbacks (main thread) ------------------------------------------------------------

    def _on_te_lost(self, resource_id: str, reason: int, message: str) -> None:
        self.shuffle_master.on_producer_lost(resource_id)
        for job in list(self.jobs.values()):
            job.on_task_executor_lost(resource_id, reason, message)

    def _on_slots_available(self) -> None:
        for job in list(self.jobs.values()):
            job.try_allocate()

    def _on_job_terminal(self, job: JobScheduler) -> None:
        if self.job_store is not None:
            # Finished, cancelled or failed for good: never recovered again.
            self._forget_stored(job.job_id)
        retained = self.configuration.get(jm_options.JOBS_RETAINED)
        finished = [j for j in self.jobs.values() if j.graph.is_terminal()]
        for old in finished[:-retained] if len(finished) > retained else []:
            del self.jobs[old.job_id]

    # -- jobs (main thread) -----------------------------------------------------------------

    def submit(self, graph: Any, snapshot: CompletedCheckpoint | None = None) -> str:
        """Register and start a job whose graph passed validate_job_graph (main thread),
        from ``snapshot`` (a savepoint or retained checkpoint, see ``load_start_snapshot``)
        if given.

        Raises JobExistsError for a known job id and ConfigError for a configuration that
        cannot work; a job that fails to start is forgotten again, slots released.
        """
        if graph.job_id in self.jobs:
            msg = f"a job with id {graph.job_id} exists already"
            raise JobExistsError(msg)
        job = self.create_job(graph)
        if snapshot is not None and job.checkpointing is None:
            msg = ("starting from a savepoint needs checkpointing: set "
                   "execution.checkpointing.interval (and state.checkpoints.dir)")
            raise ConfigError(msg)
        self.jobs[graph.job_id] = job
        self._attach_job_store(job)
        log.info("job %s (%s) submitted: %d vertices, %d slots needed", graph.job_id,
                 graph.name, len(graph.vertices), job.required_slots)
        try:
            if snapshot is not None:
                assert job.checkpointing is not None
                job.checkpointing.add_restored(snapshot)
                job.start_from(snapshot)
            else:
                job.start()
        except BaseException:
            del self.jobs[graph.job_id]
            self.resources.release(graph.job_id)
            raise
        return graph.job_id

    def create_job(self, graph: Any) -> JobScheduler:
        """A scheduler for ``graph``, neither registered nor started (main thread); raises
        ConfigError for a configuration that cannot work."""
        return JobScheduler(graph, self.resources, self.shuffle_master, self.main,
                            self.configuration.merged(dict(graph.config)),
                            self._on_job_terminal, self.io)

    def job(self, job_id: str) -> JobScheduler | None:
        return self.jobs.get(job_id)

    # -- high availability ------------------------------------------------------------------

    def load_start_snapshot(self, graph: Any) -> CompletedCheckpoint | None:
        """RPC thread: the savepoint or retained checkpoint ``graph`` starts from
        (execution.state-recovery.path), read and checked against the job; None when it
        starts empty. Raises SnapshotMismatchError, ConfigError and the storage errors,
        naming the snapshot and the fix."""
        config = self.configuration.merged(dict(graph.config))
        path = config.get(checkpoint_options.RECOVERY_PATH)
        if not path:
            return None
        snapshot = load_snapshot(path, config)
        for warning in check_state_matches(
                snapshot.metadata, snapshot.external_path, graph,
                config.get(checkpoint_options.IGNORE_UNCLAIMED_STATE)):
            log.warning("job %s: %s", graph.job_id, warning)
        log.info("job %s starts from %s (checkpoint %d, %s)", graph.job_id,
                 snapshot.external_path, snapshot.checkpoint_id,
                 "claimed" if snapshot.claimed else "not claimed")
        return snapshot

    def submit_durably(self, graph: Any) -> str:
        """Submit from an RPC thread: with high availability, the graph is stored before
        the job is registered and the submission acknowledged, and removed again if the job
        does not start. Raises what ``submit`` and ``load_start_snapshot`` raise, and
        JobNotStoredError."""
        snapshot = self.load_start_snapshot(graph)
        store = self.job_store
        if store is None:
            return self.main.call(lambda: self.submit(graph, snapshot))
        job_id = graph.job_id

        def reserve() -> None:
            if job_id in self.jobs or job_id in self._reserved:
                msg = f"a job with id {job_id} exists already"
                raise JobExistsError(msg)
            self._reserved.add(job_id)

        self.main.call(reserve)
        try:
            data = graph.SerializeToString(deterministic=True)
            try:
                self.io.submit(store.put_job, data, job_id).result(STORE_TIMEOUT_S)
            except (StorageError, TimeoutError) as err:
                self._forget_stored(job_id, wait=True)
                msg = (f"the job was not submitted: high availability is on and storing its "
                       f"graph at {store.location(job_id)} failed: {str(err) or 'timed out'}"
                       " (check high-availability.storageDir)")
                raise JobNotStoredError(msg) from err
            try:
                return self.main.call(lambda: self.submit(graph, snapshot))
            except BaseException:
                self._forget_stored(job_id, wait=True)
                raise
        finally:
            self.main.submit(lambda: self._reserved.discard(job_id))

    def add_recovered(self, job: JobScheduler) -> bool:
        """Register a job recovered from the job store (main thread); False if a job with
        its id is registered already."""
        if job.job_id in self.jobs:
            return False
        self.jobs[job.job_id] = job
        self._attach_job_store(job)
        return True

    def _attach_job_store(self, job: JobScheduler) -> None:
        """Store each completed checkpoint of ``job`` as its latest (high availability)."""
        store = self.job_store
        if store is None or job.checkpointing is None:
            return
        job_id = job.job_id

        def store_pointer(checkpoint_id: int, path: str) -> None:
            try:
                store.put_checkpoint_pointer(job_id, checkpoint_id, path)
            except StorageError as err:
                msg = (f"storing it as the job's latest checkpoint for high availability "
                       f"({store.location(job_id, POINTER_NAME)}) failed: {err}")
                raise StorageError(msg) from err

        job.checkpointing.on_metadata_written = store_pointer

        def store_graph(graph: Any) -> None:
            data = graph.SerializeToString(deterministic=True)
            future = self.io.submit(store.put_job, data, job_id)
            future.add_done_callback(lambda f: f.exception() and log.error(
                "high availability: storing the changed graph of job %s failed (%s): a "
                "restarted JobMaster recovers its previous graph", job_id, f.exception()))

        job.on_graph_changed = store_graph

    def _forget_stored(self, job_id: str, wait: bool = False) -> None:
        """Remove a job from the job store, on the I/O pool (``wait``: before returning,
        not on the main thread); a failure is logged."""
        store = self.job_store
        assert store is not None

        def logged(future: Any) -> None:
            if future.exception() is not None:
                log.error("high availability: removing job %s from %s failed (%s): a "
                          "restarted JobMaster will recover it again; delete that directory "
                          "to prevent this", job_id, store.location(job_id),
                          future.exception())

        try:
            future = self.io.submit(store.remove_job, job_id)
            future.add_done_callback(logged)
            if wait:
                with contextlib.suppress(Exception):  # logged
                    future.result(STORE_TIMEOUT_S)
        except RuntimeError:  # the I/O pool is shut down: the JobMaster stops
            log.error("high availability: job %s ended while the JobMaster stops and stays in "
                      "%s: delete that directory, or the next JobMaster recovers it", job_id,
                      store.location(job_id))

    def overview(self) -> jobmaster_pb2.ClusterOverview:
        overview = jobmaster_pb2.ClusterOverview(
            slots_total=self.resources.total_slots(), slots_free=self.resources.free_slots(),
            metrics_url=self.metrics_url, pid=os.getpid())
        for record in self.resources.task_executors.values():
            overview.task_executors.append(record.to_info())
        return overview

    def _collect_metrics(self) -> list[Any]:
        def snapshot() -> tuple[int, int, int, dict[str, int]]:
            by_state: dict[str, int] = {}
            for job in self.jobs.values():
                name = common_pb2.JobStatus.Name(job.graph.status).removeprefix("JOB_")
                by_state[name] = by_state.get(name, 0) + 1
            return (len(self.resources.task_executors), self.resources.total_slots(),
                    self.resources.free_slots(), by_state)

        registered, total, free, by_state = self.main.call(snapshot, timeout=5)
        job_families = self.main.call(self._job_metrics, timeout=5)
        jm = families(JOBMASTER_METRICS)
        jm["taskexecutors_registered"].add_metric([], registered)
        jm["slots_total"].add_metric([], total)
        jm["slots_free"].add_metric([], free)
        for name in ("RUNNING", "FINISHED", "FAILED", "CANCELED", "FAILING", "CANCELLING"):
            jm["jobs"].add_metric([name], by_state.get(name, 0))
        jm["uptime_seconds"].add_metric([], time.monotonic() - self._started)
        return [*jm.values(), *job_families]

    def _job_metrics(self) -> list[Any]:
        """Main thread: per-job metric families, labelled by job id and name."""
        per_job = families(JOB_METRICS)
        path = per_job["lastCheckpointExternalPath"]
        for job in self.jobs.values():
            values = [job.job_id, job.graph.job_graph.name]
            times = job.times_ms()
            numbers: dict[str, float] = {
                "numRestarts": job.restarts, "restartingTime": times["restartingTime"],
                "uptime": times["uptime"], "downtime": times["downtime"],
                "lastCheckpointRestoreTimestamp": job.restore_timestamp_ms or -1,
                "lastChangeDowntime": job.last_change.downtime_ms
                if job.last_change is not None else -1}
            if job.checkpointing is not None:
                coordinator = job.checkpointing.coordinator
                completed = [r for r in coordinator.stats()
                             if r.status == checkpoint_pb2.CheckpointStats.COMPLETED]
                numbers.update({
                    "numberOfInProgressCheckpoints": len(coordinator.pending_ids()),
                    "numberOfCompletedCheckpoints": coordinator.counts["completed"],
                    "numberOfFailedCheckpoints": coordinator.counts["failed"],
                    "totalNumberOfCheckpoints": coordinator.counts["completed"]
                    + coordinator.counts["failed"] + len(coordinator.pending_ids())})
                if completed:
                    last = completed[-1]
                    numbers.update({
                        "lastCheckpointDuration": last.duration_ms,
                        "lastCheckpointSize": last.incremental_size,
                        "lastCheckpointFullSize": last.state_size,
                        "lastCheckpointProcessedData": last.processed_bytes,
                        "lastCheckpointPersistedData": last.persisted_bytes,
                        "lastCompletedCheckpointId": last.checkpoint_id})
                    path.add_metric([*values, last.external_path], 1)
                else:
                    numbers["lastCompletedCheckpointId"] = -1
            for name, value in numbers.items():
                per_job[name].add_metric(values, value)
        return list(per_job.values())


class _Servicer(jobmaster_pb2_grpc.JobMasterServiceServicer):
    """Thin RPC layer: validates, hands over to the main thread, translates errors."""

    def __init__(self, jm: JobMaster) -> None:
        self._jm = jm
        self._main = jm.main

    def _job(self, job_id: str, context: grpc.ServicerContext) -> JobScheduler:
        job = self._main.call(lambda: self._jm.job(job_id))
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"no job with id {job_id!r} (`weir list` shows the known jobs)")
        return job

    # -- TaskExecutors ----------------------------------------------------------------------

    def RegisterTaskExecutor(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            record = self._main.call(lambda: self._jm.resources.register(request))
        except DuplicateTaskExecutorError as err:
            log.warning("refused a TaskExecutor at %s (pid %d): %s", request.rpc_address,
                        request.pid, err)
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(err))
        return jobmaster_pb2.RegisterTaskExecutorResponse(
            jobmaster_id=self._jm.jobmaster_id,
            heartbeat_interval_ms=int(self._jm._interval * 1000),
            heartbeat_timeout_ms=int(self._jm._timeout * 1000),
            registration_id=record.registration_id)

    def Heartbeat(self, request_iterator: Iterator[Any],  # noqa: N802
                  context: grpc.ServicerContext) -> Iterator[Any]:
        jm = self._jm
        try:
            first = next(request_iterator)
        except (StopIteration, grpc.RpcError):
            return
        resource_id = first.resource_id
        stream_id = next(jm._stream_ids)

        def attach() -> bool:
            if not jm.resources.heartbeat(resource_id, first):
                return False
            jm.resources.task_executors[resource_id].stream_id = stream_id
            return True

        if not self._main.call(attach):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"TaskExecutor {resource_id} is not registered under registration "
                          f"{first.registration_id!r} (never, or replaced since): register")

        def ended() -> None:
            def check() -> None:
                record = jm.resources.get(resource_id)
                if record is not None and record.stream_id == stream_id:
                    jm.resources.remove(resource_id, common_pb2.TASK_EXECUTOR_LOST,
                                        "its connection closed (process exited or network "
                                        "failure)")
            if not jm.stopped.is_set():
                try:
                    self._main.submit(check)
                except Exception:  # the JobMaster is stopping
                    log.debug("ignoring the end of a heartbeat stream during shutdown")

        context.add_callback(ended)
        done = threading.Event()
        unknown: list[list[str]] = [[]]

        def read() -> None:
            try:
                for message in request_iterator:
                    def handle(m: Any = message) -> list[str] | None:
                        if not jm.resources.heartbeat(resource_id, m):
                            return None  # fenced: a newer registration replaced this one
                        # Tasks of ended jobs count as unknown: the TaskExecutor cancels them.
                        known = {a for job in jm.jobs.values() if not job.graph.is_terminal()
                                 for a in job.graph.by_attempt}
                        return [a for a in m.running_attempts if a not in known]
                    attempts = self._main.call(handle, timeout=10)
                    if attempts is None:
                        log.info("ending a replaced heartbeat stream of %s", resource_id)
                        break
                    unknown[0] = attempts
            except Exception:  # the stream ended or broke: ended() handles it
                log.debug("heartbeat stream of %s ended", resource_id)
            finally:
                done.set()

        reader = threading.Thread(target=read, name=f"heartbeat-{resource_id}", daemon=True)
        reader.start()
        while context.is_active() and not done.is_set() and not jm.stopped.is_set():
            attempts, unknown[0] = unknown[0], []
            yield jobmaster_pb2.JobMasterHeartbeat(jobmaster_id=jm.jobmaster_id,
                                                   unknown_attempts=attempts)
            done.wait(jm._interval)

    def UpdateTaskExecutionState(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def update() -> None:
            job = self._jm.job(request.job_id)
            if job is not None:
                job.on_task_state(request)

        self._main.call(update)
        return jobmaster_pb2.Ack()

    def RequestSplits(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._job(request.job_id, context)

        def answer() -> Any:
            if job.graph.by_attempt.get(request.attempt_id) is None:
                return jobmaster_pb2.SplitResponse(retry_after_ms=1000)  # a stale attempt
            try:
                return job.sources.request_splits(request.vertex_id, request.subtask_index,
                                                  request.checkpoint_passed)
            except Exception as err:  # user code of the enumerator
                job.fail(common_pb2.ErrorInfo(
                    reason=common_pb2.SOURCE_ERROR,
                    message=f"the split enumerator failed: {type(err).__name__}: {err}"))
                return None

        response = self._main.call(answer)
        if response is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the split enumerator failed")
        return response

    def PushCollectBatch(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._jm.jobs.get(request.job_id)  # read-only dict lookups off the main thread
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_id}")
        if request.attempt_id and request.attempt_id not in job.graph.by_attempt:
            # A failed attempt's late results: the restarted attempt sends its own.
            return jobmaster_pb2.CollectAck(accepted=True)
        # A full buffer is an answer, not an error: RESOURCE_EXHAUSTED is what gRPC itself
        # reports for a message over the size limit, which retrying can never cure.
        return jobmaster_pb2.CollectAck(accepted=job.collect.push(request.arrow_ipc, wait=5.0))

    def AcknowledgeCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._checkpoint_call(request.job_id, lambda c: c.on_acknowledge(request))
        return jobmaster_pb2.Ack()

    def DeclineCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._checkpoint_call(request.job_id, lambda c: c.on_decline(request))
        return jobmaster_pb2.Ack()

    def ReportEndOfData(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._checkpoint_call(request.job_id, lambda c: c.on_end_of_data(request.attempt_id))
        return jobmaster_pb2.Ack()

    def _checkpoint_call(self, job_id: str, fn: Callable[[JobCheckpointing], None]) -> None:
        """Hand a task's checkpoint report to the main thread (unknown jobs and jobs
        without checkpointing ignore it: they ended, or never asked)."""
        def run() -> None:
            job = self._jm.job(job_id)
            if job is not None and job.checkpointing is not None and \
                    job.graph.status == common_pb2.JOB_RUNNING:
                fn(job.checkpointing)

        self._main.submit(run)

    # -- clients ----------------------------------------------------------------------------

    def SubmitJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        graph = request.job_graph
        try:
            validate_job_graph(graph)
        except JobGraphValidationError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        for vertex in graph.vertices:
            if vertex.source:
                try:
                    cloudpickle.loads(vertex.source)
                except Exception as err:  # whatever unpickling user objects raises
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"the source of '{vertex.name}' cannot be loaded on the "
                                  f"JobMaster: {type(err).__name__}: {err}")
        try:
            job_id = self._jm.submit_durably(graph)
        except ConfigError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except JobExistsError as err:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(err))
        except JobNotStoredError as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        except SnapshotMismatchError as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        except (StateError, StorageError) as err:  # the snapshot to start from
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"the job cannot start from its savepoint: {err}")
        except Exception as err:  # our bug: one line to the client, the traceback in the log
            log.exception("submitting job %s failed", graph.job_id)
            context.abort(grpc.StatusCode.INTERNAL,
                          f"the JobMaster failed to schedule the job ({type(err).__name__}: "
                          f"{err}); this is a bug in weir, see the JobMaster log")
        return jobmaster_pb2.SubmitJobResponse(job_id=job_id)

    def ListJobs(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._main.call(lambda: jobmaster_pb2.ListJobsResponse(
            jobs=[j.graph.summary() for j in self._jm.jobs.values()]))

    def GetJobDetails(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._job(request.job_id, context)
        return self._main.call(job.details)

    def CancelJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._job(request.job_id, context)
        self._main.call(job.cancel)
        return jobmaster_pb2.Ack()

    def FetchCollectResults(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._job(request.job_id, context)
        wait = min(max(request.wait_ms, 0), 30_000) / 1000
        batches, end = job.collect.fetch(request.max_batches or 16, wait,
                                         max_bytes=fetch_budget())
        response = jobmaster_pb2.FetchCollectResponse(arrow_ipc=batches, end_of_results=end,
                                                      status=job.graph.status)
        if job.graph.failure is not None:
            response.failure.CopyFrom(job.graph.failure)
            if response.failure.ByteSize() > FETCH_ENVELOPE_BYTES // 2:
                # The batches fill the rest of the message; the whole failure is in
                # GetJobDetails, which the client asks once the results end.
                response.failure.traceback = ""
                response.failure.message = response.failure.message[:4000]
        return response

    def GetClusterOverview(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._main.call(self._jm.overview)

    def TriggerSavepoint(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._job(request.job_id, context)
        # A savepoint waits for a checkpoint in progress, then takes at most its timeout.
        path = self._outcome(lambda done: job.savepoint(request, done), "savepoint",
                             2 * job.checkpoint_timeout_s() + 60, context)
        return jobmaster_pb2.SavepointResponse(path=path)

    def RescaleJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._job(request.job_id, context)
        try:
            graph = self._main.call(lambda: rescaled_graph(
                job.graph.job_graph, request.parallelism, dict(request.operator_parallelism)))
        except JobChangeRefusedError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        changed = sorted(u for new, old in zip(graph.vertices, job.graph.job_graph.vertices,
                                               strict=True)
                         if new.parallelism != old.parallelism for u in new.operator_uids if u)
        return self._change(job, "rescale", graph, changed, None, context)

    def UpdateJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._job(request.job_id, context)
        try:
            validate_job_graph(request.job_graph)
            graph, changed = self._main.call(lambda: updated_graph(job.graph.job_graph,
                                                                   request.job_graph))
        except (JobGraphValidationError, JobChangeRefusedError) as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except Exception as err:  # unpickling the new program's sources
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the new program cannot be loaded on the JobMaster: "
                          f"{type(err).__name__}: {err}")

        def check(metadata: Any) -> None:
            for warning in check_state_matches(metadata, f"checkpoint "
                                               f"{metadata.checkpoint_id}", graph,
                                               request.allow_non_restored_state):
                log.warning("job %s update: %s", job.job_id, warning)

        return self._change(job, "update", graph, changed, check, context)

    def _change(self, job: JobScheduler, kind: str, graph: Any, changed: list[str],
                check: Any, context: grpc.ServicerContext) -> Any:
        # A checkpoint (at most its timeout, after one in progress), then a redeployment
        # that waits for slots at most slot.request.timeout.
        return self._outcome(lambda done: job.change(kind, graph, changed, done, check), kind,
                             2 * job.checkpoint_timeout_s() + job.slot_timeout_s() + 120,
                             context)

    def _outcome(self, start: Callable[[Callable[[Any, str | None], None]], None], what: str,
                 wait: float, context: grpc.ServicerContext) -> Any:
        """Start a savepoint or change on the main thread and wait (up to ``wait`` s) for
        the ``done(result, error)`` it promises; an error ends the call with
        FAILED_PRECONDITION and its message."""
        outcome: Future[tuple[Any, str | None]] = Future()
        self._main.call(lambda: start(lambda result, error: outcome.set_result(
            (result, error))))
        try:
            result, error = outcome.result(timeout=wait)
        except TimeoutError:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                          f"the {what} did not end within {wait:.0f} s")
        if error is not None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, error)
        return result

    def DisposeSavepoint(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            dispose_savepoint(request.path, self._jm.configuration)
        except (UserError, StorageError, StateError) as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        return jobmaster_pb2.Ack()

    def GetCheckpoints(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        job = self._job(request.job_id, context)

        def history() -> Any:
            response = jobmaster_pb2.CheckpointHistory()
            if job.checkpointing is not None:
                response.checkpoints.extend(job.checkpointing.coordinator.stats())
            if job.restored is not None:
                response.restored_checkpoint_id = job.restored.checkpoint_id
                response.restore_timestamp_ms = job.restore_timestamp_ms
            return response

        return self._main.call(history)
