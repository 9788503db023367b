"""Checkpointing keyed state: a synchronous part on the task thread, an asynchronous part
that writes to checkpoint storage and returns a keyed state handle.

The checkpoint coordinator's task-side counterpart calls, per stateful operator::

    running = backend.snapshot_to(checkpoint_id, location)   # task thread, at the barrier
    handle = running.run()                                   # any thread, task continues
    ...acknowledge with handle.to_dict()...
    backend.notify_checkpoint_complete(checkpoint_id)        # or notify_checkpoint_aborted

:class:`SnapshotLocation` says where the files go: private files under the checkpoint's
own prefix (``<job>/chk-<n>/<owner>``), files shared between checkpoints under
``<job>/shared``, and optionally a local directory for task-local recovery.
:class:`CanonicalSnapshotStrategy` writes the canonical format (both backends; ``hashmap``
always); the RocksDB native incremental strategy lives in state/incremental.py.

Example:
    >>> import tempfile
    >>> from weir.checkpoint.storage import create_storage
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.heap import HeapKeyedStateBackend
    >>> from weir.state.key_groups import KeyGroupRange
    >>> from weir.state.restore import restore
    >>> storage = create_storage(tempfile.mkdtemp())
    >>> backend = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> count = backend.get_state(ValueStateDescriptor("count"))
    >>> backend.set_current_key("ann"); count.update(5)
    >>> running = backend.snapshot_to(1, SnapshotLocation.for_checkpoint(storage, "job", 1,
    ...                                                                   "op-0"))
    >>> count.update(6)                      # processing goes on meanwhile
    >>> handle = running.run()
    >>> handle.kind, handle.key_group_range
    ('canonical', KeyGroupRange(start=0, end=127))
    >>> fresh = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> _ = restore(fresh, [handle], storage)
    >>> fresh.set_current_key("ann"); fresh.get_state(ValueStateDescriptor("count")).value()
    5
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from weir.checkpoint.storage import CheckpointStorageAccess, check_relative
from weir.core.errors import StateError, StorageError
from weir.core.ids import CheckpointId, JobId
from weir.proto.checkpoint_pb2 import SAVEPOINT_CANONICAL
from weir.state.canonical import write_segments
from weir.state.handles import CanonicalStateHandle, KeyedStateHandle, LocalCopy
from weir.state.key_groups import KeyGroupRange
from weir.state.local_recovery import LocalCopyTracker, local_checkpoint_dir, record_local_copy

if TYPE_CHECKING:
    from weir.state.backend import KeyedStateBackend

log = logging.getLogger(__name__)

#: Sub-prefix of a job's checkpoint directory holding files shared between checkpoints.
SHARED_DIR = "shared"


@dataclass(frozen=True)
class SnapshotLocation:
    """Where one owner's (operator subtask's) snapshot of one checkpoint goes.

    ``private_prefix`` and ``shared_prefix`` are relative to ``storage``'s base;
    ``local_dir`` (None: no local copy) is this checkpoint's own local directory."""

    storage: CheckpointStorageAccess
    private_prefix: str
    shared_prefix: str
    local_dir: Path | None = None
    #: A savepoint's format (a ``SavepointFormat`` value); None for a checkpoint.
    savepoint_format: int | None = None

    def __post_init__(self) -> None:
        check_relative(self.private_prefix)
        check_relative(self.shared_prefix)

    @property
    def canonical_savepoint(self) -> bool:
        return self.savepoint_format == SAVEPOINT_CANONICAL

    @classmethod
    def for_savepoint(cls, storage: CheckpointStorageAccess, owner: str, savepoint_format: int
                      ) -> SnapshotLocation:
        """Inside a savepoint's own directory (``storage``'s base): ``<owner>`` and
        ``shared``, so that the savepoint holds every file it needs; no local copy."""
        return cls(storage, owner, SHARED_DIR, None, savepoint_format)

    @classmethod
    def for_checkpoint(cls, storage: CheckpointStorageAccess, job_id: JobId,
                       checkpoint_id: CheckpointId, owner: str,
                       local_root: Path | None = None) -> SnapshotLocation:
        """The layout of DESIGN §6: ``<job>/chk-<n>/<owner>`` and ``<job>/shared``; local
        copies (if ``local_root``) in ``<local_root>/<job>/<owner>/chk-<n>``."""
        local = local_checkpoint_dir(local_root, job_id, owner, checkpoint_id) \
            if local_root is not None else None
        return cls(storage, f"{job_id}/chk-{checkpoint_id}/{owner}",
                   f"{job_id}/{SHARED_DIR}", local)


