"""Run a PySpark query and stage its result under the staging contract of
:mod:`weir.datastream.connectors.spark_staging`: the writer side, on the client.

A batch query (:func:`stage_batch`) is written as one commit directory; a streaming query
(:class:`StreamingStager`) as one commit directory per micro-batch, written inside Spark's
``foreachBatch`` and idempotent by batch id (:func:`write_micro_batch`). Spark writes into
the staging root itself when it is local; for ``s3://`` it writes into a private temporary
directory of the client and weir uploads the Parquet files, ``_SUCCESS`` last (S3 has no
rename: the marker is the commit). Spark's own streaming checkpoint always stays on the
client's disk: only the client's Spark driver reads it, and this Spark has no S3 file
system.

Example::

    spark = spark_session("local[2]")
    result = stage_batch(lambda s: s.range(1000).withColumnRenamed("id", "n"),
                         "/tmp/stage", spark=spark)
    assert list_committed_splits("/tmp/stage") == result.files
"""

from __future__ import annotations

import base64
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

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from weir.core.config import Configuration
from weir.core.errors import UserError
from weir.core.files import fsync_directory
from weir.core.object_store import filesystem

if TYPE_CHECKING:  # pyspark is imported lazily: readers only need pyarrow.
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

from weir.datastream.connectors.spark_staging import (
    BATCH_COMMIT_DIR,
    CHECKPOINT_DIR_NAME,
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    SUCCESS_MARKER,
    TMP_PREFIX,
    StagedResult,
    StagingError,
    commit_dir_name,
    is_remote,
    is_reserved,
    join_location,
    local_root,
    read_staging_manifest,
    write_document,
)

__all__ = ["SparkQueryError", "StreamingStager", "spark_session", "stage_batch",
           "write_micro_batch"]

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


class SparkQueryError(UserError):
    """The user's Spark query failed: it raised, returned no DataFrame or the wrong kind
    (batch or streaming), or its Spark job failed, wrote nothing, or could not start or
    stop. The message names the query and Spark's one-line cause."""



def _is_committed(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, SUCCESS_MARKER))



def _spark_path(local_path: str) -> str:
    """Path for Spark's Hadoop file system: explicit ``file://`` so no default FS applies."""
    return "file://" + local_path



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
        if n.endswith(".parquet") and not is_reserved(n)
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
    write_document(place.fs, place.root, document)


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
        marker = join_location(join_location(self.root, name), SUCCESS_MARKER)
        return bool(self.fs.get_file_info(marker).type == pafs.FileType.File)

    def location(self, *names: str) -> str:
        path = self.root
        for name in names:
            path = join_location(path, name)
        return ("s3://" + path) if self.remote else path


def _place(staging: str, config: Configuration | None) -> _Place:
    if is_remote(staging):
        fs, root = filesystem(staging, config if config is not None else Configuration())
        root = root.rstrip("/")
        return _Place(fs, root, "s3://" + root, True, config)
    root = local_root(staging)
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
    final = join_location(place.root, name)
    # Objects of an upload that crashed before its _SUCCESS: not ours to keep, and would
    # become visible with ours.
    place.fs.delete_dir_contents(final, missing_dir_ok=True)
    names = [os.path.basename(path) for path in _parquet_files(local_dir)]
    local = pafs.LocalFileSystem()
    for file_name in names:
        pafs.copy_files(os.path.join(local_dir, file_name), join_location(final, file_name),
                        source_filesystem=local, destination_filesystem=place.fs)
    with place.fs.open_output_stream(join_location(final, SUCCESS_MARKER)):
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
            self._checkpoint = local_root(checkpoint_dir)
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
