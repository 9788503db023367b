r"""``env.from_spark(query)``: Spark prepares the input, weir streams it (weir's own
connector, next to PyFlink's).

Spark runs on the client (where the job program runs), once per job: a batch query is
staged as Parquet splits before the job is submitted; a streaming query keeps staging one
commit directory per micro-batch while the job runs. The job reads the staging location
with the file source's split enumerator and readers, so a reader's position is always
(split, row offset). See :mod:`weir.datastream.connectors.spark_staging` for the staging
contract.

Where: each source stages into its own directory ``<spark.staging.dir>/<query>-<random>``
(the *staging root*). ``spark.staging.dir`` is an absolute local path, ``file:///path`` or
``s3://bucket/prefix``; anything else is refused at submission. Unset, it is
``<state.checkpoints.dir>/spark-staging`` when the checkpoints go to S3 (TaskExecutors on
every host can read it), else the local cluster's ``staging/`` directory, else a private
temporary directory; a local default while the JobMaster is on another host is logged as a
warning (TaskExecutors on other hosts cannot read this machine's disk). On S3, the client
uploads with its ``s3.*`` options, while the JobMaster lists micro-batches and the
TaskExecutors read with their own (no secret travels in the job graph).

Lifetime: the client writes the job id into the root's ``_staging.json`` and lists the
roots in the job's configuration (``spark.staging.job-roots``); the JobMaster deletes them
when the job reaches FINISHED, CANCELED or FAILED, also after a ``--detached`` submission
whose client is long gone (:mod:`weir.jobmaster.staging_cleanup`). When the job's
checkpoints are retained at its end, its staging roots are kept too (a retained
checkpoint's readers point into them) and marked ``retained``. A root staged for a job
that was never submitted (the submission failed) is deleted by the client; a client killed
before or during submission leaves its root behind, which ``weir staging list|clean``
finds (:mod:`weir.cli.staging`). A location given as ``from_spark(..., staging=PATH)`` is
the caller's and never deleted.

Checkpoints: staged splits are immutable Parquet files, so a reader's state is its
unfinished :class:`~weir.datastream.connectors.file_splits.FileSplit`\ s with the rows
already read (``offset``), and a restored reader skips exactly those rows. The
enumerator's checkpoint holds the splits not handed out yet and every split it has seen: a
restored batch source reads the files it staged at submission (Spark does not run again),
and a restored streaming source never hands out a micro-batch twice. The staging location
must therefore outlive the checkpoints that point into it.

Example:
    >>> SparkSource(lambda spark: spark.range(10)).streaming
    False
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from weir.checkpoint import options as checkpoint_options
from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import ConfigError, InvalidJobError, UserError
from weir.core.execution import get_execution_context
from weir.core.object_store import location, scheme
from weir.core.source import Source
from weir.datastream.connectors.base import PreparedSource
from weir.datastream.connectors.file_system import FileSource

if TYPE_CHECKING:  # pyspark is imported lazily, on the client only
    from pyspark.sql import DataFrame, SparkSession

    from weir.datastream.connectors.spark_stager import StreamingStager
    from weir.proto import jobgraph_pb2

log = logging.getLogger(__name__)

#: Under an ``s3://`` ``state.checkpoints.dir``: where staging roots go by default.
CHECKPOINT_STAGING_DIR = "spark-staging"


class StagedFiles:
    """A fixed list of staged split files (the lister of a batch Spark source)."""

    def __init__(self, files: list[str]) -> None:
        self.files = list(files)

    def __call__(self, path: str) -> list[str]:
        return list(self.files)


def committed_splits(path: str) -> list[str]:
    """The lister of a streaming Spark source: every committed micro-batch's files."""
    from weir.datastream.connectors.spark_staging import list_committed_splits

    return list_committed_splits(path)


