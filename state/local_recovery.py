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

from weir.checkpoint.filesystem import FsCheckpointStorageAccess
from weir.checkpoint.storage import (
    CheckpointStorageAccess,
    StreamStateHandle,
    checksum_of,
    file_checksum,
    reader_for,
)
from weir.core.config import Configuration
from weir.core.errors import StorageError
from weir.core.ids import CheckpointId, JobId
from weir.state.handles import LocalCopy

log = logging.getLogger(__name__)

_CHECKPOINT_DIR = re.compile(r"^chk-(\d+)$")

#: Sub-directory of the TaskExecutor working directory that holds local copies.
LOCAL_STATE_DIR = "localState"


def local_state_root(config: Configuration, working_dir: str | Path | None) -> Path | None:
    """Where local copies go if ``state.backend.local-recovery`` is on:
    ``taskmanager.state.local.root-dirs`` if set, else ``<working_dir>/localState``; None
    (no local copies) when recovery is off or there is no directory to use."""
    from weir.state.options import LOCAL_RECOVERY

    if not config.get(LOCAL_RECOVERY):
        return None
    return local_state_dir(config, working_dir)


def local_state_dir(config: Configuration, working_dir: str | Path | None) -> Path | None:
    """Where a TaskExecutor's local copies are, whether or not its own configuration turns
    local recovery on (a job may): to offer and delete them."""
    from weir.state.options import LOCAL_ROOT_DIR

    configured = config.get(LOCAL_ROOT_DIR)
    if configured:
        return Path(configured)
    if working_dir is None:
        return None
    return Path(working_dir) / LOCAL_STATE_DIR


def local_checkpoint_dir(root: Path, job_id: JobId, owner: str,
                         checkpoint_id: CheckpointId) -> Path:
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
    """None if every file of ``copy`` exists with its recorded length and checksum, else
    what is wrong (for the log line)."""
    for _, handle in sorted(copy.files.items()):
        path = FsCheckpointStorageAccess.path_from_uri(handle.uri)
        try:
            length, checksum = file_checksum(path, handle.checksum)
        except OSError as err:
            return f"{path} cannot be read ({err.strerror or err})"
        if length != handle.length:
            return f"{path} has {length} bytes, {handle.length} were recorded"
        if checksum and checksum != handle.checksum:
            return f"{path} has checksum {checksum}, {handle.checksum} was recorded"
    return None


def usable_local_copy(copy: LocalCopy | None, what: str,
                      storage: CheckpointStorageAccess | None = None) -> LocalCopy | None:
    """``copy`` if it verifies (and, restoring through a :class:`RestoreStorage`, is this
    TaskExecutor's own); otherwise None, after logging why the remote files are used."""
    if copy is None:
        return None
    if isinstance(storage, RestoreStorage) and not storage.holds(copy):
        log.info("the local copy of %s is on another TaskExecutor; restoring from "
                 "checkpoint storage", what)
        return None
    problem = verify_local_copy(copy)
    if problem is None:
        return copy
    log.warning("local copy of %s is unusable (%s); restoring from checkpoint storage "
                "instead", what, problem)
    return None


def materialise(copy: LocalCopy, target: Path, link: frozenset[str] = frozenset(),
                only: frozenset[str] | None = None) -> None:
    """Put the files of a verified local copy (those named in ``only``, if given) into
    ``target``: hard links for the names in ``link`` (immutable files, e.g. SSTs) where
    the file system allows, copies otherwise (files a reader may rewrite must not be shared
    with the copy)."""
    target.mkdir(parents=True, exist_ok=True)
    for name, handle in copy.files.items():
        if only is not None and name not in only:
            continue
        source = FsCheckpointStorageAccess.path_from_uri(handle.uri)
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

    def add(self, checkpoint_id: CheckpointId, directory: Path) -> None:
        stale = False
        with self._lock:
            self._owner_dirs.add(directory.parent)
            if checkpoint_id < self._latest_confirmed:
                stale = True  # a newer checkpoint completed while this one was written
            else:
                self._copies[checkpoint_id] = directory
        if stale:
            shutil.rmtree(directory, ignore_errors=True)

    def confirm(self, checkpoint_id: CheckpointId) -> None:
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

    def abort(self, checkpoint_id: CheckpointId) -> None:
        with self._lock:
            directory = self._copies.pop(checkpoint_id, None)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def adopt_owner(self, owner_dir: Path) -> None:
        """Also prune ``owner_dir`` (a restored backend's predecessor wrote copies there)."""
        with self._lock:
            self._owner_dirs.add(owner_dir)


def count_local(storage: CheckpointStorageAccess, nbytes: int) -> None:
    """Note ``nbytes`` restored from a local copy (counted by a :class:`RestoreStorage`)."""
    if isinstance(storage, RestoreStorage):
        storage.add_local(nbytes)


