"""The durable short-term log (DSTL) of the changelog state backend, on file:// or s3://.

One :class:`ChangelogStorage` per TaskExecutor and base location, shared by its tasks;
each keyed backend appends its state changes through its own :class:`ChangelogWriter`.
A writer frames changes (sequence number, key group, payload) in memory; when asked to
persist (a checkpoint) or when it holds ``preemptive-persist-threshold`` bytes, it hands a
*piece* (its framed changes of one sequence range) to the storage. A background thread
batches the pieces of every writer into one log file per upload (waiting up to
``batch.persist-delay``, or less once ``batch.persist-size-threshold`` bytes wait), uploads
it with ``upload.timeout`` per attempt and up to ``upload.max-attempts`` attempts, and
returns a :class:`LogSegmentHandle` per piece: file, offset, length, key groups, sequence
range and checksum. The task thread never uploads: it only waits when the bytes buffered or
being uploaded would exceed ``upload.max-in-flight`` (backpressure), so memory stays
bounded. That wait ends when the task is cancelled, and fails the task once no upload made
room for :attr:`ChangelogStorageOptions.stall_timeout_s` (derived from the upload options):
a storage that cannot keep up, or cannot be reached, fails over instead of hanging. A piece
whose upload failed stays with its writer and goes again with the next persist: a storage
outage fails checkpoints, it loses no change.

Every upload attempt writes a file of its own. An attempt that timed out is never referred
to by a handle; when it finishes after all, its file is deleted.

A piece on storage: ``WCLG`` | version (u8) | first sequence (u64) | count (u32) | body
length (u32) | body | directory | CRC-32C of all before (u32); the body is records of
sequence (u64), key group (u16), payload length (u32), payload, grouped by state (named
at the start of the payload, :func:`state_of`) and key group, and the directory says where
each group starts: number of state names (u16), each name's length (u16) and UTF-8 bytes,
number of groups (u32), then state name number (u16), key group (u16), start in the piece
(u32) and records (u32) of each. (Version 1 pieces, written before, hold the records in
sequence order and no directory.) :func:`read_changes` verifies each piece.

Log files are shared between checkpoints (a handle's ``shared_state``): the JobMaster's
shared state registry deletes a file when no retained checkpoint refers to it.

Example:
    >>> import tempfile
    >>> from weir.checkpoint.storage import create_storage
    >>> storage = ChangelogStorage(create_storage(tempfile.mkdtemp()), "job/changelog",
    ...                            ChangelogStorageOptions(persist_delay_s=0.0))
    >>> writer = storage.create_writer("op-0")
    >>> writer.append(3, b"put a"); writer.append(5, b"put b")
    >>> handles = writer.persist(0).result()
    >>> [(c.sequence, c.key_group, c.payload) for c in read_changes(storage.storage, handles)]
    [(0, 3, b'put a'), (1, 5, b'put b')]
    >>> storage.close()
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from weir.checkpoint.filesystem import FsCheckpointStorageAccess
from weir.checkpoint.storage import CheckpointStorageAccess, StreamStateHandle, checksum_of
from weir.core.errors import CorruptStateError, StateError, StorageError

log = logging.getLogger(__name__)

MAGIC = b"WCLG"
#: Version 2 groups a piece's records by state and key group and ends the body with a
#: directory of the groups; version 1 (records in sequence order, no directory) is still
#: read.
VERSION = 2
_HEADER = struct.Struct(">4sBQII")
_RECORD = struct.Struct(">QHI")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
#: A directory entry: state (its number in the directory's names), key group, where its
#: records start in the piece, how many.
_GROUP = struct.Struct(">HHII")
_CRC = struct.Struct(">I")

#: (state, key group, start, records) of each run of records of one state and key group.
Groups = tuple[tuple[str, int, int, int], ...]


#: After the last attempt's timeout the attempts still running are not abandoned: the
#: first of them to succeed is used if it does within this long (a storage that is slow
#: under load, e.g. while the state is first written, is not a failed one; as in Flink,
#: a timeout only starts another attempt). Past it the upload fails and its changes go with
#: the next persist.
LAST_ATTEMPT_GRACE_S = 30.0


@dataclass(frozen=True)
class ChangelogStorageOptions:
    """The ``state.changelog.dstl.dfs.*`` options (declared in state/options.py, read by
    the state backend factory), in seconds and bytes."""

    preemptive_persist_bytes: int = 5 << 20
    persist_delay_s: float = 0.010
    persist_size_bytes: int = 10 << 20
    upload_timeout_s: float = 1.0
    max_attempts: int = 3
    next_attempt_delay_s: float = 0.050
    max_in_flight_bytes: int = 100 << 20
    #: How long the attempts still running after the last one's timeout may take.
    last_attempt_grace_s: float = LAST_ATTEMPT_GRACE_S

    @property
    def upload_bound_s(self) -> float:
        """The longest one log file upload can take: the batching delay, every attempt
        timing out, the delays between attempts, and the last attempts' grace."""
        return (self.persist_delay_s + self.max_attempts * self.upload_timeout_s
                + (self.max_attempts - 1) * self.next_attempt_delay_s
                + self.last_attempt_grace_s)

    @property
    def stall_timeout_s(self) -> float:
        """How long a task waits at ``max-in-flight`` without any upload making room before
        it fails: the upload running when it started waiting and the next one, each at
        :attr:`upload_bound_s`."""
        return 2 * self.upload_bound_s


