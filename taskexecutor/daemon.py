"""The TaskExecutor daemon: offers slots to the JobMaster and runs the tasks deployed to them.

Threads: the gRPC server's pool (SubmitTask/CancelTask/ReleaseJob only start, flag or
release things), one heartbeat thread (registration and the heartbeat stream), one mailbox
thread per task, and the shuffle environment's network threads.

A TaskExecutor whose shuffle environment can no longer do its part (its data server's accept
thread died: no consumer could read what its tasks produce) says so in its heartbeats; the
JobMaster removes it and fails over its tasks, and the TaskExecutor exits with the reason
instead of registering again (a supervisor restarts it with a working data server).

The TaskExecutorService servicer only translates: requests become calls of
:class:`TaskExecutor`, whose domain errors become status codes in one place
(:data:`STATUS_CODES`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.barrier import CheckpointBarrier
from weir.core import options
from weir.core.addresses import (
    HostChoice,
    join_host_port,
    local_address_toward,
    metrics_host,
    metrics_url,
    taskexecutor_hosts,
)
from weir.core.config import Configuration
from weir.core.errors import ConfigError, WeirError
from weir.core.heartbeat import RpcFailureThreshold, RpcOutcome, classify
from weir.core.ids import CheckpointId, ExecutionAttemptId, JobId, ResourceId
from weir.core.metric_names import (
    CHANGELOG_STORAGE_METRICS,
    MATERIALIZATION_METRICS,
    TASK_METRICS,
    TASKEXECUTOR_METRICS,
    families,
    histogram_families,
)
from weir.core.metrics import CallbackCollector, Health, HealthChecks, MetricsServer
from weir.core.records import MIN_WATERMARK
from weir.core.rpc import SMALL_MESSAGE_BYTES, create_server, method_limits
from weir.core.secrets import auth_token
from weir.core.tls import TlsFiles
from weir.proto import (
    common_pb2,
    jobgraph_pb2,
    jobmaster_pb2,
    taskexecutor_pb2,
    taskexecutor_pb2_grpc,
)
from weir.shuffle.api import ShuffleEnvironmentContext
from weir.shuffle.loader import load_shuffle_service_factory
from weir.state.local_recovery import (
    local_state_dir,
    local_state_inventory,
    local_state_root,
    remove_job_state,
)
from weir.state.options import ROCKSDB_LOCALDIR
from weir.taskexecutor import options as te_options
from weir.taskexecutor.checkpointing import UploadPool
from weir.taskexecutor.jobmaster_gateway import JobMasterGateway
from weir.taskexecutor.local_dirs import DirectoryLock, empty_directory, sweep_abandoned
from weir.taskexecutor.task import Task
from weir.taskexecutor.user_metrics import MetricRegistry

log = logging.getLogger(__name__)


def rocksdb_dir(configuration: Configuration, working_dir: Path, resource_id: str) -> Path:
    """Where a TaskExecutor's RocksDB instances go: ``<working dir>/rocksdb``, or with
    ``state.backend.rocksdb.localdir`` ``<localdir>/weir-tm-<resource id>``. Either is
    this TaskExecutor's alone and emptied when it starts, so the instances of a killed one
    do not stay on the disk (a TaskExecutor started again with the same resource id)."""
    base = configuration.get(ROCKSDB_LOCALDIR)
    return Path(base) / f"weir-tm-{resource_id}" if base else working_dir / "rocksdb"


TERMINAL = {common_pb2.FINISHED, common_pb2.CANCELED, common_pb2.FAILED}
#: Longest a stopping TaskExecutor waits for the JobMaster to take its deregistration.
DEREGISTRATION_TIMEOUT_S = 5.0


class SlotNotFoundError(WeirError):
    """A deployment names a slot this TaskExecutor does not offer (its allocation is of
    another TaskExecutor, or of a registration with more slots)."""


class TaskNotFoundError(WeirError):
    """A request names a task attempt this TaskExecutor does not run (it ended, or was
    never deployed here)."""


#: The status each domain error of the TaskExecutor answers with (its message is the
#: details); other exceptions end the call as gRPC ends one whose handler raised.
STATUS_CODES: dict[type[WeirError], grpc.StatusCode] = {
    SlotNotFoundError: grpc.StatusCode.FAILED_PRECONDITION,
    TaskNotFoundError: grpc.StatusCode.NOT_FOUND,
}


def request_limits() -> dict[str, int]:
    """What each TaskExecutor RPC may receive (see weir.core.rpc.create_server).

    A deployment carries its vertex's pickled chain and source, as large as the submitted
    JobGraph could make them, so SubmitTask keeps the server's limit (MAX_MESSAGE_BYTES).
    The rest (cancel, release, checkpoint trigger and notification) is control traffic.
    """
    service = taskexecutor_pb2.DESCRIPTOR.services_by_name["TaskExecutorService"]
    return method_limits(service, SMALL_MESSAGE_BYTES, SubmitTask=None)


class TaskExecutor:
    """One TaskExecutor process (or, in a mini cluster, one in-process instance).

    Example:
        >>> te = TaskExecutor("127.0.0.1:6123", Configuration(), num_slots=2)
        >>> te.num_slots
        2
    """

    def __init__(self, jobmaster_address: str, configuration: Configuration,
                 num_slots: int | None = None) -> None:
        self.configuration = configuration
        self.jobmaster_address = jobmaster_address
        self.num_slots = num_slots or configuration.get(te_options.NUM_TASK_SLOTS)
        #: What this TaskExecutor binds and advertises; chosen in start().
        self.hosts: HostChoice | None = None
        self.resource_id = ResourceId(configuration.get(te_options.RESOURCE_ID)
                                      or f"te-{secrets.token_hex(4)}")
        self._token = auth_token(configuration)
        self._tls = TlsFiles.from_conf(configuration)
        #: Kept across restarts (same resource id): task-local state lives here.
        self.working_dir = Path(configuration.get(te_options.WORKING_DIR) or
                                Path(tempfile.gettempdir()) / f"weir-tm-{self.resource_id}")
        # Without a fixed identity nothing could ever find the directory again.
        self._ephemeral_working_dir = not (configuration.get(te_options.WORKING_DIR)
                                           or configuration.get(te_options.RESOURCE_ID))
        self.local_state_dir = local_state_dir(configuration, self.working_dir)
        #: Where this TaskExecutor's RocksDB instances go (see :func:`rocksdb_dir`).
        self.rocksdb_dir = rocksdb_dir(configuration, self.working_dir, self.resource_id)
        self._directory_locks: list[DirectoryLock] = []
        self._tasks: dict[ExecutionAttemptId, Task] = {}
        self._slot_of: dict[ExecutionAttemptId, int] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        #: Tells this process from another one that claims the same resource id.
        self.instance_id = secrets.token_hex(8)
        #: The current registration at the JobMaster; heartbeats carry it.
        self.registration_id = ""
        self.jobmaster_lost = threading.Event()
        self._registered = threading.Event()
        self._gateway: JobMasterGateway | None = None
        self._server: grpc.Server | None = None
        self._metrics: MetricsServer | None = None
        self._heartbeat_thread: threading.Thread | None = None
        #: Set to end the current heartbeat stream (its threads wait on it, not on stop).
        self._heartbeat_ended: threading.Event | None = None
        self._started = time.monotonic()
        self._upload_pool = UploadPool(configuration.get(checkpoint_options.UPLOAD_THREADS))
        #: The user metrics of the tasks (RuntimeContext.get_metrics_group()), served with
        #: the TaskExecutor's own on /metrics.
        self.user_metrics = MetricRegistry()
        self._samples: dict[ExecutionAttemptId, tuple[float, float, float, float]] = {}
        self._rates: dict[ExecutionAttemptId, tuple[float, float, float]] = {}
        self.rpc_address = ""
        self.data_address = ""
        self.metrics_url = ""
        self.fatal_error: str | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Bind the data server, the gRPC server and the metrics endpoint, and start
        registering with the JobMaster (a thread of its own). Raises ConfigError when the
        address to advertise cannot be chosen (see :meth:`_choose_hosts`), UserError when
        a port cannot be bound or another process holds this TaskExecutor's directories."""
        hosts = self.hosts = self._choose_hosts()
        self._claim_directories()
        try:
            self._start_serving(hosts)
        except BaseException:
            self._release_directories()
            raise

    def _start_serving(self, hosts: HostChoice) -> None:
        factory = load_shuffle_service_factory(self.configuration)
        self.shuffle = factory.create_shuffle_environment(ShuffleEnvironmentContext(
            self.configuration, self.resource_id, hosts.advertised, hosts.bind))
        self.data_address = self.shuffle.start()
        # Before the server: every task deployed through it reports through the gateway.
        self._gateway = JobMasterGateway(self.jobmaster_address, self._token, self._tls)
        self._server, port = create_server(
            hosts.bind, self.configuration.get(te_options.RPC_PORT), self._token,
            self._add_servicer, limits=request_limits(), tls=self._tls)
        self.rpc_address = join_host_port(hosts.advertised, port)
        registry = CollectorRegistry()
        registry.register(CallbackCollector(self._collect_metrics))
        registry.register(self.user_metrics)
        metrics_bind = self.configuration.get(options.METRICS_HOST)
        self._metrics = MetricsServer(metrics_bind,
                                      self.configuration.get(options.METRICS_PORT), registry,
                                      HealthChecks(self.liveness, self.readiness))
        self.metrics_url = metrics_url(metrics_host(metrics_bind, hosts), self._metrics.port)
        self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop,
                                                  name="heartbeat", daemon=True)
        self._heartbeat_thread.start()
        log.info("TaskExecutor %s started: rpc %s, data %s, %d slots, metrics %s "
                 "(bound to %s; advertising %s: %s)", self.resource_id, self.rpc_address,
                 self.data_address, self.num_slots, self.metrics_url, hosts.bind,
                 hosts.advertised, hosts.reason)

    def _claim_directories(self) -> None:
        """Lock this TaskExecutor's directories (see taskexecutor/local_dirs.py), empty its
        RocksDB directory of what an earlier run left (it was killed: a RocksDB instance is
        never reopened, a restore starts from a checkpoint), and remove the directories of
        TaskExecutors with random resource ids that are gone. Raises DirectoryInUseError
        when another live process holds one of them."""
        owned = [(self.working_dir, self._ephemeral_working_dir)]
        rocksdb_apart = not self.rocksdb_dir.is_relative_to(self.working_dir)
        if rocksdb_apart:  # under state.backend.rocksdb.localdir, named by the resource id
            owned.append((self.rocksdb_dir,
                          not self.configuration.get(te_options.RESOURCE_ID)))
        for path, ephemeral in owned:
            try:
                self._directory_locks.append(DirectoryLock.acquire(path, ephemeral=ephemeral))
            except BaseException:
                self._release_directories()
                raise
        if rocksdb_apart:
            empty_directory(self.rocksdb_dir)
        else:
            shutil.rmtree(self.rocksdb_dir, ignore_errors=True)
        # Where directories of random resource ids are made (see __init__, rocksdb_dir).
        sweep_abandoned(Path(tempfile.gettempdir()))
        if (localdir := self.configuration.get(ROCKSDB_LOCALDIR)):
            sweep_abandoned(Path(localdir))

    def _release_directories(self) -> None:
        for lock in self._directory_locks:
            lock.release()
        self._directory_locks.clear()

    def _choose_hosts(self) -> HostChoice:
        """What to bind and advertise (see weir.core.addresses.taskexecutor_hosts). Raises
        ConfigError when the bind host is a wildcard, taskmanager.host is unset, and no
        interface toward the JobMaster's address can be found."""
        def toward_jobmaster() -> str:
            try:
                return local_address_toward(self.jobmaster_address)
            except (OSError, ValueError) as err:
                msg = (f"taskmanager.bind-host binds every interface and taskmanager.host is "
                       f"unset, but no interface toward the JobMaster at "
                       f"{self.jobmaster_address} (--jobmaster) was found to advertise "
                       f"({err}): set taskmanager.host to this TaskExecutor's address")
                raise ConfigError(msg) from err

        return taskexecutor_hosts(self.configuration.get(te_options.HOST),
                                  self.configuration.get(te_options.BIND_HOST),
                                  toward_jobmaster)

    # -- health probes (HTTP threads: flags and thread states only, never ``_lock``) -------

    def liveness(self) -> Health:
        """``/healthz``: alive until it stops, or a fatal error (or a dead heartbeat
        thread) stopped its work."""
        if self.fatal_error is not None:
            return Health(False, "failed", self.fatal_error)
        if self._stopped.is_set():
            return Health(False, "stopping", "the TaskExecutor is shutting down")
        thread = self._heartbeat_thread
        if thread is not None and not thread.is_alive():
            return Health(False, "failed", "its heartbeat thread ended; see its log")
        return Health(True, "alive", f"{len(self._tasks)} task(s) deployed")

    def readiness(self) -> Health:
        """``/readyz``: ready while it is registered with the JobMaster and healthy."""
        if self.fatal_error is not None or self._stopped.is_set():
            return Health(False, "not ready", self.fatal_error or
                          "the TaskExecutor is shutting down")
        if (unhealthy := self._unhealthy_reason()) is not None:
            return Health(False, "not ready", f"unhealthy: {unhealthy}")
        if not self._registered.is_set():
            if self.jobmaster_lost.is_set():
                return Health(False, "not ready", f"lost the JobMaster at "
                              f"{self.jobmaster_address}; registering with it again")
            return Health(False, "not ready",
                          f"registering with the JobMaster at {self.jobmaster_address}")
        return Health(True, "ready", f"registered with the JobMaster at "
                                     f"{self.jobmaster_address}")

    def _add_servicer(self, server: grpc.Server) -> None:
        taskexecutor_pb2_grpc.add_TaskExecutorServiceServicer_to_server(
            TaskExecutorServicer(self), server)

    def wait_registered(self, timeout: float) -> bool:
        return self._registered.wait(timeout)

    def stop(self, reason: str = "stopped") -> None:
        """Leave the JobMaster, then cancel every task, then stop serving. Safe to call
        more than once, and after the TaskExecutor stopped itself on a fatal error
        (``stopped`` set, ``fatal_error``).

        ``reason`` (e.g. "SIGTERM") reaches the jobs' failure history: the JobMaster is told
        first (see :meth:`_deregister`), so it fails over the tasks here at once and takes
        their cancellation for this TaskExecutor leaving, not for failures of their own.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._stopped.set()  # from here on the heartbeat loop never registers again
        self._deregister(reason)
        if (ended := self._heartbeat_ended) is not None:
            ended.set()  # the heartbeat threads wake now, not at their next interval
        with self._lock:
            tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            task.join(timeout=5)
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join(timeout=5)
        if self._server is not None:
            self._server.stop(grace=1).wait(5)
        self.shuffle.close()
        self._upload_pool.shutdown()
        if self._metrics is not None:
            self._metrics.stop()
        if self._gateway is not None:
            self._gateway.close()
        for lock in self._directory_locks:
            if lock.ephemeral:  # a random resource id's: nothing would find it again
                shutil.rmtree(lock.path, ignore_errors=True)
        self._release_directories()
        log.info("TaskExecutor %s stopped", self.resource_id)

    def _deregister(self, reason: str) -> None:
        """Tell the JobMaster this TaskExecutor leaves, waiting at most
        :data:`DEREGISTRATION_TIMEOUT_S` for it to fail over the tasks here. Skipped when
        there is no registration to end (never registered, the JobMaster lost, or a fatal
        error it was told of in the heartbeats); a JobMaster that cannot be reached is
        logged and the shutdown goes on: the heartbeat stream closing, or at worst
        ``heartbeat.timeout``, tells it instead."""
        gateway, registration_id = self._gateway, self.registration_id
        if gateway is None or not registration_id or self.jobmaster_lost.is_set() or \
                self.fatal_error is not None:
            return
        started = time.monotonic()
        try:
            gateway.disconnect(self.resource_id, registration_id, reason,
                               DEREGISTRATION_TIMEOUT_S)
        except grpc.RpcError as err:
            log.warning("could not deregister from the JobMaster at %s within %.0f s (%s); "
                        "shutting down anyway: it notices when the heartbeat stream closes, "
                        "or after heartbeat.timeout", self.jobmaster_address,
                        DEREGISTRATION_TIMEOUT_S, err.code().name)
            return
        log.info("deregistered from the JobMaster at %s (%s) in %.0f ms",
                 self.jobmaster_address, reason, (time.monotonic() - started) * 1000)

    @property
    def stopped(self) -> threading.Event:
        return self._stopped

    # -- tasks ------------------------------------------------------------------------------

    def submit_task(self, tdd: jobgraph_pb2.TaskDeploymentDescriptor) -> None:
        """Start the task ``tdd`` deploys in its slot (an RPC thread; returns once its
        thread started). A deployment of an attempt that runs here already is ignored.
        Raises SlotNotFoundError."""
        slot = int(tdd.allocation_id.rsplit(":", 1)[-1]) if ":" in tdd.allocation_id else -1
        if not 0 <= slot < self.num_slots:
            msg = f"{self.resource_id} has no slot {slot}"
            raise SlotNotFoundError(msg)
        config = self.configuration.merged(dict(tdd.config))
        config = config.merged({ROCKSDB_LOCALDIR.key: str(rocksdb_dir(
            config, self.working_dir, self.resource_id))})
        assert self._gateway is not None, "tasks are deployed once the TaskExecutor started"
        task = Task(tdd, self.shuffle, self._gateway, config, self._on_task_state,
                    self._upload_pool, local_state_root(config, self.working_dir),
                    self.user_metrics)
        with self._lock:
            if task.attempt_id in self._tasks:
                return
            self._tasks[task.attempt_id] = task
            self._slot_of[task.attempt_id] = slot
        task.start()

    def cancel_task(self, attempt_id: ExecutionAttemptId) -> None:
        with self._lock:
            task = self._tasks.get(attempt_id)
        if task is not None:
            task.cancel()

    def trigger_checkpoint(self, attempt_id: ExecutionAttemptId, barrier: CheckpointBarrier
                           ) -> None:
        """Start a checkpoint at the source task ``attempt_id`` (an RPC thread; the task
        snapshots and emits ``barrier`` on its own thread). Raises TaskNotFoundError."""
        with self._lock:
            task = self._tasks.get(attempt_id)
        if task is None:
            msg = f"no task {attempt_id} on {self.resource_id}"
            raise TaskNotFoundError(msg)
        task.trigger_checkpoint(barrier)

    def notify_checkpoint(self, attempt_ids: Iterable[ExecutionAttemptId],
                          checkpoint_id: CheckpointId, complete: bool) -> None:
        """The coordinator completed (or aborted) ``checkpoint_id``: tell the tasks
        ``attempt_ids`` that run here (an RPC thread; a stuck task drops it)."""
        with self._lock:
            tasks = [self._tasks.get(a) for a in attempt_ids]
        for task in tasks:
            if task is not None:
                task.notify_checkpoint(checkpoint_id, complete)

    def release_job(self, job_id: JobId) -> None:
        with self._lock:
            for attempt_id, task in list(self._tasks.items()):
                if task.job_id == job_id:
                    task.cancel()
                    if task.state in TERMINAL:
                        del self._tasks[attempt_id]
                        self._slot_of.pop(attempt_id, None)
        self.shuffle.release_partitions_of_job(job_id)
        remove_job_state(self.local_state_dir, job_id)
        from weir.checkpoint.changelog_storage import close_job

        close_job(job_id)

    def _on_task_state(self, task: Task, state: common_pb2.ExecutionState,
                       error: common_pb2.ErrorInfo | None) -> None:
        """Called on the task's thread."""
        update = jobmaster_pb2.TaskExecutionStateUpdate(
            job_id=task.job_id, attempt_id=task.attempt_id, state=state,
            metrics=self._task_metrics(task))
        if state == common_pb2.RUNNING and task.restore_stats is not None:
            update.restore.CopyFrom(task.restore_stats)
        if error is not None:
            update.error.CopyFrom(error)
        assert self._gateway is not None
        if state in TERMINAL:
            with self._lock:
                self._tasks.pop(task.attempt_id, None)
                self._slot_of.pop(task.attempt_id, None)
                self._samples.pop(task.attempt_id, None)
                self._rates.pop(task.attempt_id, None)
        if not self._stopped.is_set() or state in TERMINAL:
            self._gateway.update_task_state(update, attempts=5 if state in TERMINAL else 1)

    def _task_metrics(self, task: Task, sample: bool = False) -> jobmaster_pb2.TaskMetrics:
        """Counters of ``task``; the per-second rates are re-sampled only when ``sample``
        (by the heartbeat thread, once per interval), so scrapes do not skew them."""
        c = task.counters
        bytes_in = sum(m.get("bytesIn", 0.0) for m in task.input_metrics())
        bytes_out = sum(m.get("bytesOut", 0.0) for m in task.output_metrics())
        if sample:
            now = time.monotonic()
            current = (now, c.busy_s, c.idle_s, c.backpressured_s)
            previous = self._samples.get(task.attempt_id)
            self._samples[task.attempt_id] = current
            if previous is not None and now - previous[0] > 0.05:
                span = now - previous[0]
                rates = [min(1000.0, (current[i] - previous[i]) / span * 1000)
                         for i in (1, 2, 3)]
                self._rates[task.attempt_id] = (rates[0], rates[1], rates[2])
        busy, idle, backpressured = self._rates.get(task.attempt_id, (0.0, 0.0, 0.0))
        metrics = jobmaster_pb2.TaskMetrics(
            attempt_id=task.attempt_id, records_in=c.records_in, records_out=c.records_out,
            bytes_in=int(bytes_in), bytes_out=int(bytes_out), busy_ms_per_s=busy,
            idle_ms_per_s=idle, back_pressured_ms_per_s=backpressured)
        if task.tdd.input_gates:
            # As Flink's gauge: a task with inputs has an input watermark, Long.MIN_VALUE
            # until the first one arrives; a source has none.
            metrics.input_watermark = c.input_watermark if c.input_watermark is not None \
                else MIN_WATERMARK
        if c.output_watermark is not None:
            metrics.output_watermark = c.output_watermark
        return metrics

    @staticmethod
    def _event_time_metrics(task: Task) -> list[tuple[str, float]]:
        c = task.counters
        out = [(name, float(value)) for name, value in (
            ("currentInputWatermark", c.input_watermark),
            ("currentOutputWatermark", c.output_watermark)) if value is not None]
        dropped = task.late_records_dropped()
        if dropped is not None:
            out.append(("numLateRecordsDropped", float(dropped)))
        return out

    @staticmethod
    def _pool_metrics(task: Task) -> list[tuple[str, float]]:
        writers = task.output_metrics()
        gates = task.input_metrics()
        return [("outPoolUsage", max((w.get("outPoolUsage", 0.0) for w in writers), default=0.0)),
                ("inPoolUsage", max((g.get("inPoolUsage", 0.0) for g in gates), default=0.0)),
                ("numBuffersOut", sum(w.get("buffersOut", 0.0) for w in writers)),
                ("numBuffersInRemote", sum(g.get("buffersInRemote", 0.0) for g in gates)),
                ("inputQueueBytes", sum(g.get("inputQueueBytes", 0.0) for g in gates)),
                ("debloatedBufferSize",
                 min((g["debloatedBufferSize"] for g in gates if "debloatedBufferSize" in g),
                     default=0.0)),
                ("estimatedTimeToConsumeBuffersMs",
                 max((g.get("estimatedTimeToConsumeBuffersMs", 0.0) for g in gates),
                     default=0.0))]

    def tasks(self) -> list[Task]:
        with self._lock:
            return list(self._tasks.values())

    # -- registration and heartbeats --------------------------------------------------------

    def _unhealthy_reason(self) -> str | None:
        return self.shuffle.unhealthy_reason()

    def _stop_unhealthy(self, reason: str) -> None:
        """Stop for good: a TaskExecutor that cannot serve its data must not offer slots."""
        self.fatal_error = f"the TaskExecutor cannot do its work: {reason}"
        log.error("%s; shutting down", self.fatal_error)
        self._stopped.set()

    def _heartbeat_loop(self) -> None:
        timeout = self.configuration.get(te_options.REGISTRATION_TIMEOUT)
        deadline = time.monotonic() + timeout
        backoff = 0.1
        # Whether the JobMaster ever accepted this process (and so reached its address).
        registered_once = False
        while not self._stopped.is_set():
            if (reason := self._unhealthy_reason()) is not None:
                self._stop_unhealthy(reason)
                return
            try:
                response = self._register()
            except grpc.RpcError as err:
                code = err.code()
                refused = (f"the JobMaster at {self.jobmaster_address} refused the "
                           f"registration: {err.details()}")
                if code == grpc.StatusCode.ALREADY_EXISTS or (
                        code == grpc.StatusCode.INVALID_ARGUMENT and not registered_once):
                    # Another live process holds our resource id, or the JobMaster cannot
                    # reach the address we advertise: retrying cannot help (Flink's
                    # TaskExecutor also ends on a rejected registration).
                    self.fatal_error = refused
                    log.error("%s; shutting down", self.fatal_error)
                    self._stopped.set()
                    return
                if time.monotonic() > deadline:
                    self.fatal_error = refused if code == grpc.StatusCode.INVALID_ARGUMENT \
                        else (f"could not register with the JobMaster at "
                              f"{self.jobmaster_address} (--jobmaster) within {timeout:.0f} s "
                              f"({code.name}: {err.details()})")
                    log.error("%s; shutting down", self.fatal_error)
                    self._stopped.set()
                    return
                if backoff == 0.1 and code == grpc.StatusCode.INVALID_ARGUMENT:
                    # It reached this address before: a network fault between the two,
                    # which may heal within the registration timeout.
                    log.warning("%s; trying again until taskmanager.registration.timeout "
                                "(%.0f s)", refused, timeout)
                elif backoff == 0.1 and code in (grpc.StatusCode.UNAVAILABLE,
                                                 grpc.StatusCode.DEADLINE_EXCEEDED):
                    # Once per outage (the back-off grows from its start): a JobMaster
                    # starting late is normal, a wrong --jobmaster shows here at once.
                    log.warning("cannot reach the JobMaster at %s (--jobmaster): %s; "
                                "retrying until taskmanager.registration.timeout (%.0f s)",
                                self.jobmaster_address, err.details() or code.name, timeout)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            backoff = 0.1
            registered_once = True
            self.registration_id = response.registration_id
            self._registered.set()
            self.jobmaster_lost.clear()
            log.info("registered at the JobMaster %s", self.jobmaster_address)
            self._run_heartbeats(response.heartbeat_interval_ms / 1000,
                                 response.heartbeat_timeout_ms / 1000)
            self._registered.clear()
            if self._stopped.is_set():
                return
            if (reason := self._unhealthy_reason()) is not None:
                # The JobMaster ended the stream on hearing it (or was lost meanwhile).
                self._stop_unhealthy(reason)
                return
            self.jobmaster_lost.set()
            # The JobMaster forgot us (or died): our tasks cannot report anywhere.
            for task in self.tasks():
                task.cancel()
            deadline = time.monotonic() + timeout
            log.warning("lost the JobMaster %s; registering again", self.jobmaster_address)

    def _register(self) -> jobmaster_pb2.RegisterTaskExecutorResponse:
        assert self._gateway is not None
        return self._gateway.register(jobmaster_pb2.RegisterTaskExecutorRequest(
            resource_id=self.resource_id, rpc_address=self.rpc_address,
            data_address=self.data_address, num_slots=self.num_slots,
            metrics_url=self.metrics_url, pid=os.getpid(), instance_id=self.instance_id,
            local_state=[jobmaster_pb2.LocalStateEntry(job_id=job, owner=owner,
                                                       checkpoint_id=checkpoint)
                         for job, owner, checkpoint in
                         local_state_inventory(self.local_state_dir)]))

    def _run_heartbeats(self, interval: float, timeout: float) -> None:
        """Keep the heartbeat stream of the current registration until it ends: closed by
        either side, silent for ``timeout``, or the JobMaster unreachable (below)."""
        gateway = self._gateway
        assert gateway is not None
        ended = self._heartbeat_ended = threading.Event()
        if self._stopped.is_set():
            return
        last_seen = [time.monotonic()]
        # A silent JobMaster is asked again over a new connection every interval; when that
        # many calls in a row cannot reach it, waiting for the timeout is pointless.
        unreachable = RpcFailureThreshold(
            self.configuration.get(options.HEARTBEAT_RPC_FAILURE_THRESHOLD),
            round(interval * 1000))

        # Both threads end with ``ended``, not with ``stopped``: a stop deregisters first,
        # and the stream closing before that would make the JobMaster lose this
        # TaskExecutor with a connection failure as the reason.
        def outgoing() -> Iterator[jobmaster_pb2.TaskExecutorHeartbeat]:
            while not ended.is_set():
                tasks = self.tasks()
                unhealthy = self._unhealthy_reason()
                if unhealthy is not None:
                    log.error("reporting this TaskExecutor unhealthy to the JobMaster: %s",
                              unhealthy)
                yield jobmaster_pb2.TaskExecutorHeartbeat(
                    resource_id=self.resource_id, registration_id=self.registration_id,
                    running_attempts=[t.attempt_id for t in tasks],
                    task_metrics=[self._task_metrics(t, sample=True) for t in tasks],
                    unhealthy_reason=unhealthy or "")
                ended.wait(interval)

        call = gateway.heartbeats(outgoing())

        def watchdog() -> None:
            probed_at = 0.0
            while not ended.wait(interval):
                silent = time.monotonic() - last_seen[0]
                if silent > timeout:
                    log.warning("no heartbeat from the JobMaster for %.1f s", silent)
                    call.cancel()
                    return
                if last_seen[0] > probed_at:
                    # A heartbeat arrived since the last probe: failures are no longer in
                    # a row.
                    unreachable.record(RpcOutcome.REACHED)
                if not unreachable.enabled or silent < 2 * interval:
                    continue  # no heartbeat overdue by a whole interval yet
                probed_at = time.monotonic()
                code = gateway.probe(interval)
                if ended.is_set():
                    break
                if unreachable.record(classify(code)):
                    log.warning("the JobMaster at %s cannot be reached: %d calls in a row "
                                "failed (%s) after %.1f s without a heartbeat "
                                "(heartbeat.rpc-failure-threshold %d); treating it as lost",
                                self.jobmaster_address, unreachable.failures, code.name,
                                time.monotonic() - last_seen[0], unreachable.threshold)
                    call.cancel()
                    return
            # Ended: by the stream's end, or by a stop once it deregistered (a JobMaster
            # that stopped answering would leave the reader waiting).
            call.cancel()

        watcher = threading.Thread(target=watchdog, name="heartbeat-watchdog", daemon=True)
        watcher.start()
        try:
            for message in call:
                last_seen[0] = time.monotonic()
                for attempt_id in message.unknown_attempts:
                    self.cancel_task(ExecutionAttemptId(attempt_id))
        except grpc.RpcError as err:
            if not self._stopped.is_set():
                log.warning("heartbeat stream to the JobMaster ended: %s", err.code())
        finally:
            ended.set()
            call.cancel()
            watcher.join(timeout=5)

    # -- metrics ----------------------------------------------------------------------------

    def _collect_metrics(self) -> list[Metric]:
        with self._lock:
            tasks = list(self._tasks.values())
            busy = len({self._slot_of.get(t.attempt_id) for t in tasks})
        te = families(TASKEXECUTOR_METRICS)
        te["slots_total"].add_metric([], self.num_slots)
        te["slots_used"].add_metric([], busy)
        te["uptime_seconds"].add_metric([], time.monotonic() - self._started)
        per_task = families(TASK_METRICS)
        for task in tasks:
            m = self._task_metrics(task)
            values = [task.job_id, task.tdd.task_name, str(task.tdd.subtask_index)]
            for name, value in (("numRecordsIn", m.records_in),
                                ("numRecordsOut", m.records_out),
                                ("numBytesIn", m.bytes_in), ("numBytesOut", m.bytes_out),
                                ("busyTimeMsPerSecond", m.busy_ms_per_s),
                                ("idleTimeMsPerSecond", m.idle_ms_per_s),
                                ("backPressuredTimeMsPerSecond", m.back_pressured_ms_per_s),
                                *self._pool_metrics(task), *self._event_time_metrics(task),
                                ("checkpointAlignmentTime",
                                 task.counters.checkpoint_alignment_ms * 1_000_000),
                                ("checkpointStartDelayNanos",
                                 task.counters.checkpoint_start_delay_ms * 1_000_000)):
                per_task[name].add_metric(values, value)
        return [*te.values(), *per_task.values(), *_changelog_metrics()]


