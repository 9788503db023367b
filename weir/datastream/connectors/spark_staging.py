"""Stage the result of a PySpark query as immutable Parquet splits that weir can stream.

PySpark prepares input data; weir streams it. The two meet at a *staging location*: a local
directory path, a ``file://`` URI or ``s3://bucket/prefix``. Spark writes immutable Parquet
files there and weir's split enumerator lists them with :func:`list_committed_splits`.

Local staging: Spark writes into the staging root itself. S3 staging: Spark writes each
commit directory into a private temporary directory on the client (Spark here has no S3
file system: no hadoop-aws jars), then weir uploads its Parquet files through
:mod:`pyarrow.fs` (configured by the ``s3.*`` options, see :mod:`weir.core.object_store`)
and deletes the local copy. Readers and writers alike take the ``s3.*`` options as a
:class:`~weir.core.config.Configuration` (``config``; None: the ``WEIR_S3_*`` environment).

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
* Local: every commit directory is first written by Spark's own Parquet writer into a sibling
  work directory ``_tmp-batch-{N:012d}-<random>`` (Spark writes ``_SUCCESS`` last, on job
  commit) and then renamed into place, so a half-written directory never appears under its
  final name.
* S3 has no rename: the ``_SUCCESS`` object is the commit. Its Parquet files are uploaded
  to ``batch-{N:012d}/`` first and ``_SUCCESS`` is written LAST. Objects left there by an
  upload that crashed before its ``_SUCCESS`` are deleted before the directory is written
  again, so a committed directory holds exactly one attempt's files.
* ``_staging.json`` at the staging root is written before the first commit directory:
  ``{"format": "weir-spark-staging", "version": 1, "mode": "batch"|"streaming",
  "schema": <base64 of the Arrow IPC-serialized schema>, "created": <ISO time>,
  "host": <client host>, "pid": <client pid>, "job_id": <id or null>}``. The schema is
  exactly the one a reader gets from the splits' Parquet footers (schema-level metadata
  removed), so a reader can know it before the first split exists. Mode and schema never
  change; the client adds ``job_id`` when it submits the job (the JobMaster deletes only
  staging roots naming its job, and ``weir staging list`` shows whose a root is), and a
  JobMaster that keeps a root for a retained checkpoint adds ``retained``. See
  :func:`read_staging_manifest` and :func:`update_staging_manifest`.
* One writer per staging location. A local writer removes leftover ``_tmp-*`` work
  directories of a crashed predecessor when it starts.

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
import socket
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

from weir.core.config import Configuration
from weir.core.errors import UserError
from weir.core.files import fsync_directory, owned_private_directory
from weir.core.object_store import delete_tree, filesystem, scheme

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
    "delete_staging",
    "is_remote",
    "list_committed_splits",
    "read_staging_manifest",
    "spark_session",
    "stage_batch",
    "staging_filesystem",
    "update_staging_manifest",
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
        root: absolute local path of the staging root (its ``s3://`` URI on S3).
        files: the split files (absolute paths; ``s3://bucket/key`` URIs on S3) of the
            commit directory, in split order.
        rows: total number of rows over all splits, read from the Parquet footers.
    """

    root: str
    files: list[str]
    rows: int


@dataclass(frozen=True)
class StagingManifest:
    """Content of ``_staging.json``: the staging mode and the Arrow schema of every split,
    and who staged it: when (``created``, ISO 8601 UTC), on which host, by which process,
    for which job (``job_id``, None until submitted); ``retained`` says why the JobMaster
    kept it at job end (None: it did not)."""

    mode: str
    schema: pa.Schema
    created: str | None = None
    host: str | None = None
    pid: int | None = None
    job_id: str | None = None
    retained: str | None = None


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


def staging_filesystem(staging: str, config: Configuration | None = None
                       ) -> tuple[pafs.FileSystem, str, str]:
    """(file system, root path in it, prefix that turns a path in it back into a location).

    S3 takes the ``s3.*`` options of ``config`` (None: the ``WEIR_S3_*`` environment)."""
    if scheme(staging) == "s3":
        fs, root = filesystem(staging, config if config is not None else Configuration())
        return fs, root.rstrip("/"), "s3://"
    if "://" in staging:
        fs, root = pafs.FileSystem.from_uri(staging)
        return fs, root.rstrip("/") or "/", f"{scheme(staging)}://"
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(staging)), ""


