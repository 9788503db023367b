"""Deleting a job's staged Spark data when the job ends for good.

``env.from_spark()`` stages on the client before submission (and, streaming, while the job
runs); the client lists the staging roots in the job's configuration
(``spark.staging.job-roots``) and writes the job id into each root's ``_staging.json``. The
JobMaster deletes them when the job reaches FINISHED, CANCELED or FAILED: a ``--detached``
client has exited long before. A root whose ``_staging.json`` does not name the job is
never touched (the option comes with the job graph, so a path in it alone is no licence to
delete). When the job's checkpoints outlive it (externalized retention), its staging roots
are kept too, as the retained checkpoint's source readers point into them, and marked
``retained`` in their ``_staging.json`` (``weir staging clean`` leaves them alone).

Example:
    >>> staging_roots(Configuration.from_pairs({"spark.staging.job-roots": '["s3://b/x"]'}))
    ['s3://b/x']
    >>> staging_roots(Configuration())
    []
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from weir.core import options
from weir.core.config import Configuration
from weir.core.ids import JobId
from weir.core.object_store import delete_tree, filesystem
from weir.proto import common_pb2

log = logging.getLogger(__name__)

#: The staging contract's manifest (weir.datastream.connectors.spark_staging, a floor above
#: the JobMaster): its name and format tag.
MANIFEST_NAME = "_staging.json"
MANIFEST_FORMAT = "weir-spark-staging"


def staging_roots(config: Configuration) -> list[str]:
    """The staging roots a job's configuration lists (none when unset or malformed)."""
    text = config.get(options.SPARK_STAGING_JOB_ROOTS)
    if not text:
        return []
    try:
        roots = json.loads(text)
    except ValueError:
        roots = None
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        log.warning("ignoring %s=%r: not a JSON list of paths",
                    options.SPARK_STAGING_JOB_ROOTS.key, text)
        return []
    return roots


def retained_reason(status: common_pb2.JobStatus, retention: str | None) -> str | None:
    """Why the job's checkpoints (and so its staged data) outlive it, None if they do not:
    the rule of the checkpoints' own deletion (``retention`` None: no checkpointing).

    >>> retained_reason(common_pb2.JOB_FAILED, "RETAIN_ON_CANCELLATION")
    'job FAILED with RETAIN_ON_CANCELLATION checkpoints'
    >>> retained_reason(common_pb2.JOB_FINISHED, "RETAIN_ON_CANCELLATION") is None
    True
    """
    if retention is None or status == common_pb2.JOB_FINISHED or \
            retention == "NO_EXTERNALIZED_CHECKPOINTS" or \
            (status == common_pb2.JOB_CANCELED and retention == "DELETE_ON_CANCELLATION"):
        return None
    return f"job {common_pb2.JobStatus.Name(status).removeprefix('JOB_')} with {retention} " \
        "checkpoints"


def on_job_terminal(job_id: JobId, config: Configuration, status: common_pb2.JobStatus,
                    retention: str | None) -> threading.Thread | None:
    """The job ended for good (main thread): delete its staging roots, or mark them
    retained, on a thread of their own (None: the job staged nothing). Not on the JobMaster's
    I/O pool: stopping the JobMaster right after the job (an in-process cluster) cancels
    what waits there, and the process waits for this (non-daemon) thread."""
    roots = staging_roots(config)
    if not roots:
        return None
    reason = retained_reason(status, retention)

    def run() -> None:
        try:
            finish(job_id, roots, config, reason)
        except Exception as err:
            log.warning("cleaning up the Spark staging of job %s failed: %s (`weir staging "
                        "clean` removes it)", job_id, err)

    thread = threading.Thread(target=run, name=f"staging-cleanup-{job_id[:8]}")
    thread.start()
    return thread


def finish(job_id: JobId, roots: list[str], config: Configuration,
           retained: str | None) -> None:
    """Delete (``retained`` None) or mark retained each root whose ``_staging.json``
    names ``job_id``; one root failing does not keep the others."""
    errors: list[str] = []
    for root in roots:
        try:
            manifest = _read_manifest(root, config)
            if manifest is None:
                continue  # deleted already (or never written)
            if manifest.get("job_id") != job_id:
                log.warning("job %s: not deleting %s, whose %s names job %s", job_id, root,
                            MANIFEST_NAME, manifest.get("job_id"))
                continue
            if retained is not None:
                _write_manifest(root, {**manifest, "retained": retained}, config)
                log.info("job %s: keeping its Spark staging %s (%s point into it)",
                         job_id, root, retained)
                continue
            delete_tree(root, config)
            log.info("job %s: deleted its Spark staging %s", job_id, root)
        except Exception as err:  # reported together below
            errors.append(f"{root}: {err}")
    if errors:
        raise OSError("; ".join(errors))


def _read_manifest(root: str, config: Configuration) -> dict[str, Any] | None:
    fs, path = filesystem(root, config)
    try:
        with fs.open_input_stream(f"{path.rstrip('/')}/{MANIFEST_NAME}") as stream:
            document = json.loads(stream.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    if not isinstance(document, dict) or document.get("format") != MANIFEST_FORMAT:
        msg = f"{MANIFEST_NAME} is no weir staging manifest"
        raise ValueError(msg)
    return document


def _write_manifest(root: str, document: dict[str, Any], config: Configuration) -> None:
    # One PUT (S3) or one write of a small file: the readers re-read it whole.
    fs, path = filesystem(root, config)
    with fs.open_output_stream(f"{path.rstrip('/')}/{MANIFEST_NAME}") as out:
        out.write((json.dumps(document, indent=2) + "\n").encode("utf-8"))
