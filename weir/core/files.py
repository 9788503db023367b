"""Small file-system helpers shared by the parts of weir that write files atomically.

Example:
    >>> import tempfile
    >>> fsync_directory(tempfile.gettempdir())
"""

from __future__ import annotations

import contextlib
import os


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
