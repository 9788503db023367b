"""Stage the result of a PySpark query as immutable Parquet splits that weir can stream.

PySpark prepares input data; weir streams it. The two meet at a *staging location*: a local
directory path or a ``file://`` URI (``s3://`` is planned: readers already go through
``pyarrow.fs``, writers are local-only for now). Spark writes immutable Parquet files there and
weir's split enumerator lists them with :func:`list_committed_splits`.

Staging contract
----------------
* A **commit directory** is a directory directly under the staging root whose name does not
  start with ``_`` or ``.`` and that contains a ``_SUCCESS`` marker file. Only committed
  directories are visible to readers. Names starting with ``_`` or ``.`` are reserved for the
  writer (``_tmp-*`` work directories, ``_spark_checkpoint``, ``_staging.json``).
* Every ``*.parquet`` file (not starting with ``_`` or ``.``) in a commit directory is one
  split. Splits are ordered by (directory name, file name). A visible split never changes and
  never disappears while the staging location is in use; a commit directory never gains or
  loses files. A split may hold zero rows (Spark writes one schema-only file for an empty
  result or micro-batch).
* **Batch** (:func:`stage_batch`): the query's result is written as ONE commit directory named
  ``batch-000000000000``.
* **Streaming** (:class:`StreamingStager`): micro-batch ``N`` is written (via Spark's
  ``foreachBatch``) to ``batch-{N:012d}``. Writes are idempotent by batch id: if
  ``batch-{N:012d}/_SUCCESS`` already exists (a micro-batch replayed after a restart), the
  micro-batch is skipped, so nothing visible is ever rewritten.
* Every commit directory is first written by Spark's own Parquet writer into a sibling work
  directory ``_tmp-batch-{N:012d}-<random>`` (Spark writes ``_SUCCESS`` last, on job commit) and
  then renamed into place, so a half-written directory never appears under its final name.
* ``_staging.json`` at the staging root is written once, before the first commit directory:
  ``{"format": "weir-spark-staging", "version": 1, "mode": "batch"|"streaming",
  "schema": <base64 of the Arrow IPC-serialized schema>}``. The schema is exactly the one a
  reader gets from the splits' Parquet footers (schema-level metadata removed), so a reader can
  know it before the first split exists. See :func:`read_staging_manifest`.
* One writer per staging location. A writer removes leftover ``_tmp-*`` work directories of
  a crashed predecessor when it starts.

Spark sessions built by :func:`spark_session` write timestamps as ``TIMESTAMP_MICROS``
(read by pyarrow as ``timestamp[us, tz=UTC]``); a session built elsewhere should set
``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS`` too (Spark's default, INT96, is
read as ``timestamp[ns]``).

Example::

    spark = spark_session("local[2]")
    result = stage_batch(lambda s: s.range(1000).withColumnRenamed("id", "n"),
                         "/tmp/stage", spark=spark)
    assert list_committed_splits("/tmp/stage") == result.files
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from weir.core.errors import UserError
from weir.core.files import fsync_directory, owned_private_directory

if TYPE_CHECKING:  # pyspark is imported lazily: readers only need pyarrow.
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

__all__ = [
    "BATCH_COMMIT_DIR",
    "CHECKPOINT_DIR_NAME",
    "MANIFEST_NAME",
    "SUCCESS_MARKER",
    "TMP_PREFIX",
    "SparkQueryError",
    "StagedResult",
    "StagingError",
    "StagingManifest",
    "StreamingStager",
    "commit_dir_name",
    "default_staging_root",
    "list_committed_splits",
    "read_staging_manifest",
    "spark_session",
    "stage_batch",
    "write_micro_batch",
]

SUCCESS_MARKER = "_SUCCESS"
"""Marker file whose presence makes a commit directory visible."""
TMP_PREFIX = "_tmp-"
"""Prefix of the writer's work directories (never visible to readers)."""
MANIFEST_NAME = "_staging.json"
"""File at the staging root describing mode and schema."""
CHECKPOINT_DIR_NAME = "_spark_checkpoint"
"""Default directory (under the staging root) for Spark's streaming checkpoint."""
MANIFEST_FORMAT = "weir-spark-staging"
MANIFEST_VERSION = 1

_DEFAULT_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Stopping a streaming query during a micro-batch overflowed the default thread stack.
    "spark.driver.extraJavaOptions": "-Xss16m",
}
_LOG_LEVEL = "WARN"
_MAX_MESSAGE = 300


