"""Task-local recovery: verified secondary copies of snapshots on the TaskExecutor's disk.

With ``state.backend.local-recovery`` on, the asynchronous part of a snapshot also keeps
the snapshot's files in a local directory (``<root>/<job>/<owner>/chk-<n>``) and records
each file's length and CRC-32 in the handle's ``local`` field. A restore on the same
TaskExecutor verifies the copy and reads it instead of the remote files; a missing or
corrupt copy is logged and the remote files are used, so a bad local disk costs time,
never state.

Only the latest completed checkpoint's copy is worth keeping: :class:`LocalCopyTracker`
removes older ones when a checkpoint completes, and a copy of an aborted one at once. Local
copies outlive the backend that wrote them (that is their point); they are removed when a
later checkpoint of the same owner completes, even by a new backend instance.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> root = Path(tempfile.mkdtemp())
    >>> tracker = LocalCopyTracker()
    >>> for n in (1, 2):
    ...     directory = root / "job" / "op-0" / f"chk-{n}"
    ...     directory.mkdir(parents=True)
    ...     tracker.add(n, directory)
    >>> tracker.confirm(2)
    >>> sorted(p.name for p in (root / "job" / "op-0").iterdir())
    ['chk-2']
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from pathlib import Path

from weir.checkpoint.filesystem import FileSystemCheckpointStorage
from weir.checkpoint.storage import StreamStateHandle, file_checksum
from weir.core.config import Configuration
from weir.core.errors import StorageError
from weir.state.handles import LocalCopy

log = logging.getLogger(__name__)

_CHECKPOINT_DIR = re.compile(r"^chk-(\d+)$")

#: Sub-directory of the TaskExecutor working directory that holds local copies.
LOCAL_STATE_DIR = "localState"


def local_state_root(config: Configuration, working_dir: str | Path | None) -> Path | None:
    """Where local copies go if ``state.backend.local-recovery`` is on:
    ``taskmanager.state.local.root-dirs`` if set, else ``<working_dir>/localState``; None
    (no local copies) when recovery is off or there is no directory to use."""
    from weir.state.options import LOCAL_RECOVERY, LOCAL_ROOT_DIR

    if not config.get(LOCAL_RECOVERY):
        return None
    configured = config.get(LOCAL_ROOT_DIR)
    if configured:
        return Path(configured)
    if working_dir is None:
        return None
    return Path(working_dir) / LOCAL_STATE_DIR


def local_checkpoint_dir(root: Path, job_id: str, owner: str, checkpoint_id: int) -> Path:
    """``<root>/<job>/<owner>/chk-<n>``: one directory per checkpoint of one state owner."""
    return root / job_id / owner / f"chk-{checkpoint_id}"


def record_local_copy(directory: Path, files: dict[str, StreamStateHandle]) -> LocalCopy:
    """Describe the files of ``directory`` that hold the same bytes as ``files`` (name ->
    the remote handle, whose length and checksum they share), checking each length.

    Raises StorageError if a file is missing or has another length: then the copy is
    not trusted and the snapshot goes without one."""
    local: dict[str, StreamStateHandle] = {}
    for name, remote in files.items():
        path = directory / name
        try:
            size = path.stat().st_size
        except OSError as err:
            msg = f"local copy {path} was not written: {err}"
            raise StorageError(msg) from err
        if size != remote.length:
            msg = f"local copy {path} has {size} bytes, the snapshot file {remote.length}"
            raise StorageError(msg)
        local[name] = StreamStateHandle(path.as_uri(), remote.length, remote.checksum)
    return LocalCopy(str(directory), local)


def verify_local_copy(copy: LocalCopy) -> str | None:
    """None if every file of ``copy`` exists with its recorded length and CRC-32, else
    what is wrong (for the log line)."""
    for _, handle in sorted(copy.files.items()):
        path = FileSystemCheckpointStorage.path_from_uri(handle.uri)
        try:
            length, checksum = file_checksum(path)
        except OSError as err:
            return f"{path} cannot be read ({err.strerror or err})"
        if length != handle.length:
            return f"{path} has {length} bytes, {handle.length} were recorded"
        if checksum != handle.checksum:
            return f"{path} has checksum {checksum}, {handle.checksum} was recorded"
    return None


def usable_local_copy(copy: LocalCopy | None, what: str) -> LocalCopy | None:
    """``copy`` if it verifies; otherwise None, after logging why the remote files are used."""
    if copy is None:
        return None
    problem = verify_local_copy(copy)
    if problem is None:
        return copy
    log.warning("local copy of %s is unusable (%s); restoring from checkpoint storage "
                "instead", what, problem)
    return None


def materialise(copy: LocalCopy, target: Path, link: frozenset[str] = frozenset()) -> None:
    """Put the files of a verified local copy into ``target``: hard links for the names in
    ``link`` (immutable files, e.g. SSTs) where the file system allows, copies otherwise
    (files a reader may rewrite must not be shared with the copy)."""
    target.mkdir(parents=True, exist_ok=True)
    for name, handle in copy.files.items():
        source = FileSystemCheckpointStorage.path_from_uri(handle.uri)
        if name in link:
            try:
                os.link(source, target / name)
                continue
            except OSError:
                pass  # another file system, or links not supported: copy instead
        shutil.copyfile(source, target / name)


def move_into(source: Path, target: Path) -> None:
    """Move a directory to ``target`` (rename on one file system, copy across them)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        shutil.rmtree(target)
    try:
        os.replace(source, target)
    except OSError:
        shutil.copytree(source, target)
        shutil.rmtree(source, ignore_errors=True)


class LocalCopyTracker:
    """Which local copies exist and when they go (see the module docstring).

    ``add`` may be called from a snapshot's asynchronous thread, ``confirm``/``abort`` from
    the task thread: a lock guards the bookkeeping; deletions happen outside it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._copies: dict[int, Path] = {}
        self._owner_dirs: set[Path] = set()
        self._latest_confirmed = -1

    def add(self, checkpoint_id: int, directory: Path) -> None:
        stale = False
        with self._lock:
            self._owner_dirs.add(directory.parent)
            if checkpoint_id < self._latest_confirmed:
                stale = True  # a newer checkpoint completed while this one was written
            else:
                self._copies[checkpoint_id] = directory
        if stale:
            shutil.rmtree(directory, ignore_errors=True)

    def confirm(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: older copies of the owners seen so far
        (including ones a previous backend instance left) are removed."""
        with self._lock:
            self._latest_confirmed = max(self._latest_confirmed, checkpoint_id)
            doomed = [n for n in self._copies if n < checkpoint_id]
            for n in doomed:
                del self._copies[n]
            owners = list(self._owner_dirs)
        for owner in owners:
            if not owner.is_dir():
                continue
            for entry in owner.iterdir():
                match = _CHECKPOINT_DIR.match(entry.name)
                if match and int(match.group(1)) < checkpoint_id:
                    shutil.rmtree(entry, ignore_errors=True)

    def abort(self, checkpoint_id: int) -> None:
        with self._lock:
            directory = self._copies.pop(checkpoint_id, None)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def adopt_owner(self, owner_dir: Path) -> None:
        """Also prune ``owner_dir`` (a restored backend's predecessor wrote copies there)."""
        with self._lock:
            self._owner_dirs.add(owner_dir)