class SparkStagedSource(FileSource):
    """The file source a prepared Spark source becomes. ``staging_root`` is where it
    staged; ``owned``: weir named it, so the JobMaster deletes it when the job ends (a
    location the caller gave stays the caller's)."""

    def __init__(self, staging_root: str, owned: bool, **kwargs: Any) -> None:
        super().__init__(staging_root, "parquet", **kwargs)
        self.staging_root = staging_root
        self.owned = owned

    def list(self, configuration: Configuration | None = None) -> list[str]:
        """The committed micro-batches' files (streaming), listed on S3 with the
        ``s3.*`` options of ``configuration`` (the JobMaster's merged with the job's:
        the client's secret key never enters the job graph); the fixed staged files
        (batch)."""
        if self.lister is committed_splits:
            from weir.datastream.connectors.spark_staging import list_committed_splits

            return list_committed_splits(self.path, configuration)
        return super().list(configuration)


def staging_dir(configuration: Configuration, cluster_dir: str | None = None) -> str:
    """Where staging roots go: ``spark.staging.dir`` checked and normalized (an absolute
    local path or ``s3://bucket/prefix``), else the default (see the module docstring;
    ``cluster_dir``: the local cluster's directory, if the job goes there).

    Raises ConfigError, one line naming ``spark.staging.dir`` and the fix, for a value that
    is no local path, ``file://`` or ``s3://`` URI (never a folder named ``s3:``).
    """
    configured = configuration.get(options.SPARK_STAGING_DIR)
    if configured:
        return location(configured, options.SPARK_STAGING_DIR.key)
    checkpoints = configuration.get(checkpoint_options.CHECKPOINTS_DIR)
    if checkpoints and scheme(checkpoints) == "s3":
        try:
            base = location(checkpoints, checkpoint_options.CHECKPOINTS_DIR.key)
        except ConfigError as err:
            msg = f"{err} (from_spark() stages there unless spark.staging.dir is set)"
            raise ConfigError(msg) from err
        return f"{base}/{CHECKPOINT_STAGING_DIR}"
    if cluster_dir:
        from weir.core.cluster_directory import ClusterDirectory

        return str(ClusterDirectory(cluster_dir).staging_dir)
    from weir.datastream.connectors.spark_staging import default_staging_root as private_root

    return private_root()


def default_staging_root(configuration: Configuration) -> str:
    """Where this process's from_spark() sources stage (:func:`staging_dir` for the
    current execution context)."""
    context = get_execution_context()
    return staging_dir(configuration, context.cluster_dir if context is not None else None)


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _warn_if_unreadable(root: str, configuration: Configuration) -> None:
    """A default local staging directory while the JobMaster is on another host: its
    TaskExecutors cannot read it (they may share this host, so only a warning)."""
    context = get_execution_context()
    if configuration.get(options.SPARK_STAGING_DIR) or scheme(root) == "s3" or \
            context is None or _loopback(context.address):
        return
    log.warning("from_spark() stages to %s on this machine, but the job goes to the "
                "JobMaster at %s: TaskExecutors on other hosts cannot read it; set "
                "spark.staging.dir to s3://bucket/prefix", root, context.address)


class _Lease:
    """The client's hold on one staging root, from staging until the JobMaster takes it
    over (the job is submitted) or the client deletes it (the submission failed)."""

    def __init__(self, root: str, configuration: Configuration,
                 stager: StreamingStager | None) -> None:
        self.root = root
        self.configuration = configuration
        self.stager = stager
        self.submitted = False
        with _LEASES_LOCK:
            _LEASES[root] = self

    def release(self) -> None:
        """The job ended (or was never submitted): stop staging; delete the root unless
        the JobMaster owns it, and what a last micro-batch wrote after the JobMaster
        deleted it."""
        from weir.datastream.connectors.spark_staging import delete_staging, read_staging_manifest

        with _LEASES_LOCK:
            _LEASES.pop(self.root, None)
        try:
            if self.stager is not None:
                self.stager.stop()
        finally:
            try:
                if not self.submitted or (self.stager is not None and read_staging_manifest(
                        self.root, self.configuration) is None):
                    delete_staging(self.root, self.configuration)
            except (OSError, UserError) as err:  # the job's outcome matters more
                log.warning("could not delete the Spark staging %s: %s (`weir staging "
                            "clean` removes it later)", self.root, err)


_LEASES: dict[str, _Lease] = {}
_LEASES_LOCK = threading.Lock()


class StagingClaim:
    """The staging roots of a job about to be submitted (see :func:`claim_staging`)."""

    def __init__(self, leases: list[_Lease]) -> None:
        self.leases = leases

    def submitted(self) -> None:
        """The JobMaster accepted the job: deleting its staging is the JobMaster's now."""
        for lease in self.leases:
            lease.submitted = True