@dataclass(frozen=True)
class LogSegmentHandle:
    """One piece of one writer's log inside a shared log file.

    Example:
        >>> f = StreamStateHandle("file:///c/job/changelog/a.log", 100, "crc32c:00000001")
        >>> h = LogSegmentHandle(f, 40, 60, 0, 63, 10, 25, "crc32c:0000abcd")
        >>> LogSegmentHandle.from_dict(h.to_dict()) == h
        True
    """

    file: StreamStateHandle
    offset: int
    length: int
    #: First and last key group of the piece's changes.
    first_key_group: int
    last_key_group: int
    #: Sequence numbers of the piece's changes: ``[first_sequence, end_sequence)``.
    first_sequence: int
    end_sequence: int
    checksum: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file.to_dict(), "offset": self.offset, "length": self.length,
                "key_groups": [self.first_key_group, self.last_key_group],
                "sequence": [self.first_sequence, self.end_sequence],
                "checksum": self.checksum}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogSegmentHandle:
        first_kg, last_kg = data["key_groups"]
        first_seq, end_seq = data["sequence"]
        return cls(StreamStateHandle.from_dict(data["file"]), int(data["offset"]),
                   int(data["length"]), int(first_kg), int(last_kg), int(first_seq),
                   int(end_seq), str(data["checksum"]))

    def overlaps(self, start: int, end: int) -> bool:
        """Whether the piece may hold changes of key groups ``start..end``."""
        return self.first_key_group <= end and self.last_key_group >= start


class StateChange(NamedTuple):
    sequence: int
    key_group: int
    payload: bytes


# -- framing -------------------------------------------------------------------------------


def frame_piece(first_sequence: int, records: list[tuple[int, int, bytes]],
                version: int = VERSION) -> bytes:
    """The bytes of a piece holding ``records`` of (sequence, key group, payload).

    In version 2 the records are grouped by state and key group (each group in sequence
    order: a row's changes never cross groups, so their order is kept), and a directory of
    the groups follows them, so that a restore can index the changes of one state and key
    group without reading the others' (see :class:`weir.state.changelog_replay.PendingLog`).
    A payload names its state as a change does (:func:`state_of`)."""
    if version == 1:
        body = b"".join(_RECORD.pack(seq, kg, len(payload)) + payload
                        for seq, kg, payload in records)
        head = _HEADER.pack(MAGIC, 1, first_sequence, len(records), len(body)) + body
        return head + _CRC.pack(_crc(head))
    groups: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    for seq, kg, payload in records:
        groups.setdefault((state_of(payload).decode(), kg), []).append((seq, payload))
    return frame_groups(first_sequence, len(records), groups)


def frame_groups(first_sequence: int, count: int,
                 groups: Mapping[tuple[str, int], list[tuple[int, bytes]]]) -> bytes:
    """The bytes of a version 2 piece of ``count`` records, given grouped: (state, key
    group) -> (sequence, payload) of its changes in sequence order. The writer groups the
    changes as they come (cheaper on the task thread than sorting them here)."""
    pack = _RECORD.pack
    names: dict[str, int] = {}
    parts: list[bytes] = []
    entries: list[bytes] = []
    start = _HEADER.size
    for state, kg in sorted(groups):
        run = groups[state, kg]
        entries.append(_GROUP.pack(names.setdefault(state, len(names)), kg, start, len(run)))
        part = b"".join([pack(seq, kg, len(payload)) + payload for seq, payload in run])
        start += len(part)
        parts.append(part)
    body = b"".join(parts)
    encoded = [n.encode() for n in names]
    directory = [_U16.pack(len(names)), *(_U16.pack(len(n)) + n for n in encoded),
                 _U32.pack(len(entries)), *entries]
    head = b"".join((_HEADER.pack(MAGIC, VERSION, first_sequence, count, len(body)),
                     body, *directory))
    return head + _CRC.pack(_crc(head))


def state_of(payload: bytes) -> bytes:
    """The state name a change's payload starts with: op (u8), name length (u16), name
    (the payload of :mod:`weir.state.changelog_replay`); empty for a shorter payload."""
    return payload[3:3 + int.from_bytes(payload[1:3], "big")]


def _directory(view: memoryview, at: int, end: int) -> Groups | None:
    """The groups of a version 2 directory at ``view[at:end]``, None if it is not one."""
    try:
        (count,) = _U16.unpack_from(view, at)
        at += _U16.size
        names = []
        for _ in range(count):
            (n,) = _U16.unpack_from(view, at)
            names.append(bytes(view[at + _U16.size:at + _U16.size + n]).decode())
            at += _U16.size + n
        (groups,) = _U32.unpack_from(view, at)
        at += _U32.size
        if at + groups * _GROUP.size != end:
            return None
        return tuple((names[i], kg, start, n)
                     for i, kg, start, n in _GROUP.iter_unpack(view[at:end]))
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


