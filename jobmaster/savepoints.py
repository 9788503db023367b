"""Savepoints and retained checkpoints as the user handles them: starting a job from one
(``execution.state-recovery.*``), checking that its state fits the job, and disposing of
one.

A snapshot is named by its directory or its ``_metadata`` file, on ``file://`` (or a plain
absolute path) or ``s3://``; a savepoint's paths are relative to its directory, so a
moved or copied savepoint restores from where it is now. Native savepoints in one directory
may refer to each other's files (checkpoint/savepoint_chain.py): such a directory moves
whole, and disposing of one savepoint keeps what the others need. Everything here does storage
I/O: the JobMaster calls it off its main thread.

Example:
    >>> from weir.proto import checkpoint_pb2, jobgraph_pb2
    >>> metadata = checkpoint_pb2.CheckpointMetadata(checkpoint_id=7)
    >>> _ = metadata.vertices.add(vertex_id=1, parallelism=2, max_parallelism=128,
    ...                           operator_uids=["counts"])
    >>> sub = metadata.subtasks.add(vertex_id=1, subtask_index=0)
    >>> _ = sub.state.operators.add(operator_uid="counts", keyed_state="[]",
    ...                             keyed_state_size=10)
    >>> graph = jobgraph_pb2.JobGraph()
    >>> _ = graph.vertices.add(id=1, parallelism=3, max_parallelism=128,
    ...                        operator_uids=["sums"])
    >>> try:
    ...     check_state_matches(metadata, "/sp", graph, allow_non_restored=False)
    ... except SnapshotMismatchError as err:
    ...     print(str(err)[:72])
    the snapshot /sp holds state of operator 'counts', which the job does no
    >>> check_state_matches(metadata, "/sp", graph, allow_non_restored=True)
    ["dropping the state of operator 'counts' (not in the job)"]
"""

from __future__ import annotations

import logging
from pathlib import Path

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.checkpoint.metadata import (
    METADATA_NAME,
    missing_files,
    read_metadata,
    snapshot_directory,
)
from weir.checkpoint.savepoint_chain import (
    dependents,
    dispose_in_chain,
    read_refs,
    split_directory,
)
from weir.checkpoint.storage import create_storage, reader_for
from weir.core.config import Configuration
from weir.core.errors import (
    ConfigError,
    CorruptStateError,
    MissingStateError,
    StorageError,
    UserError,
)
from weir.core.ids import CheckpointId
from weir.proto import checkpoint_pb2, jobgraph_pb2

log = logging.getLogger(__name__)


class SnapshotMismatchError(UserError):
    """A snapshot's state does not fit the job it should start: nothing was started."""


def snapshot_uri(path: str) -> str:
    """A snapshot's directory as a URI (plain absolute paths become ``file://``)."""
    directory = snapshot_directory(path.strip())
    if directory.startswith("/"):
        return Path(directory).as_uri()
    return directory


def load_snapshot(path: str, config: Configuration) -> CompletedCheckpoint:
    """Read the snapshot at ``path`` for a job to start from, owned by the job in CLAIM
    mode. Raises MissingStateError / CorruptStateError / StorageError naming the file, and
    ConfigError for a location weir cannot use."""
    directory = snapshot_uri(path)
    storage = reader_for(f"{directory}/{METADATA_NAME}", config)
    metadata = read_metadata(storage, directory)
    missing = missing_files(storage, metadata)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        msg = (f"the snapshot {directory} is incomplete: its file {missing[0]}{more} does not "
               "exist (a savepoint must be moved or copied whole)")
        raise MissingStateError(msg)
    claim = config.get(checkpoint_options.CLAIM_MODE) == "CLAIM"
    if claim and metadata.savepoint:
        _refuse_claim_in_chain(directory, metadata, config)
    return CompletedCheckpoint(CheckpointId(metadata.checkpoint_id), metadata, directory,
                               owned=claim, claimed=claim)


