"""The external shuffle service's disk store: result partitions written sorted and spilled.

Layout under ``data_dir``::

    .lock                                   flock of the running service (one per data_dir)
    <job_id>/<partition_id>/data            a committed partition: its data file
    <job_id>/<partition_id>/index           ... and the index of the data file's regions
    <job_id>/_inprogress-<partition_id>-<nonce>/data     a partition being written
    <job_id>/_deleting-<partition_id>-<nonce>/           a released partition being deleted

Partitions hold job records, so only the service's user may read them: directories are
0700 (``data_dir`` too, tightened if it existed) and files 0600.

Write path (sort-spill, after Flink's ``SortMergeResultPartition``): a partition's chunks
arrive interleaved across subpartitions and are buffered in memory, per subpartition, until
the buffered bytes reach the spill threshold. A *spill* then appends one run to the data
file: the buffered chunks of subpartition 0, then of 1, ..., each subpartition's in arrival
order. Runs are NOT merged at commit: the index records, per run and subpartition, the
region ``(offset, length, chunks)``, and a reader of a subpartition reads its region of each
run in turn (a few large sequential reads; every byte is written once, never rewritten).

Commit: the remaining buffered chunks are spilled as a last run, the data file is fsynced,
the index is written and fsynced, and the ``_inprogress-*`` directory is renamed to
``<partition_id>`` (atomic publication), then the job directory is fsynced. Until that
rename nothing of the partition is visible; an aborted write deletes its directory, and the
``_inprogress-*``/``_deleting-*`` leftovers of a crashed service are deleted at start-up.
Releasing a partition renames it to ``_deleting-*`` (invisible at once) and deletes it;
releasing the last partition of a job deletes the job directory.

Formats (little endian):

* data: frames ``[u32 length][u32 crc32][length bytes]``, one per chunk;
* index: header ``magic "WEIRSHF1", u32 version, u32 num_subpartitions, u32 num_runs,
  u32 reserved, u64 data_length, u64 chunks, u64 chunk_bytes``, then ``num_runs *
  num_subpartitions`` entries ``u64 offset, u64 length, u32 chunks`` (run-major), then the
  crc32 of everything before it.

Reads check the index checksum, the data file's length against the index, every frame's
length against its region and every chunk's checksum; a mismatch is a
:class:`CorruptPartitionError` naming the file and what is wrong.

Threads: :class:`PartitionStore` is thread-safe. A :class:`PartitionWrite` is used by one
thread (its RPC handler), except :meth:`PartitionStore.release`, which may mark it released
from another. A :class:`SubpartitionReader` is used by one thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import shutil
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from weir.core.errors import WeirError
from weir.core.files import PRIVATE_DIRECTORY_MODE, open_private, private_directory
from weir.core.ids import JobId, PartitionId

log = logging.getLogger(__name__)

#: Bytes a partition being written buffers in memory before it spills a run.
DEFAULT_SPILL_THRESHOLD = 8 * 1024 * 1024
#: Largest number of subpartitions of one partition (bounds the index size).
MAX_SUBPARTITIONS = 1 << 16
#: How long a release waits for a partition being written to delete its files.
RELEASE_WAIT_S = 5.0

INPROGRESS_PREFIX = "_inprogress-"
DELETING_PREFIX = "_deleting-"
DATA_FILE = "data"
INDEX_FILE = "index"
LOCK_FILE = ".lock"

_MAGIC = b"WEIRSHF1"
_VERSION = 1
_HEADER = struct.Struct("<8sIIIIQQQ")
_ENTRY = struct.Struct("<QQI")
_FRAME = struct.Struct("<II")
_CRC = struct.Struct("<I")
#: Ids become directory names: no separators, no leading "." or "_" (ours), bounded length.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_INDEX_CACHE_SIZE = 256


class ShuffleStorageError(WeirError):
    """Base class of the partition store's errors (not checkpoint storage's
    :class:`~weir.core.errors.StorageError`)."""


class InvalidRequestError(ShuffleStorageError):
    """A malformed id or an out-of-range subpartition or position."""


class PartitionExistsError(ShuffleStorageError):
    """The partition is committed already, or being written by another stream."""


class UnknownPartitionError(ShuffleStorageError):
    """The partition is not committed (``in_progress``: it is being written) or unknown."""

    def __init__(self, message: str, in_progress: bool = False) -> None:
        super().__init__(message)
        self.in_progress = in_progress


class WriteAbortedError(ShuffleStorageError):
    """The partition was released while it was being written; nothing was stored."""


class CorruptPartitionError(ShuffleStorageError):
    """A partition's files are truncated or fail their checksums (or a write lost data)."""