def is_remote(staging: str) -> bool:
    """Whether ``staging`` is on S3 (Spark writes locally, weir uploads).

    >>> is_remote("s3://bucket/stage"), is_remote("/tmp/stage")
    (True, False)
    """
    return scheme(staging) == "s3"


def _reserved(name: str) -> bool:
    return name.startswith(("_", "."))


def _is_committed(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, SUCCESS_MARKER))


def _join(root: str, name: str) -> str:
    """Join with ``/`` (``pyarrow.fs`` paths use ``/`` on every platform)."""
    return f"{root.rstrip('/')}/{name}"


# ---------------------------------------------------------------------------------------------
# Reader side (pure pyarrow; no Spark)


def list_committed_splits(staging: str, config: Configuration | None = None) -> list[str]:
    """List the split files of all committed directories, in split order.

    Returns absolute local paths for a local ``staging`` path, and URIs with the same scheme
    for a URI (``file:///...``, ``s3://bucket/key``). A missing staging root has no splits.
    Uses only ``pyarrow.fs``, so it is cheap to call repeatedly from a split enumerator.
    ``config`` supplies the ``s3.*`` options (None: the ``WEIR_S3_*`` environment).

    Example::

        for path in list_committed_splits("/tmp/stage"):
            table = pyarrow.parquet.read_table(path)
    """
    fs, root, prefix = staging_filesystem(staging, config)
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


def read_staging_manifest(staging: str, config: Configuration | None = None
                          ) -> StagingManifest | None:
    """Read ``_staging.json`` of a staging location, or ``None`` if it is not written yet.

    Example::

        manifest = read_staging_manifest("/tmp/stage")
        if manifest is not None:
            print(manifest.mode, manifest.schema)
    """
    fs, root, _ = staging_filesystem(staging, config)
    document = _read_document(fs, root, staging)
    if document is None:
        return None
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(document["schema"])))
    except (KeyError, TypeError, ValueError, pa.ArrowException) as err:
        msg = f"{MANIFEST_NAME} in {staging!r} holds no readable schema: {err}"
        raise StagingError(msg) from err
    return StagingManifest(mode=document["mode"], schema=schema,
                           created=document.get("created"), host=document.get("host"),
                           pid=document.get("pid"), job_id=document.get("job_id"),
                           retained=document.get("retained"))


def _read_document(fs: pafs.FileSystem, root: str, staging: str) -> dict[str, Any] | None:
    try:
        with fs.open_input_stream(_join(root, MANIFEST_NAME)) as stream:
            document = json.loads(stream.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as err:
        msg = f"{MANIFEST_NAME} in {staging!r} is not a weir staging manifest: {err}"
        raise StagingError(msg) from err
    if not isinstance(document, dict) or document.get("format") != MANIFEST_FORMAT:
        msg = f"{MANIFEST_NAME} in {staging!r} is not a weir staging manifest"
        raise StagingError(msg)
    return document


def _write_document(fs: pafs.FileSystem, root: str, document: dict[str, Any]) -> None:
    """Write ``_staging.json`` whole: a local file is replaced atomically (temp file, fsync,
    rename); an S3 PUT is atomic by itself."""
    data = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = os.path.join(root, f"{TMP_PREFIX}{MANIFEST_NAME}-{uuid.uuid4().hex[:12]}")
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, os.path.join(root, MANIFEST_NAME))
        return
    with fs.open_output_stream(_join(root, MANIFEST_NAME)) as out:
        out.write(data)


def delete_staging(staging: str, config: Configuration | None = None) -> None:
    """Delete a staging root and everything under it; nothing if it does not exist.
    A local root that is a symbolic link is refused (OSError), never followed."""
    delete_tree(staging if is_remote(staging) else _local_root(staging),
                config if config is not None else Configuration())


