"""Sinks for ``DataStream.sink_to``.

``FileSink(path, format)`` is weir's own form; ``FileSink.for_row_format(base_path,
Encoder.simple_string_encoder())`` with :class:`OutputFileConfig` and :class:`RollingPolicy`
is PyFlink's, and writes lines of text. Both are exactly once (see
:mod:`weir.operators.file_sink`).

Example:
    >>> from weir import FileSink
    >>> FileSink("/tmp/out", format="json").name
    'File (json: /tmp/out)'
    >>> sink = (FileSink.for_row_format("/tmp/out", Encoder.simple_string_encoder())
    ...         .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".txt")
    ...                                  .build())
    ...         .build())
    >>> sink.format, sink.part_suffix
    ('text', '.txt')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from weir.core.config import ByteSize
from weir.core.errors import InvalidJobError
from weir.operators.file_sink import FileSinkOperator, PartNames
from weir.operators.sinks import DiscardingSinkOperator
from weir.taskexecutor.operator import StreamOperator


class Sink:
    """Creates the operator that writes a stream somewhere."""

    name = "Sink"

    def create_operator(self, name: str) -> StreamOperator:
        raise NotImplementedError


class FileSink(Sink):
    """Part files under a ``file://`` directory or an ``s3://`` prefix: Parquet, JSON lines,
    or (``text``) one line per record made by ``encoder`` (``str`` by default). A part rolls
    at ``rolling_size``, when it is ``rollover_seconds`` old, and at every checkpoint; parts
    are named ``<part_prefix>-<subtask>-<n><part_suffix>`` (the suffix defaults to
    ``.parquet``, ``.jsonl`` or nothing).

    Exactly once with checkpointing: files are committed (renamed, or their S3 multipart
    upload completed) when the checkpoint that pre-committed them completes, and only
    committed files have names that do not start with ``.`` (see
    :mod:`weir.operators.file_sink`). Without checkpointing they are committed when the
    input ends.
    """

    def __init__(self, path: str, format: str = "parquet",
                 rolling_size: str | int = "128mb", *, part_prefix: str = "part",
                 part_suffix: str | None = None,
                 encoder: Callable[[Any], str] | None = None,
                 rollover_seconds: float | None = None) -> None:
        if format not in ("parquet", "json", "text"):
            msg = f"FileSink format must be 'parquet', 'json' or 'text', got {format!r}"
            raise ValueError(msg)
        if encoder is not None and format != "text":
            msg = f"an encoder writes lines of text: use format='text', not {format!r}"
            raise ValueError(msg)
        if not part_prefix or "/" in part_prefix or part_prefix.startswith((".", "_")):
            msg = (f"part_prefix {part_prefix!r} must be a non-empty file name that does not "
                   "start with '.' or '_' (those mark files readers skip)")
            raise ValueError(msg)
        self.path = path
        self.format = format
        self.rolling_bytes = ByteSize.parse(rolling_size)
        self.part_prefix = part_prefix
        self.part_suffix = PartNames.for_format(format, suffix=part_suffix).suffix
        self.encoder = encoder
        self.rollover_seconds = rollover_seconds
        self.name = f"File ({format}: {path})"

    def create_operator(self, name: str) -> StreamOperator:
        return FileSinkOperator(name, self.path, self.format, self.rolling_bytes,
                                names=PartNames(self.part_prefix, self.part_suffix),
                                encoder=self.encoder, rollover_seconds=self.rollover_seconds)

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> FileSinkBuilder:
        """PyFlink's row-format file sink: lines of text made by ``encoder``, built with
        :class:`FileSinkBuilder`. Every part is written under ``base_path`` (PyFlink's
        ``BucketAssigner.base_path_bucket_assigner()``).

        Example:
            >>> FileSink.for_row_format("/tmp/out", Encoder.simple_string_encoder()).build().name
            'File (text: /tmp/out)'
        """
        if not isinstance(encoder, Encoder):
            msg = (f"for_row_format takes an Encoder, got {type(encoder).__name__}: use "
                   "Encoder.simple_string_encoder()")
            raise InvalidJobError(msg)
        return FileSinkBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: Any) -> FileSinkBuilder:
        """PyFlink's bulk-format sink takes Java writer factories (Parquet, ORC, Avro),
        which do not exist in weir: ``FileSink(path, format="parquet")`` writes Parquet."""
        msg = ("FileSink.for_bulk_format is not supported by weir: its writer factories are "
               f"Java classes; write Parquet with FileSink({base_path!r}, format='parquet')")
        raise InvalidJobError(msg)


class Encoder:
    """How a row-format file sink turns a record into a line (PyFlink's ``Encoder``).

    Example:
        >>> Encoder.simple_string_encoder().encode(("a", 1))
        "('a', 1)"
    """

    def __init__(self, encode: Callable[[Any], str] = str) -> None:
        self.encode = encode

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        """One line per record: ``str(record)`` (PyFlink writes Java's ``toString()``),
        UTF-8 encoded."""
        if charset_name.upper().replace("-", "") != "UTF8":
            msg = f"weir's file sink writes UTF-8 text only, got charset {charset_name!r}"
            raise InvalidJobError(msg)
        return Encoder()


class OutputFileConfig:
    """Part file names: ``<part_prefix>-<subtask>-<n><part_suffix>`` (PyFlink puts a random
    id where weir puts the subtask index).

    Example:
        >>> config = OutputFileConfig.builder().with_part_prefix("out").build()
        >>> config.get_part_prefix(), config.get_part_suffix()
        ('out', '')
    """

    def __init__(self, part_prefix: str, part_suffix: str) -> None:
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix

    def get_part_prefix(self) -> str:
        return self.part_prefix

    def get_part_suffix(self) -> str:
        return self.part_suffix

    @staticmethod
    def builder() -> OutputFileConfigBuilder:
        return OutputFileConfigBuilder()


class OutputFileConfigBuilder:
    """Builds an :class:`OutputFileConfig` (prefix ``part``, no suffix by default)."""

    def __init__(self) -> None:
        self.part_prefix = "part"
        self.part_suffix = ""

    def with_part_prefix(self, prefix: str) -> OutputFileConfigBuilder:
        self.part_prefix = prefix
        return self

    def with_part_suffix(self, suffix: str) -> OutputFileConfigBuilder:
        self.part_suffix = suffix
        return self

    def build(self) -> OutputFileConfig:
        return OutputFileConfig(self.part_prefix, self.part_suffix)


OutputFileConfig.OutputFileConfigBuilder = OutputFileConfigBuilder  # type: ignore[attr-defined]


class RollingPolicy:
    """When a part file of a row-format sink rolls (closes and a new one opens); it also
    rolls at every checkpoint, which is when parts are committed.

    ``inactivity_interval`` is accepted for PyFlink's signature; weir checks a part's age
    when a record arrives, so an idle part rolls at the next checkpoint (or the end of
    input) rather than after the inactivity interval.

    Example:
        >>> RollingPolicy.default_rolling_policy(part_size=1 << 20).part_size
        1048576
    """

    def __init__(self, part_size: int | None, rollover_interval_ms: int | None) -> None:
        self.part_size = part_size
        self.rollover_interval_ms = rollover_interval_ms

    @staticmethod
    def default_rolling_policy(part_size: int = 1024 * 1024 * 128,
                               rollover_interval: int = 60 * 1000,
                               inactivity_interval: int = 60 * 1000) -> RollingPolicy:
        """Roll at ``part_size`` bytes, or when the part is ``rollover_interval`` ms old."""
        if part_size <= 0 or rollover_interval <= 0 or inactivity_interval <= 0:
            msg = ("default_rolling_policy: part_size, rollover_interval and "
                   "inactivity_interval must be positive")
            raise InvalidJobError(msg)
        return RollingPolicy(part_size, rollover_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> RollingPolicy:
        """Roll only at checkpoints (and at the end of input)."""
        return RollingPolicy(None, None)


class FileSinkBuilder:
    """PyFlink's ``FileSink.RowFormatBuilder``: set the part names and the rolling policy,
    then :meth:`build`."""

    def __init__(self, base_path: str, encoder: Encoder) -> None:
        self._path = base_path
        self._encoder = encoder
        self._names = OutputFileConfig("part", "")
        self._rolling = RollingPolicy.default_rolling_policy()

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> FileSinkBuilder:
        self._names = output_file_config
        return self

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> FileSinkBuilder:
        self._rolling = rolling_policy
        return self

    def with_bucket_check_interval(self, interval: int) -> FileSinkBuilder:
        """Accepted: weir checks the rolling policy as records arrive."""
        return self

    def with_bucket_assigner(self, bucket_assigner: Any) -> FileSinkBuilder:
        msg = ("FileSink bucket assigners are not supported by weir: every part is written "
               "under the base path (base_path_bucket_assigner)")
        raise InvalidJobError(msg)

    def enable_compact(self, strategy: Any, compactor: Any) -> FileSinkBuilder:
        msg = ("FileSink compaction is not supported by weir: size the parts with the "
               "rolling policy instead")
        raise InvalidJobError(msg)

    def disable_compact(self) -> FileSinkBuilder:
        return self

    def build(self) -> FileSink:
        rolling = self._rolling
        return FileSink(self._path, "text",
                        rolling_size=rolling.part_size or (1 << 62),
                        part_prefix=self._names.part_prefix,
                        part_suffix=self._names.part_suffix,
                        encoder=self._encoder.encode,
                        rollover_seconds=(rolling.rollover_interval_ms / 1000
                                          if rolling.rollover_interval_ms else None))


FileSink.RowFormatBuilder = FileSinkBuilder  # type: ignore[attr-defined]


class DiscardingSink(Sink):
    """Drops every record (for benchmarks)."""

    name = "Discard"

    def create_operator(self, name: str) -> StreamOperator:
        return DiscardingSinkOperator(name)
