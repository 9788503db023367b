"""Checkpoint storage: where state snapshots go, as immutable objects behind handles.

A :class:`CheckpointStorageAccess` writes bytes or local files under its base URI (a local
directory or an S3 bucket and prefix) and returns a :class:`StreamStateHandle`: the object's
absolute URI, length and checksum (CRC-32C; handles written before it carry zlib's CRC-32,
and still verify). Writes are atomic (a reader sees the whole object or
nothing); reads and downloads verify length and checksum, so a corrupted or truncated snapshot
raises :class:`~weir.core.errors.CorruptStateError` instead of restoring wrong state.
:func:`create_storage` picks the implementation from the URI scheme.

Example:
    >>> import tempfile
    >>> storage = create_storage(tempfile.mkdtemp())
    >>> handle = storage.write("job-1/chk-3/op-a/state-0", b"snapshot bytes")
    >>> handle.length, handle.checksum
    (14, 'crc32c:5c7d3cca')
    >>> storage.read(StreamStateHandle.from_dict(handle.to_dict()))
    b'snapshot bytes'
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import google_crc32c

from weir.core.errors import ConfigError, CorruptStateError, StorageError

if TYPE_CHECKING:
    from weir.core.config import Configuration

#: Chunk size for streaming copies and checksums: large enough to amortise syscalls,
#: small enough that a big snapshot never sits in memory whole.
CHUNK_SIZE = 1 << 20


@dataclass(frozen=True)
class StreamStateHandle:
    """A pointer to one immutable state object, with what is needed to verify it.

    Example:
        >>> h = StreamStateHandle("s3://bucket/job/chk-1/state-0", 3, "crc32:352441c2")
        >>> StreamStateHandle.from_dict(h.to_dict()) == h
        True
    """

    uri: str
    length: int
    checksum: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (for checkpoint metadata and RPC messages)."""
        return {"uri": self.uri, "length": self.length, "checksum": self.checksum}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamStateHandle:
        """The inverse of :meth:`to_dict`; raises ValueError on a malformed dict."""
        try:
            uri, length, checksum = data["uri"], data["length"], data["checksum"]
        except (KeyError, TypeError) as err:
            msg = f"not a state handle (needs uri, length, checksum): {data!r}"
            raise ValueError(msg) from err
        if not isinstance(uri, str) or not isinstance(checksum, str) \
                or isinstance(length, bool) or not isinstance(length, int) or length < 0:
            msg = f"malformed state handle: {data!r}"
            raise ValueError(msg)
        return cls(uri=uri, length=length, checksum=checksum)


def _crc32c(data: bytes | bytearray | memoryview, value: int) -> int:
    # google-crc32c takes bytes only (file and S3 reads give bytes: no copy there).
    return int(google_crc32c.extend(value, data if isinstance(data, bytes) else bytes(data)))


def _crc32(data: bytes | bytearray | memoryview, value: int) -> int:
    return zlib.crc32(data, value)


#: Checksum algorithms by the prefix of a handle's checksum. CRC-32C runs in hardware
#: (SSE 4.2, ARMv8) through google-crc32c: about 9 GB/s here against zlib's CRC-32 at 3
#: (measured with a file read), which matters when a restore verifies a gigabyte of local
#: copies. zlib's stays for older handles, and where google-crc32c has no native code.
_ALGORITHMS = {"crc32c": _crc32c, "crc32": _crc32}
DEFAULT_CHECKSUM = "crc32c" if google_crc32c.implementation == "c" else "crc32"


class Checksum:
    """An incremental checksum: cheap, and enough to catch corruption, not tampering.
    ``like``: the checksum of a handle to verify (its algorithm is used); None for new
    handles (:data:`DEFAULT_CHECKSUM`).

    Example:
        >>> crc = Checksum("crc32:352441c2")
        >>> crc.update(b"abc")
        >>> crc.hexdigest(), crc.length
        ('crc32:352441c2', 3)
    """

    def __init__(self, like: str | None = None) -> None:
        self.algorithm = like.split(":", 1)[0] if like else DEFAULT_CHECKSUM
        # An unknown algorithm verifies nothing but the length, rather than failing
        # every read of a handle from a newer writer.
        self._update = _ALGORITHMS.get(self.algorithm)
        self.value = 0
        self.length = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        if self._update is not None:
            self.value = self._update(data, self.value)
        self.length += len(data)

    def hexdigest(self) -> str:
        """``algorithm:`` and eight hex digits ("" for an unknown algorithm: nothing to
        compare, :func:`verify` checks the length only)."""
        return f"{self.algorithm}:{self.value:08x}" if self._update is not None else ""