def _crc(data: bytes | memoryview) -> int:
    return int(checksum_of(data, "crc32c:").split(":", 1)[1] or "0", 16)


def verify_piece(data: bytes | memoryview, where: str) -> tuple[int, Groups | None]:
    """Verify one piece's framing and checksum; returns its number of records (which start
    at ``PIECE_HEADER_SIZE``) and its key groups' runs of records (positions in ``data``;
    None for a version 1 piece). Raises CorruptStateError naming ``where``."""
    view = memoryview(data)
    if len(view) < _HEADER.size + _CRC.size:
        msg = f"state change log {where} is corrupt: a piece of {len(view)} bytes is too short"
        raise CorruptStateError(msg)
    magic, version, _first, count, body_length = _HEADER.unpack_from(view, 0)
    end = _HEADER.size + body_length  # of the records
    groups: Groups | None = None
    if magic == MAGIC and version == 2 and end + _CRC.size <= len(view):
        groups = _directory(view, end, len(view) - _CRC.size)
        if groups is not None:
            end = len(view) - _CRC.size
    if magic != MAGIC or version not in (1, 2) or (version == 2 and groups is None) or \
            end + _CRC.size != len(view):
        msg = f"state change log {where} is corrupt: bad piece header"
        raise CorruptStateError(msg)
    (expected,) = _CRC.unpack_from(view, len(view) - _CRC.size)
    if _crc(view[:len(view) - _CRC.size]) != expected:
        msg = f"state change log {where} is corrupt: checksum mismatch"
        raise CorruptStateError(msg)
    if groups is not None and sum(g[3] for g in groups) != count:
        msg = f"state change log {where} is corrupt: its key groups do not add up"
        raise CorruptStateError(msg)
    return int(count), groups


#: Where a piece's first record starts; a record is ``RECORD`` (sequence, key group,
#: payload length) then the payload.
PIECE_HEADER_SIZE = _HEADER.size
RECORD = _RECORD


def parse_piece(data: bytes | memoryview, where: str) -> Iterator[StateChange]:
    """The changes of one piece, after verifying its framing and checksum; raises
    CorruptStateError naming ``where``."""
    count, _groups = verify_piece(data, where)
    view = memoryview(data)
    position = _HEADER.size
    for _ in range(count):
        seq, kg, length = _RECORD.unpack_from(view, position)
        position += _RECORD.size
        yield StateChange(seq, kg, bytes(view[position:position + length]))
        position += length


class VerifiedPiece(NamedTuple):
    """A verified piece inside the bytes of its log file: ``records`` records starting at
    ``start`` (see :data:`RECORD`), and the runs of them of each state and key group
    (positions in ``file``; None for a version 1 piece, whose records are in sequence
    order)."""

    file: bytes
    start: int
    records: int
    groups: Groups | None = None

    @classmethod
    def of(cls, data: bytes, where: str = "piece") -> VerifiedPiece:
        """``data`` holding one piece, verified."""
        count, groups = verify_piece(data, where)
        return cls(data, _HEADER.size, count, groups)


def read_pieces(storage: CheckpointStorageAccess, handles: Iterable[LogSegmentHandle],
                key_groups: tuple[int, int] | None = None,
                files: Mapping[str, bytes | Future[bytes]] | None = None
                ) -> Iterator[VerifiedPiece]:
    """The pieces of ``handles`` that may hold changes of ``key_groups``, in order, each
    verified; the bulk form of :func:`read_changes` (the caller walks the records). A log
    file is taken from ``files`` (its bytes, or a download under way) or else read.
    Raises CorruptStateError or MissingStateError naming the file."""
    cache: dict[str, bytes] = {}
    for handle in handles:
        if key_groups is not None and not handle.overlaps(*key_groups):
            continue
        uri = handle.file.uri
        data = cache.get(uri)
        if data is None:
            known = files.get(uri) if files is not None else None
            if isinstance(known, Future):
                known = known.result()
            data = cache[uri] = known if known is not None else storage.read(handle.file)
        view = memoryview(data)[handle.offset:handle.offset + handle.length]
        count, groups = verify_piece(view, uri)
        if groups is not None:
            groups = tuple((state, kg, handle.offset + start, n)
                           for state, kg, start, n in groups)
        yield VerifiedPiece(data, handle.offset + _HEADER.size, count, groups)


def read_changes(storage: CheckpointStorageAccess, handles: Iterable[LogSegmentHandle],
                 key_groups: tuple[int, int] | None = None,
                 files: dict[str, bytes] | None = None) -> Iterator[StateChange]:
    """The changes of ``handles`` in order: of the handles, then within a piece by state
    and key group, each group's in sequence order (a version 1 piece: in sequence order); only
    those of ``key_groups`` (first, last) when given. Each log file is read (and verified) once;
    ``files`` caches them across calls. Raises CorruptStateError or MissingStateError
    naming the file."""
    cache = files if files is not None else {}
    for handle in handles:
        if key_groups is not None and not handle.overlaps(*key_groups):
            continue
        data = cache.get(handle.file.uri)
        if data is None:
            data = cache[handle.file.uri] = storage.read(handle.file)
        piece = memoryview(data)[handle.offset:handle.offset + handle.length]
        for change in parse_piece(piece, handle.file.uri):
            if key_groups is None or key_groups[0] <= change.key_group <= key_groups[1]:
                yield change