class RestoreStorage(CheckpointStorageAccess):
    """Checkpoint storage as one task's restore sees it: local first, counted.

    A file this TaskExecutor kept beside the upload (operator state, channel state: written
    to ``<local_root>/<job>/<owner>/chk-<n>/<name>`` for the remote ``<job>/chk-<n>/<owner>/
    <name>``) is read locally when it verifies against the handle; everything else comes
    from ``remote``. Keyed state handles name their local copy themselves; it is used only
    if it lies under ``local_root`` (:meth:`holds`): a copy another TaskExecutor wrote is on
    another machine, even when a local cluster shares one disk. ``local_bytes`` and
    ``remote_bytes`` say what the restore cost. Thread-safe (downloads run in parallel).

    Example:
        >>> import tempfile
        >>> from weir.checkpoint.filesystem import FsCheckpointStorageAccess
        >>> remote = FsCheckpointStorageAccess(tempfile.mkdtemp())
        >>> handle = remote.write("job/chk-1/1-0/operator-state-x", b"abc")
        >>> storage = RestoreStorage(remote, Path(tempfile.mkdtemp()))
        >>> storage.read(handle), storage.local_bytes, storage.remote_bytes
        (b'abc', 0, 3)
    """

    def __init__(self, remote: CheckpointStorageAccess, local_root: Path | None,
                 config: Configuration | None = None) -> None:
        """``config``: how to reach storage other than ``remote`` (a savepoint restored
        from another place, say ``s3://`` while checkpoints go to ``file://``)."""
        self.remote = remote
        self.local_root = local_root.resolve() if local_root is not None else None
        self.local_bytes = 0
        self.remote_bytes = 0
        self._config = config
        self._lock = threading.Lock()

    def _remote_for(self, handle: StreamStateHandle) -> CheckpointStorageAccess:
        """The storage that reads ``handle``: ``remote`` for its own scheme (a storage
        reads any object of its kind), another one for another scheme."""
        scheme = handle.uri.partition(":")[0]
        if scheme == self.remote.base_uri.partition(":")[0]:
            return self.remote
        return reader_for(handle.uri, self._config)

    def holds(self, copy: LocalCopy) -> bool:
        """Whether ``copy`` is in this TaskExecutor's local state directory."""
        if self.local_root is None:
            return False
        return Path(copy.directory).resolve().is_relative_to(self.local_root)

    def add_local(self, nbytes: int) -> None:
        with self._lock:
            self.local_bytes += nbytes

    def add_remote(self, nbytes: int) -> None:
        with self._lock:
            self.remote_bytes += nbytes

    def local_file(self, handle: StreamStateHandle) -> Path | None:
        """Where this TaskExecutor would have kept a copy of ``handle`` (None: nowhere)."""
        parts = handle.uri.rstrip("/").split("/")
        if self.local_root is None or len(parts) < 4 or not _CHECKPOINT_DIR.match(parts[-3]):
            return None
        job, checkpoint, owner, name = parts[-4:]
        return self.local_root / job / owner / checkpoint / name

    @property
    def base_uri(self) -> str:
        return self.remote.base_uri

    def read(self, handle: StreamStateHandle) -> bytes:
        path = self.local_file(handle)
        if path is not None and path.is_file():
            data = path.read_bytes()
            if len(data) == handle.length and (not handle.checksum
                                               or checksum_of(data, handle.checksum)
                                               == handle.checksum):
                self.add_local(len(data))
                return data
            log.warning("local copy %s does not match %s; reading checkpoint storage",
                        path, handle.uri)
        data = self._remote_for(handle).read(handle)
        self.add_remote(len(data))
        return data

    def download(self, handle: StreamStateHandle, local_path: str | Path) -> None:
        self._remote_for(handle).download(handle, local_path)
        self.add_remote(handle.length)

    def write(self, relative_path: str, data: bytes | bytearray | memoryview
              ) -> StreamStateHandle:
        return self.remote.write(relative_path, data)

    def write_file(self, relative_path: str, local_path: str | Path, *,
                   background: bool = False) -> StreamStateHandle:
        return self.remote.write_file(relative_path, local_path, background=background)

    def delete(self, target: StreamStateHandle | str) -> None:
        self.remote.delete(target)

    def delete_prefix(self, relative_prefix: str) -> None:
        self.remote.delete_prefix(relative_prefix)

    def exists(self, target: StreamStateHandle | str) -> bool:
        uri = target.uri if isinstance(target, StreamStateHandle) else target
        return self._remote_for(StreamStateHandle(uri, 0, "")).exists(target)

    def list(self, relative_prefix: str = "") -> list[str]:
        return self.remote.list(relative_prefix)


def keep_local_file(directory: Path | None, name: str, data: bytes | bytearray | memoryview
                    ) -> bool:
    """Also keep ``data`` (just uploaded as ``name``) in a checkpoint's local directory;
    False (logged) when it could not be written: a local copy is a bonus, never a failure."""
    if directory is None:
        return False
    try:
        directory.mkdir(parents=True, exist_ok=True)
        temporary = directory / f".{name}.tmp"
        temporary.write_bytes(data)
        os.replace(temporary, directory / name)
        return True
    except OSError as err:
        log.warning("no local copy of %s in %s: %s", name, directory, err)
        return False


def local_state_inventory(root: Path | None) -> list[tuple[str, str, int]]:
    """(job id, owner, checkpoint id) of every local copy under ``root``: what a restarted
    TaskExecutor offers the JobMaster on registration."""
    found: list[tuple[str, str, int]] = []
    if root is None or not root.is_dir():
        return found
    for job in sorted(root.iterdir()):
        if not job.is_dir():
            continue
        for owner in sorted(job.iterdir()):
            if not owner.is_dir():
                continue
            for entry in owner.iterdir():
                match = _CHECKPOINT_DIR.match(entry.name)
                if match and entry.is_dir():
                    found.append((job.name, owner.name, int(match.group(1))))
    return sorted(found)


def remove_job_state(root: Path | None, job_id: JobId) -> None:
    """The job ended: its local copies go (they can never be restored)."""
    if root is not None and job_id and "/" not in job_id and job_id not in (".", ".."):
        shutil.rmtree(root / job_id, ignore_errors=True)