class AsyncSnapshot(ABC):
    """The asynchronous part of one snapshot, produced by the synchronous part.

    ``run()`` is called at most once, on any thread, while the task keeps processing; it
    returns the handle or raises (StorageError from the storage, StateError otherwise),
    having deleted what it uploaded. ``cancel()`` may be called from any thread: before
    ``run()`` it releases the frozen state; during ``run()`` it makes ``run()`` stop at the
    next file and raise StateError."""

    def __init__(self, checkpoint_id: CheckpointId) -> None:
        self.checkpoint_id = checkpoint_id
        self._cancelled = threading.Event()
        self._started = False
        self._start_lock = threading.Lock()

    def run(self) -> KeyedStateHandle:
        with self._start_lock:
            if self._started:
                msg = f"the snapshot of checkpoint {self.checkpoint_id} already ran"
                raise StateError(msg)
            self._started = True
        try:
            self._check_cancelled()
            return self._run()
        finally:
            self._release()

    def cancel(self) -> None:
        self._cancelled.set()
        with self._start_lock:
            started, self._started = self._started, True
        if not started:
            self._release()

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            msg = f"the snapshot of checkpoint {self.checkpoint_id} was cancelled"
            raise StateError(msg)

    @abstractmethod
    def _run(self) -> KeyedStateHandle: ...

    @abstractmethod
    def _release(self) -> None:
        """Free what the synchronous part froze (idempotent)."""


class SnapshotStrategy(ABC):
    """How a backend takes snapshots of one kind, and what it remembers between them."""

    @abstractmethod
    def snapshot(self, checkpoint_id: CheckpointId, location: SnapshotLocation) -> AsyncSnapshot:
        """The synchronous part (task thread)."""

    @abstractmethod
    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> None: ...

    @abstractmethod
    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> None: ...


class FrozenState(Protocol):
    """What a backend's ``snapshot()`` returns: canonical entries of frozen state."""

    def entries(self) -> Any: ...

    def segments(self) -> Any: ...

    def release(self) -> None: ...


class CanonicalSnapshotStrategy(SnapshotStrategy):
    """Full snapshots in the canonical format, from either backend."""

    def __init__(self, backend: KeyedStateBackend,
                 local_copies: LocalCopyTracker | None = None) -> None:
        self._backend = backend
        self.local_copies = local_copies or LocalCopyTracker()

    def snapshot(self, checkpoint_id: CheckpointId, location: SnapshotLocation) -> AsyncSnapshot:
        frozen = self._backend.snapshot()
        return CanonicalAsyncSnapshot(checkpoint_id, frozen, self._backend.key_group_range,
                                      location, self.local_copies,
                                      self._backend.state_kinds())

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> None:
        self.local_copies.confirm(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> None:
        self.local_copies.abort(checkpoint_id)


class CanonicalAsyncSnapshot(AsyncSnapshot):
    """Streams the frozen entries into a local file (the local copy, when there is one),
    then uploads that file."""

    #: Name of the object under the checkpoint's private prefix.
    OBJECT_NAME = "keyed-state.canonical"

    def __init__(self, checkpoint_id: CheckpointId, frozen: FrozenState, key_groups: KeyGroupRange,
                 location: SnapshotLocation, local_copies: LocalCopyTracker,
                 state_kinds: dict[str, str] | None = None) -> None:
        super().__init__(checkpoint_id)
        self._state_kinds = dict(state_kinds or {})
        self._frozen: FrozenState | None = frozen
        self._key_groups = key_groups
        self._location = location
        self._local_copies = local_copies

    def _run(self) -> KeyedStateHandle:
        location = self._location
        local_dir = location.local_dir
        path: Path | None = None
        keep = False
        try:
            if local_dir is not None:
                try:
                    local_dir.mkdir(parents=True, exist_ok=True)
                    path = local_dir / CanonicalStateHandle.LOCAL_NAME
                    self._write(path)
                except OSError as err:
                    # A full or broken local disk costs the local copy, not the checkpoint.
                    log.warning("checkpoint %d: no local copy in %s (%s); the snapshot goes "
                                "through a temporary file", self.checkpoint_id, local_dir, err)
                    self._discard(path, local_dir)
                    path = local_dir = None
            if path is None:
                fd, name = tempfile.mkstemp(prefix="weir-snapshot-", suffix=".canonical")
                os.close(fd)
                path = Path(name)
                self._write(path)
            self._check_cancelled()
            data = location.storage.write_file(
                f"{location.private_prefix}/{self.OBJECT_NAME}", path)
            local: LocalCopy | None = None
            if local_dir is not None:
                try:
                    local = record_local_copy(local_dir,
                                              {CanonicalStateHandle.LOCAL_NAME: data})
                    self._local_copies.add(self.checkpoint_id, local_dir)
                    keep = True
                except StorageError:
                    local = None  # the remote copy is the snapshot; the local one is a bonus
            return CanonicalStateHandle(self._key_groups, self.checkpoint_id, data, local,
                                        self._state_kinds)
        finally:
            if not keep:
                self._discard(path, local_dir)

    def _write(self, path: Path) -> None:
        with open(path, "wb") as out:
            assert self._frozen is not None
            write_segments(_checking(self._frozen.segments(), self._check_cancelled,
                                     every=16), out)

    @staticmethod
    def _discard(path: Path | None, local_dir: Path | None) -> None:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
        if local_dir is not None:
            with contextlib.suppress(OSError):
                local_dir.rmdir()  # only if empty

    def _release(self) -> None:
        frozen, self._frozen = self._frozen, None
        if frozen is not None:
            frozen.release()


def _checking(entries: Any, check: Any, every: int) -> Any:
    """Pass ``entries`` through, calling ``check()`` every ``every`` of them."""
    for count, entry in enumerate(entries, 1):
        if count % every == 0:
            check()
        yield entry

