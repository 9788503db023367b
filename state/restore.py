"""Restoring keyed state from snapshots into a backend, for any key-group range.

Each new subtask reads the snapshots whose key groups overlap its range and inserts only
the entries of its own key groups, so the union of the restored subtasks is the original
state, with no key in two of them, whatever the old and new parallelism.

:func:`restore` takes keyed state handles (state/handles.py) and dispatches on their
kind: canonical files are loaded entry by entry — lazily, on a background thread, with
``state.backend.restore.lazy`` (state/lazy.py); RocksDB native snapshots are restored as
instances into a RocksDB backend (clip or baseline, state/rocksdb_restore.py) and read row
by row into any other backend. A verified local copy is preferred to the remote files.
:func:`restore_canonical` restores raw canonical bytes.

Example:
    >>> import io
    >>> from weir.state.canonical import write_canonical
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.heap import HeapKeyedStateBackend
    >>> from weir.state.key_groups import KeyGroupRange
    >>> source = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> count = source.get_state(ValueStateDescriptor("count"))
    >>> for user in ("ann", "bob", "cyd"):
    ...     source.set_current_key(user); count.update(1)
    >>> out = io.BytesIO()
    >>> _ = write_canonical(source.entries(), out)
    >>> halves = [HeapKeyedStateBackend(128, KeyGroupRange(0, 63)),
    ...           HeapKeyedStateBackend(128, KeyGroupRange(64, 127))]
    >>> sum(restore_canonical(half, [out.getvalue()]) for half in halves)
    3
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from weir.checkpoint.filesystem import FsCheckpointStorageAccess
from weir.checkpoint.storage import CheckpointStorageAccess
from weir.core.errors import CorruptStateError, MissingStateError, StateError, StorageError
from weir.state.backend import KeyedStateBackend
from weir.state.canonical import read_segments
from weir.state.handles import CanonicalStateHandle, IncrementalRocksDBStateHandle, KeyedStateHandle
from weir.state.incremental import TRANSFER_THREADS
from weir.state.lazy import DEFAULT_WAIT_TIMEOUT, LazyRestore
from weir.state.local_recovery import RestoreStorage, count_local

if TYPE_CHECKING:
    from weir.state.rocksdb_restore import NativeRestoreStats

log = logging.getLogger(__name__)


def restore_canonical(backend: KeyedStateBackend,
                      snapshots: Iterable[bytes | memoryview]) -> int:
    """Load the entries of ``snapshots`` in ``backend``'s key-group range; returns how many
    entries were loaded."""
    return sum(backend.load_segment(segment) for data in snapshots
               for segment in read_segments(data, backend.key_group_range))


@dataclass
class RestoreResult:
    """What :func:`restore` did."""

    #: Handles that overlapped the backend's key groups.
    handles: int = 0
    #: Canonical entries loaded (eagerly; a lazy restore counts none here).
    entries: int = 0
    local_copies_used: int = 0
    native: NativeRestoreStats | None = None
    lazy: LazyRestore | None = None


def describe(handle: KeyedStateHandle) -> str:
    kg = handle.key_group_range
    return (f"the {handle.kind} snapshot of key groups {kg.start}-{kg.end} in checkpoint "
            f"{handle.checkpoint_id}")


def fetch_canonical(handle: CanonicalStateHandle, storage: CheckpointStorageAccess
                    ) -> tuple[bytes, bool]:
    """The verified bytes of a canonical snapshot, and whether they came from the local
    copy (preferred; a missing or corrupt copy is logged and the remote file read)."""
    local = handle.local.files.get(CanonicalStateHandle.LOCAL_NAME) if handle.local else None
    if handle.local is not None and isinstance(storage, RestoreStorage) and \
            not storage.holds(handle.local):
        local = None  # another TaskExecutor's copy: not on this machine
    if local is not None:
        directory = FsCheckpointStorageAccess.path_from_uri(local.uri).parent
        try:
            data = FsCheckpointStorageAccess(directory).read(local)
            count_local(storage, len(data))
            return data, True
        except (StorageError, OSError) as err:
            log.warning("local copy of %s is unusable (%s); restoring from checkpoint "
                        "storage instead", describe(handle), err)
    try:
        return storage.read(handle.data), False
    except MissingStateError as err:
        msg = (f"{err}: it holds {describe(handle)}. Restore from another retained "
               "checkpoint or a savepoint")
        raise MissingStateError(msg) from err
    except CorruptStateError as err:
        msg = (f"{err}: it holds {describe(handle)}. Restore from another retained "
               "checkpoint or a savepoint")
        raise CorruptStateError(msg) from err


def restore(backend: KeyedStateBackend, handles: Iterable[KeyedStateHandle],
            storage: CheckpointStorageAccess, *, lazy: bool | None = None,
            rescale_method: str | None = None, wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
            transfer_threads: int = TRANSFER_THREADS, build_on: bool = True) -> RestoreResult:
    """Restore the key groups of ``backend`` (a fresh one) from ``handles``, any kind, any
    old key-group ranges; handles that do not overlap are skipped.

    Called on the task thread before processing starts. ``storage`` reads the handles'
    remote files (their URIs are absolute). ``lazy`` (default: the backend's
    ``state.backend.restore.lazy``) returns as soon as the loader thread started, for
    canonical handles; native RocksDB handles are always restored before returning.
    ``rescale_method`` is ``clip`` or ``baseline`` for native handles into RocksDB
    (default: the backend's ``state.backend.rocksdb.restore.rescale-method``).
    ``build_on`` False: the snapshot is not the job's (NO_CLAIM), so the backend's next
    incremental snapshot must not build on its files.

    Raises MissingStateError / CorruptStateError (naming the file and what to do) when a
    file is gone or damaged, StateError when a backend cannot take the state; the backend
    must then be disposed.
    """
    handles = list(handles)
    hook = getattr(backend, "restore_handles", None)
    if hook is not None:  # the changelog backend restores its delegate, then the log
        result: RestoreResult = hook(handles, storage, build_on)
        return result
    if any(h.kind == "changelog" for h in handles):
        from weir.state.changelog import restore_into  # changelog imports this module

        return restore_into(backend, handles, storage, build_on=build_on)
    owned = backend.key_group_range
    relevant = [h for h in handles if len(h.overlap(owned))]
    for handle in relevant:
        backend.expect_state_kinds(getattr(handle, "state_kinds", {}))
    result = RestoreResult(handles=len(relevant))
    canonical = [h for h in relevant if isinstance(h, CanonicalStateHandle)]
    native = [h for h in relevant if isinstance(h, IncrementalRocksDBStateHandle)]
    unknown = [h for h in relevant if h not in canonical and h not in native]
    if unknown:
        msg = f"cannot restore keyed state handles of kind {unknown[0].kind!r}"
        raise StateError(msg)
    lazy = backend.lazy_restore if lazy is None else lazy
    rescale_method = rescale_method or backend.rescale_method
    if native:
        if lazy:
            log.info("lazy restore needs canonical snapshots; restoring the %d RocksDB native "
                     "snapshot(s) of %s before processing", len(native), owned)
        result.native = _restore_native(backend, native, storage, rescale_method,
                                        transfer_threads, build_on)
        result.local_copies_used += result.native.local_copies_used
    if canonical and lazy:
        def fetch(handle: CanonicalStateHandle) -> bytes:
            data, _ = fetch_canonical(handle, storage)
            return data

        result.lazy = LazyRestore(backend, canonical, fetch, wait_timeout).start()
    elif canonical:
        for handle in canonical:
            data, local = fetch_canonical(handle, storage)
            result.local_copies_used += local
            result.entries += sum(map(backend.load_segment, read_segments(data, owned)))
    return result


def _restore_native(backend: KeyedStateBackend,
                    handles: list[IncrementalRocksDBStateHandle],
                    storage: CheckpointStorageAccess, method: str, threads: int,
                    build_on: bool = True) -> NativeRestoreStats:
    from weir.state import rocksdb_restore  # loads rocksdict only when native state is restored

    if backend.name == "rocksdb":
        return rocksdb_restore.restore_native(backend, handles, storage,  # type: ignore[arg-type]
                                              method, threads, build_on=build_on)
    stats = rocksdb_restore.NativeRestoreStats("entries", handles=len(handles))
    for handle in handles:
        stats.rows_inserted += backend.load_entries(rocksdb_restore.native_entries(
            handle, storage, backend.key_group_range, threads))
    return stats
