"""Small file-system helpers shared by the parts of weir that write files atomically or
keep them private.

Logs, shuffle partitions and staged data can hold records and secrets, so weir creates them
readable by their owner only (directories 0700, files 0600) rather than trusting the umask.

Example:
    >>> import tempfile
    >>> fsync_directory(tempfile.gettempdir())
    >>> root = private_directory(os.path.join(tempfile.mkdtemp(), "private"))
    >>> oct(os.stat(root).st_mode & 0o777)
    '0o700'
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from pathlib import Path
from typing import Literal

from weir.core.errors import UserError

PRIVATE_DIRECTORY_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


class UnsafeDirectoryError(UserError):
    """A directory weir must own alone is a symlink, not a directory, another user's, or
    open to other users; the message names it and the fix."""


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flush a directory entry to disk: a rename is durable only once its directory is.
    Best effort: some platforms and file systems cannot open or sync directories."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def open_private(path: str | os.PathLike[str],
                 mode: Literal["ab", "wb"] = "ab") -> io.BufferedWriter:
    """Open a file for writing (binary ``"ab"`` or ``"wb"``) readable by its owner only: a new
    file is created 0600, an existing one is restricted to 0600 first."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "ab" else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE_MODE)
    try:
        # The mode argument only applies to a file this call creates.
        os.fchmod(fd, PRIVATE_FILE_MODE)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def restrict_file(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty if missing; either way leave it 0600 (for a file that another
    program opens for appending afterwards, e.g. a log)."""
    open_private(path, "ab").close()


def private_directory(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents) so that only its owner can enter the last
    component: mode 0700, also when it existed with a wider mode. Raises OSError."""
    directory = Path(path)
    directory.mkdir(mode=PRIVATE_DIRECTORY_MODE, parents=True, exist_ok=True)
    if stat.S_IMODE(directory.stat().st_mode) != PRIVATE_DIRECTORY_MODE:
        directory.chmod(PRIVATE_DIRECTORY_MODE)
    return directory


def owned_private_directory(path: str | os.PathLike[str], fix: str) -> Path:
    """A directory of this user's alone at ``path`` in a directory others can write (such as
    ``/tmp``): created 0700 if missing, and otherwise used only if ``os.lstat`` shows a real
    directory (not a symlink another user planted), owned by this user, mode 0700.

    Raises UnsafeDirectoryError naming the path and ``fix`` (what the user can do instead),
    OSError if it cannot be created.
    """
    directory = Path(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, PRIVATE_DIRECTORY_MODE)
    info = os.lstat(directory)
    problem = None
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory"
    elif info.st_uid != os.geteuid():
        problem = f"belongs to another user (uid {info.st_uid})"
    elif stat.S_IMODE(info.st_mode) != PRIVATE_DIRECTORY_MODE:
        # Not tightened in place: whatever others could write there meanwhile stays.
        problem = f"is open to other users (mode {stat.filemode(info.st_mode)})"
    if problem is not None:
        msg = f"{directory} {problem}, so it is not private to this user: {fix}"
        raise UnsafeDirectoryError(msg)
    return directory