@dataclass(frozen=True)
class PartitionInfo:
    """A partition the store holds, committed or being written."""

    job_id: JobId
    partition_id: PartitionId
    num_subpartitions: int
    committed: bool
    chunks: int
    bytes: int
    runs: int


def check_id(kind: str, value: str) -> str:
    """``value`` if it is a valid job or partition id, else InvalidRequestError."""
    if not _ID.fullmatch(value):
        msg = (f"invalid {kind} {value!r}: use 1-200 letters, digits, '.', '_' or '-', "
               "starting with a letter or digit")
        raise InvalidRequestError(msg)
    return value


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Index:
    """A parsed, checksum-verified index file (kept raw; entries are unpacked on demand)."""

    def __init__(self, raw: bytes, path: Path) -> None:
        self.path = path
        if len(raw) < _HEADER.size + _CRC.size:
            msg = f"index {path} is truncated ({len(raw)} bytes)"
            raise CorruptPartitionError(msg)
        (stored_crc,) = _CRC.unpack_from(raw, len(raw) - _CRC.size)
        if zlib.crc32(memoryview(raw)[:-_CRC.size]) != stored_crc:
            msg = f"index {path} fails its checksum (truncated or corrupt)"
            raise CorruptPartitionError(msg)
        (magic, version, self.num_subpartitions, self.num_runs, _, self.data_length,
         self.chunks, self.chunk_bytes) = _HEADER.unpack_from(raw)
        if magic != _MAGIC or version != _VERSION:
            msg = f"index {path} is not a weir shuffle index (version {_VERSION})"
            raise CorruptPartitionError(msg)
        expected = _HEADER.size + self.num_runs * self.num_subpartitions * _ENTRY.size + \
            _CRC.size
        if len(raw) != expected:
            msg = f"index {path} is {len(raw)} bytes, its header implies {expected}"
            raise CorruptPartitionError(msg)
        self._raw = raw

    def regions(self, subpartition: int) -> list[tuple[int, int, int]]:
        """``(offset, length, chunks)`` of ``subpartition`` in each run, in run order."""
        n = self.num_subpartitions
        return [_ENTRY.unpack_from(self._raw, _HEADER.size + (run * n + subpartition) *
                                   _ENTRY.size) for run in range(self.num_runs)]


