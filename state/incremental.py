"""RocksDB native incremental snapshots: upload only the SST files not uploaded before.

Synchronous part (task thread): flush every column family, then a RocksDB checkpoint of
the instance into a scratch directory (hard links to the immutable SST files, copies of
MANIFEST, CURRENT, OPTIONS, ...). That is all the task waits for.

Asynchronous part (any thread): every SST file that the last *confirmed* checkpoint
already uploaded is referenced again (same remote object); every other SST file is
uploaded as a shared file ``<job>/shared/<uuid>-<name>``; the small private files go under
the checkpoint's own prefix. The handle lists both, the state -> column family mapping and
the key-group range. SST names are unique within an instance's lineage (RocksDB numbers
files monotonically, also after a restore), so a name identifies the bytes.

A native savepoint stores the files of the confirmed checkpoint in its own directory
(server-side copies), except those the last savepoints this instance wrote into the same
savepoint directory already hold: it refers to those (checkpoint/savepoint_chain.py), once
the file's length and checksum match. ``--full`` uploads everything.

Why only confirmed checkpoints: an unconfirmed checkpoint may still be aborted or fail,
and its uploads may then be deleted; a snapshot that referenced them would point at
nothing. As Flink does, the base moves only on ``notify_checkpoint_complete``; the
uploads of a pending checkpoint are kept aside until then, and dropped when a later one
completes or it is aborted. The coordinator's ``SharedStateRegistry`` keeps the files of
a retained checkpoint alive (a new completed checkpoint is registered before the ones it
subsumes are unregistered).

Example:
    >>> import tempfile
    >>> from weir.checkpoint.storage import create_storage
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.key_groups import KeyGroupRange
    >>> from weir.state.rocksdb import RocksDBKeyedStateBackend
    >>> from weir.state.snapshot import SnapshotLocation
    >>> storage = create_storage(tempfile.mkdtemp())
    >>> backend = RocksDBKeyedStateBackend(128, KeyGroupRange(0, 127), tempfile.mkdtemp())
    >>> total = backend.get_state(ValueStateDescriptor("total"))
    >>> def checkpoint(n):
    ...     location = SnapshotLocation.for_checkpoint(storage, "job", n, "op-0")
    ...     return backend.snapshot_to(n, location).run()
    >>> backend.set_current_key("k"); total.update(1)
    >>> first = checkpoint(1)
    >>> backend.notify_checkpoint_complete(1)
    >>> total.update(2)
    >>> second = checkpoint(2)
    >>> set(first.shared) < set(second.shared), second.files_reused
    (True, 1)
    >>> backend.dispose()
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from weir.checkpoint.savepoint_chain import split_directory
from weir.checkpoint.storage import CheckpointStorageAccess, StreamStateHandle, file_checksum
from weir.core.errors import StorageError
from weir.core.ids import CheckpointId
from weir.proto.checkpoint_pb2 import SAVEPOINT_NATIVE, SAVEPOINT_NATIVE_FULL
from weir.state.handles import IncrementalRocksDBStateHandle, KeyedStateHandle, LocalCopy
from weir.state.key_groups import KeyGroupRange
from weir.state.local_recovery import LocalCopyTracker, move_into, record_local_copy
from weir.state.snapshot import AsyncSnapshot, SnapshotLocation, SnapshotStrategy

if TYPE_CHECKING:
    from weir.state.rocksdb import RocksDBKeyedStateBackend

log = logging.getLogger(__name__)

#: Parallel uploads/downloads of one snapshot (Flink:
#: ``state.backend.rocksdb.checkpoint.transfer.thread.num``, default 4).
TRANSFER_THREADS = 4

#: Native savepoints an instance remembers as bases of the next one (the newest that still
#: exists is used; more cover savepoints that failed or were disposed of).
SAVEPOINTS_REMEMBERED = 4

#: A savepoint a subtask wrote: its directory URI and its shared files by local name.
WrittenSavepoint = tuple[str, dict[str, StreamStateHandle]]


def is_shared_file(name: str) -> bool:
    """SST files are immutable and shared between checkpoints; the rest is private."""
    return name.endswith(".sst")


class IncrementalSnapshotStrategy(SnapshotStrategy):
    """Native incremental snapshots of one RocksDB backend (see the module docstring).

    Thread safety: ``snapshot`` and the ``notify_*`` methods run on the task thread; the
    asynchronous parts report their uploads from their own threads. ``_lock`` guards the
    confirmed base and the pending uploads."""

    def __init__(self, backend: RocksDBKeyedStateBackend, local_copies: LocalCopyTracker,
                 transfer_threads: int = TRANSFER_THREADS) -> None:
        self._backend = backend
        self._local_copies = local_copies
        self.transfer_threads = transfer_threads
        self.backend_id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._confirmed_id = -1
        self._confirmed: dict[str, StreamStateHandle] = {}
        self._pending: dict[int, dict[str, StreamStateHandle]] = {}
        self._savepoints: deque[WrittenSavepoint] = deque(maxlen=SAVEPOINTS_REMEMBERED)

    def snapshot(self, checkpoint_id: CheckpointId, location: SnapshotLocation) -> AsyncSnapshot:
        """A checkpoint's snapshot, or a native savepoint's when ``location`` is one: that
        refers to the files an earlier savepoint of this instance in the same savepoint
        directory holds, copies the other files of the confirmed checkpoint into the
        savepoint instead of uploading them (none of either with ``SAVEPOINT_NATIVE_FULL``),
        and is never the base of a checkpoint."""
        backend = self._backend
        backend.flush()
        scratch = backend.directory / f"chk-{checkpoint_id}-{uuid.uuid4().hex[:8]}"
        backend.checkpoint(scratch)
        # Right after the checkpoint: a file compacted away meanwhile only goes unlisted.
        key_groups = backend.sst_key_groups()
        savepoint = location.savepoint_format is not None
        with self._lock:
            base = {} if location.savepoint_format == SAVEPOINT_NATIVE_FULL \
                else dict(self._confirmed)
            chain: list[WrittenSavepoint] = []
            if location.savepoint_format == SAVEPOINT_NATIVE:
                parent = split_directory(location.storage.base_uri)[0]
                chain = [(d, dict(f)) for d, f in reversed(self._savepoints)
                         if split_directory(d)[0] == parent]
        return IncrementalAsyncSnapshot(
            checkpoint_id, self, scratch, base, backend.column_families(),
            backend.key_group_range, location, savepoint=savepoint,
            state_kinds=backend.state_kinds(), sst_key_groups=key_groups,
            savepoint_chain=chain)

    @property
    def confirmed_checkpoint_id(self) -> int:
        """The checkpoint whose SST files the next snapshot reuses (-1: none)."""
        with self._lock:
            return self._confirmed_id

    def seed(self, handle: IncrementalRocksDBStateHandle) -> None:
        """Build on a restored checkpoint (the instance was restored from exactly it)."""
        with self._lock:
            if handle.checkpoint_id > self._confirmed_id:
                self._confirmed_id = handle.checkpoint_id
                self._confirmed = dict(handle.shared)

    def _uploaded(self, checkpoint_id: CheckpointId, shared: dict[str, StreamStateHandle]) -> None:
        with self._lock:
            if checkpoint_id > self._confirmed_id:
                self._pending[checkpoint_id] = dict(shared)

    def _savepoint_written(self, directory: str, shared: dict[str, StreamStateHandle]) -> None:
        # Remembered whether or not the savepoint completes: the next one checks.
        with self._lock:
            self._savepoints.append((directory, dict(shared)))

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> None:
        with self._lock:
            shared = self._pending.pop(checkpoint_id, None)
            if shared is not None and checkpoint_id > self._confirmed_id:
                self._confirmed_id = checkpoint_id
                self._confirmed = shared
            for older in [n for n in self._pending if n < checkpoint_id]:
                del self._pending[older]  # subsumed: never completes
        self._local_copies.confirm(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> None:
        with self._lock:
            self._pending.pop(checkpoint_id, None)
        self._local_copies.abort(checkpoint_id)


class IncrementalAsyncSnapshot(AsyncSnapshot):
    """Uploads one RocksDB checkpoint directory (see the module docstring)."""

    def __init__(self, checkpoint_id: CheckpointId, strategy: IncrementalSnapshotStrategy,
                 scratch: Path, base: dict[str, StreamStateHandle],
                 column_families: dict[str, str], key_groups: KeyGroupRange,
                 location: SnapshotLocation, savepoint: bool = False,
                 state_kinds: dict[str, str] | None = None,
                 sst_key_groups: dict[str, tuple[int, int]] | None = None,
                 savepoint_chain: list[WrittenSavepoint] | None = None) -> None:
        """``savepoint``: files of ``base`` are copied into the location, not referenced,
        and it is not a base for later checkpoints. ``savepoint_chain``: earlier savepoints
        of this instance next to this one, newest first; the newest that still exists is
        referred to."""
        super().__init__(checkpoint_id)
        self._chain = list(savepoint_chain or [])
        self._savepoint = savepoint
        self._state_kinds = dict(state_kinds or {})
        self._sst_key_groups = dict(sst_key_groups or {})
        self._strategy = strategy
        self._scratch = scratch
        self._base = base
        self._column_families = column_families
        self._key_groups = key_groups
        self._location = location

    def _run(self) -> KeyedStateHandle:
        location = self._location
        storage = location.storage
        names = sorted(p.name for p in self._scratch.iterdir() if p.is_file())
        chain_dir, referred = self._refer_to_chain(storage, names)
        shared: dict[str, StreamStateHandle] = dict(referred)
        private: dict[str, StreamStateHandle] = {}
        uploads: list[tuple[str, str]] = []  # (local name, remote relative path)
        copies: list[tuple[str, str]] = []  # (name, remote relative path): a savepoint's
        for name in names:
            if name in referred:
                continue
            reused = self._base.get(name) if is_shared_file(name) else None
            if reused is not None and reused.length == (self._scratch / name).stat().st_size:
                if self._savepoint:
                    # Unique as uploads are: every subtask's RocksDB numbers its files alike,
                    # and a savepoint's shared directory holds all of them.
                    copies.append((name, f"{location.shared_prefix}/{uuid.uuid4().hex}-{name}"))
                else:
                    shared[name] = reused
            elif is_shared_file(name):
                uploads.append((name, f"{location.shared_prefix}/{uuid.uuid4().hex}-{name}"))
            else:
                uploads.append((name, f"{location.private_prefix}/{name}"))
        shared.update(self._copy(storage, copies))
        uploaded = self._upload(storage, uploads)
        for name, handle in uploaded.items():
            (shared if is_shared_file(name) else private)[name] = handle
        key_groups = {n: self._sst_key_groups[n] for n in shared if n in self._sst_key_groups}
        if self._savepoint:
            self._strategy._savepoint_written(storage.base_uri.rstrip("/"), shared)
            return IncrementalRocksDBStateHandle(
                self._key_groups, self.checkpoint_id, self._strategy.backend_id,
                dict(self._column_families), shared, private,
                uploaded_bytes=sum(h.length for h in uploaded.values()),
                files_reused=len(copies) + len(referred), state_kinds=self._state_kinds,
                sst_key_groups=key_groups,
                savepoint_base=split_directory(chain_dir)[1] if referred else "")
        local = self._keep_local_copy({**shared, **private})
        self._strategy._uploaded(self.checkpoint_id, shared)
        return IncrementalRocksDBStateHandle(
            self._key_groups, self.checkpoint_id, self._strategy.backend_id,
            dict(self._column_families), shared, private,
            uploaded_bytes=sum(h.length for h in uploaded.values()), local=local,
            files_reused=len(names) - len(uploads), state_kinds=self._state_kinds,
            sst_key_groups=key_groups)

    def _refer_to_chain(self, storage: CheckpointStorageAccess, names: list[str]
                        ) -> tuple[str, dict[str, StreamStateHandle]]:
        """The newest earlier savepoint that still exists (its ``_metadata``) and the
        files of this snapshot it holds: same SST file of this instance, same length and
        same checksum (read locally; SST files are in the page cache or cheap to read)."""
        chosen = next(((d, f) for d, f in self._chain
                       if storage.exists(f"{d}/_metadata")), None)
        if chosen is None:
            return "", {}
        directory, files = chosen
        candidates = [(name, files[name].uri) for name in names
                      if is_shared_file(name) and name in files and files[name].checksum
                      and files[name].length == (self._scratch / name).stat().st_size]
        matched: dict[str, StreamStateHandle] = {}
        lock = threading.Lock()

        def check(name: str, _uri: str) -> None:
            self._check_cancelled()
            length, checksum = file_checksum(self._scratch / name, files[name].checksum)
            if (length, checksum) == (files[name].length, files[name].checksum):
                with lock:
                    matched[name] = files[name]

        run_all(check, candidates, self._strategy.transfer_threads)
        return directory, matched

    def _copy(self, storage: CheckpointStorageAccess, copies: list[tuple[str, str]]
              ) -> dict[str, StreamStateHandle]:
        """Copy files the confirmed checkpoint stored into the savepoint, without moving
        their bytes through this process where the storage can (S3 CopyObject, links)."""
        done: dict[str, StreamStateHandle] = {}
        lock = threading.Lock()

        def copy(name: str, remote: str) -> None:
            self._check_cancelled()
            handle = storage.copy(self._base[name], remote)
            with lock:
                done[name] = handle

        run_all(copy, copies, self._strategy.transfer_threads)
        return done

    def _upload(self, storage: CheckpointStorageAccess, uploads: list[tuple[str, str]]
                ) -> dict[str, StreamStateHandle]:
        done: dict[str, StreamStateHandle] = {}
        lock = threading.Lock()

        def upload(name: str, remote: str) -> None:
            self._check_cancelled()
            handle = storage.write_file(remote, self._scratch / name)
            with lock:
                done[name] = handle

        try:
            run_all(upload, uploads, self._strategy.transfer_threads)
        except BaseException:
            # Nothing refers to these objects yet: delete them, or they would leak.
            for handle in done.values():
                with contextlib.suppress(Exception):
                    storage.delete(handle)
            raise
        return done

    def _keep_local_copy(self, files: dict[str, StreamStateHandle]) -> LocalCopy | None:
        target = self._location.local_dir
        if target is None:
            return None
        try:
            move_into(self._scratch, target)
            copy = record_local_copy(target, files)
        except (OSError, StorageError) as err:
            log.warning("no local copy of checkpoint %d in %s: %s", self.checkpoint_id,
                        target, err)
            shutil.rmtree(target, ignore_errors=True)
            return None
        self._strategy._local_copies.add(self.checkpoint_id, target)
        return copy

    def _release(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)


def run_all(work: Callable[[str, str], None], items: list[tuple[str, str]],
            threads: int) -> None:
    """``work(*item)`` for every item on up to ``threads`` threads. After the first error
    the items not yet started are skipped, and that error is raised once every thread is
    done (no thread outlives the call)."""
    if threads <= 1 or len(items) <= 1:
        for item in items:
            work(*item)
        return
    failed = threading.Event()

    def guarded(item: tuple[str, str]) -> None:
        if failed.is_set():
            return
        try:
            work(*item)
        except BaseException:
            failed.set()
            raise

    with ThreadPoolExecutor(max_workers=min(threads, len(items)),
                            thread_name_prefix="state-transfer") as pool:
        futures = [pool.submit(guarded, item) for item in items]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]  # type: ignore[misc]