def checksum_of(data: bytes | bytearray | memoryview, like: str | None = None) -> str:
    """The handle checksum of ``data`` (see :class:`Checksum` for ``like``)."""
    crc = Checksum(like)
    crc.update(data)
    return crc.hexdigest()


def file_checksum(path: str | Path, like: str | None = None) -> tuple[int, str]:
    """Length and handle checksum of a local file, read in chunks."""
    crc = Checksum(like)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            crc.update(chunk)
    return crc.length, crc.hexdigest()


#: The length of a handle to a file that verifies itself (``_metadata`` has its own
#: checksum): reads of such a handle check nothing.
UNKNOWN_LENGTH = -1


def self_verifying(uri: str) -> StreamStateHandle:
    """A handle to read ``uri`` whose length and checksum are not known in advance."""
    return StreamStateHandle(uri, UNKNOWN_LENGTH, "")


def verify(handle: StreamStateHandle, length: int, checksum: str | None) -> None:
    """Raise CorruptStateError unless ``length``/``checksum`` match the handle's.

    ``checksum`` None (or "") checks the length only (used before a body is read, to fail
    early).
    A handle of :data:`UNKNOWN_LENGTH` is not checked.
    """
    if handle.length == UNKNOWN_LENGTH:
        return
    if length != handle.length:
        msg = (f"state object {handle.uri} is corrupt: length is {length} bytes, "
               f"the handle recorded {handle.length}")
        raise CorruptStateError(msg)
    if checksum and checksum != handle.checksum:
        msg = (f"state object {handle.uri} is corrupt: checksum is {checksum}, "
               f"the handle recorded {handle.checksum}")
        raise CorruptStateError(msg)


def check_relative(path: str, allow_empty: bool = False) -> str:
    """Normalise a storage-relative path (``a/b/c``); refuse escapes and absolute paths.

    Paths are ``/``-separated on every platform, since they double as S3 keys.
    """
    # A prefix may be written directory-style ('a/b/'); an object path may not.
    text = path.rstrip("/") if allow_empty else path
    if not text:
        if allow_empty:
            return ""
        msg = "relative path must not be empty"
        raise ValueError(msg)
    if text.startswith("/") or "\\" in text \
            or any(part in ("", ".", "..") for part in text.split("/")):
        msg = f"not a plain relative path: {path!r} (use 'a/b/c' below the storage base)"
        raise ValueError(msg)
    return text


class TargetOutsideStorageError(StorageError, ValueError):
    """A delete named something outside the storage's base (another directory, bucket or
    prefix, or a path that climbs out with ``..``): a storage deletes only its own objects.
    Nothing was deleted."""


def outside_error(target: str, base_uri: str) -> TargetOutsideStorageError:
    """The refusal to delete ``target``, which is not under ``base_uri``."""
    return TargetOutsideStorageError(
        f"refusing to delete {target}: it is not inside this checkpoint storage "
        f"({base_uri}); only objects under its base may be deleted")


def contained_relative(relative_path: str, base_uri: str, allow_empty: bool = False) -> str:
    """:func:`check_relative` for deletes: the same normalised path, or
    TargetOutsideStorageError instead of its ValueError."""
    try:
        return check_relative(relative_path, allow_empty=allow_empty)
    except ValueError as err:
        target = f"{base_uri}/{relative_path}"
        raise outside_error(target, base_uri) from err


