"""Checkpoint storage on a local or mounted file system (``file:///abs/dir``).

Every write goes to a hidden temporary file in the destination directory, is fsynced and then
renamed over the final name, so a reader (or a restore after a crash) sees a whole object or
none. The same helper makes downloads from any storage atomic at their destination.

Example:
    >>> import tempfile
    >>> storage = FsCheckpointStorageAccess(tempfile.mkdtemp())
    >>> handle = storage.write("job/chk-1/state-0", b"abc")
    >>> storage.list("job") == [handle.uri]
    True
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar
from urllib.parse import unquote, urlparse

from weir.checkpoint.storage import (
    CHUNK_SIZE,
    CheckpointStorageAccess,
    Checksum,
    StreamStateHandle,
    TargetOutsideStorageError,
    check_relative,
    checksum_of,
    contained_relative,
    outside_error,
    target_uri,
    verify,
)
from weir.core.errors import ConfigError, MissingStateError, StorageError
from weir.core.files import fsync_directory

T = TypeVar("T")

#: Temporary files are ``.<final name>.<random><TEMP_SUFFIX>`` next to the final file.
TEMP_SUFFIX = ".weir-tmp"


def is_temp_name(name: str) -> bool:
    """Whether a file name is one of our in-progress temporary files."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def atomic_local_write(final: str | Path, fill: Callable[[BinaryIO], T]) -> T:
    """Create ``final`` by calling ``fill(file)`` on a temp file, then fsync and rename.

    If ``fill`` (or anything before the rename) raises, the temp file is removed and
    ``final`` is left as it was. Returns what ``fill`` returned.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    # Same directory as the target: os.replace is only atomic within one file system.
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            result = fill(f)
            f.flush()
            # Data durable before the name becomes visible, or a crash could leave a
            # complete-looking name over an empty file.
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(final.parent)
    return result


class FsCheckpointStorageAccess(CheckpointStorageAccess):
    """Checkpoint storage in a directory; URIs are ``file:///abs/path``."""

    def __init__(self, base: str | Path) -> None:
        if not os.path.isabs(base):
            msg = f"checkpoint directory must be an absolute path, got {str(base)!r}"
            raise ConfigError(msg)
        # abspath (not resolve): normalise '..' without following symlinks the user chose.
        self._base = Path(os.path.abspath(base))

    @staticmethod
    def path_from_uri(uri: str) -> Path:
        """The local path of ``file:///abs/path`` (percent-decoded) or of a plain path."""
        if uri.startswith("file:"):
            parsed = urlparse(uri)
            if parsed.netloc not in ("", "localhost"):
                msg = (f"file URI {uri!r} names host {parsed.netloc!r}; use file:///abs/path "
                       "(mount remote storage locally, or use s3://)")
                raise ConfigError(msg)
            path = unquote(parsed.path)
        else:
            path = uri
        if not os.path.isabs(path):
            msg = f"checkpoint location {uri!r} is not an absolute path"
            raise ConfigError(msg)
        return Path(path)

    @property
    def base_uri(self) -> str:
        return self._base.as_uri()

    @property
    def base_path(self) -> Path:
        return self._base

    def _path(self, relative_path: str) -> Path:
        return self._base / check_relative(relative_path)

    def _local(self, target: StreamStateHandle | str) -> Path:
        uri = target_uri(target)
        if not uri.startswith("file:"):
            msg = f"{uri!r} is not a file:// URI; this storage is {self.base_uri}"
            raise ValueError(msg)
        return self.path_from_uri(uri)

    def write(self, relative_path: str, data: bytes | bytearray | memoryview
              ) -> StreamStateHandle:
        path = self._path(relative_path)
        view = memoryview(data).cast("B")
        atomic_local_write(path, lambda f: f.write(view))
        return StreamStateHandle(path.as_uri(), len(view), checksum_of(view))

    def write_file(self, relative_path: str, local_path: str | Path, *,
                   background: bool = False) -> StreamStateHandle:
        path = self._path(relative_path)
        with open(local_path, "rb") as source:
            def copy(f: BinaryIO) -> Checksum:
                crc = Checksum()
                while chunk := source.read(CHUNK_SIZE):
                    crc.update(chunk)
                    f.write(chunk)
                return crc

            crc = atomic_local_write(path, copy)
        return StreamStateHandle(path.as_uri(), crc.length, crc.hexdigest())

    def copy(self, source: StreamStateHandle, relative_path: str) -> StreamStateHandle:
        """A hard link when ``source`` is a local file on the same file system (objects
        are immutable, so sharing the inode is safe), else a byte copy; verified by size."""
        if not source.uri.startswith("file:"):
            return super().copy(source, relative_path)
        origin = self.path_from_uri(source.uri)
        path = self._path(relative_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not origin.is_file():
                msg = f"state object {source.uri} does not exist"
                raise MissingStateError(msg)
            verify(source, origin.stat().st_size, None)
            path.unlink(missing_ok=True)
            try:
                os.link(origin, path)
            except OSError:  # another file system, or links not allowed: copy the bytes
                atomic_local_write(path, lambda f: _copy_into(origin, f))
        except OSError as err:
            msg = f"copying {source.uri} to {path} failed: {err}"
            raise StorageError(msg) from err
        return StreamStateHandle(path.as_uri(), source.length, source.checksum)

    def _open(self, handle: StreamStateHandle) -> BinaryIO:
        path = self._local(handle)
        try:
            f = open(path, "rb")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            msg = f"state object {handle.uri} does not exist"
            raise MissingStateError(msg) from None
        try:
            # Fail on a wrong size before reading (possibly gigabytes of) the wrong file.
            verify(handle, os.fstat(f.fileno()).st_size, None)
        except BaseException:
            f.close()
            raise
        return f

    def read(self, handle: StreamStateHandle) -> bytes:
        with self._open(handle) as f:
            data = f.read()
        verify(handle, len(data), checksum_of(data, handle.checksum))
        return data

    def download(self, handle: StreamStateHandle, local_path: str | Path) -> None:
        with self._open(handle) as source:
            def copy(f: BinaryIO) -> None:
                crc = Checksum(handle.checksum)
                while chunk := source.read(CHUNK_SIZE):
                    crc.update(chunk)
                    f.write(chunk)
                # Inside fill: a mismatch discards the temp file, the destination stays as is.
                verify(handle, crc.length, crc.hexdigest())

            atomic_local_write(local_path, copy)

    def _contained(self, target: StreamStateHandle | str) -> Path:
        """The local path of ``target`` if it is a file below the base; else raises
        TargetOutsideStorageError."""
        uri = target_uri(target)
        try:
            path = self._local(target)
        except (ValueError, ConfigError) as err:
            raise outside_error(uri, self.base_uri) from err
        # Lexically ('..' collapsed), and where the unlink really happens: a symlinked
        # directory below the base must not lead out of it.
        lexical = Path(os.path.abspath(path))
        real_base = Path(os.path.realpath(self._base))
        if lexical == self._base or not lexical.is_relative_to(self._base) or \
                not Path(os.path.realpath(lexical.parent)).is_relative_to(real_base):
            raise outside_error(uri, self.base_uri)
        return lexical

    def delete(self, target: StreamStateHandle | str) -> None:
        self._contained(target).unlink(missing_ok=True)

    def delete_prefix(self, relative_prefix: str) -> None:
        """Delete the directory ``relative_prefix`` names below the base (all of the base's
        contents for an empty prefix, keeping the base itself).

        Raises TargetOutsideStorageError, deleting nothing, if a component of the prefix is
        a symbolic link: it could lead out of the base (the base's own path may hold links:
        those the user chose). A prefix that names nothing, or a file, deletes nothing.
        """
        relative = contained_relative(relative_prefix, self.base_uri, allow_empty=True)
        try:
            base_fd = os.open(self._base, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            if relative:
                self._delete_below(base_fd, relative)
            else:
                self._empty(base_fd)
        finally:
            os.close(base_fd)

    def _delete_below(self, base_fd: int, relative: str) -> None:
        """rmtree of ``relative`` below the directory ``base_fd``, reached one component at a
        time without following a symlink: a link swapped in for a checked directory is not
        followed either, which a check of the path before deleting it could not promise."""
        *parents, name = relative.split("/")
        fd = os.dup(base_fd)
        try:
            for depth, part in enumerate(parents):
                try:
                    child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                    dir_fd=fd)
                except FileNotFoundError:
                    return
                except NotADirectoryError:
                    # A file holds nothing to delete; a symlink is refused.
                    with contextlib.suppress(FileNotFoundError):
                        if stat.S_ISLNK(os.lstat(part, dir_fd=fd).st_mode):
                            link = "/".join(parents[:depth + 1])
                            raise self._symlink_error(link, relative) from None
                    return
                os.close(fd)
                fd = child
            try:
                info = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                return
            if stat.S_ISLNK(info.st_mode):
                raise self._symlink_error(relative, relative)
            if not stat.S_ISDIR(info.st_mode):
                return
            # A writer still finishing inside (a task's late upload to an aborted
            # checkpoint) can refill a directory between the unlinks and the rmdir.
            # rmtree's fd-based walk (dir_fd) follows no symlink met inside, and refuses a
            # top that became one since the lstat.
            for attempt in range(3):
                try:
                    shutil.rmtree(name, dir_fd=fd)
                    return
                except FileNotFoundError:
                    return
                except OSError:
                    if attempt == 2:
                        raise
        finally:
            os.close(fd)

    def _symlink_error(self, link: str, relative: str) -> TargetOutsideStorageError:
        """The refusal to delete ``relative`` because ``link`` (both below the base) is a
        symbolic link."""
        return TargetOutsideStorageError(
            f"refusing to delete {self.base_uri}/{relative}: {self.base_uri}/{link} is a "
            f"symbolic link, which may lead out of this checkpoint storage ({self.base_uri}); "
            "only what lies under its base may be deleted")

    @staticmethod
    def _empty(base_fd: int) -> None:
        """Delete every entry of the base but keep the base (it may be a mount point). A
        symlink is unlinked, never followed."""
        with os.scandir(base_fd) as entries:
            names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        for name, is_dir in names:
            if is_dir:
                shutil.rmtree(name, dir_fd=base_fd)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=base_fd)

    def exists(self, target: StreamStateHandle | str) -> bool:
        return self._local(target).is_file()

    def check_access(self) -> None:
        # Only what holds on every machine: the daemons may see another file system here
        # (a mount the client lacks), so existence and permissions are theirs to judge.
        if self._base.exists() and not self._base.is_dir():
            msg = (f"checkpoint directory {self._base} is a file: point "
                   "state.checkpoints.dir at a directory")
            raise ConfigError(msg)

    def list(self, relative_prefix: str = "") -> list[str]:
        relative = check_relative(relative_prefix, allow_empty=True)
        directory = self._base / relative if relative else self._base
        uris = []
        for root, _dirs, files in os.walk(directory):
            for name in files:
                if not is_temp_name(name):
                    uris.append(Path(root, name).as_uri())
        return sorted(uris)


def _copy_into(origin: Path, f: BinaryIO) -> None:
    with open(origin, "rb") as source:
        shutil.copyfileobj(source, f, CHUNK_SIZE)
