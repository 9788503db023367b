"""The directories a TaskExecutor owns on its host, and what becomes of them when it dies.

A TaskExecutor keeps RocksDB instances and task-local state copies on the local disk: in
its working directory, and with ``state.backend.rocksdb.localdir`` in
``<localdir>/weir-tm-<resource id>``. While it runs it holds an exclusive ``flock`` on
each directory's ``.lock`` file (with its pid in it), which the kernel releases however
the process ends, SIGKILL included. So:

* a second TaskExecutor given the same directory (the same resource id on one host) is
  refused before it touches anything, instead of emptying the first one's RocksDB
  directory under its running tasks;
* a directory named after a random resource id (no ``taskmanager.resource-id``) cannot
  be found again by its owner once that one is gone, so it is marked ``.ephemeral``, and
  any TaskExecutor starting on the host removes the marked directories whose lock is free.
  A directory of a fixed resource id is never swept: its owner finds its local state there
  when it comes back.

The marker is written after the lock is held, so a directory whose marker is there and
whose lock can be taken has no live owner.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> parent = Path(tempfile.mkdtemp())
    >>> owned = DirectoryLock.acquire(parent / "weir-tm-te-1", ephemeral=True)
    >>> DirectoryLock.acquire(parent / "weir-tm-te-1", ephemeral=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    weir.taskexecutor.local_dirs.DirectoryInUseError: ...
    >>> sweep_abandoned(parent)  # its owner (this process) is alive
    []
    >>> owned.release()
    >>> [path.name for path in sweep_abandoned(parent)]
    ['weir-tm-te-1']
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
from pathlib import Path

from weir.core.errors import UserError

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
#: In a directory nothing will look for again once its owner is gone (see the module doc).
EPHEMERAL_MARK = ".ephemeral"
#: The names of TaskExecutor directories, in the temp directory and in a RocksDB localdir.
DIRECTORY_PREFIX = "weir-tm-"


class DirectoryInUseError(UserError):
    """Another live process holds a TaskExecutor directory."""


class DirectoryLock:
    """An exclusive hold on a TaskExecutor directory for the life of this process."""

    def __init__(self, path: Path, fd: int, ephemeral: bool) -> None:
        self.path = path
        #: Named after a random resource id: nothing finds it again once this process ends.
        self.ephemeral = ephemeral
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: Path, *, ephemeral: bool) -> DirectoryLock:
        """Create ``path`` (mode 0700) and lock it; raises DirectoryInUseError naming the
        pid that holds it."""
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            msg = (f"the TaskExecutor directory {path} is in use by another process on "
                   f"this host (pid {holder}): give each TaskExecutor its own "
                   "taskmanager.resource-id or process.taskmanager.working-dir")
            raise DirectoryInUseError(msg) from None
        except OSError as err:  # a file system without locks (ENOLCK): run unguarded
            log.warning("cannot lock %s (%s): another TaskExecutor given the same directory "
                        "would not be noticed", path, err)
        except BaseException:
            os.close(fd)
            raise
        # Only informs the message above: a full disk must not stop a TaskExecutor (the
        # lock file of a directory used before is there already).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        if ephemeral:
            (path / EPHEMERAL_MARK).touch(mode=0o600)
        return cls(path, fd, ephemeral)

    def release(self) -> None:
        """Let go of the directory (idempotent); its files stay."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the flock


def empty_directory(path: Path) -> None:
    """Remove everything in an owned directory but its lock and marker: what an earlier
    run of the same TaskExecutor left (a RocksDB instance is never reopened; a restore
    starts from a checkpoint)."""
    if not path.is_dir():
        return
    for entry in path.iterdir():
        if entry.name in (LOCK_FILE, EPHEMERAL_MARK):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()


def _ours(entry: Path) -> bool:
    """A real directory (not a symlink) of this user: in a shared temp directory, another
    user's entries are not this process's to remove."""
    try:
        status = entry.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid()


def sweep_abandoned(parent: Path) -> list[Path]:
    """Remove the ephemeral TaskExecutor directories under ``parent`` whose owner is gone
    (their lock is free); returns those removed. Unreadable entries are skipped."""
    removed: list[Path] = []
    try:
        candidates = [entry for entry in parent.iterdir()
                      if entry.name.startswith(DIRECTORY_PREFIX) and _ours(entry)
                      and (entry / EPHEMERAL_MARK).is_file()]
    except OSError:
        return removed
    for directory in candidates:
        try:
            fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its owner runs
        try:
            shutil.rmtree(directory, ignore_errors=True)
        finally:
            os.close(fd)
        log.info("removed %s, left by a TaskExecutor that is gone", directory)
        removed.append(directory)
    return removed
