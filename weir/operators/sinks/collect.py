"""The collect sink: results travel back to the client (``execute_and_collect``) through
the JobMaster, as Arrow IPC payloads that fit the RPC message limit.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pyarrow as pa

from weir.core.errors import UserError
from weir.core.records import Elements
from weir.taskexecutor.jobmaster_gateway import collect_payload_limit
from weir.taskexecutor.operator import COLLECT_SERVICE, StreamOperator


class RecordTooLargeError(UserError):
    """One collected record is larger than a result message may carry: results travel to
    the client in RPC messages, and a record cannot be split across them."""


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """One RecordBatch as an Arrow IPC stream."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def from_ipc(data: bytes) -> list[pa.RecordBatch]:
    """The RecordBatches of an Arrow IPC stream."""
    return list(pa.ipc.open_stream(data))


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def collect_payloads(batch: pa.RecordBatch, limit: int | None = None) -> Iterator[bytes]:
    """``batch`` as Arrow IPC payloads of at most ``limit`` bytes (default: what one collect
    message carries, :func:`~weir.taskexecutor.jobmaster_gateway.collect_payload_limit`),
    rows in order. A batch too large is halved until its parts fit.

    Raises RecordTooLargeError, naming the sizes, for a single row larger than ``limit``.

    Example:
        >>> batch = pa.record_batch({"f0": [b"x" * 600, b"y" * 600]})
        >>> [len(from_ipc(p)[0]) for p in collect_payloads(batch, limit=1000)]
        [1, 1]
    """
    limit = collect_payload_limit() if limit is None else limit
    pending = [batch]  # a stack: the part popped next comes first in the stream
    while pending:
        part = pending.pop()
        data = to_ipc(part)
        if len(data) <= limit:
            yield data
            continue
        if part.num_rows <= 1:
            msg = (f"a collected record of {_mib(len(data))} ({len(data):,} bytes as Arrow) is "
                   f"larger than one result message carries ({_mib(limit)}, {limit:,} bytes: "
                   "the RPC limit weir.core.rpc.MAX_MESSAGE_BYTES less its envelope): make "
                   "the records smaller, or write large results with a FileSink instead")
            raise RecordTooLargeError(msg)
        half = part.num_rows // 2
        pending.append(part.slice(half))
        pending.append(part.slice(0, half))


class CollectSinkOperator(StreamOperator):
    """Sends every batch to the JobMaster, from where ``execute_and_collect`` fetches it,
    in as many messages as the RPC message limit requires."""

    def open(self) -> None:
        assert self.ctx is not None
        self._push = self.ctx.services[COLLECT_SERVICE]

    def process(self, elements: Elements, input_index: int = 0) -> None:
        for payload in collect_payloads(elements.arrow()):
            self._push(payload, False)

    def finish(self) -> None:
        self._push(b"", True)


