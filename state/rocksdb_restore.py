"""Restoring RocksDB native snapshots, for any new key-group range (rescaling).

A new subtask takes the handles whose key groups overlap its range. Two methods:

* ``clip`` (Flink 1.16's): the handle with the largest overlap becomes the base — its
  files are downloaded and opened as the instance itself, and ``delete_range`` removes the
  key groups outside the new range from every column family (no row is read or
  rewritten). Only the in-range rows of the *other* handles are inserted: each is opened
  read-only and read from the first owned key group to the last (rows start with their
  key group, so that is one contiguous range per column family), in write batches.
  Beyond Flink, a handle records which key groups each SST file holds, so of the other
  handles only the files of owned key groups are fetched (RocksDB's repair makes them an
  instance of their own), while the base is fetched on another thread.
* ``baseline`` (the older method, kept to measure against): an empty instance into which
  the in-range rows of *every* overlapping handle are inserted.

On scale-in (3 -> 2) clip inserts about a third of what baseline inserts; on scale-out a
new subtask often lies inside one old range and inserts nothing. Both give the same rows.

Restoring a native snapshot into the ``hashmap`` backend reads the same files row by row
(:func:`native_entries`), so switching backends works with either kind of snapshot.

Example:
    >>> import tempfile
    >>> from weir.checkpoint.storage import create_storage
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.key_groups import KeyGroupRange
    >>> from weir.state.rocksdb import RocksDBKeyedStateBackend
    >>> from weir.state.snapshot import SnapshotLocation
    >>> storage = create_storage(tempfile.mkdtemp())
    >>> old = RocksDBKeyedStateBackend(128, KeyGroupRange(0, 127), tempfile.mkdtemp())
    >>> count = old.get_state(ValueStateDescriptor("count"))
    >>> for user in range(100):
    ...     old.set_current_key(user); count.update(user)
    >>> handle = old.snapshot_to(1, SnapshotLocation.for_checkpoint(storage, "j", 1, "op")).run()
    >>> halves = [RocksDBKeyedStateBackend(128, KeyGroupRange(0, 63), tempfile.mkdtemp()),
    ...           RocksDBKeyedStateBackend(128, KeyGroupRange(64, 127), tempfile.mkdtemp())]
    >>> [restore_native(half, [handle], storage).method for half in halves]
    ['clip', 'clip']
    >>> sum(len(list(half.entries())) for half in halves)
    100
    >>> for backend in (old, *halves): backend.dispose()
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, ReadOptions

from weir.checkpoint.filesystem import FsCheckpointStorageAccess
from weir.checkpoint.storage import (
    CheckpointStorageAccess,
    StreamStateHandle,
    file_checksum,
    verify,
)
from weir.core.errors import CorruptStateError, MissingStateError, StateError
from weir.state.backend import Entry
from weir.state.handles import IncrementalRocksDBStateHandle
from weir.state.incremental import TRANSFER_THREADS, is_shared_file, run_all
from weir.state.key_groups import KeyGroupRange
from weir.state.local_recovery import (
    RestoreStorage,
    count_local,
    materialise,
    usable_local_copy,
)
from weir.state.rocksdb import RocksDBKeyedStateBackend, key_group_bounds, split_row_key

log = logging.getLogger(__name__)

#: ``clip`` (base instance + delete_range) or ``baseline`` (empty instance, insert all).
RESCALE_METHODS = ("clip", "baseline")


@dataclass
class NativeRestoreStats:
    """What a native restore did (for logs, metrics and the benchmark)."""

    method: str
    handles: int = 0
    base_checkpoint: int | None = None
    rows_inserted: int = 0
    local_copies_used: int = 0
    bytes_fetched: int = 0
    fetch_seconds: float = 0.0
    insert_seconds: float = 0.0


def describe(handle: IncrementalRocksDBStateHandle) -> str:
    kg = handle.key_group_range
    return (f"the RocksDB snapshot of key groups {kg.start}-{kg.end} in checkpoint "
            f"{handle.checkpoint_id}")


def fetch_files(handle: IncrementalRocksDBStateHandle, storage: CheckpointStorageAccess,
                target: Path, threads: int = TRANSFER_THREADS,
                key_groups: KeyGroupRange | None = None) -> bool:
    """Put the files of ``handle`` into ``target``: from its local copy if that verifies
    (returns True), else from checkpoint storage (False). With ``key_groups``, and when the
    handle says which SST files hold them, only those are fetched and RocksDB's repair
    writes a new MANIFEST listing just them: the directory then opens as an instance that
    holds every row of ``key_groups`` (and perhaps others), for reading. Raises
    MissingStateError or CorruptStateError naming the file and what to do."""
    files = handle.files()
    if "CURRENT" not in files or not any(n.startswith("MANIFEST-") for n in files):
        # Opening such a directory would create an empty instance and lose the state.
        msg = (f"{describe(handle)} is incomplete: it lists no CURRENT or MANIFEST file. "
               "Restore from another retained checkpoint or a savepoint")
        raise CorruptStateError(msg)
    subset = handle.files_for(key_groups) if key_groups is not None else None
    wanted = sorted(files) if subset is None else subset
    local = usable_local_copy(handle.local, describe(handle), storage)
    if local is not None and set(local.files) == set(files):
        materialise(local, target, link=frozenset(n for n in files if is_shared_file(n)),
                    only=frozenset(wanted))
        count_local(storage, sum(local.files[n].length for n in wanted))
        if subset is not None:
            _repair(target, handle, subset)
        return True
    if local is not None:
        log.warning("local copy of %s does not list the same files; restoring from "
                    "checkpoint storage instead", describe(handle))
    target.mkdir(parents=True, exist_ok=True)

    def download(name: str, _: str) -> None:
        try:
            if not (is_shared_file(name) and _link_verified(storage, files[name], target / name)):
                storage.download(files[name], target / name)
        except MissingStateError as err:
            msg = (f"{err}: it is file {name} of {describe(handle)}. Restore from another "
                   "retained checkpoint or a savepoint (shared files are deleted only when "
                   "no retained checkpoint refers to them, so check the storage's "
                   "retention and that nothing else deleted it)")
            raise MissingStateError(msg) from err
        except CorruptStateError as err:
            msg = (f"{err}: it is file {name} of {describe(handle)}. Restore from another "
                   "retained checkpoint or a savepoint")
            raise CorruptStateError(msg) from err

    run_all(download, [(name, name) for name in wanted], threads)
    if subset is not None:
        _repair(target, handle, subset)
    return False


def _repair(directory: Path, handle: IncrementalRocksDBStateHandle, names: list[str]) -> None:
    """Make ``directory``, which holds some SST files of ``handle``, an instance of just
    them: RocksDB's repair scans each file (rows keep their sequence numbers, so newer
    versions and deletions still win) and writes a MANIFEST for them."""
    try:
        Rdict.repair(str(directory), Options(raw_mode=True))
    except Exception as err:  # rocksdict raises plain Exception subclasses
        msg = (f"cannot rebuild the files of {describe(handle)} that key groups need "
               f"(in {directory}): {err}; restore from another retained checkpoint")
        raise CorruptStateError(msg) from err
    # Repair sets aside files it cannot read rather than failing: that would lose rows.
    missing = [name for name in names if not (directory / name).exists()]
    if missing:
        msg = (f"file {missing[0]} of {describe(handle)} is damaged: RocksDB could not read "
               "it; restore from another retained checkpoint or a savepoint")
        raise CorruptStateError(msg)


def _link_verified(storage: CheckpointStorageAccess, handle: StreamStateHandle, target: Path
                   ) -> bool:
    """Hard-link a file of file:// checkpoint storage instead of copying it, when both are
    on one file system; the link is verified like a download. Only for SST files: RocksDB
    never writes to them (it writes new MANIFEST, CURRENT and OPTIONS files, which are
    therefore copied), so the checkpoint's file cannot change through the link. Returns
    False when a link is not possible (other storage, other file system)."""
    counted = storage if isinstance(storage, RestoreStorage) else None
    if counted is not None:
        storage = counted.remote
    if not isinstance(storage, FsCheckpointStorageAccess) or \
            not handle.uri.startswith("file:"):
        return False
    source = FsCheckpointStorageAccess.path_from_uri(handle.uri)
    try:
        os.link(source, target)
    except FileNotFoundError:
        return False  # the download reports it as missing, with the usual message
    except OSError:
        return False
    try:
        verify(handle, *file_checksum(target, handle.checksum))
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    if counted is not None:
        counted.add_remote(handle.length)  # linked, but from checkpoint storage
    return True


@contextlib.contextmanager
def open_read_only(path: Path, what: str) -> Iterator[Rdict]:
    """A downloaded RocksDB checkpoint opened read-only, with every column family it has
    (closed on exit)."""
    try:
        families = {name: Options(raw_mode=True)
                    for name in Rdict.list_cf(str(path), Options(raw_mode=True))
                    if name != "default"}
        db = Rdict(str(path), Options(raw_mode=True), column_families=families,
                   access_type=AccessType.read_only())
    except Exception as err:  # rocksdict raises plain Exception subclasses
        msg = (f"cannot open {what} (downloaded to {path}): {err}; the snapshot's files are "
               "damaged or incomplete: restore from another retained checkpoint")
        raise StateError(msg) from err
    try:
        yield db
    finally:
        db.close()


def rows_in_range(db: Rdict, column_family: str, key_groups: KeyGroupRange
                  ) -> Iterator[tuple[bytes, bytes]]:
    """The rows of ``key_groups`` in one column family: a seek and a bounded scan (none
    when the instance lacks the family: a partial fetch had no file of it to fetch)."""
    low, high = key_group_bounds(key_groups.start, key_groups.end)
    read_options = ReadOptions()
    read_options.set_iterate_upper_bound(high)
    try:
        family = db.get_column_family(column_family)
    except Exception:  # rocksdict raises plain Exception subclasses
        return
    try:
        yield from family.items(from_key=low, read_opt=read_options)
    finally:
        del family  # a column family object keeps the instance open


def _check_mapping(handle: IncrementalRocksDBStateHandle) -> None:
    for state, family in handle.column_families.items():
        if state != family:
            msg = (f"{describe(handle)} stores state {state!r} in column family {family!r}; "
                   "this version of weir keeps each state in the column family of its name "
                   "and cannot restore it natively: take a canonical savepoint instead")
            raise StateError(msg)


def restore_native(backend: RocksDBKeyedStateBackend,
                   handles: Sequence[IncrementalRocksDBStateHandle],
                   storage: CheckpointStorageAccess, method: str = "clip",
                   threads: int = TRANSFER_THREADS, build_on: bool = True
                   ) -> NativeRestoreStats:
    """Restore ``handles`` (those overlapping the backend's key groups are used) into a
    fresh RocksDB ``backend`` with ``method`` (see the module docstring).

    Runs on the task thread before processing starts. Raises MissingStateError or
    CorruptStateError for a missing or damaged file, StateError if RocksDB fails; the
    backend must then be disposed. ``build_on`` False: the next incremental snapshot must
    not reuse the restored files (a snapshot restored in NO_CLAIM mode)."""
    if method not in RESCALE_METHODS:
        msg = f"unknown rescaling restore method {method!r} (accepted: clip, baseline)"
        raise StateError(msg)
    owned = backend.key_group_range
    relevant = [h for h in handles if len(h.overlap(owned))]
    stats = NativeRestoreStats(method, handles=len(relevant))
    for handle in relevant:
        _check_mapping(handle)
    scratch = Path(tempfile.mkdtemp(prefix="restore-", dir=backend.directory))
    try:
        if method == "clip" and relevant:
            _restore_clip(backend, relevant, storage, scratch, stats, threads, build_on)
            return stats
        for index, handle in enumerate(relevant):
            directory = scratch / f"handle-{index}"
            started = time.perf_counter()
            stats.local_copies_used += fetch_files(handle, storage, directory, threads)
            stats.bytes_fetched += handle.state_size
            stats.fetch_seconds += time.perf_counter() - started
            started = time.perf_counter()
            stats.rows_inserted += _insert_rows(backend, handle, directory)
            stats.insert_seconds += time.perf_counter() - started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return stats


def _restore_clip(backend: RocksDBKeyedStateBackend, handles: list[IncrementalRocksDBStateHandle],
                  storage: CheckpointStorageAccess, scratch: Path, stats: NativeRestoreStats,
                  threads: int, build_on: bool) -> None:
    """The base is fetched on another thread while the other handles are (only their SST
    files that hold owned key groups); then the base becomes the instance, is clipped, and
    the others' rows of owned key groups are inserted."""
    owned = backend.key_group_range
    # The largest overlap is the base; a tie goes to a handle this TaskExecutor keeps a
    # local copy of (only the other is downloaded, and only in part), then to the first.
    base = max(handles, key=lambda h: (len(h.overlap(owned)), _held_locally(h, storage)))
    others = [(h, scratch / f"handle-{i}") for i, h in enumerate(h for h in handles
                                                                  if h is not base)]
    started = time.perf_counter()
    with ThreadPoolExecutor(1, thread_name_prefix="restore-base") as pool:
        fetching = pool.submit(fetch_files, base, storage, scratch / "base", threads)
        for handle, directory in others:
            stats.local_copies_used += fetch_files(handle, storage, directory, threads,
                                                   key_groups=handle.overlap(owned))
            stats.bytes_fetched += sum(p.stat().st_size for p in directory.glob("*.sst"))
        stats.local_copies_used += fetching.result()
    stats.bytes_fetched += base.state_size
    stats.fetch_seconds += time.perf_counter() - started
    started = time.perf_counter()
    backend.adopt_instance(scratch / "base")
    if base.key_group_range.intersection(owned) != base.key_group_range:
        backend.clip()
    stats.base_checkpoint = base.checkpoint_id
    if build_on:
        # The instance holds the base's SST files unchanged (clipping only adds range
        # tombstones): the next checkpoint uploads only what is new, also after a rescale.
        backend.restored_from(base)
    for handle, directory in others:
        stats.rows_inserted += _insert_rows(backend, handle, directory)
    stats.insert_seconds += time.perf_counter() - started


def _insert_rows(backend: RocksDBKeyedStateBackend, handle: IncrementalRocksDBStateHandle,
                 directory: Path) -> int:
    """Insert the rows of the backend's key groups from ``handle``'s files fetched into
    ``directory`` (removed after); returns how many."""
    overlap = handle.overlap(backend.key_group_range)
    inserted = 0
    with open_read_only(directory, describe(handle)) as db:
        for state, family in sorted(handle.column_families.items()):
            inserted += backend.write_rows(state, rows_in_range(db, family, overlap))
    shutil.rmtree(directory, ignore_errors=True)
    return inserted


def _held_locally(handle: IncrementalRocksDBStateHandle, storage: CheckpointStorageAccess) -> bool:
    """Whether this TaskExecutor keeps a local copy of ``handle`` (not yet verified)."""
    if handle.local is None:
        return False
    return not isinstance(storage, RestoreStorage) or storage.holds(handle.local)


def native_entries(handle: IncrementalRocksDBStateHandle, storage: CheckpointStorageAccess,
                   key_groups: KeyGroupRange, threads: int = TRANSFER_THREADS
                   ) -> Iterator[Entry]:
    """The canonical entries of ``handle`` in ``key_groups`` (canonical order), read from
    its downloaded files: how a native snapshot restores into another backend."""
    _check_mapping(handle)
    overlap = handle.overlap(key_groups)
    if not len(overlap):
        return
    scratch = Path(tempfile.mkdtemp(prefix="weir-restore-"))
    try:
        fetch_files(handle, storage, scratch / "db", threads, key_groups=overlap)
        with open_read_only(scratch / "db", describe(handle)) as db:
            for state, family in sorted(handle.column_families.items()):
                for row, value in rows_in_range(db, family, overlap):
                    key_group, key, namespace = split_row_key(row)
                    yield state, key_group, key, namespace, value
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