# -- metrics -------------------------------------------------------------------------------


class Histogram:
    """Counts of observed values per bucket (upper bounds, cumulative as Prometheus
    exports them), their sum and count. Thread-safe: the upload thread observes, a scrape
    reads.

    Example:
        >>> h = Histogram((1, 2, 5))
        >>> for v in (1, 2, 2, 9):
        ...     h.observe(v)
        >>> h.buckets(), h.sum, h.count
        ([('1', 1), ('2', 3), ('5', 3), ('+Inf', 4)], 14.0, 4)
    """

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, value)] += 1
            self.sum += value
            self.count += 1

    def buckets(self) -> list[tuple[str, int]]:
        """``(upper bound, observations <= it)`` per bucket, ``+Inf`` last."""
        with self._lock:
            counts = list(self._counts)
        cumulative = list(itertools.accumulate(counts))
        names = [_bound_text(b) for b in self.bounds] + ["+Inf"]
        return list(zip(names, cumulative, strict=True))


def _bound_text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


#: Bucket bounds of ``uploadSizes`` (bytes): 1 KiB to 64 MiB, by fours.
SIZE_BUCKETS = tuple(1024 * 4 ** i for i in range(9))
#: Bucket bounds of ``uploadLatenciesNanos``: 1 ms to 10 s.
LATENCY_BUCKETS = tuple(int(ms * 1_000_000) for ms in
                        (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000))
#: Bucket bounds of ``attemptsPerUpload``.
ATTEMPT_BUCKETS = (1, 2, 3, 5, 10)


@dataclass
class ChangelogStorageMetrics:
    """Flink's changelog storage metrics, read at scrape time. Flink's histograms
    (``attemptsPerUpload``, ``uploadSizes``, ``uploadLatenciesNanos``) are
    :class:`Histogram` s, exported as Prometheus histograms."""

    upload_requests: int = 0
    upload_failures: int = 0
    total_attempts: int = 0
    attempts: Histogram = field(default_factory=lambda: Histogram(ATTEMPT_BUCKETS))
    sizes: Histogram = field(default_factory=lambda: Histogram(SIZE_BUCKETS))
    latencies_ns: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    queue_size: int = 0
    #: Files of upload attempts that timed out and finished later, deleted since.
    late_files_deleted: int = 0

    def snapshot(self) -> dict[str, float]:
        """Flink's metric name -> value, for the metrics that are one value."""
        return {"numberOfUploadRequests": self.upload_requests,
                "numberOfUploadFailures": self.upload_failures,
                "totalAttemptsPerUpload": self.total_attempts,
                "uploadQueueSize": self.queue_size}

    def histograms(self) -> dict[str, Histogram]:
        """Flink's metric name -> its histogram."""
        return {"attemptsPerUpload": self.attempts, "uploadSizes": self.sizes,
                "uploadLatenciesNanos": self.latencies_ns}


# -- the storage ---------------------------------------------------------------------------


class _Piece:
    """A writer's framed changes of ``[first, end)``, waiting for, in or after upload."""

    __slots__ = ("data", "done", "dropped", "end", "error", "first", "first_kg", "handle",
                 "last_kg", "local", "queued")

    def __init__(self, first: int, end: int, first_kg: int, last_kg: int, data: bytes) -> None:
        self.first, self.end = first, end
        self.first_kg, self.last_kg = first_kg, last_kg
        self.data = data
        self.handle: LogSegmentHandle | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.queued = False
        self.dropped = False
        #: The verified copy of its log file in the TaskExecutor's local state directory.
        self.local: StreamStateHandle | None = None


