"""Sink operators: collect (results back to the client), print, files, discard.

The exactly-once file sink lives in :mod:`weir.operators.file_sink`.
"""

from __future__ import annotations

import io
import sys

import pyarrow as pa

from weir.core.records import Elements
from weir.taskexecutor.operator import COLLECT_SERVICE, StreamOperator


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """One RecordBatch as an Arrow IPC stream."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def from_ipc(data: bytes) -> list[pa.RecordBatch]:
    """The RecordBatches of an Arrow IPC stream."""
    return list(pa.ipc.open_stream(data))


class CollectSinkOperator(StreamOperator):
    """Sends every batch to the JobMaster, from where ``execute_and_collect`` fetches it."""

    def open(self) -> None:
        assert self.ctx is not None
        self._push = self.ctx.services[COLLECT_SERVICE]

    def process(self, elements: Elements, input_index: int = 0) -> None:
        self._push(to_ipc(elements.arrow()), False)

    def finish(self) -> None:
        self._push(b"", True)


class PrintSinkOperator(StreamOperator):
    """Prints records to the task's stdout, prefixed by the subtask (``2> record``)."""

    def __init__(self, name: str, to_stderr: bool = False) -> None:
        super().__init__(name)
        self.to_stderr = to_stderr

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        stream = sys.stderr if self.to_stderr else sys.stdout
        prefix = f"{self.ctx.subtask_index + 1}> " if self.ctx.parallelism > 1 else ""
        stream.write("".join(f"{prefix}{r}\n" for r in elements.records()))
        stream.flush()


class DiscardingSinkOperator(StreamOperator):
    """Drops everything (benchmarks)."""

    def process(self, elements: Elements, input_index: int = 0) -> None:
        return