class StagingError(UserError):
    """The staging location cannot take this result: it holds a committed one, another
    mode's or another schema's, another writer committed there first, or it is no weir
    staging location. The message names the location; use a fresh one."""


class SparkQueryError(UserError):
    """The user's Spark query failed: it raised, returned no DataFrame or the wrong kind
    (batch or streaming), or its Spark job failed, wrote nothing, or could not start or
    stop. The message names the query and Spark's one-line cause."""


@dataclass(frozen=True)
class StagedResult:
    """Outcome of :func:`stage_batch`.

    Attributes:
        root: absolute local path of the staging root.
        files: the split files (absolute paths) of the commit directory, in split order.
        rows: total number of rows over all splits, read from the Parquet footers.
    """

    root: str
    files: list[str]
    rows: int


@dataclass(frozen=True)
class StagingManifest:
    """Content of ``_staging.json``: the staging mode and the Arrow schema of every split."""

    mode: str
    schema: pa.Schema


def commit_dir_name(batch_id: int) -> str:
    """Name of the commit directory for (micro-)batch ``batch_id``.

    >>> commit_dir_name(42)
    'batch-000000000042'
    """
    if batch_id < 0:
        msg = f"batch id must be >= 0, got {batch_id}"
        raise ValueError(msg)
    return f"batch-{batch_id:012d}"


BATCH_COMMIT_DIR = commit_dir_name(0)
"""The single commit directory written by :func:`stage_batch`."""


# ---------------------------------------------------------------------------------------------
# Spark session


def spark_session(
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "weir",
) -> SparkSession:
    """Build (or get) a quiet SparkSession bound to loopback.

    Applies the defaults weir relies on: driver host/bind address ``127.0.0.1``, no UI, 4
    shuffle partitions, Arrow enabled, UTC session time zone, ``TIMESTAMP_MICROS`` Parquet
    timestamps and ``-Xss16m`` for the driver JVM. ``conf`` overrides them (a user
    ``spark.driver.extraJavaOptions`` gets ``-Xss16m`` appended unless it sets ``-Xss``).
    Sets the environment variables ``SPARK_LOCAL_IP=127.0.0.1`` and
    ``PYSPARK_PYTHON=sys.executable`` unless already set. If a session already exists in this
    process, Spark returns it and only runtime SQL settings take effect.

    Example::

        spark = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"})
        spark.range(3).count()
        spark.stop()
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = dict(_DEFAULT_CONF)
    for key, value in (conf or {}).items():
        if key == "spark.driver.extraJavaOptions" and "-Xss" not in value:
            value = f"{value} -Xss16m".strip()
        settings[key] = str(value)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(_LOG_LEVEL)
    return session


# ---------------------------------------------------------------------------------------------
# Locations


def default_staging_root(temp_dir: str | None = None) -> str:
    """The staging root when none is configured: ``weir-staging-<uid>`` in ``temp_dir``
    (default ``$TMPDIR`` or ``/tmp``), this user's alone.

    Other users can create names in ``/tmp`` too, e.g. a symlink where weir would stage
    (redirecting the data into their directory, or deletions into one of ours). So the
    directory is created 0700 and, if it exists, used only when ``os.lstat`` shows a real
    directory owned by this user with mode 0700; otherwise UnsafeDirectoryError (a
    UserError) names it and the fix.

    Example::

        root = default_staging_root()      # e.g. /tmp/weir-staging-1000, mode 0700
    """
    directory = os.path.join(temp_dir or tempfile.gettempdir(), f"weir-staging-{os.geteuid()}")
    return str(owned_private_directory(
        directory, fix="remove it, or set spark.staging.dir to a directory of your own"))


def _local_root(staging: str) -> str:
    """Absolute local path of a local path or ``file://`` URI; other schemes are rejected."""
    if not staging:
        msg = "staging location must not be empty"
        raise ValueError(msg)
    parsed = urlparse(staging)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            msg = f"file:// URI with a remote host is not supported: {staging!r}"
            raise ValueError(msg)
        path = unquote(parsed.path)
    elif "://" in staging:
        msg = (
            f"unsupported staging location {staging!r}: writers support local paths and "
            "file:// URIs only (for now)"
        )
        raise ValueError(msg)
    else:
        path = staging
    return os.path.abspath(os.path.expanduser(path))


