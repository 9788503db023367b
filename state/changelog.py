"""The changelog state backend: generic log-based incremental checkpoints (Flink's FLIP-158).

:class:`ChangelogKeyedStateBackend` wraps a ``hashmap`` or ``rocksdb`` backend (the
*delegate*). Every change of keyed state — and of keyed timers, which are keyed state — is
applied to the delegate and appended to the backend's log writer
(checkpoint/changelog_storage.py) for its key group. In-place mutations need nothing more:
every handle that mutates a value from ``_get_mutable`` writes it back with ``_put`` (or
clears it), and the new value is what the log records.

* A checkpoint is the last completed *materialization* (a snapshot of the delegate, in its
  own format: RocksDB native incremental, ``hashmap`` canonical) plus the log after it. Its
  synchronous part only marks the log position; the asynchronous part waits for the log's
  tail to be uploaded and returns a :class:`ChangelogStateHandle` naming both.
* A materialization runs every ``state.changelog.periodic-materialize.interval``: the
  delegate's synchronous snapshot on the task thread, the upload on a background thread;
  later checkpoints refer to it, and the log before it is forgotten (its files go once no
  retained checkpoint refers to them). ``state.changelog.max-failures-allowed``
  consecutive failures fail the task. With task-local recovery, a materialization also
  keeps a local copy (:func:`materialization_local_dir`), until a checkpoint naming a
  newer one completes.
* Restore: the delegate is restored from the materialized handles (only this subtask's
  key groups) while each handle's log, for the key groups that handle owned and this
  subtask owns, is indexed by row (state/changelog_replay.py); the rows are applied to
  the delegate as the task touches them, a few between records, and all before the whole
  state is read. A later checkpoint refers to the restored handle only when
  the snapshot is the job's (CLAIM, or a failover), it is one changelog handle and covers
  exactly this subtask's key groups; otherwise (NO_CLAIM, rescaling, another format) the
  first checkpoint materializes, so it names only files of its own job.
* A savepoint is the delegate's: canonical, or the delegate's native format.

Example:
    >>> import tempfile
    >>> from weir.checkpoint.changelog_storage import ChangelogStorage, ChangelogStorageOptions
    >>> from weir.checkpoint.storage import create_storage
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.heap import HeapKeyedStateBackend
    >>> from weir.state.key_groups import KeyGroupRange
    >>> from weir.state.snapshot import SnapshotLocation
    >>> storage = create_storage(tempfile.mkdtemp())
    >>> log = ChangelogStorage(storage, "job/changelog", ChangelogStorageOptions(0.0))
    >>> def backend():
    ...     return ChangelogKeyedStateBackend(
    ...         HeapKeyedStateBackend(128, KeyGroupRange(0, 127)), log.create_writer("op-0"),
    ...         storage, "job", "op-0")
    >>> old = backend()
    >>> count = old.get_state(ValueStateDescriptor("count"))
    >>> old.set_current_key("ann"); count.update(5)
    >>> handle = old.snapshot_to(1, SnapshotLocation.for_checkpoint(storage, "job", 1,
    ...                                                             "op-0")).run()
    >>> handle.kind, handle.materialized, len(handle.log)
    ('changelog', (), 1)
    >>> new = backend()
    >>> from weir.state.restore import restore
    >>> _ = restore(new, [handle], storage)
    >>> new.set_current_key("ann"); new.get_state(ValueStateDescriptor("count")).value()
    5
    >>> log.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from weir.checkpoint.changelog_storage import (
    ChangelogWriter,
    LogSegmentHandle,
    PersistResult,
    VerifiedPiece,
    YieldingStorage,
    read_pieces,
)
from weir.checkpoint.storage import CheckpointStorageAccess, StreamStateHandle
from weir.core.errors import CorruptStateError, MissingStateError, StateError
from weir.core.ids import CheckpointId
from weir.state.backend import Entry, KeyedStateBackend
from weir.state.changelog_replay import (
    APPEND,
    DELETE,
    PUT,
    PendingLog,
    encode_change,
    replay,
    row_id,
)
from weir.state.handles import KeyedStateHandle, LocalCopy, _range_from, _range_to_list
from weir.state.incremental import TRANSFER_THREADS
from weir.state.key_groups import KeyGroupRange
from weir.state.serializers import encode_key, serialize_value
from weir.state.snapshot import SHARED_DIR, AsyncSnapshot, SnapshotLocation

if TYPE_CHECKING:
    from weir.state.canonical import SegmentView
    from weir.state.restore import RestoreResult

log = logging.getLogger(__name__)

KIND_CHANGELOG = "changelog"

#: Writes between two looks at the materialization clock (a look is cheap, not free).
_CHECK_EVERY = 256

#: Rows of a restored log applied at each of those looks while some are left (about 2 per
#: write: a few tenths of a millisecond, so records keep flowing while the rest of the log
#: is applied).
DRAIN_ROWS = 512

#: A materialization's local copy directory: ``m<id>-<tag>``.
_MATERIALIZATION_DIR = re.compile(r"^m(\d+)-")


def materialization_local_dir(local_root: Path, job_id: str, owner: str) -> Path:
    """Where task-local recovery keeps the local copies of ``owner``'s materializations:
    ``<local_root>/<job>/changelog/materialized/<owner>`` (beside the log files' copies,
    removed with the job's local state)."""
    return local_root / job_id / "changelog" / "materialized" / owner


# -- the handle ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=True)
class ChangelogStateHandle(KeyedStateHandle):
    """A changelog checkpoint of one subtask: materialized handles (any other kind) plus
    log segments, replayed in order after them.

    Example:
        >>> from weir.state.handles import CanonicalStateHandle
        >>> data = StreamStateHandle("file:///c/job/shared/m/state", 120, "crc32c:0000abcd")
        >>> base = CanonicalStateHandle(KeyGroupRange(0, 63), 2, data)
        >>> f = StreamStateHandle("file:///c/job/changelog/a.log", 90, "crc32c:00000001")
        >>> segment = LogSegmentHandle(f, 10, 40, 0, 63, 0, 7, "crc32c:00000002")
        >>> handle = ChangelogStateHandle(KeyGroupRange(0, 63), 5, 2, (base,), (segment,))
        >>> KeyedStateHandle.from_dict(handle.to_dict()) == handle
        True
        >>> handle.materialized_size, handle.log_size, handle.state_size
        (120, 40, 160)
    """

    key_group_range: KeyGroupRange
    checkpoint_id: CheckpointId
    #: The materialization the handle builds on (0: none, the log holds everything).
    materialization_id: int
    materialized: tuple[KeyedStateHandle, ...]
    log: tuple[LogSegmentHandle, ...]
    #: Bytes this checkpoint uploaded: log segments and a materialization that no earlier
    #: checkpoint of this subtask named.
    uploaded_bytes: int = 0
    local: LocalCopy | None = None
    state_kinds: dict[str, str] = field(default_factory=dict, compare=False)
    kind: ClassVar[str] = KIND_CHANGELOG

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "key_group_range": _range_to_list(self.key_group_range),
                "checkpoint_id": self.checkpoint_id,
                "materialization_id": self.materialization_id,
                "materialized": [h.to_dict() for h in self.materialized],
                "log": [s.to_dict() for s in self.log],
                "uploaded_bytes": self.uploaded_bytes,
                "local": self.local.to_dict() if self.local else None,
                "state_kinds": dict(sorted(self.state_kinds.items()))}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> ChangelogStateHandle:
        local = data.get("local")
        return cls(_range_from(data["key_group_range"]), CheckpointId(int(data["checkpoint_id"])),
                   int(data["materialization_id"]),
                   tuple(KeyedStateHandle.from_dict(h) for h in data["materialized"]),
                   tuple(LogSegmentHandle.from_dict(s) for s in data["log"]),
                   int(data.get("uploaded_bytes", 0)),
                   LocalCopy.from_dict(local) if local else None,
                   {str(k): str(v) for k, v in (data.get("state_kinds") or {}).items()})

    def shared_state(self) -> list[StreamStateHandle]:
        # A materialization and the log files outlive the checkpoint that wrote them: every
        # file is counted by the shared state registry, none is private.
        files: dict[str, StreamStateHandle] = {}
        for handle in self.materialized:
            for f in (*handle.shared_state(), *handle.private_state()):
                files.setdefault(f.uri, f)
        for segment in self.log:
            files.setdefault(segment.file.uri, segment.file)
        return [files[uri] for uri in sorted(files)]

    def private_state(self) -> list[StreamStateHandle]:
        return []

    @property
    def materialized_size(self) -> int:
        """Bytes of the materialized part (what a restore reads before the log)."""
        return sum(h.state_size for h in self.materialized)

    @property
    def log_size(self) -> int:
        """Bytes of the log segments (what a restore replays)."""
        return sum(s.length for s in self.log)

    @property
    def state_size(self) -> int:
        # Log files are shared by several writers: only this handle's segments count.
        return self.materialized_size + self.log_size

    @property
    def checkpointed_size(self) -> int:
        return self.uploaded_bytes


