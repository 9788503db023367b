"""The external shuffle service daemon: the ``ShuffleService`` gRPC service over a store.

:class:`ShuffleServiceDaemon` is what ``weir shuffle-service`` runs: a gRPC server (with the
cluster's auth token, when set) whose handlers write, read, release and list the result
partitions of a :class:`~shuffle.external.storage.PartitionStore`.

Threads: every call runs on a thread of the daemon's pool (``shuffle-service_N``); a write
holds its thread until it commits or breaks, a read only while it sends at most the
``max_bytes`` its caller asked for. Pool size bounds the concurrent calls
(``max_workers``); calls beyond it wait for a free thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc

from weir.core.errors import UserError

# The generic create_server does not expose its thread pool, and stop() must end every
# thread it started: build the server here with the same options and auth interceptor.
from weir.core.ids import JobId, PartitionId
from weir.core.rpc import create_server
from weir.core.tls import TlsFiles
from weir.proto import shuffle_service_pb2 as pb
from weir.proto import shuffle_service_pb2_grpc
from weir.shuffle.external.storage import (
    DEFAULT_SPILL_THRESHOLD,
    CorruptPartitionError,
    InvalidRequestError,
    PartitionExistsError,
    PartitionInfo,
    PartitionStore,
    PartitionWrite,
    ShuffleStorageError,
    UnknownPartitionError,
    WriteAbortedError,
)

log = logging.getLogger(__name__)

#: Trailing metadata of a NOT_FOUND read whose partition is being written.
PARTITION_STATE_KEY = "weir-partition-state"
IN_PROGRESS = "in-progress"
#: The largest request the service reads: writers cut chunks at the segment size (a batch
#: crossing the mark makes one up to about twice that); 64 MiB leaves room for one oversized
#: row while 32 concurrent writes hold at most 2 GiB.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Threads serving calls: bounds concurrent writes plus reads.
DEFAULT_MAX_WORKERS = 64
#: A read response message carries chunks up to about this many bytes.
_MESSAGE_BYTES = 1024 * 1024

_CODES: list[tuple[type[ShuffleStorageError], grpc.StatusCode]] = [
    (UnknownPartitionError, grpc.StatusCode.NOT_FOUND),
    (PartitionExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (WriteAbortedError, grpc.StatusCode.ABORTED),
    (CorruptPartitionError, grpc.StatusCode.DATA_LOSS),
    (InvalidRequestError, grpc.StatusCode.INVALID_ARGUMENT),
]


def _abort(context: grpc.ServicerContext, err: ShuffleStorageError) -> None:
    """End the call with the status code of ``err`` (raises, as context.abort does)."""
    code = next((c for cls, c in _CODES if isinstance(err, cls)), grpc.StatusCode.INTERNAL)
    if isinstance(err, UnknownPartitionError) and err.in_progress:
        context.set_trailing_metadata(((PARTITION_STATE_KEY, IN_PROGRESS),))
    context.abort(code, str(err))


def _info_message(info: PartitionInfo) -> pb.PartitionInfo:
    return pb.PartitionInfo(
        job_id=info.job_id, partition_id=info.partition_id,
        num_subpartitions=info.num_subpartitions,
        state=pb.PartitionInfo.COMMITTED if info.committed else pb.PartitionInfo.IN_PROGRESS,
        chunks=info.chunks, bytes=info.bytes, runs=info.runs)


class ShuffleServiceServicer(shuffle_service_pb2_grpc.ShuffleServiceServicer):
    """The gRPC handlers; each runs on a server pool thread."""

    def __init__(self, store: PartitionStore) -> None:
        self._store = store

    def WritePartition(self, request_iterator: Iterator[pb.WritePartitionRequest],  # noqa: N802
                       context: grpc.ServicerContext) -> pb.WritePartitionResponse:
        write: PartitionWrite | None = None
        try:
            # A broken or cancelled stream raises grpc.RpcError from the iterator: the
            # finally below deletes what was written, and gRPC ends the call.
            for request in request_iterator:
                if write is None:
                    # A release from another call interrupts this one (the stream may
                    # otherwise wait for its producer for a long time).
                    write = self._store.begin_write(JobId(request.job_id),
                                                    PartitionId(request.partition_id),
                                                    request.num_subpartitions,
                                                    on_release=context.cancel)
                elif request.job_id and (request.job_id, request.partition_id) != \
                        (write.job_id, write.partition_id):
                    msg = (f"a write stream carries one partition: got {request.partition_id}"
                           f" of job {request.job_id} in the stream of {write.partition_id}")
                    raise InvalidRequestError(msg)
                if request.data:
                    write.add(request.subpartition, request.data)
                if request.commit:
                    info = write.commit(request.total_chunks, request.total_bytes)
                    log.debug("committed partition %s of job %s: %d chunks, %d bytes, %d runs",
                              info.partition_id, info.job_id, info.chunks, info.bytes,
                              info.runs)
                    return pb.WritePartitionResponse(chunks=info.chunks, bytes=info.bytes,
                                                     runs=info.runs)
            what = "partition" if write is None else f"partition {write.partition_id}"
            context.abort(grpc.StatusCode.ABORTED,
                          f"the write stream of {what} ended without a commit: nothing stored")
        except ShuffleStorageError as err:
            _abort(context, err)
        except OSError as err:  # disk full, permissions, ...
            log.error("storing a partition failed: %s", err)
            context.abort(grpc.StatusCode.INTERNAL, f"the shuffle service cannot store the "
                          f"partition: {err}")
        finally:
            if write is not None:
                write.abort()  # no-op once committed
        raise AssertionError  # unreachable: context.abort raised

    def ReadSubpartition(self, request: pb.ReadSubpartitionRequest,  # noqa: N802
                         context: grpc.ServicerContext) -> Iterator[pb.ReadSubpartitionResponse]:
        try:
            reader = self._store.open_subpartition(JobId(request.job_id),
                                                   PartitionId(request.partition_id),
                                                   request.subpartition)
        except ShuffleStorageError as err:
            _abort(context, err)
        with reader:
            position = request.start_chunk
            if position > reader.total_chunks:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"start_chunk {position} is past the end of subpartition "
                              f"{request.subpartition} ({reader.total_chunks} chunks)")
            limit = request.max_bytes
            chunks: list[bytes] = []
            pending = sent = 0
            try:
                for chunk in reader.chunks(position):
                    chunks.append(chunk)
                    position += 1
                    pending += len(chunk)
                    sent += len(chunk)
                    if position == reader.total_chunks or (limit and sent >= limit):
                        break
                    if pending >= _MESSAGE_BYTES:
                        yield pb.ReadSubpartitionResponse(chunks=chunks)
                        chunks, pending = [], 0
            except CorruptPartitionError as err:
                log.error("reading partition %s of job %s: %s", request.partition_id,
                          request.job_id, err)
                _abort(context, err)
            except OSError as err:
                log.error("reading partition %s of job %s: %s", request.partition_id,
                          request.job_id, err)
                context.abort(grpc.StatusCode.INTERNAL, f"the shuffle service cannot read "
                              f"partition {request.partition_id}: {err}")
            yield pb.ReadSubpartitionResponse(
                chunks=chunks, end_of_subpartition=position == reader.total_chunks)

    def ReleasePartitions(self, request: pb.ReleasePartitionsRequest,  # noqa: N802
                          context: grpc.ServicerContext) -> pb.ReleasePartitionsResponse:
        ids = None if request.all_of_job else [PartitionId(p) for p in request.partition_ids]
        try:
            released = self._store.release(JobId(request.job_id), ids)
        except ShuffleStorageError as err:
            _abort(context, err)
        if request.all_of_job:
            log.info("released every partition of job %s (%d)", request.job_id, released)
        return pb.ReleasePartitionsResponse(released=released)

    def ListPartitions(self, request: pb.ListPartitionsRequest,  # noqa: N802
                       context: grpc.ServicerContext) -> pb.ListPartitionsResponse:
        try:
            infos = self._store.list(JobId(request.job_id) if request.job_id else None)
        except ShuffleStorageError as err:
            _abort(context, err)
        return pb.ListPartitionsResponse(partitions=[_info_message(i) for i in infos])


class ShuffleServiceDaemon:
    """The external shuffle service: a gRPC server storing partitions under ``data_dir``.

    ``start`` binds ``host:port`` (0: a free port) and sets ``address``; raises UserError
    when it cannot listen, ShuffleStorageError when another service uses ``data_dir``. ``stop``
    cancels the calls in flight (their unfinished writes are deleted), joins every thread
    the daemon started and unlocks ``data_dir``; idempotent. Both from any one thread.
    Memory: each partition being written buffers up to ``spill_threshold`` bytes.
    """

    def __init__(self, data_dir: str, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, spill_threshold: int = DEFAULT_SPILL_THRESHOLD,
                 max_workers: int = DEFAULT_MAX_WORKERS, tls: TlsFiles | None = None) -> None:
        self.data_dir = data_dir
        self.host = host
        self.port = port
        self._token = token
        self._tls = tls
        self._spill_threshold = spill_threshold
        self._max_workers = max_workers
        self.address = ""
        self.store: PartitionStore | None = None
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def start(self) -> str:
        """Start serving; returns ``address`` ("host:port")."""
        with self._lock:
            if self._server is not None:
                msg = "the shuffle service is started already"
                raise RuntimeError(msg)
            store = PartitionStore(self.data_dir, self._spill_threshold)
            executor = futures.ThreadPoolExecutor(self._max_workers,
                                                  thread_name_prefix="shuffle-service")
            try:
                server, bound = create_server(
                    self.host, self.port, self._token,
                    lambda s: shuffle_service_pb2_grpc.add_ShuffleServiceServicer_to_server(
                        ShuffleServiceServicer(store), s), executor=executor,
                    max_receive_bytes=MAX_MESSAGE_BYTES, tls=self._tls)
            except UserError:
                executor.shutdown()
                store.close()
                raise
            self.store, self._server, self._executor = store, server, executor
            self.port = bound
            self.address = f"{self.host}:{bound}"
        log.info("shuffle service listening on %s, data in %s", self.address, store.data_dir)
        if not self._token:
            log.warning(
                "the shuffle service on %s has no security.auth.token: ANYONE WHO CAN "
                "REACH THIS PORT CAN READ, WRITE AND DELETE EVERY JOB'S PARTITIONS. Give it "
                "the cluster's token (WEIR_SECURITY_AUTH_TOKEN or security.auth.token-file)",
                self.address)
        return self.address

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving; calls still running after ``grace`` seconds are cancelled."""
        with self._lock:
            server, executor, store = self._server, self._executor, self.store
            self._server = self._executor = None
        if server is None or executor is None or store is None:
            return
        server.stop(grace).wait(grace + 10)
        executor.shutdown(wait=True)
        store.close()

    def __enter__(self) -> ShuffleServiceDaemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
