"""Recovering the jobs of a :class:`~weir.jobmaster.high_availability.JobStore` when a
JobMaster starts (high availability).

The flow, I/O on the JobMaster's I/O pool and everything else on its main thread:

1. list the stored jobs; read each one's JobGraph, checkpoint pointer and history (I/O);
2. create each job's scheduler from its graph (main);
3. no pointer: the job never completed a checkpoint; it is registered under its id and
   starts afresh. A pointer: read that checkpoint's ``_metadata`` and check its files
   exist (I/O); then the job is registered, the checkpoint added as its latest completed
   one, and the job starts from it (main). ``weir list`` shows the job from then on, with
   the checkpoints and recoveries of its history and, as its newest recovery, this
   JobMaster's taking it over.

The jobs then wait for slots as a submitted job does, so they deploy once the
TaskExecutors, which lost the old JobMaster, have registered with this one
(``slot.request.timeout`` applies).

A job that cannot be recovered — its graph, pointer or checkpoint is missing, damaged or
does not match — is skipped with one error line naming the job, the file and the cause;
nothing of it is deleted, so it can be repaired (or removed) by hand, and the JobMaster
goes on with the other jobs. A storage that fails (unreachable, say) is retried with a
growing delay rather than giving up on the jobs. A history that is missing, damaged or
unreadable is not worth either: one warning names the file, and the job is recovered with
an empty history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import TypeVar

from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.checkpoint.metadata import missing_files, read_metadata
from weir.checkpoint.storage import CheckpointStorageAccess, reader_for
from weir.core.config import Configuration
from weir.core.errors import (
    ConfigError,
    CorruptStateError,
    MissingStateError,
    StorageError,
    WeirError,
)
from weir.core.ids import JobId
from weir.jobmaster.high_availability import (
    JOB_GRAPH_NAME,
    CheckpointPointer,
    JobStore,
    read_history,
)
from weir.jobmaster.jobgraph_validation import JobGraphValidationError, validate_job_graph
from weir.jobmaster.main_thread import MainThreadExecutor
from weir.jobmaster.savepoints import load_snapshot
from weir.jobmaster.scheduler import JobScheduler
from weir.proto import common_pb2, jobgraph_pb2, jobmaster_pb2

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Delays between attempts while the storage fails (seconds).
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0


class UnrecoverableJobError(WeirError):
    """A stored job cannot be recovered (its graph, pointer or checkpoint is missing,
    damaged or does not match): it is skipped, its data left for repair. The message names
    the file and the cause. Not a StorageError: a storage that fails is retried, this is
    not."""


@dataclass
class _Loaded:
    job_id: JobId
    graph: jobgraph_pb2.JobGraph | None = None
    pointer: CheckpointPointer | None = None
    history: jobmaster_pb2.JobHistory | None = None
    #: Why the job cannot be recovered (UnrecoverableJobError), or a storage failure
    #: worth retrying (StorageError).
    error: Exception | None = None


class JobRecovery:
    """Recovers every job of ``store`` once. On the main thread, ``create(graph)`` makes
    a job's scheduler (or raises ConfigError) and ``add(job)`` registers it with the
    JobMaster (False: a job with its id is there already); ``stopped()`` says the
    JobMaster stops, which ends the recovery.

    Example (a JobMaster's start, with high availability on)::

        JobRecovery(store, jm.main, jm.io, jm.create_job, jm.add_recovered).start()
    """

    def __init__(self, store: JobStore, main: MainThreadExecutor, io: Executor,
                 create: Callable[[jobgraph_pb2.JobGraph], JobScheduler],
                 add: Callable[[JobScheduler], bool],
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self._store = store
        self._main = main
        self._io = io
        self._create = create
        self._add = add
        self._stopped = stopped
        self._delay = FIRST_RETRY_S
        #: Ids being recovered or recovered, so that a retry never recovers one twice.
        self._seen: set[JobId] = set()
        #: Every stored job was listed and read (no retry pending); main thread writes.
        self._listed = False
        #: Jobs read but not yet started or skipped (their checkpoint is being read).
        self._in_flight: set[JobId] = set()

    def unfinished(self) -> str | None:
        """What is left to recover, or None once every stored job has been started or
        skipped (any thread: it only reads two fields the main thread writes)."""
        if not self._listed:
            return f"reading the jobs stored in {self._store.uri}"
        if in_flight := len(self._in_flight):
            return f"recovering {in_flight} job(s) from {self._store.uri}"
        return None

    def start(self) -> None:
        """Begin recovering (returns at once). Called once from any thread before jobs
        run, then again on the main thread when retrying."""
        seen = frozenset(self._seen)
        self._on_io(lambda: self._load_all(seen), self._loaded)

    # -- steps ------------------------------------------------------------------------------

    def _load_all(self, seen: frozenset[JobId]) -> list[_Loaded]:
        """I/O: the graph and pointer of every stored job not ``seen`` before (raises
        StorageError if listing fails)."""
        return [self._load(job_id) for job_id in self._store.job_ids() if job_id not in seen]

    def _load(self, job_id: JobId) -> _Loaded:
        loaded = _Loaded(job_id)
        where = self._store.location(job_id, JOB_GRAPH_NAME)
        try:
            graph = jobgraph_pb2.JobGraph.FromString(self._store.get_job(job_id))
            validate_job_graph(graph)
            if graph.job_id != job_id:
                msg = f"{where} holds the graph of job {graph.job_id}"
                raise UnrecoverableJobError(msg)
            loaded.graph = graph
            loaded.pointer = self._store.checkpoint_pointer(job_id)
            loaded.history = read_history(self._store, job_id)
        except (CorruptStateError, MissingStateError) as err:
            loaded.error = UnrecoverableJobError(str(err))
        except JobGraphValidationError as err:
            loaded.error = UnrecoverableJobError(f"{where} holds an invalid job graph: {err}")
        except StorageError as err:
            loaded.error = err
        except UnrecoverableJobError as err:
            loaded.error = err
        except Exception as err:  # protobuf's DecodeError and friends
            loaded.error = UnrecoverableJobError(
                f"{where} cannot be parsed ({type(err).__name__}: {err})")
        return loaded

    def _loaded(self, future: Future[list[_Loaded]]) -> None:
        """Main: register what loaded; retry later if listing (or a job) hit the storage."""
        try:
            jobs = future.result()
        except StorageError as err:
            self._retry(f"listing the stored jobs in {self._store.uri} failed: {err}")
            return
        except Exception:  # our bug: say so once, leave the stored jobs as they are
            log.exception("high availability: recovering the jobs in %s failed",
                          self._store.uri)
            self._listed = True  # given up: nothing more is coming
            return
        retry = False
        for loaded in jobs:
            if isinstance(loaded.error, UnrecoverableJobError):
                self._skip(loaded.job_id, str(loaded.error))
            elif loaded.error is not None:
                log.warning("high availability: reading job %s failed: %s", loaded.job_id,
                            loaded.error)
                retry = True
            else:
                self._recover(loaded)
        if retry:
            self._retry("some stored jobs could not be read")
        else:
            self._listed = True

    def _recover(self, loaded: _Loaded) -> None:
        assert loaded.graph is not None
        job_id = loaded.job_id
        try:
            job = self._create(loaded.graph)
        except ConfigError as err:
            self._skip(job_id, f"its configuration does not work on this JobMaster: {err}")
            return
        self._seen.add(job_id)
        self._in_flight.add(job_id)  # until _start or _skip
        if loaded.history is not None:
            job.restore_history(loaded.history)
        pointer = loaded.pointer
        checkpointing = job.checkpointing
        recovery_path = checkpointing.recovery_path if checkpointing is not None else None
        if pointer is None and checkpointing is not None and recovery_path:
            # It completed no checkpoint: it starts from its savepoint again.
            config = checkpointing.config
            self._on_io(lambda: load_snapshot(recovery_path, config),
                        lambda f: self._snapshot_read(job, recovery_path, f))
            return
        if pointer is None:
            self._start(job, None)
            return
        if checkpointing is None:
            self._skip(job_id, f"its latest checkpoint is {pointer.metadata_uri}, but "
                               "checkpointing is off in this JobMaster's configuration: "
                               "start the JobMaster with the configuration it had")
            return
        storage, config = checkpointing.storage, checkpointing.config
        self._on_io(lambda: self._read_checkpoint(storage, pointer, config),
                    lambda f: self._checkpoint_read(job, pointer, f))

    def _snapshot_read(self, job: JobScheduler, path: str,
                       future: Future[CompletedCheckpoint]) -> None:
        assert job.checkpointing is not None
        try:
            snapshot = future.result()
        except Exception as err:  # storage or a damaged snapshot: the job cannot start right
            self._skip(job.job_id, f"the savepoint it starts from ({path}) cannot be read: "
                                   f"{type(err).__name__}: {err}")
            return
        job.checkpointing.add_restored(snapshot)
        self._start(job, snapshot)

    def _read_checkpoint(self, storage: CheckpointStorageAccess, pointer: CheckpointPointer,
                         config: Configuration | None = None) -> CompletedCheckpoint:
        """I/O: the checkpoint a pointer names, checked against it and for missing files."""
        if pointer.metadata_uri.partition(":")[0] != storage.base_uri.partition(":")[0]:
            storage = reader_for(f"{pointer.metadata_uri}/_metadata", config)  # a savepoint
        try:
            metadata = read_metadata(storage, pointer.metadata_uri)
        except (CorruptStateError, MissingStateError) as err:
            msg = f"its latest checkpoint cannot be read: {err}"
            raise UnrecoverableJobError(msg) from err
        if metadata.checkpoint_id != pointer.checkpoint_id or \
                metadata.job_id != pointer.job_id:
            msg = (f"{pointer.metadata_uri} holds checkpoint {metadata.checkpoint_id} of job "
                   f"{metadata.job_id}, not checkpoint {pointer.checkpoint_id} of this job")
            raise UnrecoverableJobError(msg)
        missing = missing_files(storage, metadata)
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            msg = (f"its latest checkpoint {pointer.metadata_uri} refers to {missing[0]}"
                   f"{more}, which does not exist")
            raise UnrecoverableJobError(msg)
        # A stop's savepoint, if the job failed before it ended: the user's, never deleted.
        return CompletedCheckpoint(pointer.checkpoint_id, metadata, pointer.metadata_uri,
                                   owned=not metadata.savepoint)

    def _checkpoint_read(self, job: JobScheduler, pointer: CheckpointPointer,
                         future: Future[CompletedCheckpoint]) -> None:
        checkpointing = job.checkpointing
        assert checkpointing is not None
        storage, config = checkpointing.storage, checkpointing.config
        try:
            checkpoint = future.result()
        except UnrecoverableJobError as err:
            self._skip(job.job_id, str(err))
            return
        except (StorageError, OSError) as err:
            delay = self._next_delay()
            log.warning("high availability: reading checkpoint %d of job %s failed (%s); "
                        "trying again in %.0f s", pointer.checkpoint_id, job.job_id, err,
                        delay)
            self._main.schedule(delay, lambda: self._on_io(
                lambda: self._read_checkpoint(storage, pointer, config),
                lambda f: self._checkpoint_read(job, pointer, f)))
            return
        except Exception as err:  # a bug in the check itself: say so, keep the data
            self._skip(job.job_id, f"checking its latest checkpoint failed: "
                                   f"{type(err).__name__}: {err}")
            return
        checkpointing.add_restored(checkpoint)
        self._start(job, checkpoint)

    def _start(self, job: JobScheduler, checkpoint: CompletedCheckpoint | None) -> None:
        """Register the job and start it (from ``checkpoint``, if any)."""
        self._in_flight.discard(job.job_id)
        if not self._add(job):
            log.warning("high availability: job %s is not recovered: a job with its id was "
                        "submitted meanwhile", job.job_id)
            return
        if checkpoint is None:
            log.info("high availability: recovered job %s (%s); it completed no checkpoint, "
                     "so it starts afresh", job.job_id, job.graph.job_graph.name)
        else:
            log.info("high availability: recovered job %s (%s) from checkpoint %d (%s)",
                     job.job_id, job.graph.job_graph.name, checkpoint.checkpoint_id,
                     checkpoint.external_path)
        job.taken_over(checkpoint)
        try:
            if checkpoint is None:
                job.start()
            else:
                job.start_from(checkpoint)
        except Exception as err:  # user code restoring its split enumerators
            job.fail_terminal(common_pb2.ErrorInfo(
                reason=common_pb2.STATE_RESTORE_FAILED,
                message=f"recovering the job failed: {type(err).__name__}: {err}"))

    # -- failures ---------------------------------------------------------------------------

    def _skip(self, job_id: JobId, cause: str) -> None:
        self._seen.add(job_id)
        self._in_flight.discard(job_id)
        log.error("high availability: job %s cannot be recovered and is skipped: %s (its "
                  "stored data in %s is left as it is: repair it, or delete it to drop the "
                  "job)", job_id, cause, self._store.location(job_id))

    def _retry(self, why: str) -> None:
        if self._stopped():
            return
        delay = self._next_delay()
        log.warning("high availability: %s; trying again in %.0f s", why, delay)
        self._main.schedule(delay, self.start)

    def _next_delay(self) -> float:
        delay = self._delay
        self._delay = min(self._delay * 2, MAX_RETRY_S)
        return delay

    def _on_io(self, work: Callable[[], T], then: Callable[[Future[T]], None]) -> None:
        """Run ``work`` on the I/O pool, then ``then(future)`` on the main thread."""
        if self._stopped():
            return
        self._io.submit(work).add_done_callback(
            lambda f: None if self._stopped() else self._main.submit(lambda: then(f)))