class ChangelogStorage:
    """The log of one TaskExecutor under ``storage``'s ``prefix`` (see the module
    docstring). Thread-safe; the upload thread starts with the first piece."""

    def __init__(self, storage: CheckpointStorageAccess, prefix: str,
                 options: ChangelogStorageOptions | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 local_dir: Path | None = None) -> None:
        """``local_dir``: task-local recovery keeps a copy of every log file there (until
        no piece of it is named by a checkpoint a restore may read: see
        :meth:`ChangelogWriter.release_local`)."""
        self.storage = storage
        self.local_dir = local_dir
        #: Local copy file name -> pieces not truncated yet.
        self._local_pieces: dict[str, int] = {}
        self.prefix = prefix.strip("/")
        self.options = options or ChangelogStorageOptions()
        self.metrics = ChangelogStorageMetrics()
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: list[_Piece] = []
        self._queued_bytes = 0
        #: Bytes of pieces not uploaded yet (queued, uploading, or failed and kept).
        self._in_flight = 0
        self._closed = False
        #: When bytes in flight last went down (an upload completed, a piece was dropped).
        self._progress_at = clock()
        #: Why the last upload failed (None: it did not).
        self._last_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        #: Whether the upload thread is uploading a batch.
        self._uploading = False
        # One thread per attempt: a retry never queues behind the attempt it races.
        self._attempts = ThreadPoolExecutor(max_workers=max(2, self.options.max_attempts),
                                            thread_name_prefix="changelog-upload")

    # -- writers (task threads) ---------------------------------------------------------------

    def create_writer(self, owner: str) -> ChangelogWriter:
        """A writer for one keyed backend (``owner`` names it in messages)."""
        return ChangelogWriter(self, owner)

    @property
    def in_flight_bytes(self) -> int:
        with self._cond:
            return self._in_flight

    def _reserve(self, size: int, timeout: float | None = None,
                 cancelled: threading.Event | None = None) -> None:
        """Count ``size`` new bytes, waiting while that would pass max-in-flight (a piece
        larger than the limit goes alone).

        The wait ends with StateError when ``cancelled`` is set (checked every 0.1 s), or
        when no upload made room for ``timeout`` s (default: the options'
        ``stall_timeout_s``): the storage cannot keep up or is unreachable."""
        bound = self.options.stall_timeout_s if timeout is None else timeout
        started = self._clock()
        with self._cond:
            while self._in_flight and self._in_flight + size > self.options.max_in_flight_bytes:
                if self._closed:
                    break
                if cancelled is not None and cancelled.is_set():
                    msg = "cancelled while waiting for the state change log to upload"
                    raise StateError(msg)
                # Each upload that makes room restarts the wait: slow progress is
                # backpressure, no progress at all is a failure.
                remaining = max(started, self._progress_at) + bound - self._clock()
                if remaining <= 0:
                    cause = f"; the last upload failed: {self._last_error}" \
                        if self._last_error is not None else ""
                    msg = (f"the state change log storage {self.storage.base_uri} cannot keep "
                           f"up or is unreachable: no upload completed in {bound:g} s while "
                           f"{self._in_flight} bytes wait (state.changelog.dstl.dfs.upload."
                           f"max-in-flight is {self.options.max_in_flight_bytes}){cause}")
                    raise StateError(msg)
                self._cond.wait(min(0.1, remaining))
            self._in_flight += size

    def _freed(self, size: int) -> None:
        """``size`` bytes stop counting (under the lock): waiting writers may go on."""
        self._in_flight -= size
        self._progress_at = self._clock()
        self._cond.notify_all()

    def _drop(self, piece: _Piece) -> None:
        """A writer no longer needs ``piece``: its bytes stop counting once no upload
        holds them. Its log file's local copy stays (the writer releases it later)."""
        with self._cond:
            if piece.handle is not None or piece.dropped:
                return
            piece.dropped = True
            if not piece.queued:
                self._freed(len(piece.data))
                piece.data = b""

    def _submit(self, pieces: list[_Piece]) -> None:
        with self._cond:
            for piece in pieces:
                if piece.queued or piece.handle is not None:
                    continue
                piece.queued = True
                piece.error = None
                piece.done.clear()
                self._queue.append(piece)
                self._queued_bytes += len(piece.data)
            self.metrics.queue_size = len(self._queue)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="changelog-uploader",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    # -- the upload thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    # Woken by a submit or close; the timeout only bounds the wait.
                    self._cond.wait(1.0)
                if self._closed:
                    return
                deadline = self._clock() + self.options.persist_delay_s
                while not self._closed and \
                        self._queued_bytes < self.options.persist_size_bytes:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                batch, self._queue = self._queue, []
                self._queued_bytes = 0
                self.metrics.queue_size = 0
                self._uploading = bool(batch)
            try:
                if batch:
                    self._upload(batch)
            finally:
                with self._cond:
                    self._uploading = False
                    self._cond.notify_all()

    def wait_quiet(self, timeout: float) -> bool:
        """Wait until no log upload is queued or running, for at most ``timeout`` s;
        returns whether it is quiet. See :class:`YieldingStorage`."""
        deadline = self._clock() + timeout
        with self._cond:
            while (self._queue or self._uploading) and not self._closed:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return False
                self._cond.wait(min(0.1, remaining))
            return True

    def _upload(self, batch: list[_Piece]) -> None:
        data = b"".join(piece.data for piece in batch)
        self.metrics.upload_requests += 1
        started = time.monotonic_ns()
        stem = f"{self.prefix}/{uuid.uuid4().hex}"
        error: BaseException | None = None
        attempts = 0
        file: StreamStateHandle | None = None
        # Attempts race: one that timed out keeps running beside its retry and the first to
        # succeed wins (as in Flink), so a slow but working storage is not given up on.
        # Each attempt writes its own file; the losers' files are deleted when they finish.
        pending: dict[Future[StreamStateHandle], str] = {}
        for attempt in range(1, self.options.max_attempts + 1):
            attempts = attempt
            name = f"{stem}-{attempt}.log"
            pending[self._attempts.submit(self.storage.write, name, data)] = name
            deadline = time.monotonic() + self.options.upload_timeout_s
            failed_now = False
            while pending and file is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                done, _ = wait(list(pending), timeout=remaining, return_when=FIRST_COMPLETED)
                for future in done:
                    finished = pending.pop(future)
                    try:
                        result = future.result()
                    except Exception as err:  # the storage failed: retried, then reported
                        error = err
                        failed_now = failed_now or finished == name
                        continue
                    if file is None:
                        file = result
                    else:  # two finished together: the second's file is not used
                        log.info("upload attempt %s finished after another one", finished)
                        self._delete_late(future)
                if failed_now:
                    break  # this attempt failed: retry now rather than at its deadline
            if file is not None:
                break
            if not failed_now:
                error = StorageError(f"uploading state change log {name} timed out after "
                                     f"{self.options.upload_timeout_s} s")
            log.warning("state change log upload attempt %d of %d failed: %s", attempt,
                        self.options.max_attempts, error)
            if attempt < self.options.max_attempts:
                time.sleep(self.options.next_attempt_delay_s)
        if file is None and pending:
            file = self._first_success(pending, self.options.last_attempt_grace_s)
            if file is not None:
                log.info("state change log %s uploaded by an attempt that had timed out",
                         stem)
        for late in pending:
            late.add_done_callback(self._delete_late)
        self.metrics.attempts.observe(attempts)
        self.metrics.total_attempts += attempts
        local = self._keep_local(file.uri, data) if file is not None else None
        offset = 0
        with self._cond:
            self._last_error = None if file is not None else error
            for piece in batch:
                piece.queued = False
                piece.local = local
                if local is not None:
                    key = local.uri.rsplit("/", 1)[-1]
                    self._local_pieces[key] = self._local_pieces.get(key, 0) + 1
                if file is not None:
                    piece.handle = LogSegmentHandle(
                        file, offset, len(piece.data), piece.first_kg, piece.last_kg,
                        piece.first, piece.end, checksum_of(piece.data))
                    self._freed(len(piece.data))
                    piece.data = b""
                else:
                    piece.error = error
                    if piece.dropped:  # truncated meanwhile: nobody uploads it again
                        self._freed(len(piece.data))
                        piece.data = b""
                offset += piece.handle.length if piece.handle else 0
                piece.done.set()
            self._cond.notify_all()
        if file is None:
            self.metrics.upload_failures += 1
        else:
            self.metrics.sizes.observe(len(data))
            self.metrics.latencies_ns.observe(time.monotonic_ns() - started)

    def _first_success(self, pending: dict[Future[StreamStateHandle], str],
                       grace_s: float) -> StreamStateHandle | None:
        """The file of the first of ``pending`` to succeed within ``grace_s`` (removed from
        ``pending``; the rest stay there), or None."""
        deadline = time.monotonic() + grace_s
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            done, _ = wait(list(pending), timeout=remaining, return_when=FIRST_COMPLETED)
            for future in done:
                del pending[future]
                if future.exception() is None:
                    return future.result()
        return None

    def _delete_late(self, future: Future[StreamStateHandle]) -> None:
        """An attempt that timed out finished after all (a pool thread, or the upload
        thread if it had already finished): no handle names its file, so it goes."""
        if future.cancelled() or future.exception() is not None:
            return
        file = future.result()
        try:
            self.storage.delete(file)
        except (StorageError, OSError) as err:
            log.warning("could not delete %s, written by an upload attempt that had timed "
                        "out: %s", file.uri, err)
            return
        self.metrics.late_files_deleted += 1
        log.info("deleted %s: its upload attempt finished after timing out", file.uri)

    def _keep_local(self, name: str, data: bytes) -> StreamStateHandle | None:
        """A local copy of an uploaded log file (upload thread); None without a local
        directory or when the disk refuses (the remote file is the log; this is a bonus)."""
        if self.local_dir is None:
            return None
        try:
            return FsCheckpointStorageAccess(self.local_dir).write(name.rsplit("/", 1)[-1], data)
        except (StorageError, OSError) as err:
            log.warning("no local copy of state change log %s: %s", name, err)
            return None

    def _release_local(self, pieces: deque[_Piece], before_sequence: int) -> deque[_Piece]:
        """Forget the local copies of ``pieces`` (truncated, oldest first) that end by
        ``before_sequence``; returns the others (later ones, and any whose upload has not
        finished: a checkpoint may still name it once it does)."""
        kept: deque[_Piece] = deque()
        with self._cond:
            for piece in pieces:
                if piece.end > before_sequence or piece.queued:
                    kept.append(piece)
                else:
                    self._forget_local(piece)
        return kept

    def _forget_local(self, piece: _Piece) -> None:
        """No checkpoint a restore may read names ``piece``: its log file's local copy goes
        with the last such piece (task thread, under the lock)."""
        if piece.local is None or self.local_dir is None:
            return
        key = piece.local.uri.rsplit("/", 1)[-1]
        left = self._local_pieces.get(key, 1) - 1
        if left > 0:
            self._local_pieces[key] = left
            return
        self._local_pieces.pop(key, None)
        with contextlib.suppress(OSError):
            (self.local_dir / key).unlink()

    def close(self) -> None:
        """Stop the upload thread; pieces not uploaded fail."""
        with self._cond:
            self._closed = True
            pending, self._queue = self._queue, []
            self._cond.notify_all()
        for piece in pending:
            piece.queued = False
            piece.error = StateError("the state change log was closed")
            piece.done.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._attempts.shutdown(wait=False, cancel_futures=True)