class CheckpointStorageAccess(ABC):
    """Where snapshots are stored: atomic writes, verified reads, prefix listing and deletion.

    Paths given to ``write*``, ``list`` and ``delete_prefix`` are relative to
    :attr:`base_uri` (``job-id/chk-3/op-uid/state-0``); handles and listed entries are
    absolute URIs. A prefix names a directory: ``list("job/chk-3")`` covers
    ``job/chk-3/...`` but not ``job/chk-30/...``.
    """

    @property
    @abstractmethod
    def base_uri(self) -> str:
        """The absolute URI every relative path is resolved against (no trailing slash)."""

    @abstractmethod
    def write(self, relative_path: str, data: bytes | bytearray | memoryview
              ) -> StreamStateHandle:
        """Store ``data`` atomically at ``relative_path`` (replacing any previous object)."""

    @abstractmethod
    def write_file(self, relative_path: str, local_path: str | Path, *,
                   background: bool = False) -> StreamStateHandle:
        """Upload a local file atomically, streaming it (the file must not change meanwhile).
        ``background``: an upload nothing waits for soon (a materialization), which may
        use fewer parallel transfers to leave the link and the server to others."""

    def copy(self, source: StreamStateHandle, relative_path: str) -> StreamStateHandle:
        """Store a copy of the object ``source`` names (anywhere, any storage of the same
        kind) at ``relative_path``; the handle keeps the source's length and checksum.
        Storages that can copy without moving the bytes through this process override
        this (S3 ``CopyObject``, a hard link); this fallback downloads and uploads."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="weir-copy-") as scratch:
            local = Path(scratch) / "object"
            self.download(source, local)
            written = self.write_file(relative_path, local)
        verify(source, written.length, written.checksum
               if written.checksum.split(":")[0] == source.checksum.split(":")[0] else None)
        return StreamStateHandle(written.uri, source.length, source.checksum)

    @abstractmethod
    def read(self, handle: StreamStateHandle) -> bytes:
        """The object's bytes, verified against the handle's length and checksum."""

    @abstractmethod
    def download(self, handle: StreamStateHandle, local_path: str | Path) -> None:
        """Copy the object to ``local_path``, verified; the destination appears only whole."""

    @abstractmethod
    def delete(self, target: StreamStateHandle | str) -> None:
        """Delete one object by handle or URI; deleting a missing object is not an error.

        Raises TargetOutsideStorageError, deleting nothing, unless the target is an object
        under :attr:`base_uri` (an absolute path elsewhere, another bucket or prefix, a
        ``..`` or ``.`` segment, or another scheme are all refused).
        """

    @abstractmethod
    def delete_prefix(self, relative_prefix: str) -> None:
        """Delete every object under ``relative_prefix`` (a directory-like prefix).

        Raises TargetOutsideStorageError for a prefix that is not a plain relative path.
        """

    def check_access(self) -> None:  # noqa: B027 - a storage that cannot tell checks nothing
        """Fail now if this storage certainly cannot be used, so that a job is refused at
        submission rather than failing its first checkpoint: raises a UserError naming the
        fix (ConfigError, StorageAccessError, StorageUnreachableError). May block on the
        network for the storage's connect timeout and retries. Called on the client, which
        may not see what the daemons see: implementations check only what holds for both."""

    @abstractmethod
    def exists(self, target: StreamStateHandle | str) -> bool:
        """Whether the object a handle or URI names exists."""

    @abstractmethod
    def list(self, relative_prefix: str = "") -> list[str]:
        """URIs of every object under ``relative_prefix``, sorted."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_uri!r})"


def target_uri(target: StreamStateHandle | str) -> str:
    """The URI of a handle, or the string itself."""
    return target.uri if isinstance(target, StreamStateHandle) else target


def check_storage(uri: str, config: Configuration | None = None) -> None:
    """Refuse a storage location a job could not use (relative path, unknown scheme,
    unreachable S3 endpoint, refused credentials, missing bucket), with one UserError whose
    message names ``uri`` and the fix.

    Example:
        >>> try:
        ...     check_storage("checkpoints")
        ... except ConfigError as err:
        ...     print(str(err)[:57])
        checkpoint storage location 'checkpoints' is not absolute
    """
    create_storage(uri, config).check_access()


def reader_for(uri: str, config: Configuration | None = None) -> CheckpointStorageAccess:
    """A storage that reads (and checks the existence of) the object at ``uri``, wherever
    it is: rooted at its directory (``file://``) or bucket (``s3://``)."""
    if uri.startswith("s3://"):
        bucket = uri[len("s3://"):].partition("/")[0]
        return create_storage(f"s3://{bucket}", config)
    return create_storage(uri.rstrip("/").rsplit("/", 1)[0] or "/", config)


def create_storage(uri: str, config: Configuration | None = None) -> CheckpointStorageAccess:
    """The storage for ``uri``: ``file:///abs/dir``, ``/abs/dir`` or ``s3://bucket/prefix``.

    S3 storage is configured from the ``s3.*`` options of ``config`` (or, without one, from
    ``WEIR_S3_*`` environment variables and defaults).
    """
    text = uri.strip()
    if text.startswith("s3://"):
        # Imported here: boto3 takes a noticeable time to import, and file-only users
        # (and the unit tests) should not pay for it.
        from weir.checkpoint.s3 import S3CheckpointStorageAccess

        return S3CheckpointStorageAccess.from_uri(text, config)
    if text.startswith("file:") or text.startswith("/"):
        from weir.checkpoint.filesystem import FsCheckpointStorageAccess

        return FsCheckpointStorageAccess(FsCheckpointStorageAccess.path_from_uri(text))
    scheme = text.partition("://")[0] if "://" in text else ""
    if scheme:
        msg = (f"unsupported checkpoint storage scheme '{scheme}://' in {uri!r} "
               "(use file:///absolute/path, an absolute path, or s3://bucket/prefix)")
    else:
        msg = (f"checkpoint storage location {uri!r} is not absolute "
               "(use file:///absolute/path, an absolute path, or s3://bucket/prefix)")
    raise ConfigError(msg)
