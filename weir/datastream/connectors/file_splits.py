"""The file source's runtime: listing files (local directories, S3 prefixes), cutting them
into splits, the enumerator that hands splits out on the JobMaster and the reader that
reads them on a TaskExecutor. The user-facing side, :class:`FileSource`, is in
:mod:`weir.datastream.connectors.file_system` (PyFlink's module), whose docstring describes
how files are split and read.

Every file goes through :mod:`pyarrow.fs`: one code path reads a local file and an S3
object (ranged reads for Parquet row groups and for the byte ranges of line formats).

Example:
    >>> split_file("/nonexistent.csv", "csv")   # unreadable here: one split, read to fail
    [FileSplit(path='/nonexistent.csv', format='csv', offset=0, start=0, end=-1)]
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.fs as pafs
import pyarrow.json as pjson
import pyarrow.parquet as pq

from weir.core.config import Configuration
from weir.core.errors import ConfigError, InvalidJobError
from weir.core.ids import CheckpointId
from weir.core.object_store import filesystem, scheme
from weir.core.records import Elements, records_to_arrow
from weir.core.source import SourceReader, SplitAssignment, SplitEnumerator

if TYPE_CHECKING:
    from weir.datastream.connectors.file_system import FileSource

log = logging.getLogger(__name__)

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
    ``path``: a local path (or ``file://`` URI) as listed, or an S3 object's full
    ``s3://bucket/key`` URI. ``start``/``end``: row groups (Parquet) or bytes (CSV, JSON,
    text) ``[start, end)``; an ``end`` of -1 means to the end of the file."""

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


def split_file(path: str, fmt: str, split_bytes: int = SPLIT_BYTES,
               configuration: Configuration | None = None) -> list[FileSplit]:
    """The splits of one file, a local path or an ``s3://`` URI (one split for a small file,
    or for one it cannot read: its reader then reports the file). Only metadata is read:
    a Parquet footer, or the size of any other file. ``configuration`` supplies the
    ``s3.*`` options.
    """
    try:
        fs, location = filesystem(path, configuration or Configuration())
        if fmt == "parquet":
            with pq.ParquetFile(location, filesystem=fs) as parquet:
                metadata = parquet.metadata
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
            total = _size(fs, location)
            ranges = [(start, min(start + split_bytes, total))
                      for start in range(0, total, split_bytes)]
    except (OSError, pa.ArrowInvalid, ConfigError):
        # Unreadable here: one split, whose reader reports the file (on its task).
        return [FileSplit(path, fmt)]
    if len(ranges) <= 1:
        return [FileSplit(path, fmt)]
    return [FileSplit(path, fmt, 0, start, end) for start, end in ranges]


