"""High availability: what a restarted JobMaster needs to recover every running job.

With ``high-availability.type: file`` the JobMaster keeps, for every job it runs, the
submitted JobGraph and a pointer to the job's latest completed checkpoint in durable
storage at ``high-availability.storageDir`` (``file://`` or ``s3://``, through the same
:class:`~weir.checkpoint.storage.CheckpointStorageAccess` as checkpoints). Layout::

    <storageDir>/<cluster-id>/jobs/<job-id>/jobgraph     the JobGraph, as submitted
    <storageDir>/<cluster-id>/jobs/<job-id>/checkpoint   checkpoint id + its directory URI
    <storageDir>/<cluster-id>/jobs/<job-id>/history      the last checkpoints and recoveries

A job is stored while its ``jobgraph`` exists; a ``checkpoint`` pointer alone (left by a
removal that was cut short) is ignored.

Atomicity: both files are written with the storage's atomic write (a temporary file renamed
over the name on ``file://``, one PUT on ``s3://``), so a reader sees the previous version or
the new one, never a mixture, and a crash mid-write leaves the previous pointer in place.
Both carry a header with a magic, a kind, the payload's length and CRC-32, and every write
is read back and decoded before it counts, so a truncated, damaged or misplaced file is
refused with :class:`~weir.core.errors.CorruptStateError` naming the file instead of being
trusted. Pointers never go backwards: a pointer older than the one last written for the
job is skipped (finalizations of concurrent checkpoints may finish out of order).

The ``history`` file (a :class:`~weir.proto.jobmaster_pb2.JobHistory`: the last
``web.checkpoints.history`` checkpoints and recoveries) is what a JobMaster that takes the
job over shows of its past. It is rewritten by a :class:`HistoryWriter` after each
checkpoint that completes or fails and each recovery, off the main thread, writes coalesced:
one in flight at a time, the next one carrying every change made meanwhile. So a crash
may lose the last change or two; the checkpoint pointer, written before a checkpoint
counts as complete, is never behind the history. Unlike the pointer, a missing or damaged
history does not stop a recovery: the job is recovered with an empty history.

Example:
    >>> import tempfile
    >>> from weir.checkpoint.storage import create_storage
    >>> store = StorageJobStore(create_storage(tempfile.mkdtemp()))
    >>> job_id = "0123456789abcdef0123456789abcdef"
    >>> store.put_job(b"graph bytes", job_id)
    >>> store.job_ids() == [job_id], store.get_job(job_id)
    (True, b'graph bytes')
    >>> store.checkpoint_pointer(job_id) is None
    True
    >>> store.put_checkpoint_pointer(job_id, 7, "file:///checkpoints/" + job_id + "/chk-7")
    >>> store.checkpoint_pointer(job_id).checkpoint_id
    7
    >>> store.remove_job(job_id)
    >>> store.job_ids()
    []
"""

from __future__ import annotations

import contextlib
import json
import logging
import struct
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass

from weir.checkpoint.storage import CheckpointStorageAccess, create_storage, self_verifying
from weir.core.config import Configuration
from weir.core.errors import ConfigError, CorruptStateError, MissingStateError, StorageError
from weir.core.ids import CheckpointId, JobId, is_valid_job_id
from weir.jobmaster import options as jm_options
from weir.proto import jobmaster_pb2

log = logging.getLogger(__name__)

JOBS_DIR = "jobs"
JOB_GRAPH_NAME = "jobgraph"
POINTER_NAME = "checkpoint"
HISTORY_NAME = "history"

MAGIC = b"WEIRHA"
FILE_VERSION = 1
#: What a file holds, so that a pointer written over a job graph (or the reverse) is refused.
KIND_JOB_GRAPH, KIND_POINTER, KIND_HISTORY = 1, 2, 3
_KIND_NAMES = {KIND_JOB_GRAPH: "job graph", KIND_POINTER: "checkpoint pointer",
               KIND_HISTORY: "job history"}
#: version, kind, payload length, payload CRC-32.
_HEADER = struct.Struct(">BBQI")


