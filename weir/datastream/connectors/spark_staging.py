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
* **Batch** (``stage_batch``): the query's result is written as ONE commit directory named
  ``batch-000000000000``.
* **Streaming** (``StreamingStager``): micro-batch ``N`` is written (via Spark's
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

Spark sessions built by ``spark_session`` write timestamps as ``TIMESTAMP_MICROS``
(read by pyarrow as ``timestamp[us, tz=UTC]``); a session built elsewhere should set
``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS`` too (Spark's default, INT96, is
read as ``timestamp[ns]``).

The writer is :mod:`weir.datastream.connectors.spark_stager`. Example::

    from weir.datastream.connectors.spark_stager import spark_session, stage_batch

    spark = spark_session("local[2]")
    result = stage_batch(lambda s: s.range(1000).withColumnRenamed("id", "n"),
                         "/tmp/stage", spark=spark)
    assert list_committed_splits("/tmp/stage") == result.files
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from weir.core.config import Configuration
from weir.core.errors import UserError
from weir.core.files import owned_private_directory
from weir.core.object_store import delete_tree, filesystem, scheme

if TYPE_CHECKING:  # pyspark is imported lazily: readers only need pyarrow.
    pass

__all__ = [
    "BATCH_COMMIT_DIR",
    "CHECKPOINT_DIR_NAME",
    "MANIFEST_NAME",
    "SUCCESS_MARKER",
    "TMP_PREFIX",
    "StagedResult",
    "StagingError",
    "StagingManifest",
    "commit_dir_name",
    "default_staging_root",
    "delete_staging",
    "is_remote",
    "is_reserved",
    "join_location",
    "list_committed_splits",
    "local_root",
    "read_staging_manifest",
    "staging_filesystem",
    "update_staging_manifest",
    "write_document",
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



class StagingError(UserError):
    """The staging location cannot take this result: it holds a committed one, another
    mode's or another schema's, another writer committed there first, or it is no weir
    staging location. The message names the location; use a fresh one."""


@dataclass(frozen=True)
class StagedResult:
    """Outcome of ``stage_batch``.

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
"""The single commit directory written by ``stage_batch``."""


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


def local_root(staging: str) -> str:
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


def is_reserved(name: str) -> bool:
    return name.startswith(("_", "."))


def join_location(root: str, name: str) -> str:
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
        if e.type == pafs.FileType.Directory and not is_reserved(e.base_name)
    )
    splits: list[str] = []
    for name in directories:
        directory = join_location(root, name)
        if fs.get_file_info(join_location(directory, SUCCESS_MARKER)).type != pafs.FileType.File:
            continue  # not committed (yet)
        files = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        names = sorted(
            f.base_name
            for f in files
            if f.type == pafs.FileType.File
            and f.base_name.endswith(".parquet")
            and not is_reserved(f.base_name)
        )
        splits.extend(prefix + join_location(directory, n) for n in names)
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
        with fs.open_input_stream(join_location(root, MANIFEST_NAME)) as stream:
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


def write_document(fs: pafs.FileSystem, root: str, document: dict[str, Any]) -> None:
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
    with fs.open_output_stream(join_location(root, MANIFEST_NAME)) as out:
        out.write(data)


def delete_staging(staging: str, config: Configuration | None = None) -> None:
    """Delete a staging root and everything under it; nothing if it does not exist.
    A local root that is a symbolic link is refused (OSError), never followed."""
    delete_tree(staging if is_remote(staging) else local_root(staging),
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
    write_document(fs, root, document)
    return True