def state_size_split(handles: Iterable[KeyedStateHandle]) -> tuple[int, int]:
    """(materialized bytes, log bytes) of keyed state handles; a handle of another kind is
    all materialized."""
    materialized = logged = 0
    for handle in handles:
        if isinstance(handle, ChangelogStateHandle):
            materialized += handle.materialized_size
            logged += handle.log_size
        else:
            materialized += handle.state_size
    return materialized, logged


# -- metrics ---------------------------------------------------------------------------------


@dataclass
class MaterializationMetrics:
    """Flink's materialization metrics of one backend, read at scrape time."""

    job_id: str
    owner: str
    last_duration_ms: int = 0
    failed: int = 0
    completed: int = 0
    #: Rows of the restored log not applied yet (see changelog_replay.PendingLog).
    restored_log_rows_pending: int = 0

    def snapshot(self) -> dict[str, float]:
        return {"lastDurationOfMaterialization": self.last_duration_ms,
                "numberOfFailedMaterialization": self.failed,
                "numberOfCompletedMaterialization": self.completed,
                "restoredLogRowsPending": self.restored_log_rows_pending}


_LIVE: weakref.WeakSet[ChangelogKeyedStateBackend] = weakref.WeakSet()


def live_materialization_metrics() -> list[MaterializationMetrics]:
    """The materialization metrics of every changelog backend of this process."""
    return [backend.metrics for backend in list(_LIVE)]