@dataclass(frozen=True)
class CheckpointPointer:
    """Where a job's latest completed checkpoint is: its id and its directory URI (the
    ``external_path`` of :class:`~weir.checkpoint.coordinator.CompletedCheckpoint`, which
    holds ``_metadata``)."""

    job_id: JobId
    checkpoint_id: CheckpointId
    metadata_uri: str


class JobStore(ABC):
    """Durable record of the jobs a JobMaster runs and of their latest completed checkpoint.

    Every method does blocking storage I/O: call it from the JobMaster's I/O pool, never
    from its main thread. Thread-safe. Reads raise
    :class:`~weir.core.errors.MissingStateError` (a file that should be there is not),
    :class:`~weir.core.errors.CorruptStateError` (a file is damaged, truncated or not ours;
    the message names it) or another :class:`~weir.core.errors.StorageError` (the storage
    failed, e.g. unreachable); writes raise StorageError and leave what was stored before.
    """

    @abstractmethod
    def put_job(self, job_graph: bytes, job_id: JobId) -> None:
        """Store a submitted job's serialized JobGraph (and drop a stale pointer of an
        earlier job with the same id). Returns once it is durable and read back intact."""

    @abstractmethod
    def get_job(self, job_id: JobId) -> bytes:
        """The serialized JobGraph stored by :meth:`put_job`."""

    @abstractmethod
    def remove_job(self, job_id: JobId) -> None:
        """Forget a job that ended (graph first, so it is never recovered again, then its
        pointer). Removing an unknown job is not an error."""

    @abstractmethod
    def job_ids(self) -> list[JobId]:
        """Ids of the stored jobs, sorted."""

    @abstractmethod
    def put_checkpoint_pointer(self, job_id: JobId, checkpoint_id: CheckpointId,
                               metadata_uri: str) -> None:
        """Record ``checkpoint_id`` (its directory ``metadata_uri``) as the job's latest
        completed checkpoint; returns once it is durable and read back intact. A pointer
        older than one already written is skipped; after :meth:`remove_job`, every pointer
        of that job is."""

    @abstractmethod
    def checkpoint_pointer(self, job_id: JobId) -> CheckpointPointer | None:
        """The job's latest checkpoint pointer; None when none was written yet."""

    @abstractmethod
    def put_history(self, job_id: JobId, history: bytes) -> None:
        """Replace the job's history (a serialized JobHistory); returns once it is durable
        and read back intact. Skipped after :meth:`remove_job`."""

    @abstractmethod
    def history(self, job_id: JobId) -> bytes | None:
        """The job's history as :meth:`put_history` stored it; None when none was
        written."""

    @property
    @abstractmethod
    def uri(self) -> str:
        """Where the store keeps its files (``<storageDir>/<cluster-id>``)."""

    @abstractmethod
    def location(self, job_id: JobId, name: str = "") -> str:
        """The URI of a job's directory, or of its ``name`` file (for messages)."""