class YieldingStorage(CheckpointStorageAccess):
    """``storage`` as a materialization uploads to it: the state change log goes first.

    A checkpoint with the changelog waits for the log's tail to upload, a few megabytes;
    a materialization uploads the backend's new files, hundreds of megabytes, in the
    background. Sharing the TaskExecutor's link, cores and the storage's attention evenly,
    the log's uploads took seconds while a materialization ran (checkpoint p99 of 3.4 s
    against 0.15 s at p50 in ``bench_changelog``). So a materialization uploads one file at
    a time, and starts each only once ``log`` has no upload queued or running, or after
    ``max_wait_s``, so that it always progresses. Everything else goes to ``storage``."""

    def __init__(self, storage: CheckpointStorageAccess, log: ChangelogStorage,
                 max_wait_s: float = 1.0) -> None:
        self.storage = storage
        self.log = log
        self.max_wait_s = max_wait_s
        self._one_at_a_time = threading.Lock()

    @property
    def base_uri(self) -> str:
        return self.storage.base_uri

    def write(self, relative_path: str, data: bytes | bytearray | memoryview
              ) -> StreamStateHandle:
        return self.storage.write(relative_path, data)

    def write_file(self, relative_path: str, local_path: str | Path, *,
                   background: bool = True) -> StreamStateHandle:
        # A materialization's file: in the background whatever the caller says.
        with self._one_at_a_time:
            self.log.wait_quiet(self.max_wait_s)
            return self.storage.write_file(relative_path, local_path, background=True)

    def copy(self, source: StreamStateHandle, relative_path: str) -> StreamStateHandle:
        return self.storage.copy(source, relative_path)

    def read(self, handle: StreamStateHandle) -> bytes:
        return self.storage.read(handle)

    def download(self, handle: StreamStateHandle, local_path: str | Path) -> None:
        self.storage.download(handle, local_path)

    def delete(self, target: StreamStateHandle | str) -> None:
        self.storage.delete(target)

    def delete_prefix(self, relative_prefix: str) -> None:
        self.storage.delete_prefix(relative_prefix)

    def check_access(self) -> None:
        self.storage.check_access()

    def exists(self, target: StreamStateHandle | str) -> bool:
        return self.storage.exists(target)

    def list(self, relative_prefix: str = "") -> list[str]:
        return self.storage.list(relative_prefix)