#: The nice value of materialization threads (and the upload threads they start).
MATERIALIZATION_NICE = 10


def _background_priority() -> None:
    """A materialization is background work: while it uploads hundreds of megabytes the
    records must go on at their pace, or an aligned barrier waits behind those that queue
    up. On Linux each thread has its own nice value (threads it starts inherit it), so
    the operating system runs the task threads first when the cores are short."""
    if sys.platform.startswith("linux"):  # elsewhere the id would name a process
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), MATERIALIZATION_NICE)


#: Materializations' asynchronous parts (uploads), shared by the process's backends.
_MATERIALIZER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="materialization",
                                   initializer=_background_priority)


# -- the backend -----------------------------------------------------------------------------


@dataclass
class _Base:
    """What checkpoints build on: materialized handles (done, or still uploading) and the log
    before this writer's ``sequence`` that they do not cover."""

    materialization_id: int
    sequence: int
    materialized: tuple[KeyedStateHandle, ...] = ()
    restored_log: tuple[LogSegmentHandle, ...] = ()
    #: Local copies of ``restored_log``'s files in this TaskExecutor's log directory (a
    #: restore on the TaskExecutor that wrote them): the checkpoints that name that log
    #: name them too, so a second failover reads them locally as the first did.
    restored_local: dict[str, StreamStateHandle] = field(default_factory=dict)
    pending: Future[KeyedStateHandle] | None = None
    #: Whether a checkpoint of this subtask already named the materialization.
    reported: bool = False