def claim_staging(graph: jobgraph_pb2.JobGraph, sources: Iterable[object],
                  configuration: Configuration) -> StagingClaim:
    """Before submitting ``graph``: list the staging roots of its prepared Spark
    ``sources`` in its configuration (``spark.staging.job-roots``) and write its job id into
    their ``_staging.json``, so the JobMaster deletes them when the job ends."""
    from weir.datastream.connectors.spark_staging import update_staging_manifest

    roots = [s.staging_root for s in sources if isinstance(s, SparkStagedSource) and s.owned]
    if not roots:
        return StagingClaim([])
    graph.config[options.SPARK_STAGING_JOB_ROOTS.key] = json.dumps(roots)
    for root in roots:
        update_staging_manifest(root, {"job_id": graph.job_id}, configuration)
    with _LEASES_LOCK:
        return StagingClaim([_LEASES[r] for r in roots if r in _LEASES])


class SparkSource(PreparedSource):
    """Runs ``query(spark) -> DataFrame`` on the client and reads what it staged.

    ``staging`` is this source's staging root itself, which stays the caller's: weir
    never deletes it (default: a fresh directory under ``spark.staging.dir``, see
    :func:`staging_dir`, deleted when the job ends).
    """

    def __init__(self, query: Callable[[SparkSession], DataFrame], *, streaming: bool = False,
                 staging: str | None = None) -> None:
        if not callable(query):
            msg = "from_spark expects a function query(spark) -> DataFrame"
            raise InvalidJobError(msg)
        self.query = query
        self.streaming = streaming
        self.bounded = not streaming
        self.staging = staging
        self.name = f"Spark ({getattr(query, '__name__', 'query')})"

    def _staging_location(self, configuration: Configuration) -> str:
        if self.staging:
            return location(self.staging, "the staging location of from_spark()")
        parent = default_staging_root(configuration)
        name = f"{getattr(self.query, '__name__', 'query')}-{uuid.uuid4().hex[:12]}"
        root = f"{parent.rstrip('/')}/{name}"
        _warn_if_unreadable(root, configuration)
        return root

    def prepare(self, configuration: Configuration) -> tuple[Source, Callable[[], None]]:
        from weir.datastream.connectors.spark_stager import (
            SparkQueryError,
            StreamingStager,
            spark_session,
            stage_batch,
        )
        from weir.datastream.connectors.spark_staging import StagingError, delete_staging

        staging = self._staging_location(configuration)
        spark = spark_session(configuration.get(options.SPARK_MASTER))
        if not self.streaming:
            try:
                result = stage_batch(self.query, staging, spark=spark, config=configuration)
            except (SparkQueryError, StagingError, ValueError, OSError) as err:
                if self.staging is None:  # a fresh root of ours: nothing else is there
                    delete_staging(staging, configuration)
                msg = f"the Spark query of source '{self.name}' failed: {err}"
                raise InvalidJobError(msg) from err
            log.info("Spark staged %d rows in %d splits under %s", result.rows,
                     len(result.files), staging)
            source = SparkStagedSource(staging, self.staging is None,
                                       lister=StagedFiles(result.files), name=self.name)
            if not source.owned:  # the caller's location: the caller's to delete
                return source, lambda: None
            return source, _Lease(staging, configuration, None).release
        stager = StreamingStager(
            self.query, staging, spark=spark,
            trigger_interval_s=configuration.get(options.SPARK_TRIGGER_INTERVAL),
            config=configuration)
        try:
            stager.start()
        except (SparkQueryError, StagingError, ValueError, OSError) as err:
            stager.stop()
            if self.staging is None:
                delete_staging(staging, configuration)
            msg = f"the Spark streaming query of source '{self.name}' failed: {err}"
            raise InvalidJobError(msg) from err
        source = SparkStagedSource(
            staging, self.staging is None, lister=committed_splits, name=self.name,
            monitor_interval=configuration.get(options.SOURCE_DISCOVERY_INTERVAL))
        if not source.owned:
            return source, stager.stop
        return source, _Lease(staging, configuration, stager).release
