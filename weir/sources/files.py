"""File source: Parquet, CSV and JSON-lines files, bounded or watching a directory.

A large file is read in parallel, as Flink's file source does: a Parquet file splits into
ranges of row groups, a CSV or JSON-lines file into byte ranges of about ``split_bytes``
whose lines are the ones *starting* in the range (a line crossing the end belongs to the
range it starts in). Unless ``split_bytes`` is given, a bounded source sizes its splits as
Spark does, so that the subtasks get about equal shares: the total size of the files over
the parallelism, but at least :data:`MIN_SPLIT_BYTES` and at most :data:`SPLIT_BYTES` (a
monitored directory uses :data:`SPLIT_BYTES`). A split's ``offset`` is the number of rows
already read from it, so a reader restored from a checkpoint skips exactly those rows
(whole Parquet row groups without reading them) and replay is exact. The columns of every
CSV split take the types inferred from the start of its file (so do JSON-lines splits),
and a CSV file large enough to split must not have line breaks inside quoted fields.
Records are Arrow batches whose rows read as :class:`weir.Row`.

Paths are local (or ``file://``) paths that the JobMaster and every TaskExecutor can read
(a shared file system on a real cluster). A relative path means the submitting process's
working directory, as it would for ``open()``: it is made absolute where the job program
builds the source, since the daemons run elsewhere. Before submission
(:meth:`FileSource.check_paths`) a bounded source must match at least one file and a
monitored directory must exist, so a wrong path fails at once instead of producing 0 rows.

Example:
    >>> src = FileSource("/data/events", format="parquet")
    >>> src.bounded
    True
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from weir.core.config import Configuration
from weir.core.errors import InvalidJobError, StorageError
from weir.core.records import Elements, records_to_arrow
from weir.core.source import (
    ReaderContext,
    Source,
    SourceReader,
    SplitAssignment,
    SplitEnumerator,
)
from weir.core.time import to_millis

#: Format -> the file names it reads in a directory (text: every file, as Flink does).
FORMATS = {"parquet": (".parquet",), "csv": (".csv",), "json": (".jsonl", ".json", ".ndjson"),
           "text": ("",)}


#: Target size of one split of a large file (bytes of a CSV/JSON file, compressed bytes of
#: Parquet row groups).
SPLIT_BYTES = 64 << 20
#: The smallest split a bounded source aims for (smaller ones cost more than they share).
MIN_SPLIT_BYTES = 4 << 20


@dataclass(frozen=True)
class FileSplit:
    """A file, or part of one, to read, of which the first ``offset`` rows have been read.
    ``start``/``end``: row groups (Parquet) or bytes (CSV, JSON) ``[start, end)``; an
    ``end`` of -1 means to the end of the file."""

    path: str
    format: str
    offset: int = 0
    start: int = 0
    end: int = -1

    @property
    def split_id(self) -> str:
        if self.start == 0 and self.end == -1:
            return self.path
        return f"{self.path}#{self.start}-{self.end}"


def split_file(path: str, fmt: str, split_bytes: int = SPLIT_BYTES) -> list[FileSplit]:
    """The splits of one file (one for a small file, or one it cannot read: its reader
    then reports the file)."""
    local = path.removeprefix("file://")
    try:
        if fmt == "parquet":
            metadata = pq.ParquetFile(local).metadata
            ranges: list[tuple[int, int]] = []
            first, size = 0, 0
            for group in range(metadata.num_row_groups):
                row_group = metadata.row_group(group)
                # Compressed bytes: the file's own size, as for the other formats.
                group_bytes = sum(row_group.column(c).total_compressed_size
                                  for c in range(row_group.num_columns))
                # A split takes row groups while they fit (a larger one stands alone).
                if size and size + group_bytes > split_bytes:
                    ranges.append((first, group))
                    first, size = group, 0
                size += group_bytes
            if first < metadata.num_row_groups:
                ranges.append((first, metadata.num_row_groups))
        else:
            total = os.path.getsize(local)
            ranges = [(start, min(start + split_bytes, total))
                      for start in range(0, total, split_bytes)]
    except (OSError, pa.ArrowInvalid):
        # Unreadable here: one split, whose reader reports the file (on its task).
        return [FileSplit(path, fmt)]
    if len(ranges) <= 1:
        return [FileSplit(path, fmt)]
    return [FileSplit(path, fmt, 0, start, end) for start, end in ranges]


def split_size(paths: list[str], parallelism: int, split_bytes: int = SPLIT_BYTES) -> int:
    """How large the splits of a bounded read of ``paths`` should be, as Spark sizes its
    file partitions: an equal share of the total size per subtask, but at least
    :data:`MIN_SPLIT_BYTES` and at most ``split_bytes``.

    Example:
        >>> split_size([], 2, 64 << 20) == MIN_SPLIT_BYTES
        True
    """
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path.removeprefix("file://"))
        except OSError:
            continue  # its reader reports it
    share = -(-total // max(1, parallelism))
    return min(split_bytes, max(MIN_SPLIT_BYTES, share))


def _scheme(path: str) -> str:
    return path.split("://", 1)[0].lower() if "://" in path else ""


def absolute_path(path: str) -> str:
    """A local path (or ``file://`` URI) made absolute against this process's working
    directory, ``~`` expanded; URIs of other schemes unchanged.

    Example:
        >>> absolute_path("/data/x") == "/data/x", absolute_path("s3://b/k")
        (True, 's3://b/k')
    """
    scheme = _scheme(path)
    if scheme not in ("", "file"):
        return path
    local = os.path.abspath(os.path.expanduser(path.removeprefix("file://")))
    return f"file://{local}" if scheme else local


def list_files(path: str, fmt: str) -> list[str]:
    """Data files of ``fmt`` under ``path`` (a file or a directory), sorted, hidden ones skipped."""
    root = Path(path.removeprefix("file://"))
    if root.is_file():
        return [str(root)]
    if not root.is_dir():
        return []
    suffixes = FORMATS[fmt]
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
        found.extend(os.path.join(dirpath, f) for f in filenames
                     if f.endswith(suffixes) and not f.startswith(("_", ".")))
    return sorted(found)


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
        return FileSplitEnumerator(self, parallelism=parallelism)

    def restore_enumerator(self, parallelism: int, checkpoint: Any) -> SplitEnumerator:
        return FileSplitEnumerator(self, checkpoint, parallelism)

    def create_reader(self, context: ReaderContext) -> SourceReader:
        return FileReader(context.batch_size)

    def list(self) -> list[str]:
        if self.lister is not None:
            return self.lister(self.path)
        found = [f for path in self.paths for f in list_files(path, self.format)]
        return list(dict.fromkeys(found))

    def check_paths(self, configuration: Configuration) -> None:
        """Refuse a path this source could never read, on the client before submission:
        a bounded source must match at least one file, a monitored directory must exist
        (it may be empty). ``configuration`` supplies the ``s3.*`` options.

        Raises InvalidJobError naming the path and the fix; for ``s3://`` also the
        StorageError of an unreachable endpoint or refused credentials. A source with a
        ``lister`` is not checked: the lister decides what exists.
        """
        if self.lister is not None:
            return
        for given, path in zip(self.given_paths, self.paths, strict=True):
            self._check_path(given, path, configuration)

    def _check_path(self, given: str, path: str, configuration: Configuration) -> None:
        scheme = _scheme(path)
        what = f"the {self.format} source path {path}"
        if scheme == "s3":
            self._check_s3(path, configuration, what)
        elif scheme not in ("", "file"):
            msg = (f"{what} has an unsupported scheme {scheme}://: the file source reads "
                   "local paths or file:// URIs (on a shared file system for a real cluster)")
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
        from weir.checkpoint.s3 import S3CheckpointStorage

        storage = S3CheckpointStorage.from_uri(path, configuration)
        try:
            # S3 has no directories: a prefix matches the objects below "prefix/", or it
            # names one object exactly.
            found = bool(storage.list("")) or storage.exists(path)
        except StorageError as err:
            msg = f"cannot list {what}: {err}"
            raise type(err)(msg) from err
        if not found:
            msg = (f"{what} matches no objects (nothing under {path.rstrip('/')}/ at "
                   "the configured s3.endpoint): fix the bucket or prefix")
            raise InvalidJobError(msg)
        msg = (f"{what} cannot be read: the file source cannot read s3:// yet (only local "
               "paths and file:// URIs); copy the data to a shared file system, or stage it "
               "with env.from_spark()")
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

    def monitor_continuously(self, discovery_interval: Any) -> FileSourceBuilder:
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


class FileSplitEnumerator(SplitEnumerator):
    """Assigns each discovered file once; in continuous mode it lists again when asked.

    Its checkpoint is ``{"pending": [splits not handed out], "seen": [every path listed]}``;
    a restored enumerator does not list again in bounded mode (the files the job read are
    the ones it listed when it started) and never hands out a path it has seen.
    """

    def __init__(self, source: FileSource, checkpoint: dict[str, Any] | None = None,
                 parallelism: int = 1) -> None:
        self._source = source
        self._parallelism = max(1, parallelism)
        self._seen: set[str] = set()
        self._pending: list[FileSplit] = []
        if checkpoint is None:
            self._discover()
        else:
            self._pending = list(checkpoint["pending"])
            self._seen = set(checkpoint["seen"])

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        return {"pending": list(self._pending), "seen": sorted(self._seen)}

    def _discover(self) -> None:
        paths = [p for p in self._source.list() if p not in self._seen]
        split_bytes = getattr(self._source, "split_bytes", None)
        if split_bytes is None:
            split_bytes = split_size(paths, self._parallelism) if self._source.bounded \
                else SPLIT_BYTES
        for path in paths:
            self._seen.add(path)
            self._pending.extend(split_file(path, self._source.format, split_bytes))

    def request_splits(self, subtask_index: int) -> SplitAssignment:
        if not self._pending and not self._source.bounded:
            self._discover()
        if self._pending:
            return SplitAssignment([self._pending.pop(0)])
        if self._source.bounded:
            return SplitAssignment(no_more_splits=True)
        return SplitAssignment(retry_after=self._source.monitor_interval)

    def add_splits_back(self, splits: list[Any], subtask_index: int) -> None:
        self._pending[:0] = splits


class FileReader(SourceReader):
    """Reads assigned files one after another in batches of at most ``batch_size`` rows.

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "n.parquet")
        >>> pq.write_table(pa.table({"n": list(range(5))}), path)
        >>> reader = FileReader(batch_size=100)
        >>> reader.add_splits([FileSplit(path, "parquet", offset=3)])   # resume at row 3
        >>> [row.n for row in reader.poll().records()]
        [3, 4]
    """

    def __init__(self, batch_size: int) -> None:
        self._batch_size = batch_size
        self._splits: list[FileSplit] = []
        self._batches: Iterator[pa.RecordBatch] | None = None
        self._rows = 0

    def add_splits(self, splits: list[Any]) -> None:
        self._splits.extend(splits)

    def poll(self) -> Elements | None:
        while self._splits:
            if self._batches is None:
                self._batches = self._open(self._splits[0])
                self._rows = self._splits[0].offset
            batch = next(self._batches, None)
            if batch is None:
                self._splits.pop(0)
                self._batches = None
                continue
            if batch.num_rows == 0:
                continue
            self._rows += batch.num_rows
            return Elements.from_arrow(batch)
        return None

    def _open(self, split: FileSplit) -> Iterator[pa.RecordBatch]:
        path = split.path.removeprefix("file://")
        size = self._batch_size
        skip = split.offset
        try:
            if split.format == "parquet":
                parquet = pq.ParquetFile(path)
                end = parquet.num_row_groups if split.end < 0 else split.end
                # Whole row groups before the offset are never read, only counted.
                first = split.start
                while first < end and \
                        skip >= (rows := parquet.metadata.row_group(first).num_rows):
                    skip -= rows
                    first += 1
                groups = list(range(first, end))
                batches: Iterator[pa.RecordBatch] = (
                    parquet.iter_batches(batch_size=size, row_groups=groups) if groups
                    else iter(()))
            elif os.path.getsize(path) == 0:
                # No rows (pyarrow refuses an empty CSV or JSON-lines file).
                batches = iter(())
            elif split.format == "text":
                end = os.path.getsize(path) if split.end < 0 else split.end
                batches = _rebatch(_text_batches(_lines(path, split.start, end)), size)
            elif split.end >= 0:
                batches = _rebatch(_read_range(path, split), size)
            elif split.format == "csv":
                batches = _rebatch(iter(pcsv.open_csv(path)), size)
            else:
                batches = _rebatch(iter(pjson.read_json(path).to_batches()), size)
        except (OSError, pa.ArrowInvalid) as err:
            msg = f"cannot read {split.format} file {path}: {err}"
            raise OSError(msg) from err
        return _skip_rows(batches, skip, split) if skip else batches

    def position(self) -> tuple[Any, int] | None:
        return (self._splits[0].split_id, self._rows) if self._splits else None

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        if not self._splits:
            return []
        current, *rest = self._splits
        if self._batches is None:  # not opened yet: its offset is still the one it came with
            return [current, *rest]
        return [dataclasses.replace(current, offset=self._rows), *rest]


def _skip_rows(batches: Iterator[pa.RecordBatch], skip: int,
               split: FileSplit) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        yield batch.slice(skip) if skip else batch
        skip = 0
    if skip:
        # Splits are immutable: a file shorter than what was read from it has changed.
        msg = (f"{split.format} file {split.path} has {split.offset - skip} rows, but "
               f"{split.offset} were read from it before the restore: it changed since")
        raise OSError(msg)


def _rebatch(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for offset in range(0, batch.num_rows, size):
            yield batch.slice(offset, size)


def _lines(path: str, start: int, end: int) -> bytes:
    """The lines of ``path`` that start in bytes ``[start, end)``: a line crossing
    ``start`` belongs to the range before, one crossing ``end`` to this one."""
    with open(path, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":
                f.readline()  # the rest of a line that started in the range before
        position = f.tell()
        if position >= end:
            return b""
        data = f.read(end - position)
        if data and not data.endswith(b"\n"):
            data += f.readline()
        return data


#: How much of a JSON-lines file its column types are inferred from.
_HEAD_BYTES = 1 << 20


def _csv_head(path: str) -> tuple[list[str], pa.Schema]:
    """The column names and types of a CSV file, as its first block gives them."""
    reader = pcsv.open_csv(path)
    try:
        return list(reader.schema.names), reader.schema
    finally:
        reader.close()


def _read_range(path: str, split: FileSplit) -> Iterator[pa.RecordBatch]:
    data = _lines(path, split.start, split.end)
    if not data.strip():
        return iter(())
    if split.format == "json":
        # Every split takes the types the start of its file gives, as CSV splits do.
        head = pjson.read_json(pa.BufferReader(_lines(path, 0, _HEAD_BYTES)))
        options = pjson.ParseOptions(explicit_schema=head.schema,
                                     unexpected_field_behavior="infer")
        return iter(pjson.read_json(pa.BufferReader(data),
                                    parse_options=options).to_batches())
    names, schema = _csv_head(path)
    read = pcsv.ReadOptions(column_names=names, skip_rows=1 if split.start == 0 else 0)
    convert = pcsv.ConvertOptions(column_types=schema)
    return iter(pcsv.read_csv(pa.BufferReader(data), read_options=read,
                              convert_options=convert).to_batches())


def _text_batches(data: bytes) -> Iterator[pa.RecordBatch]:
    """The lines of a text file's range as one batch of strings (``read_text_file``)."""
    lines = data.decode("utf-8").splitlines()
    if lines:
        yield records_to_arrow(lines)