def _spark_path(local_path: str) -> str:
    """Path for Spark's Hadoop file system: explicit ``file://`` so no default FS applies."""
    return "file://" + local_path


def _reader_fs(staging: str) -> tuple[pafs.FileSystem, str, str]:
    """(file system, root path in it, prefix that turns a path in it back into a location)."""
    if "://" in staging:
        fs, root = pafs.FileSystem.from_uri(staging)
        scheme = staging.split("://", 1)[0]
        return fs, root.rstrip("/") or "/", f"{scheme}://"
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(staging)), ""


def _reserved(name: str) -> bool:
    return name.startswith(("_", "."))


def _is_committed(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, SUCCESS_MARKER))


def _join(root: str, name: str) -> str:
    """Join with ``/`` (``pyarrow.fs`` paths use ``/`` on every platform)."""
    return f"{root.rstrip('/')}/{name}"


# ---------------------------------------------------------------------------------------------
# Reader side (pure pyarrow; no Spark)


def list_committed_splits(staging: str) -> list[str]:
    """List the split files of all committed directories, in split order.

    Returns absolute local paths for a local ``staging`` path, and URIs with the same scheme
    for a URI (``file:///...``, ``s3://bucket/...``). A missing staging root has no splits.
    Uses only ``pyarrow.fs``, so it is cheap to call repeatedly from a split enumerator.

    Example::

        for path in list_committed_splits("/tmp/stage"):
            table = pyarrow.parquet.read_table(path)
    """
    fs, root, prefix = _reader_fs(staging)
    entries = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True, recursive=False))
    directories = sorted(
        e.base_name
        for e in entries
        if e.type == pafs.FileType.Directory and not _reserved(e.base_name)
    )
    splits: list[str] = []
    for name in directories:
        directory = _join(root, name)
        if fs.get_file_info(_join(directory, SUCCESS_MARKER)).type != pafs.FileType.File:
            continue  # not committed (yet)
        files = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        names = sorted(
            f.base_name
            for f in files
            if f.type == pafs.FileType.File
            and f.base_name.endswith(".parquet")
            and not _reserved(f.base_name)
        )
        splits.extend(prefix + _join(directory, n) for n in names)
    return splits


def read_staging_manifest(staging: str) -> StagingManifest | None:
    """Read ``_staging.json`` of a staging location, or ``None`` if it is not written yet.

    Example::

        manifest = read_staging_manifest("/tmp/stage")
        if manifest is not None:
            print(manifest.mode, manifest.schema)
    """
    fs, root, _ = _reader_fs(staging)
    try:
        with fs.open_input_stream(_join(root, MANIFEST_NAME)) as stream:
            document = json.loads(stream.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    if document.get("format") != MANIFEST_FORMAT:
        msg = f"{MANIFEST_NAME} in {staging!r} is not a weir staging manifest"
        raise StagingError(msg)
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(document["schema"])))
    return StagingManifest(mode=document["mode"], schema=schema)


# ---------------------------------------------------------------------------------------------
# Writer side


def _one_line(exc: BaseException) -> str:
    """A short one-line description of an exception (Spark's are long and multi-line)."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[0] if lines else type(exc).__name__
    if len(line) > _MAX_MESSAGE:
        line = line[: _MAX_MESSAGE - 3] + "..."
    return line


def _query_name(query: Callable[..., Any]) -> str:
    return getattr(query, "__qualname__", None) or repr(query)


def _run_query(
    query: Callable[[SparkSession], DataFrame], spark: SparkSession, *, streaming: bool
) -> DataFrame:
    """Call the user's query and check it returned a (streaming or batch) DataFrame."""
    from pyspark.sql import DataFrame

    name = _query_name(query)
    try:
        df = query(spark)
    except Exception as exc:
        msg = f"query {name} raised {type(exc).__name__}: {_one_line(exc)}"
        raise SparkQueryError(msg) from exc
    if not isinstance(df, DataFrame):
        msg = (
            f"query {name} returned {type(df).__module__}.{type(df).__qualname__}, "
            "expected a pyspark.sql.DataFrame"
        )
        raise SparkQueryError(msg)
    if df.isStreaming and not streaming:
        msg = (
            f"query {name} returned a streaming DataFrame; stage_batch needs a batch "
            "DataFrame (use StreamingStager for streams)"
        )
        raise SparkQueryError(msg)
    if streaming and not df.isStreaming:
        msg = (
            f"query {name} returned a batch DataFrame; StreamingStager needs a streaming "
            "DataFrame from spark.readStream (use stage_batch for batch queries)"
        )
        raise SparkQueryError(msg)
    return df