class PersistResult:
    """What a persist request returns: the handles of the pieces covering its range, once
    uploaded (:meth:`result`)."""

    def __init__(self, pieces: list[_Piece], owner: str) -> None:
        self._pieces = pieces
        self._owner = owner

    def result(self, timeout: float | None = None,
               check: Callable[[], None] | None = None) -> list[LogSegmentHandle]:
        """Wait for the uploads; ``check()`` is called while waiting (it may raise to stop).
        Raises StorageError (the upload failed) or StateError (timed out)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        handles = []
        for piece in self._pieces:
            while not piece.done.wait(0.05):
                if check is not None:
                    check()
                if deadline is not None and time.monotonic() > deadline:
                    msg = f"the state change log of {self._owner} was not uploaded in time"
                    raise StateError(msg)
            if piece.handle is None:
                msg = (f"uploading the state change log of {self._owner} failed: "
                       f"{piece.error}")
                raise StorageError(msg) from piece.error
            handles.append(piece.handle)
        return handles

    @property
    def pieces(self) -> int:
        return len(self._pieces)


class ChangelogWriter:
    """The log of one keyed backend: appends on the task thread, uploads through the
    storage. Sequence numbers start at 0 and grow by one per change."""

    def __init__(self, storage: ChangelogStorage, owner: str) -> None:
        self._storage = storage
        self.owner = owner
        self._next = 0
        #: Changes not sealed into a piece yet: (state, key group) -> (sequence, payload).
        self._active: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        self._active_bytes = 0
        self._active_first = 0
        #: Sealed pieces, oldest first, until truncated.
        self._pieces: deque[_Piece] = deque()
        #: Truncated pieces whose log files' local copies the last completed checkpoint
        #: may still name, oldest first (until :meth:`release_local`).
        self._truncated: deque[_Piece] = deque()
        self.closed = False
        #: How long the task thread may wait for room under max-in-flight without any
        #: upload completing (None: the storage options' ``stall_timeout_s``).
        self.backpressure_timeout: float | None = None
        #: Set when the task is cancelled: a wait for room then ends at once.
        self.cancelled: threading.Event | None = None

    @property
    def next_sequence(self) -> int:
        """The sequence number of the next change (a position in the log)."""
        return self._next

    def append(self, key_group: int, payload: bytes, state: str | None = None) -> None:
        """Log one change of ``key_group``; may wait (backpressure) and upload early.
        ``state`` is the state the payload names (:func:`state_of`; found in the payload
        when not given). Raises StateError when the wait ends without room (see
        ``ChangelogStorage._reserve``)."""
        if not self._active:
            self._active_first = self._next
        group = (state_of(payload).decode() if state is None else state, key_group)
        changes = self._active.get(group)
        if changes is None:
            self._active[group] = [(self._next, payload)]
        else:
            changes.append((self._next, payload))
        self._next += 1
        self._active_bytes += len(payload) + _RECORD.size
        if self._active_bytes >= self._storage.options.preemptive_persist_bytes:
            self._storage._submit([self._seal()])

    def seal(self) -> None:
        """End the active piece at the next sequence number (task thread; the piece is
        uploaded with the next persist). A materialization starts with this: a piece
        holding changes from both sides of it would be replayed whole onto materialized
        state that already holds the first part, and an append (``ListState.add``) would
        then be applied twice."""
        if self._active:
            self._seal()

    def _seal(self) -> _Piece:
        groups = self._active
        data = frame_groups(self._active_first, self._next - self._active_first, groups)
        self._storage._reserve(len(data), self.backpressure_timeout, self.cancelled)
        kgs = [kg for _, kg in groups]
        piece = _Piece(self._active_first, self._next, min(kgs), max(kgs), data)
        self._pieces.append(piece)
        self._active, self._active_bytes = {}, 0
        return piece

    def persist(self, from_sequence: int) -> PersistResult:
        """Upload every change from ``from_sequence`` on (task thread); the result waits for
        the uploads (any thread). Pieces that failed before are uploaded again."""
        if self._active:
            self._seal()
        wanted = [p for p in self._pieces if p.end > from_sequence]
        self._storage._submit([p for p in wanted if p.handle is None and not p.queued])
        return PersistResult(wanted, self.owner)

    def truncate(self, before_sequence: int) -> None:
        """Forget the changes before ``before_sequence`` (a materialization covers them).
        Their log files' local copies stay until :meth:`release_local`: until a checkpoint
        naming that materialization completes, a restore reads the last completed one,
        which names the log before it."""
        while self._pieces and self._pieces[0].end <= before_sequence:
            piece = self._pieces.popleft()
            self._storage._drop(piece)
            if self._storage.local_dir is not None and not self.closed:
                self._truncated.append(piece)

    def release_local(self, before_sequence: int) -> None:
        """A checkpoint that names the log only from ``before_sequence`` on completed
        (task thread): the local copies of the truncated pieces before it can go, with the
        last piece of their file."""
        if self._truncated:
            self._truncated = self._storage._release_local(self._truncated, before_sequence)

    def local_copies(self, result: PersistResult) -> dict[str, StreamStateHandle]:
        """Remote log file name -> its local copy, for the pieces of ``result`` that have
        one (after ``result.result()``)."""
        return {p.handle.file.uri.rsplit("/", 1)[-1]: p.local for p in result._pieces
                if p.handle is not None and p.local is not None}

    @property
    def local_dir(self) -> Path | None:
        return self._storage.local_dir

    @property
    def log(self) -> ChangelogStorage:
        """The TaskExecutor's log this writer appends to."""
        return self._storage

    def close(self) -> None:
        """Forget everything (the backend is disposed). Local copies stay: a restart on
        this TaskExecutor restores from them; they go with the job's local state."""
        if self.closed:
            return
        self.closed = True
        for piece in self._pieces:
            piece.local = None
        with contextlib.suppress(Exception):
            self.truncate(self._next + 1)
        self._truncated.clear()
        self._active = {}