class SubpartitionReader:
    """Reads the chunks of one subpartition of a committed partition; a context manager.

    Holds the data file open: a partition released meanwhile stays readable through it.
    """

    def __init__(self, data: BinaryIO, index: _Index, subpartition: int, path: Path) -> None:
        self._data = data
        self._regions = index.regions(subpartition)
        self._path = path
        #: Chunks of this subpartition.
        self.total_chunks = sum(chunks for _, _, chunks in self._regions)

    def chunks(self, start: int = 0) -> Iterator[bytes]:
        """Every chunk from the ``start``-th on, verified; raises CorruptPartitionError."""
        if not 0 <= start <= self.total_chunks:
            msg = f"chunk {start} is past the end ({self.total_chunks} chunks)"
            raise InvalidRequestError(msg)
        skip = start
        for offset, length, count in self._regions:
            if count <= skip:
                skip -= count
                continue
            yield from self._region(offset, length, count, skip)
            skip = 0

    def _region(self, offset: int, length: int, count: int, skip: int) -> Iterator[bytes]:
        data = self._data
        data.seek(offset)
        consumed = 0
        for i in range(count):
            header = data.read(_FRAME.size)
            if len(header) != _FRAME.size:
                self._corrupt(offset + consumed, "ends inside a frame header")
            size, crc = _FRAME.unpack(header)
            consumed += _FRAME.size + size
            if consumed > length:
                self._corrupt(offset + consumed - size - _FRAME.size,
                              f"has a frame of {size} bytes past its region's end")
            if i < skip:
                data.seek(size, os.SEEK_CUR)
                continue
            chunk = data.read(size)
            if len(chunk) != size:
                self._corrupt(offset + consumed - size, f"ends inside a {size}-byte chunk")
            if zlib.crc32(chunk) != crc:
                self._corrupt(offset + consumed - size - _FRAME.size,
                              "has a chunk that fails its checksum")
            yield chunk
        if consumed != length:
            self._corrupt(offset, f"has a region of {consumed} bytes, the index says {length}")

    def _corrupt(self, offset: int, what: str) -> None:
        msg = f"data file {self._path} is corrupt: it {what} (at byte {offset})"
        raise CorruptPartitionError(msg)

    def close(self) -> None:
        self._data.close()

    def __enter__(self) -> SubpartitionReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class PartitionWrite:
    """A partition being written: buffers chunks, spills runs, commits or aborts.

    Created by :meth:`PartitionStore.begin_write`; used by one thread. Exactly one of
    :meth:`commit` (successful) or :meth:`abort` ends it; ``abort`` is idempotent and safe
    after a failed commit, so callers abort in a ``finally``.
    """

    def __init__(self, store: PartitionStore, job_id: JobId, partition_id: PartitionId,
                 num_subpartitions: int, directory: Path, spill_threshold: int) -> None:
        self.store = store
        self.job_id = job_id
        self.partition_id = partition_id
        self.num_subpartitions = num_subpartitions
        self.directory = directory
        self._spill_threshold = spill_threshold
        self._file: BinaryIO | None = open_private(directory / DATA_FILE, "wb")
        self._buffers: list[list[bytes]] = [[] for _ in range(num_subpartitions)]
        self._buffered = 0
        self._offset = 0
        self._entries = bytearray()
        self.runs = 0
        self.chunks = 0
        self.bytes = 0
        #: Set (from any thread) by a release: the next add or commit raises.
        self.released = False
        #: Called (from the releasing thread) after ``released`` is set, to interrupt the
        #: writing thread, e.g. by cancelling its RPC.
        self.on_release: Callable[[], None] | None = None
        #: Set once the write ended (committed, or aborted and its files deleted).
        self.closed = threading.Event()
        self.committed = False

    def add(self, subpartition: int, chunk: bytes) -> None:
        """Buffer one chunk; spills a run when the threshold is reached."""
        if self.released:
            msg = f"partition {self.partition_id} was released while being written"
            raise WriteAbortedError(msg)
        if not 0 <= subpartition < self.num_subpartitions:
            msg = (f"subpartition {subpartition} out of range: partition {self.partition_id} "
                   f"has {self.num_subpartitions}")
            raise InvalidRequestError(msg)
        self._buffers[subpartition].append(chunk)
        self._buffered += len(chunk)
        self.chunks += 1
        self.bytes += len(chunk)
        if self._buffered >= self._spill_threshold:
            self._spill()

    def _spill(self) -> None:
        """Append the buffered chunks to the data file as one run, ordered by subpartition."""
        assert self._file is not None
        out = self._file
        for index, chunks in enumerate(self._buffers):
            start = self._offset
            for chunk in chunks:
                out.write(_FRAME.pack(len(chunk), zlib.crc32(chunk)))
                out.write(chunk)
                self._offset += _FRAME.size + len(chunk)
            self._entries += _ENTRY.pack(start, self._offset - start, len(chunks))
            self._buffers[index] = []
        self._buffered = 0
        self.runs += 1

    def commit(self, expected_chunks: int, expected_bytes: int) -> PartitionInfo:
        """Spill what is left, make it durable and publish the partition atomically.

        Raises CorruptPartitionError when the totals the writer sent differ from what
        arrived, WriteAbortedError when released meanwhile, OSError. The caller aborts
        after any error.
        """
        if self.released:
            msg = f"partition {self.partition_id} was released while being written"
            raise WriteAbortedError(msg)
        if (expected_chunks, expected_bytes) != (self.chunks, self.bytes):
            msg = (f"partition {self.partition_id}: the writer sent {expected_chunks} chunks "
                   f"({expected_bytes} bytes), the service received {self.chunks} "
                   f"({self.bytes} bytes)")
            raise CorruptPartitionError(msg)
        assert self._file is not None
        if self._buffered or any(self._buffers):
            self._spill()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        body = _HEADER.pack(_MAGIC, _VERSION, self.num_subpartitions, self.runs, 0,
                            self._offset, self.chunks, self.bytes) + bytes(self._entries)
        with open_private(self.directory / INDEX_FILE, "wb") as index:
            index.write(body + _CRC.pack(zlib.crc32(body)))
            index.flush()
            os.fsync(index.fileno())
        _fsync_dir(self.directory)
        self.store._publish(self)
        self.committed = True
        self.closed.set()
        return self.info()

    def abort(self) -> None:
        """Drop the partition: close and delete its files. Idempotent; no-op once committed."""
        if self.committed or self.closed.is_set():
            return
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        self._buffers = []
        self.store._discard(self)
        self.closed.set()

    def info(self) -> PartitionInfo:
        return PartitionInfo(self.job_id, self.partition_id, self.num_subpartitions,
                             self.committed, self.chunks, self.bytes, self.runs)