class ChangelogKeyedStateBackend(KeyedStateBackend):
    """A keyed backend whose changes are also logged (see the module docstring)."""

    name = "changelog"

    def __init__(self, delegate: KeyedStateBackend, writer: ChangelogWriter,
                 storage: CheckpointStorageAccess, job_id: str, owner: str, *,
                 materialize_interval: float = 600.0, max_failures: int = 3,
                 clock: Callable[[], float] = time.monotonic,
                 local_root: Path | None = None) -> None:
        """``storage``/``job_id``: the job's checkpoint storage, where materializations go
        (under ``<job>/shared``); ``owner`` names this operator subtask in paths and
        metrics. ``materialize_interval`` <= 0: no periodic materialization.
        ``local_root`` (task-local recovery): materializations also keep a local copy, in
        :func:`materialization_local_dir`."""
        # The delegate's clock: a time to live reads it through this backend's handles.
        super().__init__(delegate.max_parallelism, delegate.key_group_range, delegate._clock)
        self.delegate = delegate
        self.writer = writer
        self._storage = storage
        self._job_id = job_id
        self._owner_dir = owner
        self._interval = materialize_interval
        self._max_failures = max_failures
        self._mono = clock
        self._next_materialization = clock() + materialize_interval
        self._writes = 0
        self._materialization_id = 0
        self._base: _Base | None = _Base(0, 0)
        self._running: tuple[int, int, Future[KeyedStateHandle], float] | None = None
        self._consecutive_failures = 0
        self._fatal: BaseException | None = None
        self._lock = threading.Lock()
        self._last_uploaded_log = 0
        self._local_root = local_root
        #: Local copies of materializations, by id (task-local recovery only).
        self._local_dirs: dict[int, Path] = {}
        #: The materialization each checkpoint taken but not yet completed builds on, and
        #: where in the log it ends: (id, sequence).
        self._checkpoint_bases: dict[int, tuple[int, int]] = {}
        #: The list the last ``_get_mutable`` returned, and its length then.
        self._mutable: tuple[list[Any], int] | None = None
        #: The restored log's rows not applied to the delegate yet, and when the restore
        #: ended (see changelog_replay.PendingLog): a row is applied before it is read or
        #: written, the rest a few at a time, all before the whole state is read.
        self._pending: PendingLog | None = None
        self._pending_since = 0.0
        self.metrics = MaterializationMetrics(job_id, owner)
        _LIVE.add(self)

    # -- keyed state: forwarded, and logged -------------------------------------------------

    def set_current_key(self, key: Any, key_group: int | None = None) -> None:
        super().set_current_key(key, key_group)
        self.delegate.current_key, self.delegate.current_key_group = \
            self.current_key, self.current_key_group

    def get_state(self, descriptor: Any) -> Any:
        self.delegate.owner = self.owner  # named in the delegate's messages
        self.delegate.get_state(descriptor)
        return super().get_state(descriptor)

    def expect_state_kinds(self, kinds: dict[str, str]) -> None:
        self.delegate.owner = self.owner
        self.delegate.expect_state_kinds(kinds)
        super().expect_state_kinds(kinds)

    def _sync(self) -> KeyedStateBackend:
        delegate = self.delegate
        delegate.current_key, delegate.current_key_group = \
            self.current_key, self.current_key_group
        # A key's bytes are computed once for the delegate's rows and the log's changes.
        delegate._encoded_key, delegate._encoded_for = self._encoded_key, self._encoded_for
        return delegate

    def _register(self, state: str) -> None:
        self.delegate._register(state)

    def _get(self, state: str, namespace: Any) -> Any:
        if self._pending is not None:
            self._catch_up(state, encode_key(namespace), True)
        return self._sync()._get(state, namespace)

    def _get_mutable(self, state: str, namespace: Any) -> Any:
        # The caller writes the mutated value back with _put (or clears it): logged there.
        # A list is only ever extended in place (ListState.add_all): remembering its length
        # lets _put log the new elements instead of the whole list again.
        if self._pending is not None:
            self._catch_up(state, encode_key(namespace), True)
        value = self._sync()._get_mutable(state, namespace)
        self._mutable = (value, len(value)) if type(value) is list else None
        return value

    def _put(self, state: str, namespace: Any, value: Any) -> None:
        key, ns = self._current_key_bytes(), encode_key(namespace)
        if self._pending is not None:  # the whole value is replaced: its log is moot
            self._catch_up(state, ns, False)
        delegate = self._sync()
        mutable, self._mutable = self._mutable, None
        if mutable is not None and mutable[0] is value and len(value) >= mutable[1]:
            delegate._put(state, namespace, value)
            change = encode_change(APPEND, state, key, ns, serialize_value(value[mutable[1]:]))
        else:
            data = serialize_value(value)  # once, for the backend and the log
            delegate._put_serialized(state, namespace, value, data)
            change = encode_change(PUT, state, key, ns, data)
        self._log(self.current_key_group, change, state)

    def _delete(self, state: str, namespace: Any) -> None:
        key, ns = self._current_key_bytes(), encode_key(namespace)
        if self._pending is not None:
            self._catch_up(state, ns, False)
        self._sync()._delete(state, namespace)
        self._log(self.current_key_group, encode_change(DELETE, state, key, ns), state)

    def _get_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                  namespace: Any) -> list[Any]:
        if self._pending is not None:
            self._catch_up_many(state, key_groups, keys, namespace, True)
        return self.delegate._get_many(state, key_groups, keys, namespace)

    def _put_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                  namespace: Any, values: Sequence[Any]) -> None:
        if self._pending is not None:
            self._catch_up_many(state, key_groups, keys, namespace, False)
        self.delegate._put_many(state, key_groups, keys, namespace, values)
        ns = encode_key(namespace)
        for key_group, key, value in zip(key_groups, keys, values, strict=True):
            self._log(key_group, encode_change(PUT, state, encode_key(key), ns,
                                               serialize_value(value)), state)

    def _delete_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                     namespace: Any) -> None:
        if self._pending is not None:
            self._catch_up_many(state, key_groups, keys, namespace, False)
        self.delegate._delete_many(state, key_groups, keys, namespace)
        ns = encode_key(namespace)
        for key_group, key in zip(key_groups, keys, strict=True):
            self._log(key_group, encode_change(DELETE, state, encode_key(key), ns), state)

    def _log(self, key_group: int, payload: bytes, state: str) -> None:
        self.writer.append(key_group, payload, state)
        self._writes += 1
        if self._writes % _CHECK_EVERY == 0:
            self._maintain()

    def keys(self, state: str, namespace: Any = None) -> Iterator[Any]:
        self._apply_pending(state)
        return self.delegate.keys(state, namespace)

    def namespaced_keys(self, state: str) -> Iterator[tuple[int, Any, Any]]:
        self._apply_pending(state)
        return self.delegate.namespaced_keys(state)

    def entries(self) -> Iterator[Entry]:
        self._apply_pending()
        return self.delegate.entries()

    def load_entries(self, entries: Iterable[Entry]) -> int:
        return self.delegate.load_entries(entries)

    def load_segment(self, segment: SegmentView) -> int:
        return self.delegate.load_segment(segment)

    def snapshot(self) -> Any:
        self._apply_pending()
        return self.delegate.snapshot()

    def state_kinds(self) -> dict[str, str]:
        return {**self._restored_kinds, **super().state_kinds()}

    # -- the restored log, applied as the task runs (changelog_replay.PendingLog) ------------

    def _catch_up(self, state: str, namespace: bytes, apply: bool) -> None:
        """Before the current key's row of ``state`` is used: apply its pending changes
        (``apply``), or forget them (the row is about to be replaced or deleted)."""
        pending = self._pending
        assert pending is not None
        key_group = self.current_key_group
        if not pending.holds(state, key_group):
            return
        positions = pending.take(state, row_id(self._current_key_bytes(), namespace),
                                 key_group)
        if positions is not None and apply:
            pending.apply(self._sync(), positions)

    def _catch_up_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                       namespace: Any, apply: bool) -> None:
        pending = self._pending
        assert pending is not None
        ns, take, holds = encode_key(namespace), pending.take, pending.holds
        for key_group, key in zip(key_groups, keys, strict=True):
            if not holds(state, key_group):
                continue
            positions = take(state, row_id(encode_key(key), ns), key_group)
            if positions is not None and apply:
                pending.apply(self.delegate, positions)

    def _apply_pending(self, state: str | None = None, rows: int | None = None) -> None:
        """Apply pending rows of the restored log: of ``state`` or all, at most ``rows``."""
        pending = self._pending
        if pending is None:
            return
        pending.drain(self.delegate, rows, state)
        left = pending.rows
        self.metrics.restored_log_rows_pending = left
        if not left:
            self._pending = None
            log.info("%s applied the restored state change log: %d changes, %d rows, "
                     "%.1f s after its restore", self._owner_dir, pending.changes,
                     pending.applied, self._mono() - self._pending_since)

    def work_while_idle(self) -> bool:
        """Without input the task applies the restored log here, so an idle job's log is
        applied (and its index freed) in seconds rather than at DRAIN_ROWS a checkpoint."""
        if self._pending is None:
            return False
        self._apply_pending(rows=DRAIN_ROWS)
        return self._pending is not None

    # -- materialization ----------------------------------------------------------------------

    def _maintain(self) -> None:
        """Task thread: apply some of the restored log, take a finished materialization in,
        fail after too many failures, start a periodic one when due."""
        if self._pending is not None:
            self._apply_pending(rows=DRAIN_ROWS)
        self._collect()
        if self._fatal is not None:
            raise StateError(str(self._fatal)) from self._fatal
        if self._interval > 0 and self._running is None and \
                self._mono() >= self._next_materialization:
            self._next_materialization = self._mono() + self._interval
            base = self._base
            if base is None or base.pending is not None or \
                    self.writer.next_sequence > base.sequence:
                self.materialize()

    def materialize(self) -> Future[KeyedStateHandle]:
        """Start a materialization now (task thread: the delegate's synchronous snapshot);
        its upload runs on a background thread. Returns its future (the running one's, if
        one runs)."""
        self._await_restored()
        self._apply_pending()
        self._collect()
        if self._running is not None:
            return self._running[2]
        self._materialization_id += 1
        mid = self._materialization_id
        self.writer.seal()  # the log its checkpoints name starts at a piece's start
        sequence = self.writer.next_sequence
        tag = f"m{mid}-{uuid.uuid4().hex[:8]}"
        local_dir = None
        if self._local_root is not None:
            local_dir = self._local_dirs[mid] = materialization_local_dir(
                self._local_root, self._job_id, self._owner_dir) / tag
        location = SnapshotLocation(
            YieldingStorage(self._storage, self.writer.log),
            f"{self._job_id}/{SHARED_DIR}/materialized/{self._owner_dir}/{tag}",
            f"{self._job_id}/{SHARED_DIR}", local_dir)
        running = self.delegate.snapshot_to(CheckpointId(mid), location)
        future = _MATERIALIZER.submit(running.run)
        self._running = (mid, sequence, future, self._mono())
        return future

    def _collect(self) -> None:
        running = self._running
        if running is None or not running[2].done():
            return
        self._running = None
        mid, sequence, future, started = running
        self.metrics.last_duration_ms = round((self._mono() - started) * 1000)
        error = future.exception()
        if error is not None:
            self.metrics.failed += 1
            self._consecutive_failures += 1
            log.warning("materialization %d of %s failed (%d in a row): %s", mid,
                        self._owner_dir, self._consecutive_failures, error)
            if self._base is not None and self._base.pending is future:
                self._base = None  # the next checkpoint materializes again
            local_dir = self._local_dirs.pop(mid, None)
            if local_dir is not None:
                shutil.rmtree(local_dir, ignore_errors=True)
            if self._consecutive_failures > self._max_failures:
                self._fatal = StateError(
                    f"{self._consecutive_failures} materializations of {self._owner_dir} "
                    f"failed in a row (state.changelog.max-failures-allowed is "
                    f"{self._max_failures}); the last: {error}")
            return
        self._consecutive_failures = 0
        self.metrics.completed += 1
        handle = future.result()
        # The next delegate snapshot builds on this one.
        self.delegate.notify_checkpoint_complete(CheckpointId(mid))
        old = self._base
        reported = old is not None and old.pending is future and old.reported
        self._base = _Base(mid, sequence, (handle,), reported=reported)
        self.writer.truncate(sequence)

    # -- checkpoints -------------------------------------------------------------------------

    def snapshot_to(self, checkpoint_id: CheckpointId, location: SnapshotLocation, *,
                    canonical: bool = False) -> AsyncSnapshot:
        """A savepoint: the delegate's (canonical or native). A checkpoint: marks the log
        position (task thread), the returned part waits for the log's tail to be uploaded
        and names the last materialization (materializing now when there is none the
        checkpoint may name)."""
        self._maintain()
        if canonical or location.savepoint_format is not None:
            self._apply_pending()
            return self.delegate.snapshot_to(checkpoint_id, location, canonical=canonical)
        base = self._base
        if base is None:
            self.materialize()
            assert self._running is not None
            mid, sequence, future, _ = self._running
            base = self._base = _Base(mid, sequence, pending=future)
        persist = self.writer.persist(base.sequence)
        self._checkpoint_bases[checkpoint_id] = (base.materialization_id, base.sequence)
        return _ChangelogAsyncSnapshot(checkpoint_id, self, base, persist,
                                       self.state_kinds())

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> None:
        self._collect()
        done = [c for c in self._checkpoint_bases if c <= checkpoint_id]
        if not done:
            return
        confirmed, sequence = max(self._checkpoint_bases[c] for c in done)
        for c in done:
            del self._checkpoint_bases[c]
        # Only now may the local copies of what the confirmed base covers go: until a
        # checkpoint naming a materialization completes, a restore reads an older one,
        # with the log before it.
        self.writer.release_local(sequence)
        if self._local_root is not None and confirmed:
            self._prune_local(confirmed)

    def _prune_local(self, confirmed: int) -> None:
        """A completed checkpoint builds on materialization ``confirmed``: local copies of
        older ones (this backend's, and those a predecessor on this TaskExecutor left) can
        no longer be restored from."""
        assert self._local_root is not None
        for mid in [m for m in self._local_dirs if m < confirmed]:
            del self._local_dirs[mid]
        directory = materialization_local_dir(self._local_root, self._job_id, self._owner_dir)
        with contextlib.suppress(OSError):
            for entry in directory.iterdir():
                match = _MATERIALIZATION_DIR.match(entry.name)
                if match and int(match.group(1)) < confirmed:
                    shutil.rmtree(entry, ignore_errors=True)

    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> None:
        self._checkpoint_bases.pop(checkpoint_id, None)

    def _uploaded(self, base: _Base, handle: KeyedStateHandle,
                  log: Sequence[LogSegmentHandle]) -> int:
        """Bytes a checkpoint uploaded: new log segments, and the materialization when no
        checkpoint named it before (any thread)."""
        with self._lock:
            new = sum(s.length for s in log if s.end_sequence > self._last_uploaded_log)
            if log:
                self._last_uploaded_log = max(self._last_uploaded_log,
                                              max(s.end_sequence for s in log))
            if not base.reported:
                base.reported = True
                new += handle.checkpointed_size if base.materialization_id else 0
            return new

    # -- restore -----------------------------------------------------------------------------

    def restore_handles(self, handles: list[KeyedStateHandle], storage: CheckpointStorageAccess,
                        build_on: bool) -> RestoreResult:
        """Restore from any handles (called by ``weir.state.restore.restore``)."""
        self.delegate.owner = self.owner
        pending = PendingLog()
        result = restore_into(self.delegate, handles, storage, build_on=build_on,
                              pending=pending)
        if pending.rows:
            self._pending, self._pending_since = pending, self._mono()
            self.metrics.restored_log_rows_pending = pending.rows
            log.info("%s restored; %d changes of the state change log, indexed and "
                     "applied as the task runs", self._owner_dir, pending.changes)
        relevant = [h for h in handles if len(h.overlap(self.key_group_range))]
        for handle in relevant:
            super().expect_state_kinds(getattr(handle, "state_kinds", {}))
        self._materialization_id = max(
            [self._materialization_id,
             *(h.checkpoint_id for r in relevant if isinstance(r, ChangelogStateHandle)
               for h in r.materialized),
             *(h.checkpoint_id for h in relevant if not isinstance(h, ChangelogStateHandle))])
        only = relevant[0] if len(relevant) == 1 else None
        if build_on and isinstance(only, ChangelogStateHandle) and \
                only.key_group_range == self.key_group_range:
            # The job's own snapshot of exactly these key groups: build on it.
            self._base = _Base(only.materialization_id, 0, only.materialized, only.log,
                               restored_local=self._own_local_copies(only), reported=True)
        elif relevant:
            self._base = None  # the first checkpoint materializes
        return result

    def _own_local_copies(self, handle: ChangelogStateHandle) -> dict[str, StreamStateHandle]:
        """The local copies ``handle`` names of its log files, if they are in this
        writer's local directory."""
        local, directory = handle.local, self.writer.local_dir
        if local is None or directory is None or \
                Path(local.directory).resolve() != Path(directory).resolve():
            return {}
        names = {segment.file.uri.rsplit("/", 1)[-1] for segment in handle.log}
        return {name: copy for name, copy in local.files.items() if name in names}

    def dispose(self) -> None:
        _LIVE.discard(self)
        self._pending = None
        self.writer.close()
        self.delegate.dispose()