def update_staging_manifest(staging: str, fields: Mapping[str, Any],
                            config: Configuration | None = None) -> bool:
    """Set ``fields`` (``job_id``, ``retained``) in the ``_staging.json`` of ``staging``;
    False if it has none. Mode, schema and format cannot be changed.

    Example::

        update_staging_manifest("s3://bucket/stage/q-1", {"job_id": job_id}, conf)
    """
    fixed = {"format", "version", "mode", "schema"} & set(fields)
    if fixed:
        msg = f"{', '.join(sorted(fixed))} of a staging manifest never change"
        raise ValueError(msg)
    fs, root, _ = staging_filesystem(staging, config)
    document = _read_document(fs, root, staging)
    if document is None:
        return False
    document.update(fields)
    _write_document(fs, root, document)
    return True


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


def _write_manifest(place: _Place, mode: str, schema: pa.Schema) -> None:
    """Write ``_staging.json`` once; an existing one must agree on mode and schema."""
    existing = read_staging_manifest(place.uri, place.config)
    if existing is not None:
        if existing.mode != mode:
            msg = (
                f"staging location {place.uri} holds a {existing.mode} result; cannot stage a "
                f"{mode} result there"
            )
            raise StagingError(msg)
        if not existing.schema.equals(schema):
            msg = (
                f"staging location {place.uri} holds splits with a different schema: "
                f"{existing.schema} != {schema}"
            )
            raise StagingError(msg)
        return
    document = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "mode": mode,
        "schema": _encode_schema(schema),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "job_id": None,
    }
    _write_document(place.fs, place.root, document)


def _check_mode(place: _Place, mode: str) -> None:
    existing = read_staging_manifest(place.uri, place.config)
    if existing is not None and existing.mode != mode:
        msg = (
            f"staging location {place.uri} holds a {existing.mode} result; cannot stage a "
            f"{mode} result there"
        )
        raise StagingError(msg)


def _probe_schema(spark: SparkSession, schema: StructType, root: str) -> pa.Schema:
    """The Arrow schema readers will see for ``schema``: write an empty frame, read its footer.
    ``root`` is a local directory to work in."""
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


@dataclass(frozen=True)
class _Place:
    """Where a writer stages: the file system, the root's path in it, and its location as
    given to readers (an absolute local path, or an ``s3://`` URI)."""

    fs: pafs.FileSystem
    root: str
    uri: str
    remote: bool
    config: Configuration | None

    def committed(self, name: str) -> bool:
        marker = _join(_join(self.root, name), SUCCESS_MARKER)
        return bool(self.fs.get_file_info(marker).type == pafs.FileType.File)

    def location(self, *names: str) -> str:
        path = self.root
        for name in names:
            path = _join(path, name)
        return ("s3://" + path) if self.remote else path


def _place(staging: str, config: Configuration | None) -> _Place:
    if is_remote(staging):
        fs, root = filesystem(staging, config if config is not None else Configuration())
        root = root.rstrip("/")
        return _Place(fs, root, "s3://" + root, True, config)
    root = _local_root(staging)
    return _Place(pafs.LocalFileSystem(), root, root, False, config)


def _work_dir() -> str:
    """A private (0700) local temporary directory for Spark to write into before upload."""
    return tempfile.mkdtemp(prefix="weir-spark-stage-")


def _upload(place: _Place, local_dir: str, name: str) -> list[str] | None:
    """Upload the Parquet files Spark wrote to ``local_dir`` as the commit directory
    ``name``, ``_SUCCESS`` last (on S3 the marker is the commit: there is no rename).
    Returns the uploaded file names, None if ``name`` was committed already."""
    if place.committed(name):
        return None
    final = _join(place.root, name)
    # Objects of an upload that crashed before its _SUCCESS: not ours to keep, and would
    # become visible with ours.
    place.fs.delete_dir_contents(final, missing_dir_ok=True)
    names = [os.path.basename(path) for path in _parquet_files(local_dir)]
    local = pafs.LocalFileSystem()
    for file_name in names:
        pafs.copy_files(os.path.join(local_dir, file_name), _join(final, file_name),
                        source_filesystem=local, destination_filesystem=place.fs)
    with place.fs.open_output_stream(_join(final, SUCCESS_MARKER)):
        pass
    return names


