"""Sink operators: collect (results back to the client), print, files, discard.

The exactly-once file sink lives in :mod:`weir.operators.file_sink`.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator

import pyarrow as pa

from weir.core.errors import UserError
from weir.core.printing import formatter
from weir.core.records import Elements
from weir.core.types import TypeInformation
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


class PrintSinkOperator(StreamOperator):
    """Prints records to the task's stdout, prefixed as Flink's print sink does: by the
    subtask (``2> record``) with parallelism > 1, by the identifier given to ``print`` when
    there is one (``words:2> record``, ``words> record``). A record of a declared type
    prints as PyFlink prints it (see :mod:`weir.core.printing`)."""

    def __init__(self, name: str, to_stderr: bool = False,
                 sink_identifier: str | None = None,
                 type_info: TypeInformation | None = None) -> None:
        super().__init__(name)
        self.to_stderr = to_stderr
        self.sink_identifier = sink_identifier
        self.type_info = type_info

    def open(self) -> None:
        super().open()
        self._format = formatter(self.type_info)

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        stream = sys.stderr if self.to_stderr else sys.stdout
        subtask = str(self.ctx.subtask_index + 1) if self.ctx.parallelism > 1 else ""
        label = ":".join(p for p in (self.sink_identifier, subtask) if p)
        prefix = f"{label}> " if label else ""
        text = self._format
        stream.write("".join(f"{prefix}{text(r)}\n" for r in elements.records()))
        stream.flush()


class DiscardingSinkOperator(StreamOperator):
    """Drops everything (benchmarks)."""

    def process(self, elements: Elements, input_index: int = 0) -> None:
        return
