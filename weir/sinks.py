"""Sinks for ``DataStream.sink_to``.

Example:
    >>> from weir import FileSink
    >>> FileSink("/tmp/out", format="json").name
    'File (json: /tmp/out)'
"""

from __future__ import annotations

from weir.core.config import MemorySize
from weir.operators.file_sink import FileSinkOperator
from weir.operators.sinks import DiscardingSinkOperator
from weir.taskexecutor.operator import StreamOperator


class Sink:
    """Creates the operator that writes a stream somewhere."""

    name = "Sink"

    def create_operator(self, name: str) -> StreamOperator:
        raise NotImplementedError


class FileSink(Sink):
    """Part files under a ``file://`` directory or an ``s3://`` prefix, Parquet or JSON
    lines, rolled at ``rolling_size`` and at every checkpoint.

    Exactly once with checkpointing: files are committed (renamed, or their S3 multipart
    upload completed) when the checkpoint that pre-committed them completes, and only
    committed files have names that do not start with ``.`` (see
    :mod:`weir.operators.file_sink`). Without checkpointing they are committed when the
    input ends.
    """

    def __init__(self, path: str, format: str = "parquet",
                 rolling_size: str | int = "128mb") -> None:
        if format not in ("parquet", "json"):
            msg = f"FileSink format must be 'parquet' or 'json', got {format!r}"
            raise ValueError(msg)
        self.path = path
        self.format = format
        self.rolling_bytes = MemorySize.parse(rolling_size)
        self.name = f"File ({format}: {path})"

    def create_operator(self, name: str) -> StreamOperator:
        return FileSinkOperator(name, self.path, self.format, self.rolling_bytes)


class DiscardingSink(Sink):
    """Drops every record (for benchmarks)."""

    name = "Discard"

    def create_operator(self, name: str) -> StreamOperator:
        return DiscardingSinkOperator(name)
