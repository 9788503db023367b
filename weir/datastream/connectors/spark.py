r"""``env.from_spark(query)``: Spark prepares the input, weir streams it (weir's own
connector, next to PyFlink's).

Spark runs on the client (where the job program runs), once per job: a batch query is
staged as Parquet splits before the job is submitted; a streaming query keeps staging one
commit directory per micro-batch while the job runs. The job reads the staging location
with the file source's split enumerator and readers, so a reader's position is always
(split, row offset). See :mod:`weir.datastream.connectors.spark_staging` for the staging
contract.

Checkpoints: staged splits are immutable Parquet files, so a reader's state is its
unfinished :class:`~weir.datastream.connectors.file_system.FileSplit`\ s with the rows
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

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import InvalidJobError
from weir.core.execution import get_execution_context
from weir.core.source import Source
from weir.datastream.connectors.base import PreparedSource
from weir.datastream.connectors.file_system import FileSource

if TYPE_CHECKING:  # pyspark is imported lazily, on the client only
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


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


def default_staging_root(configuration: Configuration) -> Path:
    configured = configuration.get(options.SPARK_STAGING_DIR)
    if configured:
        return Path(configured.removeprefix("file://"))
    context = get_execution_context()
    if context is not None and context.cluster_dir:
        from weir.core.cluster_directory import ClusterDirectory

        return ClusterDirectory(context.cluster_dir).staging_dir
    from weir.datastream.connectors.spark_staging import default_staging_root as private_root

    return Path(private_root())


class SparkSource(PreparedSource):
    """Runs ``query(spark) -> DataFrame`` on the client and reads what it staged."""

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
            return self.staging.removeprefix("file://")
        root = default_staging_root(configuration)
        return str(root / f"{getattr(self.query, '__name__', 'query')}-{uuid.uuid4().hex[:12]}")

    def prepare(self, configuration: Configuration) -> tuple[Source, Callable[[], None]]:
        from weir.datastream.connectors.spark_staging import (
            SparkQueryError,
            StagingError,
            StreamingStager,
            spark_session,
            stage_batch,
        )

        staging = self._staging_location(configuration)
        spark = spark_session(configuration.get(options.SPARK_MASTER))
        if not self.streaming:
            try:
                result = stage_batch(self.query, staging, spark=spark)
            except (SparkQueryError, StagingError, ValueError) as err:
                msg = f"the Spark query of source '{self.name}' failed: {err}"
                raise InvalidJobError(msg) from err
            log.info("Spark staged %d rows in %d splits under %s", result.rows,
                     len(result.files), staging)
            source = FileSource(staging, "parquet", lister=StagedFiles(result.files),
                                name=self.name)
            return source, lambda: None
        stager = StreamingStager(
            self.query, staging, spark=spark,
            trigger_interval_s=configuration.get(options.SPARK_TRIGGER_INTERVAL))
        try:
            stager.start()
        except (SparkQueryError, StagingError, ValueError) as err:
            msg = f"the Spark streaming query of source '{self.name}' failed: {err}"
            raise InvalidJobError(msg) from err
        source = FileSource(staging, "parquet",
                            monitor_interval=configuration.get(options.SOURCE_DISCOVERY_INTERVAL),
                            lister=committed_splits, name=self.name)
        return source, stager.stop