def split_size(paths: list[str], parallelism: int, split_bytes: int = SPLIT_BYTES,
               configuration: Configuration | None = None) -> int:
    """How large the splits of a bounded read of ``paths`` (local paths or ``s3://`` URIs)
    should be, as Spark sizes its file partitions: an equal share of the total size per
    subtask, but at least :data:`MIN_SPLIT_BYTES` and at most ``split_bytes``.

    Example:
        >>> split_size([], 2, 64 << 20) == MIN_SPLIT_BYTES
        True
    """
    total = 0
    for path in paths:
        try:
            fs, location = filesystem(path, configuration or Configuration())
            total += _size(fs, location)
        except (OSError, ConfigError):
            continue  # its reader reports it
    share = -(-total // max(1, parallelism))
    return min(split_bytes, max(MIN_SPLIT_BYTES, share))


def _size(fs: pafs.FileSystem, location: str) -> int:
    """The size of a file, from the file system's metadata (an S3 HEAD request)."""
    info = fs.get_file_info(location)
    if info.type != pafs.FileType.File or info.size is None:
        msg = f"{location} is not a file"
        raise FileNotFoundError(msg)
    return int(info.size)


def list_files(path: str, fmt: str, configuration: Configuration | None = None) -> list[str]:
    """Data files of ``fmt`` under ``path`` (a file or a directory), sorted, hidden ones
    skipped; for an ``s3://`` URI see :func:`list_objects`."""
    if scheme(path) == "s3":
        return list_objects(path, fmt, configuration or Configuration())
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


def list_objects(uri: str, fmt: str, configuration: Configuration) -> list[str]:
    """The objects of ``fmt`` that ``uri`` (``s3://bucket/prefix``) names, as full URIs,
    sorted: the object ``prefix`` itself, or every object below ``prefix/`` whose key has
    no part starting with ``_`` or ``.`` below the prefix (hidden, as for local
    directories). S3 has no directories: ``s3://b/events/2024`` does not match
    ``events/2024-01.parquet``.

    Raises ConfigError for bad ``s3.*`` options, OSError when S3 refuses or cannot be
    reached (a missing bucket included).
    """
    fs, location = filesystem(uri, configuration)
    try:
        if "/" in location and fs.get_file_info(location).type == pafs.FileType.File:
            return [f"s3://{location}"]
        infos = fs.get_file_info(pafs.FileSelector(location, recursive=True,
                                                   allow_not_found=True))
    except OSError as err:
        msg = f"cannot list {uri}: {' '.join(str(err).split())}"
        raise OSError(msg) from err
    suffixes = FORMATS[fmt]
    found = []
    for info in infos:
        below = info.path[len(location):].lstrip("/").split("/")
        if info.type == pafs.FileType.File and below[-1].endswith(suffixes) and \
                not any(part.startswith(("_", ".")) for part in below):
            found.append(f"s3://{info.path}")
    return sorted(found)



class FileSplitEnumerator(SplitEnumerator):
    """Assigns each discovered file once; in continuous mode it lists again when asked.

    Its checkpoint is ``{"pending": [splits not handed out], "seen": [every path listed]}``;
    a restored enumerator does not list again in bounded mode (the files the job read are
    the ones it listed when it started) and never hands out a path it has seen.
    """

    def __init__(self, source: FileSource, checkpoint: dict[str, Any] | None = None,
                 parallelism: int = 1, configuration: Configuration | None = None) -> None:
        self._source = source
        self._parallelism = max(1, parallelism)
        #: The JobMaster's (with the job's): the s3.* options S3 is listed with.
        self._configuration = configuration or Configuration()
        self._seen: set[str] = set()
        self._pending: list[FileSplit] = []
        if checkpoint is None:
            self._discover()
            if source.bounded and source.lister is None and not self._seen:
                # The client checks this before submission, but not for S3 paths when it
                # holds no S3 keys, and files may vanish in between: a job that reads
                # nothing must fail, not finish with 0 rows.
                msg = (f"the {source.format} source path {', '.join(source.paths)} matches "
                       f"no {source.format} files as the JobMaster lists it (skipping names "
                       "that start with _ or .): point the source at the data")
                raise InvalidJobError(msg)
        else:
            self._pending = list(checkpoint["pending"])
            self._seen = set(checkpoint["seen"])

    def snapshot_state(self, checkpoint_id: CheckpointId) -> dict[str, Any]:
        return {"pending": list(self._pending), "seen": sorted(self._seen)}

    def _discover(self) -> None:
        config = self._configuration
        paths = [p for p in self._source.list(config) if p not in self._seen]
        split_bytes = getattr(self._source, "split_bytes", None)
        if split_bytes is None:
            split_bytes = split_size(paths, self._parallelism, configuration=config) \
                if self._source.bounded else SPLIT_BYTES
        for path in paths:
            self._seen.add(path)
            self._pending.extend(split_file(path, self._source.format, split_bytes, config))

    def request_splits(self, subtask_index: int) -> SplitAssignment:
        if not self._pending and not self._source.bounded:
            try:
                self._discover()
            except OSError as err:
                # A monitored prefix outlives a storage hiccup: the next request lists again.
                log.warning("listing %s failed, trying again in %.1f s: %s",
                            self._source.path, self._source.monitor_interval or 0, err)
        if self._pending:
            return SplitAssignment([self._pending.pop(0)])
        if self._source.bounded:
            return SplitAssignment(no_more_splits=True)
        return SplitAssignment(retry_after=self._source.monitor_interval)

    def add_splits_back(self, splits: list[Any], subtask_index: int) -> None:
        self._pending[:0] = splits


class FileReader(SourceReader):
    """Reads assigned files one after another in batches of at most ``batch_size`` rows;
    ``configuration`` supplies the ``s3.*`` options for ``s3://`` splits.

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "n.parquet")
        >>> pq.write_table(pa.table({"n": list(range(5))}), path)
        >>> reader = FileReader(batch_size=100)
        >>> reader.add_splits([FileSplit(path, "parquet", offset=3)])   # resume at row 3
        >>> [row.n for row in reader.poll().records()]
        [3, 4]
    """

    def __init__(self, batch_size: int, configuration: Configuration | None = None) -> None:
        self._batch_size = batch_size
        self._configuration = configuration or Configuration()
        self._splits: list[FileSplit] = []
        self._batches: Generator[pa.RecordBatch] | None = None
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

    def _open(self, split: FileSplit) -> Generator[pa.RecordBatch, None, None]:
        # A generator: the file opens at the first batch and closes after the last (or
        # when the reader closes), and a failure while reading, on S3 too (an object
        # deleted, access denied), names the file.
        try:
            yield from self._read(split)
        except _ChangedError:
            raise
        except (OSError, pa.ArrowInvalid, ConfigError) as err:
            # pyarrow's messages can span lines: the error is one line.
            msg = f"cannot read {split.format} file {split.path}: {' '.join(str(err).split())}"
            raise OSError(msg) from err

    def _read(self, split: FileSplit) -> Iterator[pa.RecordBatch]:
        fs, location = filesystem(split.path, self._configuration)
        size = self._batch_size
        if split.format == "parquet":
            with pq.ParquetFile(location, filesystem=fs) as parquet:
                end = parquet.num_row_groups if split.end < 0 else split.end
                # Whole row groups before the offset are never read, only counted.
                first, skip = split.start, split.offset
                while first < end and \
                        skip >= (rows := parquet.metadata.row_group(first).num_rows):
                    skip -= rows
                    first += 1
                batches: Iterator[pa.RecordBatch] = (
                    parquet.iter_batches(batch_size=size, row_groups=range(first, end))
                    if first < end else iter(()))
                yield from _skip_rows(batches, skip, split)
            return
        with fs.open_input_file(location) as f:
            yield from _skip_rows(_line_batches(f, split, size), split.offset, split)

    def position(self) -> tuple[Any, int] | None:
        return (self._splits[0].split_id, self._rows) if self._splits else None

    def snapshot_state(self, checkpoint_id: CheckpointId) -> list[Any]:
        if not self._splits:
            return []
        current, *rest = self._splits
        if self._batches is None:  # not opened yet: its offset is still the one it came with
            return [current, *rest]
        return [dataclasses.replace(current, offset=self._rows), *rest]

    def snapshot_state_unread(self, checkpoint_id: CheckpointId,
                              unread: int) -> list[Any] | None:
        # The last batch came from the first split, opened (a split is dropped only when
        # the batch after its last is asked for).
        if not self._splits or self._batches is None:
            return None
        current, *rest = self._splits
        return [dataclasses.replace(current, offset=self._rows - unread), *rest]

    def close(self) -> None:
        if self._batches is not None:
            self._batches.close()  # closes the file being read
            self._batches = None


class _ChangedError(OSError):
    """A file is shorter than what a restored reader had read from it."""


def _line_batches(f: pa.NativeFile, split: FileSplit, size: int) -> Iterator[pa.RecordBatch]:
    """The rows of a CSV, JSON-lines or text split from its start, read from ``f`` (a
    random-access file, local or S3)."""
    total = f.size()
    if total == 0:
        return iter(())  # no rows (pyarrow refuses an empty CSV or JSON-lines file)
    if split.format == "text":
        end = total if split.end < 0 else split.end
        return _rebatch(_text_batches(_lines(f, split.start, end)), size)
    if split.end >= 0:
        return _rebatch(_read_range(f, split), size)
    if split.format == "csv":
        return _rebatch(iter(pcsv.open_csv(f)), size)
    return _rebatch(iter(pjson.read_json(f).to_batches()), size)


def _skip_rows(batches: Iterator[pa.RecordBatch], skip: int,
               split: FileSplit) -> Iterator[pa.RecordBatch]:
    if not skip:
        yield from batches
        return
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
        raise _ChangedError(msg)


def _rebatch(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for offset in range(0, batch.num_rows, size):
            yield batch.slice(offset, size)


#: How much a search for a line end reads at a time (a ranged GET on S3).
_SCAN_BYTES = 64 << 10


def _line_end(f: pa.NativeFile, position: int, total: int) -> int:
    """The offset just after the first line end at or after ``position`` (``total``, the
    file's size, when no line ends there)."""
    while position < total:
        chunk: bytes = f.read_at(min(_SCAN_BYTES, total - position), position)
        newline = chunk.find(b"\n")
        if newline >= 0:
            return position + newline + 1
        if not chunk:
            break  # shorter than its size said: it changed while read
        position += len(chunk)
    return total


def _lines(f: pa.NativeFile, start: int, end: int) -> bytes:
    r"""The lines of the random-access file ``f`` (local or S3, read with ranged reads)
    that start in bytes ``[start, end)``: a line crossing ``start`` belongs to the range
    before, one crossing ``end`` to this one.

    Example:
        >>> data = pa.BufferReader(b"ab\ncd\nef\n")
        >>> _lines(data, 0, 4), _lines(data, 4, 9)
        (b'ab\ncd\n', b'ef\n')
    """
    total = f.size()
    end = min(end, total)
    # The line crossing start (if any) is the range before's: begin after its end.
    position = _line_end(f, start - 1, total) if start > 0 else 0
    if position >= end:
        return b""
    data = f.read_at(end - position, position)
    if not data.endswith(b"\n"):
        data += f.read_at(_line_end(f, end, total) - end, end)
    return bytes(data)


#: How much of a JSON-lines or CSV file its column types are inferred from.
_HEAD_BYTES = 1 << 20


def _read_range(f: pa.NativeFile, split: FileSplit) -> Iterator[pa.RecordBatch]:
    data = _lines(f, split.start, split.end)
    if not data.strip():
        return iter(())
    # Every split takes the types the start of its file gives (its first block, as
    # pyarrow's streaming CSV reader infers them for the whole file).
    head = pa.BufferReader(_lines(f, 0, _HEAD_BYTES))
    if split.format == "json":
        options = pjson.ParseOptions(explicit_schema=pjson.read_json(head).schema,
                                     unexpected_field_behavior="infer")
        return iter(pjson.read_json(pa.BufferReader(data),
                                    parse_options=options).to_batches())
    schema = pcsv.open_csv(head).schema
    read = pcsv.ReadOptions(column_names=schema.names, skip_rows=1 if split.start == 0 else 0)
    convert = pcsv.ConvertOptions(column_types=schema)
    return iter(pcsv.read_csv(pa.BufferReader(data), read_options=read,
                              convert_options=convert).to_batches())


def _text_batches(data: bytes) -> Iterator[pa.RecordBatch]:
    """The lines of a text file's range as one batch of strings (``read_text_file``)."""
    lines = data.decode("utf-8").splitlines()
    if lines:
        yield records_to_arrow(lines)