def _parquet_files(directory: str) -> list[str]:
    return sorted(
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if n.endswith(".parquet") and not _reserved(n)
    )


def _footer_schema(path: str) -> pa.Schema:
    return pq.read_schema(path).remove_metadata()


def _write_parquet(df: DataFrame, local_dir: str) -> None:
    """Write ``df`` with Spark's Parquet writer; make sure the commit left ``_SUCCESS``."""
    df.write.mode("errorifexists").parquet(_spark_path(local_dir))
    marker = os.path.join(local_dir, SUCCESS_MARKER)
    if not os.path.isfile(marker):
        # mapreduce.fileoutputcommitter.marksuccessfuljobs=false: the job did commit, so mark it.
        with open(marker, "wb"):
            pass


def _new_tmp_dir(root: str, name: str) -> str:
    return os.path.join(root, f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:12]}")


def _publish(tmp: str, final: str) -> bool:
    """Rename a written work directory into place; False if ``final`` was committed already."""
    if os.path.isdir(final):
        if _is_committed(final):
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        shutil.rmtree(final)  # an invisible leftover that is not ours to keep
    os.rename(tmp, final)
    fsync_directory(os.path.dirname(final))
    return True


def _remove_stale_tmp(root: str) -> None:
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith(TMP_PREFIX) and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)


def _encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _write_manifest(root: str, mode: str, schema: pa.Schema) -> None:
    """Write ``_staging.json`` once; an existing one must agree on mode and schema."""
    existing = read_staging_manifest(root)
    if existing is not None:
        if existing.mode != mode:
            msg = (
                f"staging location {root} holds a {existing.mode} result; cannot stage a "
                f"{mode} result there"
            )
            raise StagingError(msg)
        if not existing.schema.equals(schema):
            msg = (
                f"staging location {root} holds splits with a different schema: "
                f"{existing.schema} != {schema}"
            )
            raise StagingError(msg)
        return
    document = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "mode": mode,
        "schema": _encode_schema(schema),
    }
    tmp = os.path.join(root, f"{TMP_PREFIX}{MANIFEST_NAME}-{uuid.uuid4().hex[:12]}")
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(document, out, indent=2)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, os.path.join(root, MANIFEST_NAME))


def _check_mode(root: str, mode: str) -> None:
    existing = read_staging_manifest(root)
    if existing is not None and existing.mode != mode:
        msg = (
            f"staging location {root} holds a {existing.mode} result; cannot stage a "
            f"{mode} result there"
        )
        raise StagingError(msg)


def _probe_schema(spark: SparkSession, schema: StructType, root: str) -> pa.Schema:
    """The Arrow schema readers will see for ``schema``: write an empty frame, read its footer."""
    tmp = _new_tmp_dir(root, "schema")
    try:
        _write_parquet(spark.createDataFrame([], schema), tmp)
        files = _parquet_files(tmp)
        if not files:
            msg = f"Spark wrote no Parquet file for an empty frame in {tmp}"
            raise SparkQueryError(msg)
        return _footer_schema(files[0])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stage_batch(
    query: Callable[[SparkSession], DataFrame],
    staging: str,
    *,
    spark: SparkSession,
) -> StagedResult:
    """Run a batch query once and stage its result as the commit directory ``batch-000000000000``.

    ``query`` gets the session and returns a (non-streaming) DataFrame. The result is written
    by Spark's Parquet writer, one split per non-empty partition. The row count comes from
    the Parquet footers (no second Spark job).

    Raises:
        SparkQueryError: the query raised, returned something that is not a DataFrame,
            returned a streaming DataFrame, or its Spark job failed.
        StagingError: the staging location already holds a committed batch or a stream.
        ValueError: the staging location is not a local path or ``file://`` URI.

    Example::

        spark = spark_session("local[2]")
        result = stage_batch(lambda s: s.read.json("events.json").where("user IS NOT NULL"),
                             "/tmp/stage", spark=spark)
        print(result.rows, result.files)
    """
    root = _local_root(staging)
    final = os.path.join(root, BATCH_COMMIT_DIR)
    if _is_committed(final):
        msg = (
            f"{final} is already committed and staged results are immutable; "
            "use a fresh staging location"
        )
        raise StagingError(msg)
    _check_mode(root, "batch")
    df = _run_query(query, spark, streaming=False)
    os.makedirs(root, exist_ok=True)
    _remove_stale_tmp(root)
    tmp = _new_tmp_dir(root, BATCH_COMMIT_DIR)
    try:
        try:
            _write_parquet(df, tmp)
        except Exception as exc:
            msg = f"Spark job of query {_query_name(query)} failed: {_one_line(exc)}"
            raise SparkQueryError(msg) from exc
        files = _parquet_files(tmp)
        schema = _footer_schema(files[0]) if files else _probe_schema(spark, df.schema, root)
        _write_manifest(root, "batch", schema)
        if not _publish(tmp, final):
            msg = f"{final} was committed concurrently by another writer"
            raise StagingError(msg)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files = _parquet_files(final)
    rows = sum(pq.read_metadata(path).num_rows for path in files)
    return StagedResult(root=root, files=files, rows=rows)