class _ChangelogAsyncSnapshot(AsyncSnapshot):
    """Waits for the base's materialization (if still running) and the log's tail."""

    def __init__(self, checkpoint_id: CheckpointId, backend: ChangelogKeyedStateBackend,
                 base: _Base, persist: PersistResult, state_kinds: dict[str, str]) -> None:
        super().__init__(checkpoint_id)
        self._backend = backend
        self._base = base
        self._persist = persist
        self._state_kinds = state_kinds

    def _run(self) -> KeyedStateHandle:
        base = self._base
        materialized = base.materialized
        if base.pending is not None:
            while True:
                try:
                    materialized = (base.pending.result(timeout=0.05),)
                    break
                except TimeoutError:
                    self._check_cancelled()
        segments = self._persist.result(check=self._check_cancelled)
        log_segments = (*base.restored_log, *segments)
        writer = self._backend.writer
        copies = {**base.restored_local, **writer.local_copies(self._persist)}
        local = LocalCopy(str(writer.local_dir), copies) \
            if copies and writer.local_dir is not None else None
        handle = ChangelogStateHandle(self._backend.key_group_range, self.checkpoint_id,
                                      base.materialization_id, materialized, log_segments,
                                      0, local, self._state_kinds)
        uploaded = self._backend._uploaded(
            base, materialized[0] if materialized else handle, segments)
        return dataclasses.replace(handle, uploaded_bytes=uploaded)

    def _release(self) -> None:
        return None