class StorageJobStore(JobStore):
    """A :class:`JobStore` on a :class:`CheckpointStorageAccess` whose base is
    ``<storageDir>/<cluster-id>``."""

    def __init__(self, storage: CheckpointStorageAccess) -> None:
        self.storage = storage
        self._lock = threading.Lock()
        #: Per job: serialises its pointer writes (so that they never reorder).
        self._job_locks: dict[JobId, threading.Lock] = {}
        #: Per job, the newest pointer written by this process (-1 once removed).
        self._latest: dict[JobId, int] = {}

    # -- paths ------------------------------------------------------------------------------

    def _relative(self, job_id: JobId, name: str = "") -> str:
        if not is_valid_job_id(job_id):
            # Ids become paths: only the 32 hex digits every job id has may.
            msg = f"not a job id: {job_id!r} (32 hex digits)"
            raise ValueError(msg)
        return f"{JOBS_DIR}/{job_id}/{name}" if name else f"{JOBS_DIR}/{job_id}"

    @property
    def uri(self) -> str:
        return self.storage.base_uri.rstrip("/")

    def location(self, job_id: JobId, name: str = "") -> str:
        return f"{self.uri}/{self._relative(job_id, name)}"

    # -- jobs -------------------------------------------------------------------------------

    def _job_lock(self, job_id: JobId) -> threading.Lock:
        with self._lock:
            return self._job_locks.setdefault(job_id, threading.Lock())

    def put_job(self, job_graph: bytes, job_id: JobId) -> None:
        with self._job_lock(job_id):
            self._latest.pop(job_id, None)
        for stale in (POINTER_NAME, HISTORY_NAME):
            with _storage_errors(self.location(job_id, stale)):
                self.storage.delete(self.location(job_id, stale))
        self._write(job_id, JOB_GRAPH_NAME, KIND_JOB_GRAPH, job_graph)

    def get_job(self, job_id: JobId) -> bytes:
        return self._read(job_id, JOB_GRAPH_NAME, KIND_JOB_GRAPH)

    def remove_job(self, job_id: JobId) -> None:
        with self._job_lock(job_id):
            self._latest[job_id] = -1
        with _storage_errors(self.location(job_id)):
            # The graph first: a job whose graph is gone is not recovered, whatever is left.
            self.storage.delete(self.location(job_id, JOB_GRAPH_NAME))
            self.storage.delete_prefix(self._relative(job_id) + "/")

    def job_ids(self) -> list[JobId]:
        base = f"{self.uri}/{JOBS_DIR}/"
        found = []
        with _storage_errors(base):
            listed = self.storage.list(JOBS_DIR)
        for uri in listed:
            parts = uri.removeprefix(base).split("/")
            if len(parts) == 2 and parts[1] == JOB_GRAPH_NAME and \
                    is_valid_job_id(parts[0]):
                found.append(JobId(parts[0]))
        return sorted(found)

    # -- checkpoint pointers ----------------------------------------------------------------

    def put_checkpoint_pointer(self, job_id: JobId, checkpoint_id: CheckpointId,
                               metadata_uri: str) -> None:
        payload = json.dumps({"job_id": job_id, "checkpoint_id": checkpoint_id,
                              "metadata_uri": metadata_uri}, sort_keys=True).encode()
        # Held across the write: two finalizations of one job must not reorder their writes.
        with self._job_lock(job_id):
            latest = self._latest.get(job_id)
            if latest is not None and (latest < 0 or latest >= checkpoint_id):
                return
            self._write(job_id, POINTER_NAME, KIND_POINTER, payload)
            self._latest[job_id] = checkpoint_id

    def checkpoint_pointer(self, job_id: JobId) -> CheckpointPointer | None:
        try:
            payload = self._read(job_id, POINTER_NAME, KIND_POINTER)
        except MissingStateError:
            return None
        where = self.location(job_id, POINTER_NAME)
        try:
            data = json.loads(payload)
            pointer = CheckpointPointer(JobId(str(data["job_id"])), data["checkpoint_id"],
                                        str(data["metadata_uri"]))
        except (ValueError, KeyError, TypeError) as err:
            msg = f"{where} is corrupt: not a checkpoint pointer ({err})"
            raise CorruptStateError(msg) from err
        if pointer.job_id != job_id or isinstance(pointer.checkpoint_id, bool) or \
                not isinstance(pointer.checkpoint_id, int) or pointer.checkpoint_id < 1 or \
                not pointer.metadata_uri:
            msg = (f"{where} is corrupt: it points to checkpoint {pointer.checkpoint_id!r} of "
                   f"job {pointer.job_id!r} at {pointer.metadata_uri!r}")
            raise CorruptStateError(msg)
        return pointer

    # -- history ----------------------------------------------------------------------------

    def put_history(self, job_id: JobId, history: bytes) -> None:
        with self._job_lock(job_id):
            if self._latest.get(job_id, 0) < 0:
                return  # removed: a late write must not leave a file behind
            self._write(job_id, HISTORY_NAME, KIND_HISTORY, history)

    def history(self, job_id: JobId) -> bytes | None:
        try:
            return self._read(job_id, HISTORY_NAME, KIND_HISTORY)
        except MissingStateError:
            return None

    # -- files ------------------------------------------------------------------------------

    def _write(self, job_id: JobId, name: str, kind: int, payload: bytes) -> None:
        with _storage_errors(self.location(job_id, name)):
            self.storage.write(self._relative(job_id, name), encode(kind, payload))
        # Read back before it counts: what recovery will read is what was meant.
        if self._read(job_id, name, kind) != payload:
            msg = f"{self.location(job_id, name)} did not read back as written"
            raise CorruptStateError(msg)

    def _read(self, job_id: JobId, name: str, kind: int) -> bytes:
        uri = self.location(job_id, name)
        handle = self_verifying(uri)
        with _storage_errors(uri):
            if not self.storage.exists(handle):
                msg = f"{uri} does not exist"
                raise MissingStateError(msg)
            try:
                data = self.storage.read(handle)
            except MissingStateError:
                msg = f"{uri} does not exist"
                raise MissingStateError(msg) from None
        return decode(data, kind, uri)