def _changelog_metrics() -> list[Metric]:
    """The changelog state backend's: its log storages and materializations in this process
    (none when no job turned the changelog on)."""
    from weir.checkpoint.changelog_storage import all_storages
    from weir.state.changelog import live_materialization_metrics

    storages, backends = all_storages(), live_materialization_metrics()
    if not storages and not backends:
        return []
    logs = families(CHANGELOG_STORAGE_METRICS)
    distributions = histogram_families(CHANGELOG_STORAGE_METRICS)
    for storage in storages:
        location = f"{storage.storage.base_uri}/{storage.prefix}"
        for name, value in storage.metrics.snapshot().items():
            logs[name].add_metric([location], value)
        for name, histogram in storage.metrics.histograms().items():
            distributions[name].add_metric([location], histogram.buckets(), histogram.sum)
    materializations = families(MATERIALIZATION_METRICS)
    for metrics in backends:
        for name, value in metrics.snapshot().items():
            materializations[name].add_metric([metrics.job_id, metrics.owner], value)
    return [*logs.values(), *distributions.values(), *materializations.values()]


class TaskExecutorServicer(taskexecutor_pb2_grpc.TaskExecutorServiceServicer):
    """The TaskExecutorService RPCs (called by the JobMaster) of one TaskExecutor."""

    def __init__(self, te: TaskExecutor) -> None:
        self._te = te

    @contextlib.contextmanager
    def _domain_errors(self, context: grpc.ServicerContext) -> Iterator[None]:
        """Ends the call with the status of a domain error raised inside (see
        :data:`STATUS_CODES`), its message as details; other exceptions pass."""
        try:
            yield
        except WeirError as err:
            code = next((STATUS_CODES[c] for c in type(err).__mro__ if c in STATUS_CODES),
                        None)
            if code is None:
                raise
            context.abort(code, str(err))

    def SubmitTask(  # noqa: N802
            self, request: jobgraph_pb2.TaskDeploymentDescriptor,
            context: grpc.ServicerContext) -> taskexecutor_pb2.TaskAck:
        with self._domain_errors(context):
            self._te.submit_task(request)
        return taskexecutor_pb2.TaskAck()

    def CancelTask(  # noqa: N802
            self, request: taskexecutor_pb2.CancelTaskRequest,
            context: grpc.ServicerContext) -> taskexecutor_pb2.TaskAck:
        self._te.cancel_task(ExecutionAttemptId(request.attempt_id))
        return taskexecutor_pb2.TaskAck()

    def ReleaseJob(  # noqa: N802
            self, request: taskexecutor_pb2.ReleaseJobRequest,
            context: grpc.ServicerContext) -> taskexecutor_pb2.TaskAck:
        self._te.release_job(JobId(request.job_id))
        return taskexecutor_pb2.TaskAck()

    def TriggerCheckpoint(  # noqa: N802
            self, request: taskexecutor_pb2.TriggerCheckpointRequest,
            context: grpc.ServicerContext) -> taskexecutor_pb2.TaskAck:
        barrier = CheckpointBarrier(CheckpointId(request.checkpoint_id), request.timestamp_ms,
                                    request.options)
        with self._domain_errors(context):
            self._te.trigger_checkpoint(ExecutionAttemptId(request.attempt_id), barrier)
        return taskexecutor_pb2.TaskAck()

    def NotifyCheckpoint(  # noqa: N802
            self, request: taskexecutor_pb2.CheckpointNotification,
            context: grpc.ServicerContext) -> taskexecutor_pb2.TaskAck:
        self._te.notify_checkpoint(map(ExecutionAttemptId, request.attempt_ids),
                                   CheckpointId(request.checkpoint_id), request.complete)
        return taskexecutor_pb2.TaskAck()
