"""``rocksdb``: keyed state in a RocksDB instance (rocksdict), one column family per state.

A row's key is ``[key group: u16][key length: u32][key][namespace]``, so each key group is
one contiguous key range (restore clips a range with ``delete_range``) and iterating a
column family yields entries in the canonical snapshot order. Values are pickled.

A snapshot's synchronous part is a RocksDB checkpoint (a flush and hard links). A
canonical snapshot reads its entries from that checkpoint, opened read-only, while the task
keeps writing; a native incremental one (state/incremental.py) uploads its files. rocksdict's
own snapshot iterators return current data, so they are not used.

Writes skip the write-ahead log, as Flink's backend does: durability comes from
checkpoints, a local instance is never reopened after a crash (a restore starts from a
checkpoint), and every snapshot flushes the memtables first.

Example:
    >>> import tempfile
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.key_groups import KeyGroupRange
    >>> backend = RocksDBKeyedStateBackend(128, KeyGroupRange(0, 127), tempfile.mkdtemp())
    >>> total = backend.get_state(ValueStateDescriptor("total"))
    >>> backend.set_current_key("k"); total.update(41); total.value()
    41
    >>> backend.dispose()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rocksdict import (
    AccessType,
    Checkpoint,
    DbClosedError,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from weir.core.errors import StateError
from weir.core.ids import CheckpointId
from weir.state.backend import MISSING, Entry, KeyedStateBackend
from weir.state.canonical import Segment, segments_of
from weir.state.key_groups import KeyGroupRange
from weir.state.serializers import decode_key, deserialize_value, encode_key, serialize_value

if TYPE_CHECKING:
    from weir.state.handles import KeyedStateHandle
    from weir.state.incremental import IncrementalSnapshotStrategy
    from weir.state.local_recovery import LocalCopyTracker
    from weir.state.snapshot import AsyncSnapshot, SnapshotLocation, SnapshotStrategy

_PREFIX = struct.Struct(">HI")  # key group, key length


def row_key(key_group: int, key: bytes, namespace: bytes) -> bytes:
    return _PREFIX.pack(key_group, len(key)) + key + namespace


def split_row_key(row: bytes) -> tuple[int, bytes, bytes]:
    key_group, length = _PREFIX.unpack_from(row, 0)
    start = _PREFIX.size
    return key_group, row[start:start + length], row[start + length:]


def key_group_of_bound(key: bytes) -> int:
    """The key group a file's smallest or largest key lies in; a bound shorter than the
    prefix (a range deletion's end, say) is padded, which only ever widens the range."""
    return int.from_bytes((key + b"\0\0")[:2], "big")


def key_group_bounds(first: int, last: int) -> tuple[bytes, bytes]:
    """Row-key range ``[begin, end)`` of key groups ``first..last``."""
    return struct.pack(">H", first), struct.pack(">H", last + 1)


#: Above every row key (key groups are below 2**15): the end of "everything after".
_END_OF_ROWS = b"\xff\xff\xff"

#: Compaction output files are cut at this size.
TARGET_FILE_SIZE = 16 << 20

#: Rows per write batch when restoring (bounded memory, few Python-level calls).
RESTORE_BATCH_ROWS = 20_000


def _options(memory_bytes: int) -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_write_buffer_size(max(1 << 20, memory_bytes // 4))
    # Incremental checkpoints upload the SST files that are new since the last confirmed
    # checkpoint, so what compaction rewrites is what gets uploaded again. A checkpoint's
    # flush adds one level-0 file per column family and compaction starts only at four of
    # them, so a checkpoint after a small change usually uploads just its new level-0
    # files. When compaction does run, level compaction with dynamic level sizes keeps
    # most data in the last level, which is rewritten only when the level above overflows
    # into it, and a moderate target file size splits every level into many files, so a
    # compaction rewrites (and a checkpoint re-uploads) only the files overlapping the key
    # ranges it merged, not whole levels.
    options.set_level_compaction_dynamic_level_bytes(True)
    options.set_target_file_size_base(TARGET_FILE_SIZE)
    return options


def _write_options() -> WriteOptions:
    write_options = WriteOptions()
    # See the module docstring. rocksdict's type stub calls this a method; it is a property.
    write_options.disable_wal = True  # type: ignore[method-assign, assignment]
    return write_options


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state in RocksDB (see the module docstring)."""

    name = "rocksdb"

    def __init__(self, max_parallelism: int, key_group_range: KeyGroupRange,
                 directory: str | Path, memory_bytes: int = 64 << 20,
                 clock: Callable[[], float] | None = None, incremental: bool = True) -> None:
        super().__init__(max_parallelism, key_group_range, clock)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path = self.directory / "db"
        self._options = _options(memory_bytes)
        self._write_options = _write_options()
        #: ``state.backend.incremental``: checkpoints are native incremental snapshots.
        self.incremental = incremental
        # States may be registered by a lazy restore's loader thread and the task thread.
        self._register_lock = threading.Lock()
        self._families: dict[str, Rdict] = {}
        self._column_handles: dict[str, Any] = {}
        self._local_copies: LocalCopyTracker | None = None
        self._open()

    def _open(self) -> None:
        try:
            self._db = Rdict(str(self._path), self._options)
            self._db.set_write_options(self._write_options)
        except Exception as err:  # rocksdict raises plain Exception subclasses
            msg = f"cannot open RocksDB state in {self._path}: {err}"
            raise StateError(msg) from err
        self._families.clear()
        self._column_handles.clear()
        for name in Rdict.list_cf(str(self._path), self._options):
            if name != "default":
                self._families[name] = self._db.get_column_family(name)
        for state in self._descriptors:  # registered before a restore replaced the instance
            self._register(state)

    def _close(self) -> None:
        # Every column-family object keeps the instance open: drop them first.
        self._families.clear()
        self._column_handles.clear()
        with contextlib.suppress(DbClosedError):  # a failed restore closed it already
            self._db.close()

    # -- storage --------------------------------------------------------------------------

    def _register(self, state: str) -> None:
        if state in self._families:
            return
        with self._register_lock:
            if state not in self._families:
                self._families[state] = self._guard(
                    state, "create",
                    lambda: self._db.create_column_family(state, self._options))

    def _column_handle(self, state: str) -> Any:
        handle = self._column_handles.get(state)
        if handle is None:
            self._register(state)
            handle = self._column_handles[state] = self._guard(
                state, "open", lambda: self._db.get_column_family_handle(state))
        return handle

    def column_families(self) -> dict[str, str]:
        """State name -> column family name (the same, by construction)."""
        return {state: state for state in sorted(self._families)}

    def _guard(self, state: str, action: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as err:
            msg = (f"RocksDB could not {action} state {state!r} in {self._path}: {err} "
                   "(is the disk full, or were the local files damaged?)")
            raise StateError(msg) from err

    def _row(self, namespace: Any) -> bytes:
        return row_key(self.current_key_group, self._current_key_bytes(), encode_key(namespace))

    def _get(self, state: str, namespace: Any) -> Any:
        family = self._families[state]
        data = self._guard(state, "read", lambda: family.get(self._row(namespace)))
        return MISSING if data is None else deserialize_value(data)

    _get_mutable = _get  # every read is a fresh copy

    def _put(self, state: str, namespace: Any, value: Any) -> None:
        self._put_serialized(state, namespace, value, serialize_value(value))

    def _put_serialized(self, state: str, namespace: Any, value: Any, data: bytes) -> None:
        family, row = self._families[state], self._row(namespace)
        self._guard(state, "write", lambda: family.put(row, data))

    def _delete(self, state: str, namespace: Any) -> None:
        family = self._families[state]
        row = self._row(namespace)
        self._guard(state, "delete", lambda: family.delete(row))

    def _get_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                  namespace: Any) -> list[Any]:
        family = self._families[state]
        rows: Any = self._rows(key_groups, keys, namespace)
        found = self._guard(state, "read", partial(family.get, rows))  # one multi-get
        missing, loads = MISSING, deserialize_value
        return [missing if data is None else loads(data) for data in found]

    def _put_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                  namespace: Any, values: Sequence[Any]) -> None:
        handle = self._column_handle(state)
        batch = WriteBatch(raw_mode=True)
        dumps = serialize_value
        for row, value in zip(self._rows(key_groups, keys, namespace), values, strict=True):
            batch.put(row, dumps(value), handle)
        self._guard(state, "write", lambda: self._db.write(batch))

    def _delete_many(self, state: str, key_groups: list[int], keys: Sequence[Any],
                     namespace: Any) -> None:
        handle = self._column_handle(state)
        batch = WriteBatch(raw_mode=True)
        for row in self._rows(key_groups, keys, namespace):
            batch.delete(row, handle)
        self._guard(state, "delete", lambda: self._db.write(batch))

    @staticmethod
    def _rows(key_groups: list[int], keys: Sequence[Any], namespace: Any) -> list[bytes]:
        suffix = encode_key(namespace)
        pack, encode = _PREFIX.pack, encode_key
        rows = []
        for key_group, key in zip(key_groups, keys, strict=True):
            encoded = encode(key)
            rows.append(pack(key_group, len(encoded)) + encoded + suffix)
        return rows

    def keys(self, state: str, namespace: Any = None) -> Iterator[Any]:
        self._await_restored()
        family = self._families.get(state)
        if family is None:
            return
        wanted = encode_key(namespace)
        for row in list(family.keys()):
            _, key, ns = split_row_key(cast(bytes, row))  # raw mode: keys are bytes
            if ns == wanted:
                yield decode_key(key)

    def namespaced_keys(self, state: str) -> Iterator[tuple[int, Any, Any]]:
        self._await_restored()
        family = self._families.get(state)
        if family is None:
            return
        for row in list(family.keys()):
            key_group, key, namespace = split_row_key(cast(bytes, row))
            yield key_group, decode_key(key), decode_key(namespace)

    # -- snapshots ------------------------------------------------------------------------

    def checkpoint(self, target: str | Path) -> Path:
        """A RocksDB checkpoint of the instance in ``target`` (hard links where possible)."""
        target = Path(target)
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._guard("*", "checkpoint", lambda: Checkpoint(self._db).create_checkpoint(
            str(target)))
        return target

    def sst_key_groups(self) -> dict[str, tuple[int, int]]:
        """SST file name -> the first and last key group its rows and deletions touch, for
        the instance's live files (SST files never change, so a name's range holds for
        good): a rescaling restore downloads only the files of the key groups it needs."""
        files = self._guard("*", "list files", self._db.live_files)
        return {f["name"].lstrip("/"): (key_group_of_bound(f["start_key"]),
                                         key_group_of_bound(f["end_key"])) for f in files}

    def flush(self) -> None:
        """Write every column family's memtable to an SST file (waits for it)."""
        for state, family in list(self._families.items()):
            self._guard(state, "flush", partial(family.flush, True))

    def compact(self) -> None:
        """A full manual compaction of every column family (settles the LSM tree, e.g.
        before measuring incremental checkpoints)."""
        for state, family in list(self._families.items()):
            self._guard(state, "compact", partial(family.compact_range, None, None))

    def snapshot(self) -> RocksDBSnapshot:
        """Synchronous part: a checkpoint of the instance; entries are read from it."""
        self._await_restored()
        scratch = Path(tempfile.mkdtemp(prefix="snapshot-", dir=self.directory))
        return RocksDBSnapshot(self.checkpoint(scratch / "chk"), sorted(self._families),
                               scratch)

    def entries(self) -> Iterator[Entry]:
        snapshot = self.snapshot()
        try:
            yield from snapshot.entries()
        finally:
            snapshot.release()

    def load_entries(self, entries: Iterable[Entry]) -> int:
        loaded = 0
        batch = WriteBatch(raw_mode=True)
        handles: dict[str, Any] = {}
        first, last = self.key_group_range.start, self.key_group_range.end
        pack = _PREFIX.pack  # row_key, inlined: this loop runs per entry of a restore
        for state, key_group, key, namespace, value in entries:
            if key_group < first or key_group > last:
                continue
            handle = handles.get(state)
            if handle is None:
                handle = handles[state] = self._column_handle(state)
            batch.put(pack(key_group, len(key)) + key + namespace, value, handle)
            loaded += 1
            if len(batch) >= RESTORE_BATCH_ROWS:
                self._guard(state, "restore", partial(self._db.write, batch))
                batch = WriteBatch(raw_mode=True)
        if len(batch):
            self._guard("*", "restore", lambda: self._db.write(batch))
        return loaded

    # -- native restore (state/rocksdb_restore.py) ----------------------------------------

    def adopt_instance(self, source: Path) -> None:
        """Make the RocksDB files in ``source`` (a restored checkpoint, on the same file
        system) this backend's instance, replacing the current one, which must be fresh."""
        self._close()
        shutil.rmtree(self._path, ignore_errors=True)
        os.replace(source, self._path)
        self._open()

    def clip(self) -> None:
        """Delete every row outside the owned key groups, in every column family (after
        adopting an instance that covered other key groups too)."""
        owned = self.key_group_range
        low, high = key_group_bounds(owned.start, owned.end)
        for state, family in list(self._families.items()):
            self._guard(state, "clip", partial(family.delete_range, b"", low,
                                               self._write_options))
            self._guard(state, "clip", partial(family.delete_range, high, _END_OF_ROWS,
                                               self._write_options))

    def write_rows(self, state: str, rows: Iterable[tuple[bytes, bytes]]) -> int:
        """Insert raw (row key, value) pairs into ``state``'s column family in write
        batches; returns how many. The rows must belong to owned key groups."""
        handle = self._column_handle(state)
        written = 0
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        for row, value in rows:
            put(row, value, handle)
            written += 1
            if written % RESTORE_BATCH_ROWS == 0:
                self._guard(state, "restore", partial(self._db.write, batch))
                batch = WriteBatch(raw_mode=True)
                put = batch.put
        if len(batch):
            self._guard(state, "restore", lambda: self._db.write(batch))
        return written

    # -- checkpoints ----------------------------------------------------------------------

    def _tracker(self) -> LocalCopyTracker:
        if self._local_copies is None:
            from weir.state.local_recovery import LocalCopyTracker

            self._local_copies = LocalCopyTracker()
        return self._local_copies

    def snapshot_to(self, checkpoint_id: CheckpointId, location: SnapshotLocation, *,
                    canonical: bool = False) -> AsyncSnapshot:
        """As the base class; a native savepoint is always a RocksDB checkpoint (also with
        ``state.backend.incremental`` off)."""
        if location.savepoint_format is not None and not canonical and \
                not location.canonical_savepoint:
            self._await_restored()
            return self.incremental_strategy.snapshot(checkpoint_id, location)
        return super().snapshot_to(checkpoint_id, location, canonical=canonical)

    def _snapshot_strategy(self, canonical: bool) -> SnapshotStrategy:
        kind = "canonical" if canonical or not self.incremental else "incremental"
        strategy = self._snapshot_strategies.get(kind)
        if strategy is None:
            if kind == "canonical":
                from weir.state.snapshot import CanonicalSnapshotStrategy

                strategy = CanonicalSnapshotStrategy(self, self._tracker())
            else:
                from weir.state.incremental import IncrementalSnapshotStrategy

                strategy = IncrementalSnapshotStrategy(self, self._tracker())
            self._snapshot_strategies[kind] = strategy
        return strategy

    @property
    def incremental_strategy(self) -> IncrementalSnapshotStrategy:
        """The native incremental snapshot strategy (created on first use)."""
        from weir.state.incremental import IncrementalSnapshotStrategy

        strategy = self._snapshot_strategies.get("incremental")
        if strategy is None:
            strategy = IncrementalSnapshotStrategy(self, self._tracker())
            self._snapshot_strategies["incremental"] = strategy
        assert isinstance(strategy, IncrementalSnapshotStrategy)
        return strategy

    def restored_from(self, handle: KeyedStateHandle) -> None:
        from weir.state.handles import IncrementalRocksDBStateHandle

        if isinstance(handle, IncrementalRocksDBStateHandle) and self.incremental:
            self.incremental_strategy.seed(handle)

    def dispose(self) -> None:
        self._close_restore_gate()
        try:
            self._close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


class RocksDBSnapshot:
    """A read-only RocksDB checkpoint; ``entries()`` may run on another thread."""

    def __init__(self, path: Path, states: list[str], scratch: Path) -> None:
        self.path = path
        self._states = states
        self._scratch = scratch

    def segments(self) -> Iterator[Segment]:
        return segments_of(self.entries())

    def entries(self) -> Iterator[Entry]:
        if not self._states:
            return
        options = Options(raw_mode=True)
        db = Rdict(str(self.path), options, access_type=AccessType.read_only())
        try:
            for state in self._states:
                family = db.get_column_family(state)
                for row, value in family.items():
                    key_group, key, namespace = split_row_key(cast(bytes, row))
                    yield state, key_group, key, namespace, value
        finally:
            db.close()

    def release(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)