class HistoryWriter:
    """Keeps one job's history in a :class:`JobStore`: :meth:`changed` (main thread)
    asks for a write; the write runs on ``io`` with the history as ``snapshot()`` (called
    on the main thread) returns it then. At most one write is in flight: changes made
    meanwhile are written together by the next one. ``main`` runs a function on the main
    thread. A failed write is logged (once until a write succeeds again); the next change
    writes everything again.

    Example (a synchronous pool and main thread, as in tests)::

        writer = HistoryWriter(store, job_id, lambda: b"...", io, main=lambda fn: fn())
        writer.changed()
    """

    def __init__(self, store: JobStore, job_id: JobId, snapshot: Callable[[], bytes],
                 io: Executor, main: Callable[[Callable[[], None]], object]) -> None:
        self._store = store
        self._job_id = job_id
        self._snapshot = snapshot
        self._io = io
        self._main = main
        self._dirty = False
        self._in_flight = False
        self._failing = False
        #: Writes done (successful or not): for tests and logs.
        self.writes = 0

    def changed(self) -> None:
        """The history changed (main thread): write it soon."""
        self._dirty = True
        if not self._in_flight:
            self._start()

    @property
    def idle(self) -> bool:
        """No write is in flight or due."""
        return not self._in_flight and not self._dirty

    def _start(self) -> None:
        self._dirty = False
        self._in_flight = True
        data = self._snapshot()
        try:
            future = self._io.submit(self._store.put_history, self._job_id, data)
        except RuntimeError:  # the I/O pool is shut down: the JobMaster stops
            self._in_flight = False
            return
        future.add_done_callback(self._written)

    def _written(self, future: Future[None]) -> None:
        """I/O pool (or the caller's thread): note the outcome, start the next write on
        the main thread."""
        error = future.exception()
        self.writes += 1
        if error is not None and not self._failing:
            log.warning("high availability: storing the history of job %s in %s failed (%s); "
                        "a JobMaster taking the job over shows it as of the last write that "
                        "succeeded", self._job_id,
                        self._store.location(self._job_id, HISTORY_NAME), error)
        elif error is None and self._failing:
            log.info("high availability: the history of job %s is stored again",
                     self._job_id)
        self._failing = error is not None
        self._main(self._next)

    def _next(self) -> None:
        self._in_flight = False
        if self._dirty:
            self._start()


def decode_history(payload: bytes | None, where: str) -> jobmaster_pb2.JobHistory:
    """A stored history (None: none was written: empty). Raises CorruptStateError naming
    ``where`` for bytes that are no JobHistory."""
    history = jobmaster_pb2.JobHistory()
    if payload is None:
        return history
    try:
        history.ParseFromString(payload)
    except Exception as err:  # protobuf's DecodeError
        msg = f"{where} is corrupt: not a job history ({err})"
        raise CorruptStateError(msg) from err
    return history


