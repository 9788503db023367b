"""The JobMaster daemon: dispatcher of jobs, resource manager, heartbeats, and, with high
availability, the job store its jobs are recovered from after a restart
(``high_availability``, ``job_recovery``).

One gRPC server serves two services on one port, each by its own servicer: the
JobMasterGateway that TaskExecutors call (``gateway_servicer``) and the Dispatcher that
clients call (``dispatcher_servicer``). They translate gRPC to the operations of
:class:`JobMaster` and back; what those raise (``errors``) becomes a status code in one
place (``status_codes``). The REST API (``rest``) has an HTTP server of its own and reads
through the same operations. This module keeps the process's lifecycle, the wiring, and
the operations themselves.

Every piece of coordination state lives on the main thread (see ``main_thread``); the
operations called from RPC threads only hand work to it, except the collect path, whose
buffer is thread-safe so that a slow client never blocks the main thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import cloudpickle
import grpc
from prometheus_client import CollectorRegistry

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core import options
from weir.core.addresses import jobmaster_host, join_host_port, metrics_host, metrics_url
from weir.core.config import Configuration
from weir.core.errors import (
    ConfigError,
    InternalError,
    InvalidJobError,
    JobNotFoundError,
    StateError,
    StorageError,
    UserError,
    WeirError,
)
from weir.core.ids import CheckpointId, ExecutionAttemptId, JobId, ResourceId
from weir.core.metrics import CallbackCollector, Health, HealthChecks, MetricsServer
from weir.core.rpc import check_reachable, create_server
from weir.core.secrets import auth_token
from weir.core.tls import TlsFiles
from weir.jobmaster import dispatcher_servicer, gateway_servicer, staging_cleanup
from weir.jobmaster import options as jm_options
from weir.jobmaster.checkpointing import JobCheckpointing
from weir.jobmaster.collect import FETCH_ENVELOPE_BYTES, fetch_budget
from weir.jobmaster.errors import (
    JobChangeFailedError,
    JobExistsError,
    JobNotStoredError,
    OperationTimeoutError,
    SavepointFailedError,
    SavepointNotDisposedError,
    SnapshotUnreadableError,
    SplitEnumeratorError,
    TaskExecutorNotRegisteredError,
)
from weir.jobmaster.high_availability import (
    POINTER_NAME,
    HistoryWriter,
    JobStore,
    create_job_store,
)
from weir.jobmaster.job_change import JobChangeRefusedError, rescaled_graph, updated_graph
from weir.jobmaster.job_recovery import JobRecovery
from weir.jobmaster.jobgraph_validation import JobGraphValidationError, validate_job_graph
from weir.jobmaster.main_thread import MainThreadExecutor
from weir.jobmaster.metrics import JobMasterMetrics
from weir.jobmaster.resource_manager import (
    DuplicateTaskExecutorError,
    ResourceManager,
    TaskExecutorRecord,
)
from weir.jobmaster.rest.handlers import RestHandlers
from weir.jobmaster.rest.server import RestServer, rest_bind_host, rest_url
from weir.jobmaster.savepoints import (
    SnapshotMismatchError,
    check_state_matches,
    dispose_savepoint,
    load_snapshot,
)
from weir.jobmaster.scheduler import JobScheduler
from weir.proto import (
    checkpoint_pb2,
    common_pb2,
    dispatcher_pb2,
    jobgraph_pb2,
    jobmaster_pb2,
)
from weir.shuffle.loader import load_shuffle_service_factory

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a submission waits for its graph to be stored (high availability).
STORE_TIMEOUT_S = 120.0
#: How long a client's read (jobs, details, checkpoints) waits for the main thread.
READ_TIMEOUT_S = 30.0
#: How long a registering TaskExecutor's advertised address may take to answer: well
#: within its registration call's own timeout.
REACH_TIMEOUT_S = 5.0


def request_limits() -> dict[str, int]:
    """What each RPC of the JobMaster's server may receive (see
    weir.core.rpc.create_server): those of the JobMasterGateway and of the Dispatcher."""
    return {**gateway_servicer.request_limits(), **dispatcher_servicer.request_limits()}


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
        self._reserved: set[JobId] = set()
        self.jobmaster_id = secrets.token_hex(8)
        self._token = auth_token(configuration)
        self._tls = TlsFiles.from_conf(configuration)
        #: Seconds between heartbeats, and of silence after which a TaskExecutor is lost.
        self.heartbeat_interval: float = configuration.get(options.HEARTBEAT_INTERVAL)
        self.heartbeat_timeout: float = configuration.get(options.HEARTBEAT_TIMEOUT)
        self.main = MainThreadExecutor("jobmaster-main")
        self.resources = ResourceManager(
            self._token, self.heartbeat_timeout, self._on_te_lost, self._on_slots_available,
            tls=self._tls,
            rpc_failure_threshold=configuration.get(options.HEARTBEAT_RPC_FAILURE_THRESHOLD),
            heartbeat_interval=self.heartbeat_interval,
            # Outcomes arrive on gRPC callback threads, which must not wait for room in a
            # full main queue: a dropped outcome only delays a verdict.
            dispatch=lambda fn: self.main.submit(fn, timeout=0))
        self.shuffle_master = load_shuffle_service_factory(configuration).create_shuffle_master(
            configuration)
        self.jobs: OrderedDict[JobId, JobScheduler] = OrderedDict()
        #: Storage I/O of checkpoints (metadata writes, deletions, restore checks).
        self.io = ThreadPoolExecutor(4, thread_name_prefix="jobmaster-io")
        self._stream_ids = iter(range(1, 1 << 62))
        self._stopped = threading.Event()
        self._server: grpc.Server | None = None
        self._metrics: MetricsServer | None = None
        self._rest: RestServer | None = None
        self._rest_handlers: RestHandlers | None = None
        #: Recovering the stored jobs (high availability), from start() on.
        self._recovery: JobRecovery | None = None
        #: When this JobMaster was created (time.monotonic()).
        self.started = time.monotonic()
        self.address = ""
        self.metrics_url = ""
        #: The REST API's URL (``rest.*`` options), known after start().
        self.rest_url = ""

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.main.start()
        hosts = jobmaster_host(self.configuration.get(jm_options.RPC_ADDRESS),
                               self.configuration.get(jm_options.RPC_BIND_HOST),
                               socket.getfqdn)
        self._server, port = create_server(
            hosts.bind, self.configuration.get(jm_options.RPC_PORT), self._token,
            self._add_servicers, max_workers=64, limits=request_limits(), tls=self._tls)
        # What TaskExecutors and clients are told (info file, logs), not what is bound.
        self.address = join_host_port(hosts.advertised, port)
        if hosts.reason == "the host name":
            log.info("jobmaster.rpc.bind-host %s binds every interface and "
                     "jobmaster.rpc.address is unset: advertising the host name, %s (set "
                     "jobmaster.rpc.address if peers reach this host by another name)",
                     hosts.bind, self.address)
        registry = CollectorRegistry()
        registry.register(CallbackCollector(JobMasterMetrics(self).collect))
        metrics_bind = self.configuration.get(options.METRICS_HOST)
        self._metrics = MetricsServer(metrics_bind,
                                      self.configuration.get(options.METRICS_PORT), registry,
                                      HealthChecks(self.liveness, self.readiness))
        self.metrics_url = metrics_url(metrics_host(metrics_bind, hosts), self._metrics.port)
        self._start_rest(hosts.bind, hosts.advertised)
        self._schedule_heartbeat_check()
        log.info("JobMaster started at %s (bound to %s; metrics %s; REST API %s)",
                 self.address, join_host_port(hosts.bind, port), self.metrics_url,
                 self.rest_url)
        if self.job_store is not None:
            log.info("high availability: jobs are kept in %s; recovering the stored ones",
                     self.job_store.uri)
            self._recovery = JobRecovery(self.job_store, self.main, self.io, self.create_job,
                                         self.add_recovered, self._stopped.is_set)
            self._recovery.start()

    def _start_rest(self, rpc_bind: str, advertised: str) -> None:
        configured = self.configuration.get(jm_options.REST_BIND_ADDRESS)
        bind = rest_bind_host(configured, self._token, rpc_bind)
        if configured is None and self._token is None:
            log.info("no security.auth.token is set: the REST API binds 127.0.0.1 only "
                     "(set a token, or rest.bind-address, to serve it to other hosts)")
        self._rest_handlers = RestHandlers(self)
        self._rest = RestServer(bind, self.configuration.get(jm_options.REST_PORT),
                                self._rest_handlers.routes(), self._token, self._tls)
        self.rest_url = rest_url(self.configuration.get(jm_options.REST_ADDRESS), bind,
                                 advertised, self._rest.port, self._tls is not None)

    # -- health probes (HTTP threads; read fields only, never the main thread) --------------

    def liveness(self) -> Health:
        """``/healthz``: alive while it is not stopping and its main thread runs."""
        if self._stopped.is_set():
            return Health(False, "stopping", "the JobMaster is shutting down")
        if not self.main.is_alive():
            return Health(False, "failed", "its main thread ended; see the JobMaster log")
        return Health(True, "alive", f"serving at {self.address}")

    def readiness(self) -> Health:
        """``/readyz``: ready once its RPC server serves and, with high availability, every
        stored job has been recovered (or skipped)."""
        if self._stopped.is_set():
            return Health(False, "not ready", "the JobMaster is shutting down")
        if self._server is None:
            return Health(False, "not ready", "its RPC server is starting")
        if self.job_store is not None:
            recovery = self._recovery
            left = "recovery starting" if recovery is None else recovery.unfinished()
            if left is not None:
                return Health(False, "not ready", f"high availability: {left}")
        return Health(True, "ready", f"serving at {self.address}; "
                                     f"{len(self.resources.task_executors)} TaskExecutor(s) "
                                     "registered")

    def _add_servicers(self, server: grpc.Server) -> None:
        """Both services on the one server: its authentication, TLS and message limits
        apply to either alike."""
        gateway_servicer.add_to_server(gateway_servicer.JobMasterGatewayServicer(self), server)
        dispatcher_servicer.add_to_server(dispatcher_servicer.DispatcherServicer(self), server)

    def _schedule_heartbeat_check(self) -> None:
        def check() -> None:
            if not self._stopped.is_set():
                self.resources.check_heartbeats()
                self.main.schedule(self.heartbeat_interval / 2, check)

        self.main.schedule(self.heartbeat_interval / 2, check)

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
        if self._rest is not None:
            self._rest.stop()
        if self._rest_handlers is not None:
            self._rest_handlers.close()
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

    def _on_te_lost(self, resource_id: ResourceId, reason: common_pb2.FailureReason,
                    message: str) -> None:
        self.shuffle_master.on_producer_lost(resource_id)
        for job in list(self.jobs.values()):
            job.on_task_executor_lost(resource_id, reason, message)

    def _on_slots_available(self) -> None:
        for job in list(self.jobs.values()):
            job.try_allocate()

    def _on_job_terminal(self, job: JobScheduler) -> None:
        staging_cleanup.on_job_terminal(
            job.job_id, self.configuration.merged(dict(job.graph.job_graph.config)),
            job.graph.status,
            job.checkpointing.retention if job.checkpointing is not None else None)
        if self.job_store is not None:
            # Finished, cancelled or failed for good: never recovered again.
            self._forget_stored(job.job_id)
        retained = self.configuration.get(jm_options.JOBS_RETAINED)
        finished = [j for j in self.jobs.values() if j.graph.is_terminal()]
        for old in finished[:-retained] if len(finished) > retained else []:
            del self.jobs[old.job_id]

    # -- jobs (main thread) -----------------------------------------------------------------

    def submit(self, graph: jobgraph_pb2.JobGraph,
               snapshot: CompletedCheckpoint | None = None) -> JobId:
        """Register and start a job whose graph passed validate_job_graph (main thread),
        from ``snapshot`` (a savepoint or retained checkpoint, see ``load_start_snapshot``)
        if given.

        Raises JobExistsError for a known job id and ConfigError for a configuration that
        cannot work; a job that fails to start is forgotten again, slots released.
        """
        job_id = JobId(graph.job_id)
        if job_id in self.jobs:
            msg = f"a job with id {job_id} exists already"
            raise JobExistsError(msg)
        job = self.create_job(graph)
        if snapshot is not None and job.checkpointing is None:
            msg = ("starting from a savepoint needs checkpointing: set "
                   "execution.checkpointing.interval (and state.checkpoints.dir)")
            raise ConfigError(msg)
        self.jobs[job_id] = job
        self._attach_job_store(job)
        log.info("job %s (%s) submitted: %d vertices, %d slots needed", job_id,
                 graph.name, len(graph.vertices), job.required_slots)
        try:
            if snapshot is not None:
                assert job.checkpointing is not None
                job.checkpointing.add_restored(snapshot)
                job.start_from(snapshot)
            else:
                job.start()
        except BaseException:
            del self.jobs[job_id]
            self.resources.release(job_id)
            raise
        return job_id

    def create_job(self, graph: jobgraph_pb2.JobGraph) -> JobScheduler:
        """A scheduler for ``graph``, neither registered nor started (main thread); raises
        ConfigError for a configuration that cannot work."""
        return JobScheduler(graph, self.resources, self.shuffle_master, self.main,
                            self.configuration.merged(dict(graph.config)),
                            self._on_job_terminal, self.io)

    def job(self, job_id: JobId) -> JobScheduler | None:
        return self.jobs.get(job_id)

    # -- high availability ------------------------------------------------------------------

    def load_start_snapshot(self, graph: jobgraph_pb2.JobGraph) -> CompletedCheckpoint | None:
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

    def submit_durably(self, graph: jobgraph_pb2.JobGraph) -> JobId:
        """Submit from an RPC thread: with high availability, the graph is stored before
        the job is registered and the submission acknowledged, and removed again if the job
        does not start. Raises what ``submit`` and ``load_start_snapshot`` raise, and
        JobNotStoredError."""
        snapshot = self.load_start_snapshot(graph)
        store = self.job_store
        if store is None:
            return self.main.call(lambda: self.submit(graph, snapshot))
        job_id = JobId(graph.job_id)

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
        """Store each completed checkpoint of ``job`` as its latest, and its history as it
        changes (high availability)."""
        store = self.job_store
        if store is None:
            return
        job_id = job.job_id
        writer = HistoryWriter(store, job_id,
                               lambda: job.history().SerializeToString(deterministic=True),
                               self.io, main=lambda fn: self.main.schedule(0.0, fn))
        job.on_history_changed = writer.changed
        if job.checkpointing is None:
            return

        def store_pointer(checkpoint_id: CheckpointId, path: str) -> None:
            try:
                store.put_checkpoint_pointer(job_id, checkpoint_id, path)
            except StorageError as err:
                msg = (f"storing it as the job's latest checkpoint for high availability "
                       f"({store.location(job_id, POINTER_NAME)}) failed: {err}")
                raise StorageError(msg) from err

        job.checkpointing.on_metadata_written = store_pointer

        def stored(future: Future[None]) -> None:
            if future.exception() is not None:
                log.error("high availability: storing the changed graph of job %s failed "
                          "(%s): a restarted JobMaster recovers its previous graph", job_id,
                          future.exception())

        def store_graph(graph: jobgraph_pb2.JobGraph) -> None:
            data = graph.SerializeToString(deterministic=True)
            self.io.submit(store.put_job, data, job_id).add_done_callback(stored)

        job.on_graph_changed = store_graph

    def _forget_stored(self, job_id: JobId, wait: bool = False) -> None:
        """Remove a job from the job store, on the I/O pool (``wait``: before returning,
        not on the main thread); a failure is logged."""
        store = self.job_store
        assert store is not None

        def logged(future: Future[None]) -> None:
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

    # -- operations for TaskExecutors (RPC threads; see gateway_servicer) -------------------

    def register_task_executor(self, request: jobmaster_pb2.RegisterTaskExecutorRequest
                               ) -> TaskExecutorRecord:
        """Register a TaskExecutor and offer its slots (waits for the main thread).

        Raises DuplicateTaskExecutorError, changing nothing, when another live process
        holds its resource id, and ConfigError when its advertised gRPC address cannot be
        reached from here (dialled on this RPC thread, for REACH_TIMEOUT_S at most).
        """
        cause = check_reachable(request.rpc_address, REACH_TIMEOUT_S, self._token, self._tls)
        if cause is not None:
            msg = (f"TaskExecutor {request.resource_id} advertises {request.rpc_address} "
                   f"(taskmanager.host), which the JobMaster at {self.address} cannot reach: "
                   f"{cause}; set taskmanager.host to an address other hosts can reach")
            log.warning("refused a TaskExecutor (pid %d): %s", request.pid, msg)
            raise ConfigError(msg)
        try:
            return self.main.call(lambda: self.resources.register(request))
        except DuplicateTaskExecutorError as err:
            log.warning("refused a TaskExecutor at %s (pid %d): %s", request.rpc_address,
                        request.pid, err)
            raise

    def attach_heartbeats(self, first: jobmaster_pb2.TaskExecutorHeartbeat) -> int:
        """A TaskExecutor opened its heartbeat stream with ``first``: note that heartbeat
        and make the stream its current one; returns the stream's id, for
        :meth:`heartbeats_ended`. Waits for the main thread.

        Raises TaskExecutorNotRegisteredError when ``first`` is not of its current
        registration (it never registered, or registered again since).
        """
        resource_id = ResourceId(first.resource_id)
        stream_id = next(self._stream_ids)

        def attach() -> bool:
            if not self.resources.heartbeat(resource_id, first):
                return False
            self.resources.task_executors[resource_id].stream_id = stream_id
            return True

        if not self.main.call(attach):
            msg = (f"TaskExecutor {resource_id} is not registered under registration "
                   f"{first.registration_id!r} (never, or replaced since): register")
            raise TaskExecutorNotRegisteredError(msg)
        return stream_id

    def heartbeat(self, resource_id: ResourceId, message: jobmaster_pb2.TaskExecutorHeartbeat
                  ) -> list[ExecutionAttemptId] | None:
        """Note a heartbeat that arrived on the attached stream of ``resource_id`` (the
        stream's reader thread; waits for the main thread, at most 10 s). Returns the
        attempts it reports running that the JobMaster does not know (tasks of ended jobs
        too), which the TaskExecutor is to cancel; None when a newer registration replaced
        the stream's, or the heartbeat reported the TaskExecutor unhealthy and removed it:
        the stream then ends.
        """
        def handle() -> list[ExecutionAttemptId] | None:
            if not self.resources.heartbeat(resource_id, message):
                return None  # fenced: a newer registration replaced this one
            known = {a for job in self.jobs.values() if not job.graph.is_terminal()
                     for a in job.graph.by_attempt}
            running = map(ExecutionAttemptId, message.running_attempts)
            return [a for a in running if a not in known]

        return self.main.call(handle, timeout=10)

    def heartbeats_ended(self, resource_id: ResourceId, stream_id: int) -> None:
        """A heartbeat stream ended (closed, broken, or its process exited): the
        TaskExecutor is lost, unless a newer stream of it is attached meanwhile. Any thread
        (a gRPC callback); waits only for room in the main thread's queue."""
        def check() -> None:
            record = self.resources.get(resource_id)
            if record is not None and record.stream_id == stream_id:
                self.resources.remove(resource_id, common_pb2.TASK_EXECUTOR_LOST,
                                      "its connection closed (process exited or network "
                                      "failure)")

        if not self._stopped.is_set():
            try:
                self.main.submit(check)
            except Exception:  # the JobMaster is stopping
                log.debug("ignoring the end of a heartbeat stream during shutdown")

    def disconnect_task_executor(self, request: jobmaster_pb2.DisconnectTaskExecutorRequest
                                 ) -> None:
        """A TaskExecutor shuts down: remove it and fail over its tasks now (waits for the
        main thread, so that it cancels its tasks only once they failed over here). A
        request of a replaced or unknown registration changes nothing."""
        resource_id = ResourceId(request.resource_id)
        if not self.main.call(lambda: self.resources.disconnect(
                resource_id, request.registration_id, request.reason)):
            log.info("TaskExecutor %s shut down (%s); it was not registered under "
                     "registration %r", resource_id, request.reason or "no reason given",
                     request.registration_id)

    def update_task_state(self, update: jobmaster_pb2.TaskExecutionStateUpdate) -> None:
        """A task's state changed (waits for the main thread); an unknown job ignores it."""
        def update_job() -> None:
            job = self.job(JobId(update.job_id))
            if job is not None:
                job.on_task_state(update)

        self.main.call(update_job)

    def request_splits(self, request: jobmaster_pb2.SplitRequest
                       ) -> jobmaster_pb2.SplitResponse:
        """The splits the job's enumerator hands a source reader now (waits for the main
        thread). A stale attempt is told to ask again later.

        Raises JobNotFoundError, and SplitEnumeratorError when the enumerator raised (the
        job then fails over).
        """
        job = self._known_job(JobId(request.job_id))
        attempt_id = ExecutionAttemptId(request.attempt_id)

        def answer() -> jobmaster_pb2.SplitResponse | None:
            if job.graph.by_attempt.get(attempt_id) is None:
                return jobmaster_pb2.SplitResponse(retry_after_ms=1000)  # a stale attempt
            try:
                return job.sources.request_splits(request.vertex_id, request.subtask_index,
                                                  request.checkpoint_passed)
            except InvalidJobError as err:
                # A source that can never read anything (a bounded path matching no
                # files): restarting cannot help.
                job.fail_terminal(common_pb2.ErrorInfo(
                    reason=common_pb2.SOURCE_ERROR, message=str(err),
                    exception_class=type(err).__name__))
                return None
            except Exception as err:  # user code of the enumerator
                job.fail(common_pb2.ErrorInfo(
                    reason=common_pb2.SOURCE_ERROR,
                    message=f"the split enumerator failed: {type(err).__name__}: {err}"))
                return None

        response = self.main.call(answer)
        if response is None:
            msg = "the split enumerator failed"
            raise SplitEnumeratorError(msg)
        return response

    def push_collect(self, batch: jobmaster_pb2.CollectBatch) -> bool:
        """Add a collect sink's batch to its job's results; False when the buffer stayed
        full for 5 s (the client is slow: the sink sends it again). Blocks for that long at
        most, never on the main thread: a slow client must not stall it.

        A failed attempt's late batch is dropped (True): the restarted attempt sends its
        own. Raises JobNotFoundError.
        """
        job = self.jobs.get(JobId(batch.job_id))  # read-only dict lookups off the main thread
        if job is None:
            msg = f"no job {batch.job_id}"
            raise JobNotFoundError(msg)
        if batch.attempt_id and ExecutionAttemptId(batch.attempt_id) not in job.graph.by_attempt:
            return True
        return job.collect.push(batch.arrow_ipc, wait=5.0)

    def acknowledge_checkpoint(self, request: jobmaster_pb2.AcknowledgeCheckpointRequest
                               ) -> None:
        """A task's part of a checkpoint (handed to the main thread; returns at once)."""
        self._to_checkpointing(JobId(request.job_id), lambda c: c.on_acknowledge(request))

    def decline_checkpoint(self, request: jobmaster_pb2.DeclineCheckpointRequest) -> None:
        """A task declined a checkpoint (handed to the main thread; returns at once)."""
        self._to_checkpointing(JobId(request.job_id), lambda c: c.on_decline(request))

    def report_end_of_data(self, job_id: JobId, attempt_id: ExecutionAttemptId) -> None:
        """A source task read all its input (handed to the main thread; returns at once)."""
        self._to_checkpointing(job_id, lambda c: c.on_end_of_data(attempt_id))

    def _to_checkpointing(self, job_id: JobId, fn: Callable[[JobCheckpointing], None]) -> None:
        """Hand a task's checkpoint report to the main thread (unknown jobs and jobs
        without checkpointing ignore it: they ended, or never asked)."""
        def run() -> None:
            job = self.job(job_id)
            if job is not None and job.checkpointing is not None and \
                    job.graph.status == common_pb2.JOB_RUNNING:
                fn(job.checkpointing)

        self.main.submit(run)

    # -- operations for clients (RPC threads; see dispatcher_servicer) ----------------------

    def submit_job(self, graph: jobgraph_pb2.JobGraph) -> JobId:
        """Check and submit a client's job (see :meth:`submit_durably`); returns its id.

        Raises InvalidJobError (JobGraphValidationError among them) for a graph that is
        malformed or whose sources cannot be loaded here, ConfigError, JobExistsError,
        JobNotStoredError, SnapshotMismatchError, SnapshotUnreadableError for a snapshot to
        start from that cannot be read, and InternalError for anything else (our bug: the
        traceback is logged).
        """
        validate_job_graph(graph)
        for vertex in graph.vertices:
            if vertex.source:
                try:
                    cloudpickle.loads(vertex.source)
                except Exception as err:  # whatever unpickling user objects raises
                    msg = (f"the source of '{vertex.name}' cannot be loaded on the "
                           f"JobMaster: {type(err).__name__}: {err}")
                    raise InvalidJobError(msg) from err
        try:
            return self.submit_durably(graph)
        except (ConfigError, JobExistsError, JobNotStoredError, SnapshotMismatchError):
            raise
        except (StateError, StorageError) as err:  # the snapshot to start from
            msg = f"the job cannot start from its savepoint: {err}"
            raise SnapshotUnreadableError(msg) from err
        except Exception as err:
            log.exception("submitting job %s failed", graph.job_id)
            msg = (f"the JobMaster failed to schedule the job ({type(err).__name__}: {err}); "
                   "this is a bug in weir, see the JobMaster log")
            raise InternalError(msg) from err

    def list_jobs(self, timeout: float = READ_TIMEOUT_S) -> list[jobmaster_pb2.JobSummary]:
        """Every known job, oldest first (waits for the main thread up to ``timeout``)."""
        return self.main.call(lambda: [j.graph.summary() for j in self.jobs.values()],
                              timeout)

    def job_details(self, job_id: JobId,
                    timeout: float = READ_TIMEOUT_S) -> jobmaster_pb2.JobDetails:
        """Raises JobNotFoundError (and TimeoutError when the main thread did not answer
        within ``timeout``)."""
        return self.main.call(self._known_job(job_id, timeout).details, timeout)

    def job_graph(self, job_id: JobId,
                  timeout: float = READ_TIMEOUT_S) -> jobgraph_pb2.JobGraph:
        """A job's graph without its code (vertices, edges, config; waits for the main
        thread). Raises JobNotFoundError."""
        job = self._known_job(job_id, timeout)

        def copy() -> jobgraph_pb2.JobGraph:
            graph = jobgraph_pb2.JobGraph(job_id=job.graph.job_graph.job_id,
                                          name=job.graph.job_graph.name)
            graph.config.update(job.graph.job_graph.config)
            for vertex in job.graph.job_graph.vertices:
                graph.vertices.add(
                    id=vertex.id, name=vertex.name, parallelism=vertex.parallelism,
                    max_parallelism=vertex.max_parallelism, operator_uids=vertex.operator_uids,
                    operator_names=vertex.operator_names,
                    inputs=[jobgraph_pb2.JobEdge(source_vertex=e.source_vertex,
                                                 partitioner=e.partitioner,
                                                 input_index=e.input_index) for e in vertex.inputs])
            return graph

        return self.main.call(copy, timeout)

    def cancel_job(self, job_id: JobId, timeout: float = READ_TIMEOUT_S) -> None:
        """Cancel a job (waits for the main thread to start it, up to ``timeout``). Raises
        JobNotFoundError."""
        self.main.call(self._known_job(job_id, timeout).cancel, timeout)

    def fetch_collect(self, job_id: JobId, max_batches: int, wait_s: float
                      ) -> dispatcher_pb2.FetchCollectResponse:
        """Up to ``max_batches`` of a job's results, waiting up to ``wait_s`` for the first
        (never on the main thread), with the job's status and failure, all within one
        message. Raises JobNotFoundError."""
        job = self._known_job(job_id)
        batches, end = job.collect.fetch(max_batches, wait_s, max_bytes=fetch_budget())
        response = dispatcher_pb2.FetchCollectResponse(arrow_ipc=batches, end_of_results=end,
                                                       status=job.graph.status)
        if job.graph.failure is not None:
            response.failure.CopyFrom(job.graph.failure)
            if response.failure.ByteSize() > FETCH_ENVELOPE_BYTES // 2:
                # The batches fill the rest of the message; the whole failure is in
                # GetJobDetails, which the client asks once the results end.
                response.failure.traceback = ""
                response.failure.message = response.failure.message[:4000]
        return response

    def cluster_overview(self, timeout: float = READ_TIMEOUT_S
                         ) -> dispatcher_pb2.ClusterOverview:
        """The TaskExecutors and slots (waits for the main thread up to ``timeout``)."""
        return self.main.call(self.overview, timeout)

    def overview(self) -> dispatcher_pb2.ClusterOverview:
        """Main thread: the TaskExecutors and slots."""
        overview = dispatcher_pb2.ClusterOverview(
            slots_total=self.resources.total_slots(), slots_free=self.resources.free_slots(),
            metrics_url=self.metrics_url, pid=os.getpid())
        for record in self.resources.task_executors.values():
            overview.task_executors.append(record.to_info())
        return overview

    def checkpoint_history(self, job_id: JobId, timeout: float = READ_TIMEOUT_S
                           ) -> dispatcher_pb2.CheckpointHistory:
        """A job's checkpoints and its last restore (waits for the main thread). Raises
        JobNotFoundError."""
        job = self._known_job(job_id, timeout)

        def history() -> dispatcher_pb2.CheckpointHistory:
            response = dispatcher_pb2.CheckpointHistory()
            if job.checkpointing is not None:
                coordinator = job.checkpointing.coordinator
                response.checkpoints.extend(coordinator.stats())
                response.completed_count = coordinator.counts["completed"]
                response.failed_count = coordinator.counts["failed"]
            if job.restored is not None:
                response.restored_checkpoint_id = job.restored.checkpoint_id
                response.restore_timestamp_ms = job.restore_timestamp_ms
            return response

        return self.main.call(history, timeout)

    def trigger_savepoint(self, request: jobmaster_pb2.SavepointRequest) -> str:
        """Take a savepoint (``request.terminate``: stop the job with it) and wait for it;
        returns its directory. A savepoint waits for a checkpoint in progress, then takes
        at most the checkpoint timeout.

        Raises JobNotFoundError, SavepointFailedError (the job keeps running) and
        OperationTimeoutError.
        """
        job = self._known_job(JobId(request.job_id))

        def start(done: Callable[[str | None, str | None], None]) -> None:
            job.savepoint(request, done)

        return self._await_outcome(start, "savepoint", 2 * job.checkpoint_timeout_s() + 60,
                                   SavepointFailedError)

    def rescale_job(self, job_id: JobId, parallelism: int,
                    operator_parallelism: dict[str, int]) -> jobmaster_pb2.JobChange:
        """Deploy a running job again at another parallelism (``parallelism``, or 0 for
        only the operators of ``operator_parallelism``, by uid) from a checkpoint taken
        now, and wait until it runs again.

        Raises JobNotFoundError, JobChangeRefusedError (nothing to do, or not possible),
        JobChangeFailedError (refused by the job or rolled back: it runs as before) and
        OperationTimeoutError.
        """
        job = self._known_job(job_id)
        graph = self.main.call(lambda: rescaled_graph(job.graph.job_graph, parallelism,
                                                      operator_parallelism))
        changed = sorted(u for new, old in zip(graph.vertices, job.graph.job_graph.vertices,
                                               strict=True)
                         if new.parallelism != old.parallelism for u in new.operator_uids if u)
        return self._change(job, "rescale", graph, changed, None)

    def update_job(self, job_id: JobId, new_graph: jobgraph_pb2.JobGraph,
                   allow_non_restored_state: bool) -> jobmaster_pb2.JobChange:
        """Replace a running job's program by ``new_graph`` (hot update), its state kept by
        operator uid, and wait until it runs again.

        Raises JobNotFoundError, InvalidJobError (JobGraphValidationError among them: the
        new program is malformed or cannot be loaded here), JobChangeRefusedError,
        JobChangeFailedError (its state does not fit the new program, or the job refused
        or rolled back the change: it runs as before) and OperationTimeoutError.
        """
        job = self._known_job(job_id)
        try:
            validate_job_graph(new_graph)
            graph, changed = self.main.call(lambda: updated_graph(job.graph.job_graph,
                                                                  new_graph))
        except (JobGraphValidationError, JobChangeRefusedError):
            raise
        except Exception as err:  # unpickling the new program's sources
            msg = (f"the new program cannot be loaded on the JobMaster: "
                   f"{type(err).__name__}: {err}")
            raise InvalidJobError(msg) from err

        def check(metadata: checkpoint_pb2.CheckpointMetadata) -> None:
            for warning in check_state_matches(metadata, f"checkpoint "
                                               f"{metadata.checkpoint_id}", graph,
                                               allow_non_restored_state):
                log.warning("job %s update: %s", job.job_id, warning)

        return self._change(job, "update", graph, changed, check)

    def _change(self, job: JobScheduler, kind: str, graph: jobgraph_pb2.JobGraph,
                changed: list[str],
                check: Callable[[checkpoint_pb2.CheckpointMetadata], None] | None
                ) -> jobmaster_pb2.JobChange:
        def start(done: Callable[[jobmaster_pb2.JobChange | None, str | None], None]) -> None:
            job.change(kind, graph, changed, done, check)

        # A checkpoint (at most its timeout, after one in progress), then a redeployment
        # that waits for slots at most slot.request.timeout.
        return self._await_outcome(
            start, kind, 2 * job.checkpoint_timeout_s() + job.slot_timeout_s() + 120,
            JobChangeFailedError)

    def _await_outcome(self, start: Callable[[Callable[[T | None, str | None], None]], None],
                       what: str, wait: float, failed: type[WeirError]) -> T:
        """Start a savepoint or change on the main thread and wait (up to ``wait`` s) for
        the ``done(result, error)`` it promises (a result unless an error); returns the
        result. Raises ``failed`` with the error, or OperationTimeoutError."""
        outcome: Future[tuple[T | None, str | None]] = Future()
        self.main.call(lambda: start(lambda result, error: outcome.set_result(
            (result, error))))
        try:
            result, error = outcome.result(timeout=wait)
        except TimeoutError:
            msg = f"the {what} did not end within {wait:.0f} s"
            raise OperationTimeoutError(msg) from None
        if error is not None:
            raise failed(error)
        assert result is not None, f"the {what} ended with neither a result nor an error"
        return result

    def dispose_savepoint(self, path: str) -> None:
        """Delete the savepoint at ``path`` after checking that it is one (storage I/O on
        the calling thread). Raises SavepointNotDisposedError."""
        try:
            dispose_savepoint(path, self.configuration)
        except (UserError, StorageError, StateError) as err:
            raise SavepointNotDisposedError(str(err)) from err

    def _known_job(self, job_id: JobId, timeout: float = READ_TIMEOUT_S) -> JobScheduler:
        """The job ``job_id`` (looked up on the main thread); raises JobNotFoundError."""
        job = self.main.call(lambda: self.job(job_id), timeout)
        if job is None:
            msg = f"no job with id {job_id!r} (`weir list` shows the known jobs)"
            raise JobNotFoundError(msg)
        return job