# -- restoring from changelog handles (into any backend) -------------------------------------


def restore_into(backend: KeyedStateBackend, handles: list[KeyedStateHandle],
                 storage: CheckpointStorageAccess, *, build_on: bool = True,
                 transfer_threads: int = TRANSFER_THREADS,
                 pending: PendingLog | None = None) -> RestoreResult:
    """Restore a plain backend from handles of any kind: the materialized parts first (one
    restore), then every changelog handle's log, in order, for the key groups that handle
    covered and ``backend`` owns. The log files not kept locally download on
    ``transfer_threads`` threads while the materialized part restores, so a restore waits
    for the slower of the two, not for their sum.

    With ``pending`` the log is not replayed but indexed into it (the changelog backend
    applies it as the task runs), on a thread of its own as the files arrive, so that too
    overlaps the materialized part's restore. Raises CorruptStateError /
    MissingStateError naming the checkpoint and the file."""
    from weir.state.restore import restore

    owned = backend.key_group_range
    relevant = [h for h in handles if len(h.overlap(owned))]
    changelog = [h for h in relevant if isinstance(h, ChangelogStateHandle)]
    plain = [h for h in relevant if not isinstance(h, ChangelogStateHandle)]
    materialized = [*plain, *(m for h in changelog for m in h.materialized)]
    local: dict[str, bytes] = {}
    copies = sum(_read_local_copies(handle, storage, local) for handle in changelog)
    files: dict[str, bytes | Future[bytes]] = dict(local)

    def each_log(consume: Callable[[Iterable[VerifiedPiece], tuple[int, int]], int]) -> int:
        changes = 0
        for handle in changelog:
            window = handle.key_group_range.intersection(owned)
            key_groups = (window.start, window.end)
            try:
                changes += consume(read_pieces(storage, handle.log, key_groups, files),
                                   key_groups)
            except (CorruptStateError, MissingStateError) as err:
                kg = handle.key_group_range
                msg = (f"{err}: it holds the state change log of key groups "
                       f"{kg.start}-{kg.end} in checkpoint {handle.checkpoint_id}. "
                       "Restore from another retained checkpoint or a savepoint")
                raise type(err)(msg) from err
        return changes

    # The indexer is left (and joined) before the downloads are: a failed restore cancels
    # the downloads the indexer may be waiting for, so it ends too.
    started = time.monotonic()
    with ThreadPoolExecutor(transfer_threads, thread_name_prefix="changelog-fetch") as pool, \
            ThreadPoolExecutor(1, thread_name_prefix="changelog-index") as indexer:
        try:
            for handle in changelog:
                window = handle.key_group_range.intersection(owned)
                for segment in handle.log:
                    uri = segment.file.uri
                    if uri not in files and segment.overlaps(window.start, window.end):
                        files[uri] = pool.submit(storage.read, segment.file)
            indexed = indexer.submit(each_log, pending.add) if pending is not None else None
            result = restore(backend, materialized, storage, lazy=False, build_on=build_on)
            materialized_s = time.monotonic() - started
            result.local_copies_used += copies
            for handle in changelog:
                backend.expect_state_kinds(handle.state_kinds)
            if indexed is not None:
                result.entries += indexed.result()
            else:
                result.entries += each_log(partial(replay, backend))
            if changelog:
                log.info("%s: materialized state restored after %.2f s, the log (%.1f MiB "
                         "in %d files) %s after %.2f s", backend.owner, materialized_s,
                         sum(s.length for h in changelog for s in h.log) / 2**20,
                         len({s.file.uri for h in changelog for s in h.log}),
                         "added" if indexed is not None else "replayed",
                         time.monotonic() - started)
        finally:  # a failed restore does not wait for downloads it no longer needs
            for download in files.values():
                if isinstance(download, Future):
                    download.cancel()
    result.handles = len(relevant)
    return result


