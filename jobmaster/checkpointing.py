"""The JobMaster's side of one job's checkpoints: the thin layer that performs what the
I/O-free :class:`~weir.checkpoint.coordinator.CheckpointCoordinator` decides.

Runs on the JobMaster's main thread, except storage I/O (writing ``_metadata``, deleting
subsumed checkpoints, checking a checkpoint before a restore), which goes to the
JobMaster's I/O pool and reports back to the main thread. Triggers and notifications are
asynchronous RPCs to the TaskExecutors; a trigger that cannot be delivered fails its
checkpoint.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future

import grpc

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.coordinator import (
    Action,
    CheckpointCoordinator,
    CheckpointCoordinatorConfiguration,
    CompletedCheckpoint,
    DiscardCheckpoint,
    FailJob,
    FinalizeCheckpoint,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    SnapshotRequestCompleted,
    SnapshotRequestFailed,
    TaskInfo,
    TriggerCheckpoint,
    reason_name,
)
from weir.checkpoint.metadata import (
    METADATA_NAME,
    checkpoint_dir,
    missing_files,
    read_metadata,
    referenced_files,
    write_metadata,
    write_savepoint_metadata,
)
from weir.checkpoint.savepoint_chain import commit_refs
from weir.checkpoint.shared_registry import SharedStateRegistry
from weir.checkpoint.storage import (
    CheckpointStorageAccess,
    StreamStateHandle,
    create_storage,
    reader_for,
    target_uri,
)
from weir.core.clock import Clock, wall_clock_ms
from weir.core.config import Configuration, Option, Seconds
from weir.core.errors import ConfigError, StorageUnreachableError, WeirError
from weir.core.ids import CheckpointId, ExecutionAttemptId, JobId, ResourceId
from weir.core.rpc import keep_until_done
from weir.jobmaster import options as jm_options
from weir.jobmaster.execution_graph import ExecutionGraph
from weir.jobmaster.failover import subtask_inputs
from weir.jobmaster.main_thread import MainThreadExecutor
from weir.jobmaster.resource_manager import ResourceManager
from weir.jobmaster.source_coordinator import SourceCoordinator
from weir.proto import (
    checkpoint_pb2,
    common_pb2,
    jobgraph_pb2,
    jobmaster_pb2,
    taskexecutor_pb2,
)
from weir.state import options as state_options
from weir.state.handles import KeyedStateHandle

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 30.0


def checkpoint_config(config: Configuration) -> CheckpointCoordinatorConfiguration:
    """The coordinator's settings from the execution.checkpointing.* options; ConfigError
    for a combination Flink refuses too."""
    def ms(option: Option[Seconds]) -> int:
        return round(config.get(option) * 1000)

    interval = config.get(checkpoint_options.CHECKPOINTING_INTERVAL)
    unaligned = config.get(checkpoint_options.UNALIGNED)
    exactly_once = config.get(checkpoint_options.CHECKPOINTING_MODE) == "EXACTLY_ONCE"
    max_concurrent = config.get(checkpoint_options.MAX_CONCURRENT_CHECKPOINTS)
    if unaligned and max_concurrent > 1:
        msg = ("unaligned checkpoints need execution.checkpointing.max-concurrent-checkpoints "
               f"= 1 (it is {max_concurrent})")
        raise ConfigError(msg)
    return CheckpointCoordinatorConfiguration(
        interval_ms=round(interval * 1000) if interval is not None else None,
        timeout_ms=ms(checkpoint_options.CHECKPOINTING_TIMEOUT),
        min_pause_ms=ms(checkpoint_options.MIN_PAUSE), max_concurrent=max_concurrent,
        tolerable_failures=config.get(checkpoint_options.TOLERABLE_FAILED_CHECKPOINTS),
        unaligned=unaligned and exactly_once,
        aligned_timeout_ms=ms(checkpoint_options.ALIGNED_CHECKPOINT_TIMEOUT),
        at_least_once=not exactly_once,
        num_retained=config.get(checkpoint_options.NUM_RETAINED),
        history_size=config.get(jm_options.CHECKPOINTS_HISTORY))


class JobCheckpointing:
    """Checkpoints of one job. Main thread only (I/O results come back as main-thread
    work)."""

    def __init__(self, job_id: JobId, config: Configuration, graph: ExecutionGraph,
                 sources: SourceCoordinator, resources: ResourceManager,
                 main: MainThreadExecutor, io: Executor,
                 fail_job: Callable[[common_pb2.ErrorInfo], None],
                 clock: Clock = wall_clock_ms) -> None:
        directory = config.get(checkpoint_options.CHECKPOINTS_DIR)
        if not directory:
            msg = ("checkpointing is on (execution.checkpointing.interval) but "
                   "state.checkpoints.dir is not set: set it to a file:// path or "
                   "s3://bucket/prefix")
            raise ConfigError(msg)
        self.job_id = job_id
        self.config = config
        self.storage: CheckpointStorageAccess = create_storage(directory, config)
        #: The job's state change log outside the checkpoint directory (a configured
        #: state.changelog.dstl.dfs.base-path): its files are counted and deleted like
        #: those inside. None: the log, if any, is under the checkpoint directory.
        self._log_storage: CheckpointStorageAccess | None = None
        log_base = config.get(state_options.CHANGELOG_BASE_PATH)
        if log_base and config.get(state_options.CHANGELOG_ENABLED):
            self._log_storage = create_storage(log_base, config)
        #: Storages of claimed snapshots (CLAIM mode), by their directory: their files are
        #: the job's to delete once no retained checkpoint refers to them.
        self._claimed: dict[str, CheckpointStorageAccess] = {}
        #: Who waits for the savepoint in progress: ``(path, None)`` or ``(None, error)``.
        self._request_waiter: Callable[[str | None, str | None], None] | None = None
        self._requested_kind = "savepoint"
        self._clock = clock
        self.coordinator = CheckpointCoordinator(job_id, checkpoint_config(config), clock)
        self.registry = SharedStateRegistry(self.storage, delete=self._delete_file)
        self.retention = config.get(checkpoint_options.EXTERNALIZED_RETENTION)
        self.recover_without_channel_state = config.get(
            checkpoint_options.RECOVER_WITHOUT_CHANNEL_STATE)
        self.local_recovery = bool(config.get(state_options.LOCAL_RECOVERY))
        #: The savepoint or retained checkpoint the job starts from (None: none).
        self.recovery_path: str | None = config.get(checkpoint_options.RECOVERY_PATH)
        self._graph = graph
        self._sources = sources
        self._resources = resources
        self._main = main
        self._io = io
        self._fail_job = fail_job
        #: Storages of savepoint directories being written, by location.
        self._savepoints: dict[str, CheckpointStorageAccess] = {}
        self._timer_generation = 0
        self._stopped = False
        #: Coordinator events not handled yet, each a function feeding one and returning
        #: its actions; drained by the one running ``_run``.
        self._queued: deque[Callable[[], Iterable[Action]]] = deque()
        self._draining = False
        #: High availability: ``(checkpoint_id, external_path)`` is called on the I/O pool
        #: once ``_metadata`` is written and before the checkpoint counts as complete, so
        #: no task commits a checkpoint a recovering JobMaster would not restore; if it
        #: raises, the checkpoint fails instead.
        self.on_metadata_written: Callable[[CheckpointId, str], None] | None = None
        #: Called on the main thread once a checkpoint completed or failed (high
        #: availability stores the history then).
        self.on_history_changed: Callable[[], None] | None = None
        self._counts_seen = dict(self.coordinator.counts)
        self.set_job_graph(graph.job_graph)

    def set_job_graph(self, job_graph: jobgraph_pb2.JobGraph) -> None:
        """The vertices (parallelism, operator uids) every ``_metadata`` records."""
        self.coordinator.set_vertices(
            checkpoint_pb2.VertexLayout(vertex_id=v.id, parallelism=v.parallelism,
                                        max_parallelism=v.max_parallelism,
                                        operator_uids=list(v.operator_uids))
            for v in job_graph.vertices)

    # -- job lifecycle --------------------------------------------------------------------

    def job_running(self) -> None:
        """The (re)started job's attempts are deployed (all, or a restarted region's)."""
        tasks = [TaskInfo(ev.attempt_id, ev.job_vertex.id, ev.subtask_index, ev.name)
                 for ev in self._graph.all()]
        self._run(self.coordinator.on_job_running(tasks, subtask_inputs(self._graph.job_graph)))
        # After a region restart the other tasks keep running (or finished): say so.
        for ev in self._graph.all():
            if ev.state in (common_pb2.RUNNING, common_pb2.FINISHED):
                self.on_task_state(ev.attempt_id, ev.state)

    def on_task_state(self, attempt_id: ExecutionAttemptId, state: common_pb2.ExecutionState
                      ) -> None:
        if state == common_pb2.RUNNING:
            self._run(self.coordinator.on_task_running(attempt_id))
        elif state == common_pb2.FINISHED:
            self._run(self.coordinator.on_task_finished(attempt_id))
        elif state == common_pb2.FAILED:
            self._run(self.coordinator.on_task_failed(attempt_id))

    def job_not_running(self) -> None:
        """The job fails or restarts: pending checkpoints are aborted."""
        self._sources.clear_checkpoint_valve()
        self._run(self.coordinator.on_job_not_running())

    def job_terminal(self, status: common_pb2.JobStatus) -> None:
        """The job ended: delete its checkpoints unless its retention keeps them."""
        discard = status == common_pb2.JOB_FINISHED or \
            self.retention == "NO_EXTERNALIZED_CHECKPOINTS" or \
            (status == common_pb2.JOB_CANCELED and self.retention == "DELETE_ON_CANCELLATION")
        actions = self.coordinator.on_job_terminal(discard_completed=discard)
        self._stopped = True
        if not discard:
            self._run(actions)
            return
        # Everything goes: one deletion of the job's directory (shared files included).
        # A claimed snapshot lives elsewhere: deleted file by file.
        self._run(a for a in actions
                  if not isinstance(a, DiscardCheckpoint) or a.metadata is not None)
        prefix = f"{self.job_id}/"

        def logged(future: Future[None]) -> None:
            if future.exception() is not None:
                log.warning("deleting the checkpoints of job %s failed: %s", self.job_id,
                            future.exception())

        self._io.submit(self.storage.delete_prefix, prefix).add_done_callback(logged)
        if self._log_storage is not None:
            self._io.submit(self._log_storage.delete_prefix, prefix).add_done_callback(logged)

    # -- task reports (main thread) -------------------------------------------------------

    def on_acknowledge(self, request: jobmaster_pb2.AcknowledgeCheckpointRequest) -> None:
        self._run(self.coordinator.on_acknowledge(
            ExecutionAttemptId(request.attempt_id), CheckpointId(request.checkpoint_id),
            request.state, request.metrics))

    def on_decline(self, request: jobmaster_pb2.DeclineCheckpointRequest) -> None:
        self._run(self.coordinator.on_decline(
            ExecutionAttemptId(request.attempt_id), CheckpointId(request.checkpoint_id),
            request.reason, request.message))

    def on_end_of_data(self, attempt_id: ExecutionAttemptId) -> None:
        self._run(self.coordinator.on_end_of_data(attempt_id))

    # -- restore ----------------------------------------------------------------------------

    def find_restorable(self, done: Callable[[CompletedCheckpoint | None, list[str],
                                              StorageUnreachableError | None], None]
                        ) -> None:
        """Find, off the main thread, the newest retained checkpoint whose ``_metadata``
        reads back intact and whose files all exist; ``done(checkpoint, warnings,
        unreachable)`` runs on the main thread (checkpoint None: none completed, or none
        usable — then a warning says why). When the storage cannot be reached at all,
        ``unreachable`` is the error and no checkpoint is judged: an outage says nothing
        about them, and they must still be there when it ends."""
        candidates = list(reversed(self.coordinator.completed()))

        def check() -> tuple[CompletedCheckpoint | None, list[str], list[CheckpointId],
                             StorageUnreachableError | None]:
            warnings: list[str] = []
            unusable: list[CheckpointId] = []
            for candidate in candidates:
                try:
                    problem = self._check(candidate)
                except StorageUnreachableError as err:
                    return None, warnings, [], err
                if problem is None:
                    if warnings:
                        warnings.append(f"restoring checkpoint {candidate.checkpoint_id} "
                                        f"({candidate.external_path}) instead")
                    return candidate, warnings, unusable, None
                unusable.append(candidate.checkpoint_id)
                warnings.append(f"checkpoint {candidate.checkpoint_id} "
                                f"({candidate.external_path}) cannot be restored: {problem}")
            return None, warnings, unusable, None

        def finish(future: Future[tuple[CompletedCheckpoint | None, list[str],
                                        list[CheckpointId],
                                        StorageUnreachableError | None]]) -> None:
            def on_main() -> None:
                unreachable: StorageUnreachableError | None = None
                try:
                    checkpoint, warnings, unusable, unreachable = future.result()
                except Exception as err:  # a bug in the check itself: restore nothing
                    checkpoint, warnings, unusable = None, [f"checking failed: {err}"], []
                for checkpoint_id in unusable:
                    self.coordinator.forget_completed(checkpoint_id)
                done(checkpoint, warnings, unreachable)
            self._main.submit(on_main)

        self._io.submit(check).add_done_callback(finish)

    def _check(self, checkpoint: CompletedCheckpoint) -> str | None:
        """What makes ``checkpoint`` unusable (None: nothing); raises
        StorageUnreachableError when the storage does not answer."""
        storage = self.storage
        if checkpoint.external_path.partition(":")[0] != storage.base_uri.partition(":")[0]:
            # A savepoint the job started from, elsewhere (s3:// while checkpoints go to
            # file://, or the other way round).
            storage = reader_for(f"{checkpoint.external_path}/{METADATA_NAME}", self.config)
        try:
            stored = read_metadata(storage, checkpoint.external_path)
            if stored.checkpoint_id != checkpoint.checkpoint_id:
                return (f"its _metadata names checkpoint {stored.checkpoint_id}, not "
                        f"{checkpoint.checkpoint_id}")
            missing = missing_files(storage, stored)
        except StorageUnreachableError:
            raise
        except WeirError as err:
            return str(err)
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            return f"its file {missing[0]}{more} does not exist"
        return None

    def forget(self, checkpoint_id: CheckpointId, why: str = "") -> None:
        """A restore found ``checkpoint_id`` unusable (``why``): never restore it again."""
        self.coordinator.forget_completed(checkpoint_id, why)

    def add_restored(self, checkpoint: CompletedCheckpoint) -> None:
        """A checkpoint completed under an earlier JobMaster (high availability) and read
        back from storage: it becomes the latest retained one, checkpoint ids continue
        after it, and its shared files are counted until a newer checkpoint subsumes it."""
        self.coordinator.add_completed(checkpoint)
        if checkpoint.claimed:
            self._claimed[checkpoint.external_path] = create_storage(checkpoint.external_path,
                                                                     self.config)
        if checkpoint.owned:
            self.registry.register_checkpoint(checkpoint.checkpoint_id,
                                              _keyed_handles(checkpoint.metadata))

    # -- savepoints -------------------------------------------------------------------------

    def trigger_savepoint(self, request: jobmaster_pb2.SavepointRequest,
                          done: Callable[[str | None, str | None], None]) -> None:
        """Take the savepoint ``request`` asks for (main thread); ``done(path, None)`` or
        ``done(None, why)`` follows on the main thread (at once when it cannot start)."""
        target = request.target_directory or self.config.get(
            checkpoint_options.SAVEPOINTS_DIR)
        if not target:
            done(None, "no savepoint directory: name one (weir savepoint JOB_ID DIR, weir "
                       "stop --savepoint-path DIR) or set execution.checkpointing."
                       "savepoint-dir")
            return
        location = f"{target.rstrip('/')}/savepoint-{self.job_id[:6]}-{secrets.token_hex(6)}"
        try:
            storage = create_storage(location, self.config)
        except WeirError as err:
            done(None, str(err))
            return
        if not self._begin_request(done, "savepoint"):
            return
        self._savepoints[location] = storage
        self._run(self.coordinator.on_snapshot_request(checkpoint_pb2.CheckpointOptions(
            savepoint=True, savepoint_format=request.format, target_location=location,
            terminate=request.terminate, drain=request.terminate and request.drain)))

    def request_checkpoint(self, done: Callable[[str | None, str | None], None]) -> None:
        """Take a checkpoint now (rescaling, updating the job; main thread), as the
        periodic ones are taken (unaligned ones too: under backpressure an aligned one
        could take long; their in-flight data is redistributed on restore), retained like
        them. ``done(path, None)`` or ``done(None, why)`` follows on the main thread."""
        options = self.coordinator.config.options()
        if not self._begin_request(done, "checkpoint"):
            return
        self._run(self.coordinator.on_snapshot_request(options))

    def _begin_request(self, done: Callable[[str | None, str | None], None], kind: str
                       ) -> bool:
        if self._request_waiter is not None:
            done(None, f"a {self._requested_kind} of the job is in progress; try again "
                       "when it ended")
            return False
        self._request_waiter = done
        self._requested_kind = kind
        return True

    def _request_done(self, path: str | None, error: str | None) -> None:
        waiter, self._request_waiter = self._request_waiter, None
        if waiter is not None:
            waiter(path, error)

    # -- actions ----------------------------------------------------------------------------

    def tick(self) -> None:
        self._run(self.coordinator.on_tick())

    def _run(self, actions: Iterable[Action]) -> None:
        """Perform ``actions`` in order, then the actions of the coordinator events they
        raise (queued by :meth:`_feed`), one at a time: no action runs inside another's
        execution, so each sees the coordinator after the previous one finished. Called
        again while it runs (an action's callback on the main thread), it queues."""
        self._queued.append(lambda: actions)
        if self._draining:
            return
        self._draining = True
        try:
            while self._queued:
                for action in self._queued.popleft()():
                    self._perform(action)
        finally:
            self._draining = False
        self._schedule_tick()
        if self.coordinator.counts != self._counts_seen:
            self._counts_seen = dict(self.coordinator.counts)
            if self.on_history_changed is not None:
                self.on_history_changed()

    def _feed(self, event: Callable[[], Iterable[Action]]) -> None:
        """Queue a coordinator event (``event()`` feeds it and returns its actions) to be
        handled once the action being performed finished."""
        self._queued.append(event)

    def _perform(self, action: Action) -> None:
        """Carry out one coordinator action (main thread; RPCs and storage I/O are
        asynchronous: their results come back as queued events)."""
        if isinstance(action, TriggerCheckpoint):
            self._trigger(action)
        elif isinstance(action, FinalizeCheckpoint):
            self._finalize(action)
        elif isinstance(action, NotifyCheckpointComplete):
            self._note_local_state(action.checkpoint_id, action.tasks)
            self._notify(action.checkpoint_id, action.tasks, complete=True)
            self._sources.checkpoint_done(action.checkpoint_id, completed=True)
        elif isinstance(action, NotifyCheckpointAborted):
            self._notify(action.checkpoint_id, action.tasks, complete=False,
                         reason=action.reason)
            self._sources.checkpoint_done(action.checkpoint_id)
        elif isinstance(action, DiscardCheckpoint):
            self._discard(action)
        elif isinstance(action, FailJob):
            self._fail_job(common_pb2.ErrorInfo(reason=common_pb2.CHECKPOINT_FAILURE,
                                                message=action.message))
        elif isinstance(action, SnapshotRequestCompleted):
            log.info("job %s: %s %d completed at %s", self.job_id, self._requested_kind,
                     action.checkpoint_id, action.path)
            self._request_done(action.path, None)
        elif isinstance(action, SnapshotRequestFailed):
            log.warning("job %s: %s failed (%s): %s", self.job_id, self._requested_kind,
                        reason_name(action.reason), action.message)
            self._request_done(None, f"the {self._requested_kind} failed "
                                     f"({reason_name(action.reason)}): {action.message}")

    def _schedule_tick(self) -> None:
        if self._stopped:
            return
        wakeup = self.coordinator.next_wakeup_ms()
        if wakeup is None:
            return
        self._timer_generation += 1
        generation = self._timer_generation

        def tick() -> None:
            if generation == self._timer_generation and not self._stopped:
                self.tick()

        self._main.schedule(max(0.0, (wakeup - self._clock()) / 1000), tick)

    def _trigger(self, action: TriggerCheckpoint) -> None:
        checkpoint_id = action.checkpoint_id
        try:
            states = self._sources.snapshot(checkpoint_id)
        except Exception as err:  # an enumerator that cannot be checkpointed, or user code
            message = (f"snapshotting a split enumerator failed: {type(err).__name__}: "
                       f"{err}")
            self._feed(lambda: self.coordinator.on_trigger_failed(
                checkpoint_id, message, checkpoint_pb2.CHECKPOINT_DECLINED))
            return
        self._feed(lambda: self.coordinator.on_master_states(checkpoint_id, states))
        for attempt_id in action.tasks:
            ev = self._graph.by_attempt.get(attempt_id)
            record = self._resources.get(ev.resource_id) if ev is not None else None
            if record is None:
                self._feed(functools.partial(self.coordinator.on_trigger_failed, checkpoint_id,
                                             f"task {attempt_id} has no TaskExecutor"))
                return
            future = record.stub.TriggerCheckpoint.future(
                taskexecutor_pb2.TriggerCheckpointRequest(
                    attempt_id=attempt_id, checkpoint_id=checkpoint_id,
                    timestamp_ms=action.timestamp_ms, options=action.options),
                timeout=RPC_TIMEOUT_S)

            def delivered(f: grpc.Future[taskexecutor_pb2.TaskAck],
                          name: str = ev.name if ev else attempt_id) -> None:
                error = f.exception()
                if error is None:
                    return
                code = error.code() if hasattr(error, "code") else None
                details = error.details() if hasattr(error, "details") else str(error)
                # NOT_FOUND: the task finished (or failed) just before: not a failure.
                reason = checkpoint_pb2.CHECKPOINT_DECLINED_TASK_NOT_READY \
                    if code == grpc.StatusCode.NOT_FOUND \
                    else checkpoint_pb2.TRIGGER_CHECKPOINT_FAILURE
                message = f"the trigger did not reach {name}: {details}"
                self._main.submit(lambda: self._run(
                    self.coordinator.on_trigger_failed(checkpoint_id, message, reason)))

            keep_until_done(future, delivered)

    def _finalize(self, action: FinalizeCheckpoint) -> None:
        checkpoint_id, metadata = action.checkpoint_id, action.metadata

        def finished(future: Future[str]) -> None:
            def on_main() -> None:
                error = future.exception()
                if error is not None:
                    self._run(self.coordinator.on_finalize_failed(checkpoint_id, str(error)))
                    return
                if not action.target_location:
                    # Register the new checkpoint's shared files before subsumed ones let
                    # go (a savepoint's are its own).
                    self.registry.register_checkpoint(checkpoint_id, _keyed_handles(metadata))
                self._savepoints.pop(action.target_location, None)
                self._run(self.coordinator.on_finalized(checkpoint_id, future.result()))
            self._main.submit(on_main)

        def write() -> str:
            if action.target_location:
                # A savepoint that refers to files of earlier ones records that first.
                commit_refs(self._savepoints[action.target_location], metadata)
                path = write_savepoint_metadata(self._savepoints[action.target_location],
                                                metadata)
            else:
                path = write_metadata(self.storage, metadata)
            if not action.retained:
                return path
            if self.on_metadata_written is not None:
                self.on_metadata_written(checkpoint_id, path)
            return path

        self._io.submit(write).add_done_callback(finished)

    def _discard_claimed(self, location: str, metadata: checkpoint_pb2.CheckpointMetadata
                         ) -> None:
        """I/O pool: a claimed snapshot was subsumed. Its ``_metadata`` goes first (it can
        no longer be restored half-deleted), then its files, except shared ones that a
        retained checkpoint still refers to (the registry deletes those when they are
        released)."""
        storage = self._claimed.get(location) or create_storage(location, self.config)
        storage.delete(f"{location.rstrip('/')}/{METADATA_NAME}")
        kept = {h.uri for h in referenced_files(metadata)
                if self.registry.reference_count(h.uri)}
        for handle in referenced_files(metadata):
            if handle.uri not in kept:
                self._delete_file(StreamStateHandle(handle.uri, handle.size, handle.checksum))
        if not kept:
            self._claimed.pop(location, None)

    def _delete_file(self, target: StreamStateHandle | str) -> None:
        """Delete a state file of the job's checkpoints, of its state change log (also
        outside the checkpoint directory) or of a claimed snapshot."""
        uri = target_uri(target)
        places = [(self.storage.base_uri, self.storage), *list(self._claimed.items())]
        if self._log_storage is not None:
            # Only the job's own log (<base-path>/<job-id>/): other jobs share the base.
            places.append((f"{self._log_storage.base_uri.rstrip('/')}/{self.job_id}",
                           self._log_storage))
        for base, storage in places:
            if uri.startswith(base.rstrip("/") + "/"):
                storage.delete(target)
                return
        log.warning("not deleting %s: it is neither in the checkpoint directory nor in a "
                    "claimed snapshot", uri)

    def _note_local_state(self, checkpoint_id: CheckpointId,
                          attempts: tuple[ExecutionAttemptId, ...]) -> None:
        """Task-local recovery: each acknowledging task's TaskExecutor now holds a local
        copy of that task's state in ``checkpoint_id`` (restarts prefer it)."""
        if not self.local_recovery:
            return
        for attempt_id in attempts:
            ev = self._graph.by_attempt.get(attempt_id)
            if ev is not None and ev.resource_id:
                self._graph.local_state[ev.owner] = (checkpoint_id, ev.resource_id)

    def _notify(self, checkpoint_id: CheckpointId, attempts: tuple[ExecutionAttemptId, ...],
                complete: bool,
                reason: checkpoint_pb2.CheckpointFailureReason | None = None) -> None:
        by_executor: dict[ResourceId, list[ExecutionAttemptId]] = defaultdict(list)
        for attempt_id in attempts:
            ev = self._graph.by_attempt.get(attempt_id)
            if ev is not None and ev.resource_id:
                by_executor[ev.resource_id].append(attempt_id)
        for resource_id, attempt_ids in by_executor.items():
            record = self._resources.get(resource_id)
            if record is not None:
                keep_until_done(record.stub.NotifyCheckpoint.future(
                    taskexecutor_pb2.CheckpointNotification(
                        job_id=self.job_id, checkpoint_id=checkpoint_id, complete=complete,
                        attempt_ids=attempt_ids, reason=reason),
                    timeout=RPC_TIMEOUT_S))

    def _discard(self, action: DiscardCheckpoint) -> None:
        storage, registry = self.storage, self.registry
        location = action.location
        savepoint = self._savepoints.pop(location, None) if location else None

        def discard() -> None:
            if action.completed:
                registry.unregister_checkpoint(action.checkpoint_id)
            if action.metadata is not None:
                self._discard_claimed(location, action.metadata)
            elif savepoint is not None:
                savepoint.delete_prefix("")
            elif not location:
                storage.delete_prefix(checkpoint_dir(self.job_id, action.checkpoint_id) + "/")

        def logged(future: Future[None]) -> None:
            if future.exception() is not None:
                log.warning("deleting checkpoint %d of job %s failed: %s",
                            action.checkpoint_id, self.job_id, future.exception())

        self._io.submit(discard).add_done_callback(logged)


def _keyed_handles(metadata: checkpoint_pb2.CheckpointMetadata) -> list[KeyedStateHandle]:
    return [KeyedStateHandle.from_dict(handle)
            for subtask in metadata.subtasks for op in subtask.state.operators
            if op.keyed_state for handle in json.loads(op.keyed_state)]
