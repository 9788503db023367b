"""``rocksdb``: keyed state in a RocksDB instance (rocksdict), one column family per state.

A row's key is ``[key group: u16][key length: u32][key][namespace]``, so each key group is
one contiguous key range (restore clips a range with ``delete_range``) and iterating a
column family yields entries in the canonical snapshot order. Values are pickled.

A snapshot's synchronous part is a RocksDB checkpoint (a flush and hard links); its
entries are read from that checkpoint, opened read-only, while the task keeps writing.
rocksdict's own snapshot iterators return current data, so they are not used.

Example:
    >>> import tempfile
    >>> from state.descriptors import ValueStateDescriptor
    >>> from state.key_groups import KeyGroupRange
    >>> backend = RocksDBStateBackend(128, KeyGroupRange(0, 127), tempfile.mkdtemp())
    >>> total = backend.get_state(ValueStateDescriptor("total"))
    >>> backend.set_current_key("k"); total.update(41); total.value()
    41
    >>> backend.dispose()
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from rocksdict import AccessType, Checkpoint, Options, Rdict, WriteBatch

from state.backend import MISSING, Entry, KeyedStateBackend
from state.key_groups import KeyGroupRange
from state.serializers import decode_key, deserialize_value, encode_key, serialize_value
from weir.errors import StateError

_PREFIX = struct.Struct(">HI")  # key group, key length


def row_key(key_group: int, key: bytes, namespace: bytes) -> bytes:
    return _PREFIX.pack(key_group, len(key)) + key + namespace


def split_row_key(row: bytes) -> tuple[int, bytes, bytes]:
    key_group, length = _PREFIX.unpack_from(row, 0)
    start = _PREFIX.size
    return key_group, row[start:start + length], row[start + length:]


def key_group_bounds(first: int, last: int) -> tuple[bytes, bytes]:
    """Row-key range ``[begin, end)`` of key groups ``first..last``."""
    return struct.pack(">H", first), struct.pack(">H", last + 1)


def _options(memory_bytes: int) -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_write_buffer_size(max(1 << 20, memory_bytes // 4))
    return options


class RocksDBStateBackend(KeyedStateBackend):
    """Keyed state in RocksDB (see the module docstring)."""

    name = "rocksdb"

    def __init__(self, max_parallelism: int, key_group_range: KeyGroupRange,
                 directory: str | Path, memory_bytes: int = 64 << 20,
                 clock: Callable[[], float] | None = None) -> None:
        super().__init__(max_parallelism, key_group_range, clock)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path = self.directory / "db"
        self._options = _options(memory_bytes)
        try:
            self._db = Rdict(str(self._path), self._options)
        except Exception as err:  # rocksdict raises plain Exception subclasses
            msg = f"cannot open RocksDB state in {self._path}: {err}"
            raise StateError(msg) from err
        self._families: dict[str, Rdict] = {}
        for name in Rdict.list_cf(str(self._path), self._options):
            if name != "default":
                self._families[name] = self._db.get_column_family(name)
        self._encoded_key = b""
        self._encoded_for: Any = MISSING

    # -- storage --------------------------------------------------------------------------

    def _register(self, state: str) -> None:
        if state not in self._families:
            self._families[state] = self._guard(
                state, "create", lambda: self._db.create_column_family(state, self._options))

    def _guard(self, state: str, action: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as err:
            msg = (f"RocksDB could not {action} state {state!r} in {self._path}: {err} "
                   "(is the disk full, or were the local files damaged?)")
            raise StateError(msg) from err

    def _row(self, namespace: Any) -> bytes:
        if self._encoded_for is not self.current_key:
            self._encoded_key = encode_key(self.current_key)
            self._encoded_for = self.current_key
        return row_key(self.current_key_group, self._encoded_key, encode_key(namespace))

    def _get(self, state: str, namespace: Any) -> Any:
        family = self._families[state]
        data = self._guard(state, "read", lambda: family.get(self._row(namespace)))
        return MISSING if data is None else deserialize_value(data)

    _get_mutable = _get  # every read is a fresh copy

    def _put(self, state: str, namespace: Any, value: Any) -> None:
        family = self._families[state]
        row, data = self._row(namespace), serialize_value(value)
        self._guard(state, "write", lambda: family.put(row, data))

    def _delete(self, state: str, namespace: Any) -> None:
        family = self._families[state]
        row = self._row(namespace)
        self._guard(state, "delete", lambda: family.delete(row))

    def keys(self, state: str, namespace: Any = None) -> Iterator[Any]:
        family = self._families.get(state)
        if family is None:
            return
        wanted = encode_key(namespace)
        for row in list(family.keys()):
            _, key, ns = split_row_key(row)
            if ns == wanted:
                yield decode_key(key)

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

    def snapshot(self) -> RocksDBSnapshot:
        """Synchronous part: a checkpoint of the instance; entries are read from it."""
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
        for state, key_group, key, namespace, value in entries:
            if key_group not in self.key_group_range:
                continue
            handle = handles.get(state)
            if handle is None:
                self._register(state)
                handle = handles[state] = self._db.get_column_family_handle(state)
            batch.put(row_key(key_group, key, namespace), value, handle)
            loaded += 1
            if len(batch) >= 10_000:
                self._guard(state, "restore", lambda b=batch: self._db.write(b))
                batch = WriteBatch(raw_mode=True)
        if len(batch):
            self._guard("*", "restore", lambda: self._db.write(batch))
        return loaded

    def dispose(self) -> None:
        self._families.clear()
        try:
            self._db.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


class RocksDBSnapshot:
    """A read-only RocksDB checkpoint; ``entries()`` may run on another thread."""

    def __init__(self, path: Path, states: list[str], scratch: Path) -> None:
        self.path = path
        self._states = states
        self._scratch = scratch

    def entries(self) -> Iterator[Entry]:
        if not self._states:
            return
        options = Options(raw_mode=True)
        db = Rdict(str(self.path), options, access_type=AccessType.read_only())
        try:
            for state in self._states:
                family = db.get_column_family(state)
                for row, value in family.items():
                    key_group, key, namespace = split_row_key(row)
                    yield state, key_group, key, namespace, value
        finally:
            db.close()

    def release(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)