def _read_local_copies(handle: ChangelogStateHandle, storage: CheckpointStorageAccess,
                       files: dict[str, bytes]) -> int:
    """Read the log files ``handle`` has verified local copies of on this TaskExecutor
    into ``files`` (by remote URI); returns how many. A missing or damaged copy is logged,
    and the remote file read instead."""
    from weir.checkpoint.filesystem import FsCheckpointStorageAccess
    from weir.state.local_recovery import RestoreStorage, count_local

    local = handle.local
    if local is None or not isinstance(storage, RestoreStorage) or not storage.holds(local):
        return 0
    used = 0
    for segment in handle.log:
        remote = segment.file
        copy = local.files.get(remote.uri.rsplit("/", 1)[-1])
        if copy is None or remote.uri in files:
            continue
        try:
            if (copy.length, copy.checksum) != (remote.length, remote.checksum):
                msg = f"local copy {copy.uri} is not a copy of {remote.uri}"
                raise CorruptStateError(msg)
            data = FsCheckpointStorageAccess(local.directory).read(copy)
        except (OSError, MissingStateError, CorruptStateError) as err:
            log.warning("local copy of state change log %s is unusable (%s); reading it "
                        "from checkpoint storage", remote.uri, err)
            continue
        files[remote.uri] = data
        count_local(storage, len(data))
        used += 1
    return used


# -- the factory's part ----------------------------------------------------------------------


def wrap(delegate: KeyedStateBackend, writer: ChangelogWriter, storage: CheckpointStorageAccess,
         job_id: str, owner: str, materialize_interval: float, max_failures: int,
         local_root: Path | None = None) -> ChangelogKeyedStateBackend:
    """The changelog backend over ``delegate`` (see :class:`ChangelogKeyedStateBackend`)."""
    backend = ChangelogKeyedStateBackend(delegate, writer, storage, job_id, owner,
                                         materialize_interval=materialize_interval,
                                         max_failures=max_failures, local_root=local_root)
    # Lazy restore loads canonical snapshots by key group; the changelog defers its log by
    # row instead, after the whole materialized state (changelog_replay.PendingLog).
    backend.lazy_restore = False
    backend.rescale_method = delegate.rescale_method
    return backend