def stage_batch(
    query: Callable[[SparkSession], DataFrame],
    staging: str,
    *,
    spark: SparkSession,
    config: Configuration | None = None,
) -> StagedResult:
    """Run a batch query once and stage its result as the commit directory ``batch-000000000000``.

    ``query`` gets the session and returns a (non-streaming) DataFrame. The result is written
    by Spark's Parquet writer, one split per non-empty partition. The row count comes from
    the Parquet footers (no second Spark job). ``staging`` on S3: Spark writes into a
    private local temporary directory, deleted once its files are uploaded; ``config``
    supplies the ``s3.*`` options (None: the ``WEIR_S3_*`` environment).

    Raises:
        SparkQueryError: the query raised, returned something that is not a DataFrame,
            returned a streaming DataFrame, or its Spark job failed.
        StagingError: the staging location already holds a committed batch or a stream.
        ValueError: the staging location is not a local path, ``file://`` or ``s3://`` URI.

    Example::

        spark = spark_session("local[2]")
        result = stage_batch(lambda s: s.read.json("events.json").where("user IS NOT NULL"),
                             "/tmp/stage", spark=spark)
        print(result.rows, result.files)
    """
    place = _place(staging, config)
    if place.committed(BATCH_COMMIT_DIR):
        msg = (
            f"{place.location(BATCH_COMMIT_DIR)} is already committed and staged results are "
            "immutable; use a fresh staging location"
        )
        raise StagingError(msg)
    _check_mode(place, "batch")
    df = _run_query(query, spark, streaming=False)
    if place.remote:
        return _stage_batch_remote(query, df, place, spark)
    root = place.root
    final = os.path.join(root, BATCH_COMMIT_DIR)
    os.makedirs(root, exist_ok=True)
    _remove_stale_tmp(root)
    tmp = _new_tmp_dir(root, BATCH_COMMIT_DIR)
    try:
        _write_batch(query, df, tmp)
        files = _parquet_files(tmp)
        schema = _footer_schema(files[0]) if files else _probe_schema(spark, df.schema, root)
        _write_manifest(place, "batch", schema)
        if not _publish(tmp, final):
            msg = f"{final} was committed concurrently by another writer"
            raise StagingError(msg)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files = _parquet_files(final)
    rows = sum(pq.read_metadata(path).num_rows for path in files)
    return StagedResult(root=root, files=files, rows=rows)


def _write_batch(query: Callable[..., Any], df: DataFrame, local_dir: str) -> None:
    try:
        _write_parquet(df, local_dir)
    except Exception as exc:
        msg = f"Spark job of query {_query_name(query)} failed: {_one_line(exc)}"
        raise SparkQueryError(msg) from exc


def _stage_batch_remote(query: Callable[..., Any], df: DataFrame, place: _Place,
                        spark: SparkSession) -> StagedResult:
    work = _work_dir()
    try:
        local_dir = os.path.join(work, BATCH_COMMIT_DIR)
        _write_batch(query, df, local_dir)
        files = _parquet_files(local_dir)
        schema = _footer_schema(files[0]) if files else _probe_schema(spark, df.schema, work)
        rows = sum(pq.read_metadata(path).num_rows for path in files)
        _write_manifest(place, "batch", schema)
        names = _upload(place, local_dir, BATCH_COMMIT_DIR)
        if names is None:
            msg = f"{place.location(BATCH_COMMIT_DIR)} was committed concurrently by another writer"
            raise StagingError(msg)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return StagedResult(root=place.uri,
                        files=[place.location(BATCH_COMMIT_DIR, n) for n in names], rows=rows)


