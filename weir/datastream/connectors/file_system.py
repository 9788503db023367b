"""Files (PyFlink's ``pyflink.datastream.connectors.file_system``): the file source, which
reads Parquet, CSV, JSON-lines and text files, local or on S3, bounded or watching a
directory (or prefix), and the file sink, which writes part files exactly once.

Source
------

A large file is read in parallel, as Flink's file source does: a Parquet file splits into
ranges of row groups, a CSV or JSON-lines file into byte ranges of about ``split_bytes``
whose lines are the ones *starting* in the range (a line crossing the end belongs to the
range it starts in). Unless ``split_bytes`` is given, a bounded source sizes its splits as
Spark does, so that the subtasks get about equal shares: the total size of the files over
the parallelism, but at least ``MIN_SPLIT_BYTES`` and at most ``SPLIT_BYTES`` (a monitored
directory uses ``SPLIT_BYTES``; both in :mod:`weir.datastream.connectors.file_splits`,
which lists, splits and reads). A split's ``offset`` is the number of rows
already read from it, so a reader restored from a checkpoint skips exactly those rows
(whole Parquet row groups without reading them) and replay is exact. The columns of every
CSV split take the types inferred from the start of its file (so do JSON-lines splits),
and a CSV file large enough to split must not have line breaks inside quoted fields.
Records are Arrow batches whose rows read as :class:`weir.Row`. A monitored directory reads
each new file once, as it is when listed: files must appear whole (written under a hidden
``.``/``_`` name, then renamed), as in Flink and Spark; S3 objects always do.

Paths are local (or ``file://``) paths that the JobMaster and every TaskExecutor can read
(a shared file system on a real cluster), or ``s3://bucket/prefix`` URIs. A relative path
means the submitting process's working directory, as it would for ``open()``: it is made
absolute where the job program builds the source, since the daemons run elsewhere.

S3 has no directories: ``s3://bucket/prefix`` names the object ``prefix`` itself, or every
object below ``prefix/`` (hidden ``_``/``.`` names skipped as in a local directory, sorted);
``s3://bucket/events/2024`` does not match ``events/2024-01.parquet``. Objects are read
through :mod:`pyarrow.fs` (:func:`weir.core.object_store.filesystem`) with ranged reads:
a Parquet split fetches its footer and its own row groups, a CSV, JSON-lines or text split
its byte range and the rest of the line crossing its end; splitting needs only the
objects' sizes and Parquet footers. Splits name S3 objects by their full ``s3://bucket/key``
URI and local files by their path, as before, so checkpoints of older jobs restore. The
``s3.*`` options (``s3.endpoint``, ``s3.access-key``, ``s3.secret-key``, ``s3.region``,
``s3.path.style.access``) come from the process that reads: the enumerator lists with the
JobMaster's configuration merged with the job's, a reader reads with the TaskExecutor's
merged with the job's (each falling back to its ``WEIR_S3_*`` environment), so the
daemons' keys never travel in the job graph. A failed read (an object deleted, access
denied) fails its task with ``cannot read <format> file s3://...: <cause>``.

Before submission (:meth:`FileSource.check_paths`) a bounded source must match at least one
file (object) and a monitored directory must exist (on S3: its bucket; objects may come
later), so a wrong path fails at once instead of producing 0 rows; on S3, wrong
credentials, an unreachable endpoint or a missing bucket are one line each.

Sink
----
``FileSink(path, format)`` is weir's own form; ``FileSink.for_row_format(base_path,
Encoder.simple_string_encoder())`` with :class:`OutputFileConfig` and :class:`RollingPolicy`
is PyFlink's, and writes lines of text. Both are exactly once: the operator that writes
the parts (:mod:`weir.operators.sinks.file`) commits them with the checkpoints.

Example:
    >>> src = FileSource("/data/events", format="parquet")
    >>> src.bounded
    True
    >>> FileSink("/tmp/out", format="json").name
    'File (json: /tmp/out)'
    >>> from weir.common.serialization import Encoder
    >>> sink = (FileSink.for_row_format("/tmp/out", Encoder.simple_string_encoder())
    ...         .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".txt")
    ...                                  .build())
    ...         .build())
    >>> sink.format, sink.part_suffix
    ('text', '.txt')
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from weir.common.serialization import Encoder
from weir.common.time import TimeSpan
from weir.core.config import ByteSize, Configuration
from weir.core.errors import InvalidJobError, StorageError
from weir.core.object_store import scheme
from weir.core.source import (
    EnumeratorContext,
    ReaderContext,
    Source,
    SourceReader,
    SplitEnumerator,
)
from weir.core.time import to_millis
from weir.datastream.connectors.base import Sink

# FileSplit is re-exported: checkpoints written before the runtime moved to file_splits
# pickled their splits as this module's FileSplit, and pickle looks the name up here.
from weir.datastream.connectors.file_splits import (
    FORMATS,
    FileReader,
    FileSplitEnumerator,
    list_files,
    list_objects,
)
from weir.datastream.connectors.file_splits import FileSplit as FileSplit
from weir.operators.sinks.file import FileSinkOperator, PartNames
from weir.taskexecutor.operator import StreamOperator
from weir.unsupported import FILES, refusing

__all__ = ["FileSink", "FileSource", "FileSourceBuilder", "OutputFileConfig", "RollingPolicy",
           "StreamFormat"]

#: Why compaction is refused.
_COMPACTION = "file compaction is not supported: size parts with the rolling policy"

__unsupported__ = {
    "FileCompactor": _COMPACTION,
    "FileCompactStrategy": _COMPACTION,
    "StreamingFileSink": "it is deprecated in Flink; use FileSink.for_row_format",
    "BulkFormat": FILES,
    "FileEnumeratorProvider": "weir's enumerator lists the files, skips hidden ones and "
                              "splits large files itself",
    "FileSplitAssignerProvider": "splits go to the subtasks that ask for them",
    "BucketAssigner": "every part is written under the base path",
}
__getattr__ = refusing(__name__, __unsupported__)

log = logging.getLogger(__name__)

def absolute_path(path: str) -> str:
    """A local path (or ``file://`` URI) made absolute against this process's working
    directory, ``~`` expanded; URIs of other schemes unchanged.

    Example:
        >>> absolute_path("/data/x") == "/data/x", absolute_path("s3://b/k")
        (True, 's3://b/k')
    """
    kind = scheme(path)
    if kind not in ("", "file"):
        return path
    local = os.path.abspath(os.path.expanduser(path.removeprefix("file://")))
    return f"file://{local}" if kind else local


class FileSource(Source):
    """Reads files; with ``monitor_interval`` it keeps watching for new files (unbounded).

    ``lister(path) -> list[str]`` replaces the directory listing (the Spark source lists
    only committed staging directories this way).
    """

    def __init__(self, path: str | Sequence[str], format: str = "parquet",
                 monitor_interval: float | None = None,
                 lister: Callable[[str], list[str]] | None = None,
                 name: str | None = None, split_bytes: int | None = None) -> None:
        if format not in FORMATS:
            msg = f"unknown file format {format!r} (use one of: {', '.join(FORMATS)})"
            raise ValueError(msg)
        given = [path] if isinstance(path, str) else list(path)
        if not given:
            msg = "a FileSource needs at least one path"
            raise ValueError(msg)
        #: As given (for messages); :attr:`paths` are absolute, :attr:`path` is the first.
        self.given_paths = given
        self.paths = [absolute_path(p) for p in given]
        self.path = self.paths[0]
        self.format = format
        self.monitor_interval = monitor_interval
        self.lister = lister
        self.bounded = monitor_interval is None
        self.name = name or f"File Source ({format}: {', '.join(given)})"
        if split_bytes is not None and split_bytes < 1:
            msg = f"split_bytes must be positive, got {split_bytes}"
            raise ValueError(msg)
        #: About how much of a large file one split reads; None: sized to the parallelism
        #: (see the module docstring).
        self.split_bytes = split_bytes

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        """PyFlink's builder: ``FileSource.for_record_stream_format(
        StreamFormat.text_line_format(), path).process_static_file_set().build()``.

        Example:
            >>> src = FileSource.for_record_stream_format(
            ...     StreamFormat.text_line_format(), "/data/a.txt", "/data/b.txt").build()
            >>> src.format, src.paths, src.bounded
            ('text', ['/data/a.txt', '/data/b.txt'], True)
        """
        if not isinstance(stream_format, StreamFormat):
            msg = (f"for_record_stream_format takes a StreamFormat, got "
                   f"{type(stream_format).__name__}: use StreamFormat.text_line_format(), or "
                   "FileSource(path, format='parquet'|'csv'|'json') for other formats")
            raise InvalidJobError(msg)
        return FileSourceBuilder(stream_format.format, paths)

    @staticmethod
    def for_bulk_file_format(bulk_format: Any, *paths: str) -> FileSourceBuilder:
        """PyFlink's bulk formats are Java classes: read Parquet, CSV or JSON lines with
        ``FileSource(path, format=...)``."""
        msg = ("FileSource.for_bulk_file_format is not supported by weir: its bulk formats "
               "are Java classes; read Parquet, CSV or JSON lines with "
               f"FileSource({', '.join(map(repr, paths)) or 'path'}, format='parquet')")
        raise InvalidJobError(msg)

    def create_enumerator(self, parallelism: int) -> SplitEnumerator:
        return self.create_enumerator_in(EnumeratorContext(parallelism))

    def restore_enumerator(self, parallelism: int, checkpoint: Any) -> SplitEnumerator:
        return self.restore_enumerator_in(EnumeratorContext(parallelism), checkpoint)

    def create_enumerator_in(self, context: EnumeratorContext) -> SplitEnumerator:
        return FileSplitEnumerator(self, None, context.parallelism, context.configuration)

    def restore_enumerator_in(self, context: EnumeratorContext,
                              checkpoint: Any) -> SplitEnumerator:
        return FileSplitEnumerator(self, checkpoint, context.parallelism,
                                   context.configuration)

    def create_reader(self, context: ReaderContext) -> SourceReader:
        return FileReader(context.batch_size, Configuration.from_pairs(context.config))

    def list(self, configuration: Configuration | None = None) -> list[str]:
        """The files to read now: local paths, or ``s3://`` URIs listed with the ``s3.*``
        options of ``configuration``; what the ``lister`` returns when there is one."""
        if self.lister is not None:
            return self.lister(self.path)
        found = [f for path in self.paths
                 for f in list_files(path, self.format, configuration)]
        return list(dict.fromkeys(found))

    def check_paths(self, configuration: Configuration) -> None:
        """Refuse a path this source could never read, on the client before submission:
        a bounded source must match at least one file (or S3 object), a monitored
        directory must exist (it may be empty; on S3, its bucket). ``configuration``
        supplies the ``s3.*`` options.

        Raises InvalidJobError naming the path and the fix; for ``s3://`` also the
        StorageError of an unreachable endpoint or refused credentials. A source with a
        ``lister`` is not checked: the lister decides what exists.
        """
        if self.lister is not None:
            return
        for given, path in zip(self.given_paths, self.paths, strict=True):
            self._check_path(given, path, configuration)

    def _check_path(self, given: str, path: str, configuration: Configuration) -> None:
        kind = scheme(path)
        what = f"the {self.format} source path {path}"
        if kind == "s3":
            self._check_s3(path, configuration, what)
            return
        if kind not in ("", "file"):
            msg = (f"{what} has an unsupported scheme {kind}://: the file source reads "
                   "local paths, file:// URIs (on a shared file system for a real cluster) "
                   "or s3://bucket/prefix")
            raise InvalidJobError(msg)
        local = path.removeprefix("file://")
        if not os.path.exists(local):
            relative = "" if os.path.isabs(given.removeprefix("file://")) else (
                f" ({given!r} is relative to the working directory of the "
                "submitting process)")
            fix = "fix the path" if self.bounded else \
                "fix the path, or create the directory to watch (it may be empty)"
            msg = f"{what} does not exist{relative}: {fix}"
            raise InvalidJobError(msg)
        if self.bounded and not list_files(path, self.format):
            msg = (f"{what} matches no {self.format} files (looked for "
                   f"{', '.join('*' + s for s in FORMATS[self.format])}, skipping names that "
                   "start with _ or .): point the source at the data, or set format= to "
                   "what the files are")
            raise InvalidJobError(msg)

    def _check_s3(self, path: str, configuration: Configuration, what: str) -> None:
        from weir.checkpoint.s3 import S3CheckpointStorageAccess, has_local_credentials

        if not has_local_credentials(configuration):
            # A client host without S3 keys (the daemons hold them) cannot list: the
            # JobMaster's enumerator refuses a bounded path that matches nothing.
            log.info("no S3 credentials here: %s is checked by the JobMaster", what)
            return
        storage = S3CheckpointStorageAccess.from_uri(path, configuration)
        try:
            # The endpoint, the credentials and the bucket, each failure in one line
            # naming what to fix (pyarrow's messages name none of them).
            storage.check_access()
        except StorageError as err:
            msg = f"cannot list {what}: {err}"
            raise type(err)(msg) from err
        if not self.bounded:
            return  # the bucket exists: objects may come later
        try:
            found = list_objects(path, self.format, configuration)
        except OSError as err:
            raise StorageError(str(err)) from err  # "cannot list s3://...: <cause>"
        if not found:
            msg = (f"{what} matches no {self.format} objects (nothing named "
                   f"{', '.join('*' + s for s in FORMATS[self.format])} under "
                   f"{path.rstrip('/')}/ at the configured s3.endpoint, skipping names that "
                   "start with _ or .): fix the bucket or prefix, or set format= to what "
                   "the objects are")
            raise InvalidJobError(msg)


class StreamFormat:
    """How a PyFlink-style file source reads records: :meth:`text_line_format` (lines of
    UTF-8 text, as strings).

    Example:
        >>> StreamFormat.text_line_format().format
        'text'
    """

    def __init__(self, format: str) -> None:
        self.format = format

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> StreamFormat:
        """Lines of text; a large file is read in parallel (byte ranges aligned to line ends)
        and a restored reader skips exactly the lines read before the checkpoint."""
        if charset_name.upper().replace("-", "") != "UTF8":
            msg = f"the text line format reads UTF-8 text only, got charset {charset_name!r}"
            raise InvalidJobError(msg)
        return StreamFormat("text")


class FileSourceBuilder:
    """PyFlink's ``FileSourceBuilder``: bounded by default (:meth:`process_static_file_set`),
    or watching the paths for new files (:meth:`monitor_continuously`)."""

    def __init__(self, format: str, paths: Sequence[str]) -> None:
        if not paths:
            msg = "a FileSource needs at least one path"
            raise InvalidJobError(msg)
        self._format = format
        self._paths = list(paths)
        self._monitor_interval: float | None = None

    def monitor_continuously(self, discovery_interval: TimeSpan) -> FileSourceBuilder:
        """Keep watching for new files, every ``discovery_interval`` (a Duration, or ms)."""
        self._monitor_interval = to_millis(discovery_interval) / 1000
        return self

    def process_static_file_set(self) -> FileSourceBuilder:
        """Read the files there now, then end (the default)."""
        self._monitor_interval = None
        return self

    def set_file_enumerator(self, file_enumerator: Any) -> FileSourceBuilder:
        msg = ("FileSource.set_file_enumerator is not supported by weir: weir's enumerator "
               "lists the files, skips hidden ones and splits large files itself")
        raise InvalidJobError(msg)

    def set_split_assigner(self, split_assigner: Any) -> FileSourceBuilder:
        msg = ("FileSource.set_split_assigner is not supported by weir: splits go to the "
               "subtasks that ask for them")
        raise InvalidJobError(msg)

    def build(self) -> FileSource:
        return FileSource(self._paths, format=self._format,
                          monitor_interval=self._monitor_interval)


# -- the file sink ------------------------------------------------------------------------


class FileSink(Sink):
    """Part files under a ``file://`` directory or an ``s3://`` prefix: Parquet, JSON lines,
    or (``text``) one line per record made by ``encoder`` (``str`` by default). A part rolls
    at ``rolling_size``, when it is ``rollover_seconds`` old, and at every checkpoint; parts
    are named ``<part_prefix>-<subtask>-<n><part_suffix>`` (the suffix defaults to
    ``.parquet``, ``.jsonl`` or nothing).

    Exactly once with checkpointing: files are committed (renamed, or their S3 multipart
    upload completed) when the checkpoint that pre-committed them completes, and only
    committed files have names that do not start with ``.`` (see
    :mod:`weir.operators.sinks.file`). Without checkpointing they are committed when the
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
    def for_row_format(base_path: str, encoder: Encoder) -> FileSink.RowFormatBuilder:
        """PyFlink's row-format file sink: lines of text made by ``encoder``, built with
        :class:`FileSink.RowFormatBuilder`. Every part is written under ``base_path``
        (PyFlink's ``BucketAssigner.base_path_bucket_assigner()``).

        Example:
            >>> FileSink.for_row_format("/tmp/out", Encoder.simple_string_encoder()).build().name
            'File (text: /tmp/out)'
        """
        if not isinstance(encoder, Encoder):
            msg = (f"for_row_format takes an Encoder, got {type(encoder).__name__}: use "
                   "Encoder.simple_string_encoder()")
            raise InvalidJobError(msg)
        return FileSink.RowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: Any) -> FileSink.RowFormatBuilder:
        """PyFlink's bulk-format sink takes Java writer factories (Parquet, ORC, Avro),
        which do not exist in weir: ``FileSink(path, format="parquet")`` writes Parquet."""
        msg = ("FileSink.for_bulk_format is not supported by weir: its writer factories are "
               f"Java classes; write Parquet with FileSink({base_path!r}, format='parquet')")
        raise InvalidJobError(msg)

    class RowFormatBuilder:
        """Builds a row-format :class:`FileSink` (``FileSink.for_row_format``): set the part
        names and the rolling policy, then :meth:`build`."""

        def __init__(self, base_path: str, encoder: Encoder) -> None:
            self._path = base_path
            self._encoder = encoder
            self._names = OutputFileConfig("part", "")
            self._rolling = RollingPolicy.default_rolling_policy()

        def with_output_file_config(self, output_file_config: OutputFileConfig
                                    ) -> FileSink.RowFormatBuilder:
            self._names = output_file_config
            return self

        def with_rolling_policy(self, rolling_policy: RollingPolicy
                                ) -> FileSink.RowFormatBuilder:
            self._rolling = rolling_policy
            return self

        def with_bucket_check_interval(self, interval: int) -> FileSink.RowFormatBuilder:
            """Accepted: weir checks the rolling policy as records arrive."""
            return self

        def with_bucket_assigner(self, bucket_assigner: Any) -> FileSink.RowFormatBuilder:
            msg = ("FileSink bucket assigners are not supported by weir: every part is "
                   "written under the base path (base_path_bucket_assigner)")
            raise InvalidJobError(msg)

        def enable_compact(self, strategy: Any, compactor: Any) -> FileSink.RowFormatBuilder:
            msg = ("FileSink compaction is not supported by weir: size the parts with the "
                   "rolling policy instead")
            raise InvalidJobError(msg)

        def disable_compact(self) -> FileSink.RowFormatBuilder:
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
    def builder() -> OutputFileConfig.OutputFileConfigBuilder:
        return OutputFileConfig.OutputFileConfigBuilder()

    class OutputFileConfigBuilder:
        """Builds an :class:`OutputFileConfig` (prefix ``part``, no suffix by default)."""

        def __init__(self) -> None:
            self.part_prefix = "part"
            self.part_suffix = ""

        def with_part_prefix(self, prefix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self.part_prefix = prefix
            return self

        def with_part_suffix(self, suffix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self.part_suffix = suffix
            return self

        def build(self) -> OutputFileConfig:
            return OutputFileConfig(self.part_prefix, self.part_suffix)


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