class PartitionStore:
    """The partitions under ``data_dir`` (see the module docstring for layout and formats).

    The directory tree is the registry of committed partitions (so a restarted service
    serves what it committed before); partitions being written are tracked in memory.
    Locks ``data_dir`` for its lifetime; raises ShuffleStorageError when another store holds it.
    """

    def __init__(self, data_dir: str | os.PathLike[str],
                 spill_threshold: int = DEFAULT_SPILL_THRESHOLD) -> None:
        if spill_threshold <= 0:
            msg = f"spill threshold must be positive, got {spill_threshold}"
            raise ValueError(msg)
        self.data_dir = Path(data_dir).resolve()
        self.spill_threshold = spill_threshold
        # Partitions hold job records: 0700 directories and 0600 files, and the root is
        # tightened even if it existed, which also covers partitions written before.
        private_directory(self.data_dir)
        self._lock_file: BinaryIO | None = open_private(self.data_dir / LOCK_FILE, "ab")
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            self._lock_file.close()
            msg = (f"the shuffle data directory {self.data_dir} is in use by another shuffle "
                   "service: give each service its own directory")
            raise ShuffleStorageError(msg) from err
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._writing: dict[tuple[str, str], PartitionWrite] = {}
        self._indexes: OrderedDict[tuple[str, str], _Index] = OrderedDict()
        self._recover()

    def _recover(self) -> None:
        """Delete what a crashed service left: unfinished writes and deletions."""
        for job_dir in self._job_dirs():
            for entry in job_dir.iterdir():
                if entry.name.startswith((INPROGRESS_PREFIX, DELETING_PREFIX)):
                    log.info("deleting %s, left over by an earlier shuffle service", entry)
                    shutil.rmtree(entry, ignore_errors=True)
            self._remove_job_dir_if_empty(JobId(job_dir.name))

    def _job_dirs(self) -> list[Path]:
        return [p for p in self.data_dir.iterdir() if p.is_dir() and _ID.fullmatch(p.name)]

    # -- writing ----------------------------------------------------------------------------

    def begin_write(self, job_id: JobId, partition_id: PartitionId, num_subpartitions: int,
                    on_release: Callable[[], None] | None = None) -> PartitionWrite:
        """Start writing a partition; ``on_release`` becomes its ``on_release``.

        Raises InvalidRequestError, PartitionExistsError, OSError.
        """
        check_id("job id", job_id)
        check_id("partition id", partition_id)
        if not 0 < num_subpartitions <= MAX_SUBPARTITIONS:
            msg = (f"partition {partition_id}: num_subpartitions must be 1..{MAX_SUBPARTITIONS},"
                   f" got {num_subpartitions}")
            raise InvalidRequestError(msg)
        job_dir = self.data_dir / job_id
        with self._lock:
            if (job_id, partition_id) in self._writing:
                msg = f"partition {partition_id} of job {job_id} is being written already"
                raise PartitionExistsError(msg)
            if (job_dir / partition_id).exists():
                msg = f"partition {partition_id} of job {job_id} is committed already"
                raise PartitionExistsError(msg)
            job_dir.mkdir(mode=PRIVATE_DIRECTORY_MODE, exist_ok=True)
            directory = job_dir / f"{INPROGRESS_PREFIX}{partition_id}-{secrets.token_hex(4)}"
            directory.mkdir(mode=PRIVATE_DIRECTORY_MODE)
            try:
                write = PartitionWrite(self, job_id, partition_id, num_subpartitions,
                                       directory, self.spill_threshold)
            except OSError:
                shutil.rmtree(directory, ignore_errors=True)
                self._remove_job_dir_if_empty(job_id)
                raise
            write.on_release = on_release
            self._writing[(job_id, partition_id)] = write
        return write

    def _publish(self, write: PartitionWrite) -> None:
        key = (write.job_id, write.partition_id)
        job_dir = self.data_dir / write.job_id
        with self._lock:
            if write.released:  # a release won the race: abort() deletes the files
                msg = f"partition {write.partition_id} was released while being written"
                raise WriteAbortedError(msg)
            write.directory.rename(job_dir / write.partition_id)
            write.directory = job_dir / write.partition_id
            del self._writing[key]
            self._indexes.pop(key, None)
            self._changed.notify_all()
        _fsync_dir(job_dir)

    def _discard(self, write: PartitionWrite) -> None:
        with self._lock:
            shutil.rmtree(write.directory, ignore_errors=True)
            if self._writing.get((write.job_id, write.partition_id)) is write:
                del self._writing[(write.job_id, write.partition_id)]
            self._remove_job_dir_if_empty(write.job_id)
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no partition is being written; False on timeout."""
        with self._lock:
            return self._changed.wait_for(lambda: not self._writing, timeout)

    # -- reading ----------------------------------------------------------------------------

    def open_subpartition(self, job_id: JobId, partition_id: PartitionId,
                          subpartition: int) -> SubpartitionReader:
        """A reader of one subpartition of a committed partition.

        Raises UnknownPartitionError (not committed, or unknown), CorruptPartitionError,
        InvalidRequestError (bad id or subpartition).
        """
        check_id("job id", job_id)
        check_id("partition id", partition_id)
        directory = self.data_dir / job_id / partition_id
        index = self._index(job_id, partition_id)
        if not 0 <= subpartition < index.num_subpartitions:
            msg = (f"subpartition {subpartition} out of range: partition {partition_id} has "
                   f"{index.num_subpartitions}")
            raise InvalidRequestError(msg)
        path = directory / DATA_FILE
        try:
            data = open(path, "rb")  # noqa: SIM115 - the reader owns and closes it
        except FileNotFoundError as err:
            msg = f"partition {partition_id} of job {job_id} was released"
            raise UnknownPartitionError(msg) from err
        size = os.fstat(data.fileno()).st_size
        if size != index.data_length:
            data.close()
            msg = (f"data file {path} is truncated or corrupt: it is {size} bytes, its index "
                   f"says {index.data_length}")
            raise CorruptPartitionError(msg)
        return SubpartitionReader(data, index, subpartition, path)

    def _index(self, job_id: JobId, partition_id: PartitionId) -> _Index:
        key = (job_id, partition_id)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                return index
        path = self.data_dir / job_id / partition_id / INDEX_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError as err:
            with self._lock:
                in_progress = key in self._writing
            state = "is being written, not committed yet" if in_progress else \
                "is unknown to this shuffle service (never committed, or released)"
            msg = f"partition {partition_id} of job {job_id} {state}"
            raise UnknownPartitionError(msg, in_progress) from err
        index = _Index(raw, path)
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > _INDEX_CACHE_SIZE:
                self._indexes.popitem(last=False)
        return index

    # -- releasing and listing --------------------------------------------------------------

    def release(self, job_id: JobId, partition_ids: list[PartitionId] | None = None) -> int:
        """Delete partitions of a job (``None``: all of them), committed or being written;
        returns how many existed. Deletes the job directory once it is empty.

        Writes in progress are marked released and interrupted through their
        ``on_release``; this waits (up to RELEASE_WAIT_S) until they deleted their files.
        """
        check_id("job id", job_id)
        wanted = None if partition_ids is None else \
            {check_id("partition id", p) for p in partition_ids}
        job_dir = self.data_dir / job_id
        released = 0
        with self._lock:
            if job_dir.is_dir():
                names = [p.name for p in job_dir.iterdir() if _ID.fullmatch(p.name)]
                for name in names if wanted is None else sorted(wanted & set(names)):
                    doomed = job_dir / f"{DELETING_PREFIX}{name}-{secrets.token_hex(4)}"
                    # Rename first: the partition disappears at once, even if deleting its
                    # files is interrupted (start-up deletes leftover _deleting-* dirs).
                    (job_dir / name).rename(doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
                    self._indexes.pop((job_id, name), None)
                    released += 1
            writes = [w for (j, p), w in self._writing.items()
                      if j == job_id and (wanted is None or p in wanted)]
            for write in writes:
                write.released = True
            self._remove_job_dir_if_empty(job_id)
        for write in writes:
            if write.on_release is not None:
                write.on_release()
            if not write.closed.wait(RELEASE_WAIT_S):
                log.warning("partition %s of job %s was released while being written and has "
                            "not stopped within %.0f s", write.partition_id, job_id,
                            RELEASE_WAIT_S)
        return released + len(writes)

    def _remove_job_dir_if_empty(self, job_id: JobId) -> None:
        # rmdir fails unless the directory is empty: a concurrent write keeps it.
        with contextlib.suppress(OSError):
            (self.data_dir / job_id).rmdir()

    def list(self, job_id: JobId | None = None) -> list[PartitionInfo]:
        """The partitions held, committed and being written (of ``job_id``, or all)."""
        if job_id is not None:
            check_id("job id", job_id)
        job_dirs = [self.data_dir / job_id] if job_id is not None else self._job_dirs()
        infos = []
        for job_dir in job_dirs:
            if not job_dir.is_dir():
                continue
            for entry in sorted(job_dir.iterdir()):
                if not _ID.fullmatch(entry.name):
                    continue
                job, partition = JobId(job_dir.name), PartitionId(entry.name)
                try:
                    index = self._index(job, partition)
                except (UnknownPartitionError, CorruptPartitionError) as err:
                    # Released meanwhile, or unreadable: list it empty rather than fail.
                    log.warning("listing %s: %s", entry, err)
                    infos.append(PartitionInfo(job, partition, 0, True, 0, 0, 0))
                    continue
                infos.append(PartitionInfo(job, partition, index.num_subpartitions,
                                           True, index.chunks, index.chunk_bytes,
                                           index.num_runs))
        with self._lock:
            writes = [w for (j, _), w in self._writing.items() if job_id in (None, j)]
        infos.extend(w.info() for w in writes)
        return infos

    def close(self) -> None:
        """Unlock the data directory. Idempotent. Writes still open are not touched."""
        if self._lock_file is not None:
            self._lock_file.close()  # closing the file drops the flock
            self._lock_file = None
