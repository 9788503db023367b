"""``weir staging list|clean [ROOT]``: the Spark staging directories under ROOT, and
removing those no job needs.

``env.from_spark()`` stages into ``ROOT/<query>-<random>`` (ROOT: ``spark.staging.dir`` or
its default), and the JobMaster deletes that directory when the job ends. A client killed
before or during submission leaves it behind: its ``_staging.json`` tells when and where it
was made and for which job (if the client got that far). Each root is one of:

* ``running``: the JobMaster runs its job (or ``preparing``: no job yet, and the client
  process that stages it still runs on this host);
* ``retained``: its job ended with retained checkpoints that read from it;
* ``orphaned``: anything else (its job ended or is unknown to the JobMaster, or it never
  got a job and its client is gone).

``clean`` deletes the orphaned ones and refuses a ROOT that is itself a staging root still
in use. It asks the JobMaster (``--jobmaster``/``--dir``, as ``weir list``) which jobs run:
point it at the cluster the jobs went to.

Example:
    >>> state_of(None, None, None, {"ab": "RUNNING"}, "h1", "h1")
    'orphaned'
    >>> state_of("ab", None, None, {"ab": "RUNNING"}, "h1", "h1")
    'running'
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from weir.core.config import Configuration
from weir.core.errors import UserError
from weir.core.object_store import location
from weir.core.processes import process_alive

RUNNING = "running"
PREPARING = "preparing"
RETAINED = "retained"
ORPHANED = "orphaned"
_TERMINAL = {"FINISHED", "CANCELED", "FAILED"}


@dataclass(frozen=True)
class StagingRoot:
    """One staging directory found under ROOT, and what it is."""

    location: str
    created: str | None
    host: str | None
    pid: int | None
    job_id: str | None
    state: str


def state_of(job_id: str | None, retained: str | None, pid: int | None,
             jobs: dict[str, str], host: str | None, this_host: str) -> str:
    """What a staging root is, from its ``_staging.json`` and the JobMaster's jobs
    (id -> status name)."""
    if retained:
        return RETAINED
    if job_id is not None:
        status = jobs.get(job_id)
        return RUNNING if status is not None and status not in _TERMINAL else ORPHANED
    if host == this_host and pid is not None and process_alive(pid):
        return PREPARING
    return ORPHANED


def find_roots(root: str, config: Configuration, jobs: dict[str, str]) -> list[StagingRoot]:
    """The staging roots in ``root`` (``root`` itself when it is one, else its
    subdirectories holding a ``_staging.json``), sorted by location."""
    import pyarrow.fs as pafs

    from weir.datastream.connectors.spark_staging import (
        StagingError,
        read_staging_manifest,
        staging_filesystem,
    )

    base = location(root, "the staging directory")
    fs, path, prefix = staging_filesystem(base, config)
    candidates = [base]
    entries = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    candidates += [prefix + e.path for e in entries if e.type == pafs.FileType.Directory
                   and not e.base_name.startswith(("_", "."))]
    this_host = socket.gethostname()
    found = []
    for candidate in candidates:
        try:
            manifest = read_staging_manifest(candidate, config)
        except StagingError:
            continue  # not ours: never listed, never deleted
        if manifest is None:
            continue
        state = state_of(manifest.job_id, manifest.retained, manifest.pid, jobs,
                         manifest.host, this_host)
        found.append(StagingRoot(candidate, manifest.created, manifest.host, manifest.pid,
                                 manifest.job_id, state))
    return sorted(found, key=lambda r: r.location)


def list_roots(roots: list[StagingRoot]) -> None:
    """Print one line per staging root."""
    for r in roots:
        print(f"{r.state:9}  {r.location}  created {r.created or '?'}  host {r.host or '?'}  "
              f"pid {r.pid if r.pid is not None else '?'}  job {r.job_id or '-'}")
    if not roots:
        print("no staging directories")


def clean(root: str, roots: list[StagingRoot], config: Configuration) -> int:
    """Delete the orphaned staging roots; returns how many. A ROOT that is itself a
    staging root in use is refused (UserError); in use ones under ROOT are kept, said so."""
    from weir.datastream.connectors.spark_staging import delete_staging

    base = location(root, "the staging directory")
    deleted = 0
    for r in roots:
        if r.state != ORPHANED:
            why = {RUNNING: f"job {r.job_id} still runs",
                   PREPARING: f"its client (pid {r.pid}) is still staging",
                   RETAINED: "retained checkpoints of its job read from it (delete it "
                             "with them)"}[r.state]
            if r.location == base:
                msg = f"not deleting {r.location}: {why}"
                raise UserError(msg)
            print(f"kept {r.location}: {why}")
            continue
        delete_staging(r.location, config)
        print(f"deleted {r.location}")
        deleted += 1
    return deleted
