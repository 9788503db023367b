"""Sink operators: collect (results back to the client), print, files, discard.

Only the file sink has state worth keeping across restarts (see :class:`FileSinkOperator`).
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from weir.core.records import Elements
from weir.state.descriptors import ListStateDescriptor
from weir.state.operator_state import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OperatorListState,
)
from weir.taskexecutor.operator import StreamOperator

#: Service key under which a task offers the collect channel to the JobMaster.
COLLECT_SERVICE = "collect"


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


class FileSinkOperator(StreamOperator, CheckpointedFunction):
    """Writes part files ``part-<subtask>-<n>.<ext>`` under a directory, rolling by size.

    Not transactional yet: a failed job may leave partial files. Its operator state keeps
    what a restart needs so that it never overwrites a part file it wrote before:

    * ``file-sink-part-counter`` (union list state): each subtask's next part number. A
      restored subtask continues after the largest number of *all* old subtasks, so part
      names stay unique whatever the new parallelism.
    * ``file-sink-in-progress`` (list state): the part file being written at the
      checkpoint, ``{"path", "part", "subtask", "records"}``. A restored subtask
      finds its share in :attr:`restored_in_progress`; this is where a two-phase-commit
      version of the sink finds the files to commit or discard.

    Lifecycle: ``setup``, then ``initialize_state`` (optional: without it the part
    numbers start at 0), then ``open``; ``snapshot_state`` on the task thread at each
    checkpoint.

    Example:
        >>> import tempfile
        >>> from weir.state.operator_state import OperatorStateBackend
        >>> from weir.taskexecutor.operator import OperatorContext
        >>> sink = FileSinkOperator("sink", tempfile.mkdtemp(), "json", rolling_bytes=1 << 20)
        >>> sink.setup(OperatorContext("sink", 0, 1, 128), output=None)
        >>> backend = OperatorStateBackend()
        >>> sink.initialize_state(FunctionInitializationContext(backend))
        >>> sink.open()
        >>> sink.process(Elements.from_records([{"n": 1}]))
        >>> sink.snapshot_state(FunctionSnapshotContext(1))
        >>> [(f["part"], f["records"]) for f in
        ...  backend.get_list_state(ListStateDescriptor("file-sink-in-progress")).get()]
        [(0, 1)]
        >>> sink.close()
    """

    PART_COUNTER_STATE = "file-sink-part-counter"
    IN_PROGRESS_STATE = "file-sink-in-progress"

    def __init__(self, name: str, path: str, fmt: str, rolling_bytes: int) -> None:
        super().__init__(name)
        self.path = path
        self.fmt = fmt
        self.rolling_bytes = rolling_bytes
        self._next_part = 0
        self._counter_state: OperatorListState | None = None
        self._in_progress_state: OperatorListState | None = None
        #: In-progress part files of the restored checkpoint given to this subtask.
        self.restored_in_progress: list[dict[str, Any]] = []

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        store = context.get_operator_state_store()
        self._counter_state = store.get_union_list_state(
            ListStateDescriptor(self.PART_COUNTER_STATE))
        self._in_progress_state = store.get_list_state(
            ListStateDescriptor(self.IN_PROGRESS_STATE))
        if context.is_restored():
            self._next_part = max(self._counter_state.get(), default=0)
            self.restored_in_progress = self._in_progress_state.get()

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        if self._counter_state is None or self._in_progress_state is None:
            msg = f"{self.name}: snapshot_state called before initialize_state"
            raise RuntimeError(msg)
        self._counter_state.update([self._counter])
        current = []
        if self._current is not None and (self._writer is not None or self._file is not None):
            assert self.ctx is not None
            current.append({"path": str(self._current), "part": self._counter - 1,
                            "subtask": self.ctx.subtask_index,
                            "records": self._records})
        self._in_progress_state.update(current)

    def open(self) -> None:
        self._dir = Path(self.path.removeprefix("file://"))
        self._dir.mkdir(parents=True, exist_ok=True)
        self._counter = self._next_part
        self._writer: Any = None
        self._file: Any = None
        self._schema: pa.Schema | None = None
        self._written = 0
        self._records = 0
        self._current: Path | None = None

    def _part_path(self) -> Path:
        assert self.ctx is not None
        ext = "parquet" if self.fmt == "parquet" else "jsonl"
        path = self._dir / f"part-{self.ctx.subtask_index}-{self._counter}.{ext}"
        self._counter += 1
        self._current = path
        return path

    def _roll(self) -> None:
        self._close_part()
        path = self._part_path()
        if self.fmt == "parquet":
            assert self._schema is not None
            self._writer = pq.ParquetWriter(str(path), self._schema)
        else:
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in _close_part
        self._written = 0
        self._records = 0

    def process(self, elements: Elements, input_index: int = 0) -> None:
        if self.fmt == "parquet":
            batch = elements.arrow()
            schema = batch.schema.remove_metadata()
            if self._writer is None or schema != self._schema or \
                    self._written >= self.rolling_bytes:
                self._schema = schema
                self._roll()
            self._writer.write_batch(batch.replace_schema_metadata(None))
            self._written += batch.nbytes
            self._records += batch.num_rows
        else:
            if self._file is None or self._written >= self.rolling_bytes:
                self._roll()
            text = "".join(json.dumps(_jsonable(r), default=str) + "\n"
                           for r in elements.records())
            self._file.write(text)
            self._written += len(text)
            self._records += len(elements)

    def _close_part(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

    def finish(self) -> None:
        self._close_part()

    def close(self) -> None:
        self._close_part()


def _jsonable(record: Any) -> Any:
    from weir.core.row import Row

    if isinstance(record, Row) and record._fields:
        return record.as_dict()
    if isinstance(record, tuple):
        return list(record)
    return record