# -- one storage per TaskExecutor and location ---------------------------------------------

_STORAGES: dict[str, ChangelogStorage] = {}
_STORAGES_LOCK = threading.Lock()


def storage_for(storage: CheckpointStorageAccess, prefix: str,
                options: ChangelogStorageOptions, local_dir: Path | None = None
                ) -> ChangelogStorage:
    """The process's (the TaskExecutor's) log storage for ``storage``/``prefix``, created on
    first use and shared by every task after (``local_dir``: see ChangelogStorage)."""
    key = f"{storage.base_uri}/{prefix.strip('/')}"
    with _STORAGES_LOCK:
        found = _STORAGES.get(key)
        if found is None:
            found = _STORAGES[key] = ChangelogStorage(storage, prefix, options,
                                                      local_dir=local_dir)
        elif found.local_dir is None and local_dir is not None:
            found.local_dir = local_dir
        return found


def all_storages() -> list[ChangelogStorage]:
    """Every log storage of this process (for metrics)."""
    with _STORAGES_LOCK:
        return list(_STORAGES.values())


def close_job(job_id: str) -> None:
    """The TaskExecutor released ``job_id``: close its log storages (the default location
    is ``<job_id>/changelog``; a configured one ``<base>/<job_id>``). A later task of the
    job gets a new one."""
    with _STORAGES_LOCK:
        doomed = [key for key, s in _STORAGES.items()
                  if s.prefix == f"{job_id}/changelog" or s.prefix == job_id]
        storages = [_STORAGES.pop(key) for key in doomed]
    for storage in storages:
        storage.close()