def read_history(store: JobStore, job_id: JobId) -> jobmaster_pb2.JobHistory:
    """Blocking I/O: the job's stored history; empty when none was stored, and empty with
    one warning naming the file when it cannot be read or is damaged (a job's past is not
    worth failing its recovery for).

    Example:
        >>> import tempfile
        >>> from weir.checkpoint.storage import create_storage
        >>> store = StorageJobStore(create_storage(tempfile.mkdtemp()))
        >>> job_id = "0123456789abcdef0123456789abcdef"
        >>> store.put_history(job_id, jobmaster_pb2.JobHistory(
        ...     completed_checkpoints=3).SerializeToString())
        >>> read_history(store, job_id).completed_checkpoints
        3
    """
    where = store.location(job_id, HISTORY_NAME)
    try:
        return decode_history(store.history(job_id), where)
    except StorageError as err:  # CorruptStateError too
        detail = str(err) if where in str(err) else f"{where}: {err}"
        log.warning("high availability: the history of job %s is not recovered, the job "
                    "starts with an empty one: %s", job_id, detail)
    return jobmaster_pb2.JobHistory()


@contextlib.contextmanager
def _storage_errors(uri: str) -> Iterator[None]:
    """The file:// storage lets OSError through (a full disk, a permission, a file where a
    directory should be): callers of the store see StorageError naming ``uri``."""
    try:
        yield
    except OSError as err:
        msg = f"{uri}: {err.strerror or err}"
        raise StorageError(msg) from err


def encode(kind: int, payload: bytes) -> bytes:
    """A store file: magic, header (version, kind, length, CRC-32), payload."""
    return MAGIC + _HEADER.pack(FILE_VERSION, kind, len(payload), zlib.crc32(payload)) + payload


def decode(data: bytes, kind: int, where: str) -> bytes:
    """The payload of a store file of ``kind``; CorruptStateError naming ``where`` and what
    is wrong with it otherwise."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _HEADER.size:
        msg = f"{where} is corrupt: not a weir high-availability file ({len(data)} bytes)"
        raise CorruptStateError(msg)
    version, found, length, crc = _HEADER.unpack_from(data, len(MAGIC))
    if version != FILE_VERSION:
        msg = f"{where} has file version {version}; this weir reads version {FILE_VERSION}"
        raise CorruptStateError(msg)
    if found != kind:
        msg = (f"{where} is corrupt: it holds a {_KIND_NAMES.get(found, f'kind {found}')}, "
               f"not a {_KIND_NAMES[kind]}")
        raise CorruptStateError(msg)
    payload = data[len(MAGIC) + _HEADER.size:]
    if len(payload) != length:
        msg = f"{where} is corrupt: truncated ({len(payload)} of {length} payload bytes)"
        raise CorruptStateError(msg)
    if zlib.crc32(payload) != crc:
        msg = f"{where} is corrupt (checksum mismatch)"
        raise CorruptStateError(msg)
    return payload


def high_availability_enabled(config: Configuration) -> bool:
    """Whether ``high-availability.type`` turns high availability on."""
    return config.get(jm_options.HA_TYPE).lower() != "none"


def create_job_store(config: Configuration) -> JobStore | None:
    """The job store ``config`` asks for (None: high availability is off). Raises one
    ConfigError naming the key for a missing or unusable ``high-availability.storageDir``.
    Does no I/O: an unreachable storage shows when the store is first used.

    Example:
        >>> create_job_store(Configuration()) is None
        True
        >>> try:
        ...     create_job_store(Configuration.from_pairs({"high-availability.type": "file"}))
        ... except ConfigError as err:
        ...     print(str(err)[:70])
        high-availability.type is file but high-availability.storageDir is not
    """
    if not high_availability_enabled(config):
        return None
    key = jm_options.HA_STORAGE_DIR.key
    directory = (config.get(jm_options.HA_STORAGE_DIR) or "").strip()
    if not directory:
        msg = (f"{jm_options.HA_TYPE.key} is file but {key} is not set: set it to a "
               "file:///absolute/path or s3://bucket/prefix that every JobMaster of the "
               "cluster can reach")
        raise ConfigError(msg)
    cluster_id = config.get(jm_options.HA_CLUSTER_ID)
    try:
        create_storage(directory, config)   # refused as the user wrote it, not with the id
        storage = create_storage(f"{directory.rstrip('/')}/{cluster_id}", config)
    except ConfigError as err:
        msg = f"invalid value for '{key}': {err}"
        raise ConfigError(msg) from err
    return StorageJobStore(storage)