def write_micro_batch(batch_df: DataFrame, batch_id: int, staging: str) -> bool:
    """Write one micro-batch to ``batch-{batch_id:012d}``; the ``foreachBatch`` body.

    Idempotent by batch id: if the commit directory is already committed (a micro-batch
    replayed after a restart), nothing is written. Returns True if this call committed the
    directory, False if it was skipped as a replay.

    Example::

        df.writeStream.foreachBatch(lambda b, n: write_micro_batch(b, n, "/tmp/stage")).start()
    """
    root = _local_root(staging)
    final = os.path.join(root, commit_dir_name(batch_id))
    if _is_committed(final):
        return False
    os.makedirs(root, exist_ok=True)
    tmp = _new_tmp_dir(root, commit_dir_name(batch_id))
    try:
        _write_parquet(batch_df, tmp)
        return _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class StreamingStager:
    """Run a Structured Streaming query that stages each micro-batch as a commit directory.

    ``query`` gets the session and returns a streaming DataFrame (``spark.readStream...``).
    Micro-batches are triggered every ``trigger_interval_s`` seconds; Spark's checkpoint goes
    to ``checkpoint_dir`` (default ``<staging>/_spark_checkpoint``), so a new stager on the same
    staging location and checkpoint resumes where the last one stopped, and replayed
    micro-batches are skipped (see :func:`write_micro_batch`).

    Example::

        spark = spark_session("local[2]")
        stager = StreamingStager(
            lambda s: s.readStream.format("rate").option("rowsPerSecond", 50).load(),
            "/tmp/stream-stage", spark=spark, trigger_interval_s=0.5,
        ).start()
        stager.wait_for_batches(3, timeout_s=60)
        stager.stop()
    """

    def __init__(
        self,
        query: Callable[[SparkSession], DataFrame],
        staging: str,
        *,
        spark: SparkSession,
        trigger_interval_s: float = 1.0,
        checkpoint_dir: str | None = None,
    ) -> None:
        """Configure the stager; nothing runs until :meth:`start`."""
        if trigger_interval_s <= 0:
            msg = f"trigger_interval_s must be > 0, got {trigger_interval_s}"
            raise ValueError(msg)
        self._query_fn = query
        self._root = _local_root(staging)
        self._spark = spark
        self._trigger_ms = max(1, round(trigger_interval_s * 1000))
        self._checkpoint = (
            _local_root(checkpoint_dir)
            if checkpoint_dir is not None
            else os.path.join(self._root, CHECKPOINT_DIR_NAME)
        )
        self._query: StreamingQuery | None = None
        self._progress = threading.Condition()
        self._committed = 0
        self._replayed = 0
        self._last_batch_id: int | None = None
        self._in_flight = 0  # foreachBatch callbacks running right now

    @property
    def root(self) -> str:
        """Absolute local path of the staging root."""
        return self._root

    @property
    def checkpoint_dir(self) -> str:
        """Absolute local path of Spark's streaming checkpoint."""
        return self._checkpoint

    @property
    def batches_committed(self) -> int:
        """Number of commit directories this stager created since :meth:`start`.

        Replayed micro-batches that were already committed are not counted.
        """
        with self._progress:
            return self._committed

    @property
    def batches_replayed(self) -> int:
        """Number of micro-batches skipped because their directory was already committed."""
        with self._progress:
            return self._replayed

    @property
    def last_batch_id(self) -> int | None:
        """Id of the last micro-batch handled (committed or skipped), if any."""
        with self._progress:
            return self._last_batch_id

    @property
    def is_active(self) -> bool:
        """Whether the streaming query is running."""
        return self._query is not None and bool(self._query.isActive)

    def _write(self, batch_df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` callback (runs on py4j's callback thread)."""
        committed: bool | None = None
        with self._progress:
            self._in_flight += 1
        try:
            committed = write_micro_batch(batch_df, batch_id, self._root)
        finally:  # an exception fails the query; waiters must wake up to notice
            with self._progress:
                self._in_flight -= 1
                if committed is not None:
                    self._committed += int(committed)
                    self._replayed += int(not committed)
                    self._last_batch_id = batch_id
                self._progress.notify_all()

    def start(self) -> StreamingStager:
        """Start the streaming query; returns ``self``.

        Raises:
            SparkQueryError: the query raised, did not return a streaming DataFrame, or Spark
                refused to start it.
            StagingError: the staging location holds a batch result or another schema.
            RuntimeError: already started.
        """
        if self._query is not None:
            msg = "StreamingStager.start() called twice"
            raise RuntimeError(msg)
        _check_mode(self._root, "streaming")
        df = _run_query(self._query_fn, self._spark, streaming=True)
        os.makedirs(self._root, exist_ok=True)
        _remove_stale_tmp(self._root)
        _write_manifest(self._root, "streaming", _probe_schema(self._spark, df.schema, self._root))
        writer = (
            df.writeStream.foreachBatch(self._write)
            .trigger(processingTime=f"{self._trigger_ms} milliseconds")
            .option("checkpointLocation", _spark_path(self._checkpoint))
        )
        try:
            self._query = writer.start()
        except Exception as exc:
            msg = f"streaming query {_query_name(self._query_fn)} failed to start: {_one_line(exc)}"
            raise SparkQueryError(msg) from exc
        return self

    def wait_for_batches(self, count: int, timeout_s: float) -> bool:
        """Block until :attr:`batches_committed` >= ``count``; False on timeout or failure.

        Returns early (False) if the query stopped or failed; see :meth:`exception`.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            with self._progress:
                if self._committed >= count:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # Woken by every commit; the slice bounds how late a query failure is noticed.
                self._progress.wait(min(remaining, 0.25))
                if self._committed >= count:
                    return True
            if not self.is_active:  # a JVM call: made without holding the lock
                return False

    def exception(self) -> BaseException | None:
        """The exception that terminated the streaming query, or None."""
        if self._query is None:
            return None
        return self._query.exception()

    def stop(self, timeout_s: float = 30) -> None:
        """Stop the streaming query, waiting at most ``timeout_s`` seconds.

        Also waits for a ``foreachBatch`` callback still running on the Python side (Spark
        stops waiting for it when interrupted), so no commit directory appears after this
        returns. A micro-batch in flight is either committed completely or not at all; the
        next stager on the same checkpoint replays it and skips it if it was committed. Safe
        to call more than once.

        Raises:
            TimeoutError: the query, or its last callback, did not stop within ``timeout_s``.
            SparkQueryError: stopping failed and the query still runs.
        """
        query = self._query
        if query is None:
            return
        deadline = time.monotonic() + timeout_s
        errors: list[BaseException] = []

        def _stop() -> None:
            try:
                query.stop()
            except BaseException as exc:  # reported below unless the query did stop
                errors.append(exc)

        stopper = threading.Thread(target=_stop, name="weir-spark-stager-stop", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        if stopper.is_alive():
            msg = f"streaming query did not stop within {timeout_s} s"
            raise TimeoutError(msg)
        with self._progress:
            self._progress.notify_all()
            while self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    msg = f"a micro-batch write was still running {timeout_s} s after stop()"
                    raise TimeoutError(msg)
                self._progress.wait(remaining)
        if errors:
            if query.isActive:
                msg = f"stopping the streaming query failed: {_one_line(errors[0])}"
                raise SparkQueryError(msg) from errors[0]
            warnings.warn(
                f"streaming query stopped, but stop() reported: {_one_line(errors[0])}",
                RuntimeWarning,
                stacklevel=2,
            )