def _refuse_claim_in_chain(directory: str, metadata: checkpoint_pb2.CheckpointMetadata,
                           config: Configuration) -> None:
    """CLAIM lets the job delete the savepoint's files; one that shares files with other
    savepoints in its directory is refused (ConfigError naming them and the fix)."""
    parent, name = split_directory(directory)
    storage = create_storage(parent, config)
    shared = [f"../{n}" for n in dependents(storage, name)]
    refs = read_refs(storage, directory)
    shared += [f"../{n}" for n in refs.bases] if refs else []
    if shared:
        msg = (f"the savepoint {directory} shares files with other savepoints in "
               f"{parent} ({', '.join(shared[:3])}), so a job cannot claim it: restore it "
               "with --claim-mode NO_CLAIM (the default), or take a self-contained one "
               "(weir savepoint --type native --full, or --type canonical) to claim")
        raise ConfigError(msg)


def check_state_matches(metadata: checkpoint_pb2.CheckpointMetadata, where: str,
                        graph: jobgraph_pb2.JobGraph, allow_non_restored: bool) -> list[str]:
    """Check that the job can take the snapshot's state: every operator (uid) with state
    exists in the job (or ``allow_non_restored``: its state is dropped, returned as a
    warning), and keyed state keeps its max parallelism (key groups). Raises
    SnapshotMismatchError naming the operator and the fix."""
    uids = {uid: vertex for vertex in graph.vertices for uid in vertex.operator_uids if uid}
    layouts = {v.vertex_id: v for v in metadata.vertices}
    warnings: list[str] = []
    seen: set[str] = set()
    for subtask in metadata.subtasks:
        for operator in subtask.state.operators:
            uid = operator.operator_uid
            has_state = bool(operator.keyed_state_size or operator.operator_state.uri
                             or (operator.keyed_state and operator.keyed_state != "[]"))
            if uid in seen or not has_state:
                continue
            seen.add(uid)
            vertex = uids.get(uid)
            if vertex is None:
                if not allow_non_restored:
                    msg = (f"the snapshot {where} holds state of operator '{uid}', which the "
                           "job does not have (its uid changed, or the operator was "
                           "removed): give the operator its old uid, or run with "
                           "--allow-non-restored-state (execution.state-recovery."
                           "ignore-unclaimed-state) to start without that state")
                    raise SnapshotMismatchError(msg)
                warnings.append(f"dropping the state of operator '{uid}' (not in the job)")
                continue
            old = layouts.get(subtask.vertex_id)
            if (operator.keyed_state_size or operator.keyed_state not in ("", "[]")) and \
                    old is not None and old.max_parallelism != vertex.max_parallelism:
                msg = (f"operator '{uid}' has keyed state for max parallelism "
                       f"{old.max_parallelism} in the snapshot {where}, but max parallelism "
                       f"{vertex.max_parallelism} in the job: keyed state is split into "
                       "that many key groups, which cannot change; set the operator's max "
                       f"parallelism back to {old.max_parallelism}")
                raise SnapshotMismatchError(msg)
    return warnings


def dispose_savepoint(path: str, config: Configuration) -> str:
    """Delete the savepoint at ``path`` (every object under its directory); returns the
    directory. Refuses what is not a savepoint (a retained checkpoint shares files with
    its job's other checkpoints). Raises MissingStateError, CorruptStateError,
    StorageError or SnapshotMismatchError."""
    directory = snapshot_uri(path)
    metadata = read_metadata(reader_for(f"{directory}/{METADATA_NAME}", config), directory)
    if not metadata.savepoint:
        msg = (f"{directory} is checkpoint {metadata.checkpoint_id} of job {metadata.job_id}, "
               "not a savepoint: its job deletes it when it is subsumed (or delete the job's "
               "checkpoint directory once the job is gone)")
        raise SnapshotMismatchError(msg)
    storage = create_storage(directory, config)
    parent, _ = split_directory(directory)
    try:
        kept = dispose_in_chain(directory, storage, create_storage(parent, config))
    except CorruptStateError:
        raise  # names the damaged file already
    except StorageError as err:
        msg = f"deleting the savepoint {directory} failed: {err}"
        raise StorageError(msg) from err
    if kept:
        log.info("disposed of savepoint %s; kept %d of its files that later savepoints in "
                 "%s refer to", directory, len(kept), parent)
    else:
        log.info("disposed of savepoint %s", directory)
    return directory