def write_micro_batch(batch_df: DataFrame, batch_id: int, staging: str,
                      config: Configuration | None = None) -> bool:
    """Write one micro-batch to ``batch-{batch_id:012d}``; the ``foreachBatch`` body.

    Idempotent by batch id: if the commit directory is already committed (a micro-batch
    replayed after a restart), nothing is written. Returns True if this call committed the
    directory, False if it was skipped as a replay. On S3, Spark writes into a private local
    temporary directory, deleted once its files are uploaded (``_SUCCESS`` last).

    Example::

        df.writeStream.foreachBatch(lambda b, n: write_micro_batch(b, n, "/tmp/stage")).start()
    """
    place = _place(staging, config)
    name = commit_dir_name(batch_id)
    if place.committed(name):
        return False
    if place.remote:
        work = _work_dir()
        try:
            local_dir = os.path.join(work, name)
            _write_parquet(batch_df, local_dir)
            return _upload(place, local_dir, name) is not None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    root = place.root
    os.makedirs(root, exist_ok=True)
    tmp = _new_tmp_dir(root, name)
    try:
        _write_parquet(batch_df, tmp)
        return _publish(tmp, os.path.join(root, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class StreamingStager:
    """Run a Structured Streaming query that stages each micro-batch as a commit directory.

    ``query`` gets the session and returns a streaming DataFrame (``spark.readStream...``).
    Micro-batches are triggered every ``trigger_interval_s`` seconds; Spark's checkpoint goes
    to ``checkpoint_dir`` (default ``<staging>/_spark_checkpoint``), so a new stager on the same
    staging location and checkpoint resumes where the last one stopped, and replayed
    micro-batches are skipped (see :func:`write_micro_batch`).

    Staging on S3 (``config`` supplies the ``s3.*`` options), each micro-batch is uploaded
    inside ``foreachBatch``, still idempotent by batch id. Spark's own checkpoint stays on
    this machine's disk: Spark here cannot write to S3 (no hadoop-aws jars), and only this
    stager's Spark driver ever reads it. Unless ``checkpoint_dir`` is given, it goes to a
    private temporary directory that :meth:`stop` deletes.

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
        config: Configuration | None = None,
    ) -> None:
        """Configure the stager; nothing runs until :meth:`start`."""
        if trigger_interval_s <= 0:
            msg = f"trigger_interval_s must be > 0, got {trigger_interval_s}"
            raise ValueError(msg)
        self._query_fn = query
        self._place = _place(staging, config)
        self._root = self._place.uri
        self._spark = spark
        self._trigger_ms = max(1, round(trigger_interval_s * 1000))
        #: A temporary checkpoint directory this stager made (deleted by stop()).
        self._own_checkpoint = checkpoint_dir is None and self._place.remote
        if checkpoint_dir is not None:
            self._checkpoint = _local_root(checkpoint_dir)
        elif self._place.remote:
            self._checkpoint = tempfile.mkdtemp(prefix="weir-spark-checkpoint-")
        else:
            self._checkpoint = os.path.join(self._root, CHECKPOINT_DIR_NAME)
        self._query: StreamingQuery | None = None
        self._progress = threading.Condition()
        self._committed = 0
        self._replayed = 0
        self._last_batch_id: int | None = None
        self._in_flight = 0  # foreachBatch callbacks running right now

    @property
    def root(self) -> str:
        """Absolute local path of the staging root (its ``s3://`` URI on S3)."""
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
            committed = write_micro_batch(batch_df, batch_id, self._root, self._place.config)
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
        _check_mode(self._place, "streaming")
        df = _run_query(self._query_fn, self._spark, streaming=True)
        if self._place.remote:
            work = _work_dir()
            try:
                schema = _probe_schema(self._spark, df.schema, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        else:
            os.makedirs(self._root, exist_ok=True)
            _remove_stale_tmp(self._root)
            schema = _probe_schema(self._spark, df.schema, self._root)
        _write_manifest(self._place, "streaming", schema)
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
        to call more than once. Deletes the temporary checkpoint directory the stager made
        for S3 staging.

        Raises:
            TimeoutError: the query, or its last callback, did not stop within ``timeout_s``.
            SparkQueryError: stopping failed and the query still runs.
        """
        query = self._query
        if query is None:
            self._drop_checkpoint()
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
        self._drop_checkpoint()

    def _drop_checkpoint(self) -> None:
        """Delete the temporary checkpoint this stager made (a stopped query's is useless:
        the staging root it belongs to is not resumed)."""
        if self._own_checkpoint:
            shutil.rmtree(self._checkpoint, ignore_errors=True)
