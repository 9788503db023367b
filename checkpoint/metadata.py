"""``_metadata``: the file that makes a checkpoint complete, and finding checkpoints in
storage.

Layout: ``<dir>/<job-id>/chk-<n>/_metadata``, written atomically once every task
acknowledged. The file is ``MAGIC "WEIRMETA"``, a u8 file version, the CRC-32 of the
payload (u32, big-endian), then the payload: a ``CheckpointMetadata`` protobuf message
(``proto/checkpoint.proto``), whose own ``version`` field versions its layout. A checkpoint
directory without ``_metadata`` never completed.

Example:
    >>> import tempfile
    >>> from weir.checkpoint.storage import create_storage
    >>> storage = create_storage(tempfile.mkdtemp())
    >>> path = write_metadata(storage, CheckpointMetadata(job_id="j", checkpoint_id=3))
    >>> path.endswith("/j/chk-3")
    True
    >>> read_metadata(storage, path).checkpoint_id
    3
    >>> [n for n, _ in list_checkpoints(storage, "j")]
    [3]
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterator
from typing import Any

from weir.checkpoint.savepoint_chain import normalize_uri, sibling_relative
from weir.checkpoint.storage import CheckpointStorageAccess, StreamStateHandle, self_verifying
from weir.core.errors import CorruptStateError, MissingStateError
from weir.core.ids import CheckpointId, JobId
from weir.proto.checkpoint_pb2 import CheckpointMetadata, StreamHandle

MAGIC = b"WEIRMETA"
FILE_VERSION = 1
METADATA_NAME = "_metadata"
_HEADER = struct.Struct(">BI")
_CHECKPOINT_DIR = re.compile(r"^chk-(\d+)$")


def checkpoint_dir(job_id: JobId, checkpoint_id: CheckpointId) -> str:
    """The checkpoint's directory, relative to the checkpoint storage's base."""
    return f"{job_id}/chk-{checkpoint_id}"


def encode_metadata(metadata: CheckpointMetadata) -> bytes:
    payload = metadata.SerializeToString(deterministic=True)
    return MAGIC + _HEADER.pack(FILE_VERSION, zlib.crc32(payload)) + payload


def decode_metadata(data: bytes, where: str) -> CheckpointMetadata:
    """Parse a ``_metadata`` file; CorruptStateError naming ``where`` if it is damaged."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _HEADER.size:
        msg = f"{where} is not a weir checkpoint metadata file"
        raise CorruptStateError(msg)
    version, crc = _HEADER.unpack_from(data, len(MAGIC))
    if version != FILE_VERSION:
        msg = f"{where} has file version {version}; this weir reads version {FILE_VERSION}"
        raise CorruptStateError(msg)
    payload = data[len(MAGIC) + _HEADER.size:]
    if zlib.crc32(payload) != crc:
        msg = f"{where} is corrupt (checksum mismatch)"
        raise CorruptStateError(msg)
    try:
        return CheckpointMetadata.FromString(payload)
    except Exception as err:  # protobuf's DecodeError and friends
        msg = f"{where} cannot be parsed: {err}"
        raise CorruptStateError(msg) from err


def write_metadata(storage: CheckpointStorageAccess, metadata: CheckpointMetadata) -> str:
    """Write ``_metadata`` atomically; returns the checkpoint's external path (its
    directory URI). Raises StorageError."""
    directory = checkpoint_dir(JobId(metadata.job_id), CheckpointId(metadata.checkpoint_id))
    storage.write(f"{directory}/{METADATA_NAME}", encode_metadata(metadata))
    return f"{storage.base_uri.rstrip('/')}/{directory}"


def write_savepoint_metadata(storage: CheckpointStorageAccess,
                             metadata: CheckpointMetadata) -> str:
    """Write a savepoint's ``_metadata`` at the base of ``storage`` (the savepoint's own
    directory), every path in it relative to that directory; returns the directory URI."""
    base = storage.base_uri.rstrip("/")
    storage.write(METADATA_NAME, encode_metadata(relative_to(metadata, base)))
    return base


def snapshot_directory(path: str) -> str:
    """The directory of a snapshot named by its directory or its ``_metadata`` file."""
    path = path.rstrip("/")
    return path[:-len(METADATA_NAME) - 1] if path.endswith("/" + METADATA_NAME) else path


def read_metadata(storage: CheckpointStorageAccess, path: str) -> CheckpointMetadata:
    """The metadata of the checkpoint or savepoint at ``path`` (its directory URI, or the
    ``_metadata`` URI), relative paths resolved against where it was read from. Raises
    MissingStateError, CorruptStateError or StorageError."""
    directory = snapshot_directory(path)
    uri = f"{directory}/{METADATA_NAME}"
    handle = self_verifying(uri)
    if not storage.exists(handle):
        msg = f"checkpoint metadata {uri} does not exist"
        raise MissingStateError(msg)
    return resolved(decode_metadata(storage.read(handle), uri), directory)


def _is_relative(uri: str) -> bool:
    return "://" not in uri and not uri.startswith(("/", "file:"))


def relative_to(metadata: CheckpointMetadata, base: str) -> CheckpointMetadata:
    """A copy of ``metadata`` whose paths under ``base`` are relative to it, and those in
    a sibling savepoint directory relative too (``../savepoint-x/...``: a savepoint
    directory that can be moved whole); local copies are dropped (they belong to
    TaskExecutors)."""
    prefix = base.rstrip("/") + "/"

    def change(uri: str) -> str:
        if uri.startswith(prefix):
            return uri[len(prefix):]
        return sibling_relative(uri, base) or uri

    return _map_uris(metadata, change, drop_local=True)


def resolved(metadata: CheckpointMetadata, base: str) -> CheckpointMetadata:
    """A copy of ``metadata`` whose relative paths are joined to ``base``."""
    prefix = base.rstrip("/") + "/"
    return _map_uris(metadata, lambda uri: normalize_uri(prefix + uri) if _is_relative(uri)
                     else uri)


def _map_uris(metadata: CheckpointMetadata, change: Any, drop_local: bool = False
              ) -> CheckpointMetadata:
    result = CheckpointMetadata()
    result.CopyFrom(metadata)
    for subtask in result.subtasks:
        for operator in subtask.state.operators:
            if operator.HasField("operator_state") and operator.operator_state.uri:
                operator.operator_state.uri = change(operator.operator_state.uri)
            if operator.keyed_state:
                operator.keyed_state = json.dumps(
                    [_map_handle(h, change, drop_local)
                     for h in json.loads(operator.keyed_state)])
        if subtask.state.HasField("channel_state"):
            data = subtask.state.channel_state.data
            data.uri = change(data.uri)
    return result


def _map_handle(value: Any, change: Any, drop_local: bool) -> Any:
    """A keyed state handle's JSON form with ``change`` applied to every stream handle's
    uri. A local copy names a TaskExecutor's directory: kept as it is, or dropped."""
    if isinstance(value, dict):
        if "uri" in value and "length" in value:
            return {**value, "uri": change(value["uri"])}
        return {key: (None if drop_local else item) if key == "local"
                else _map_handle(item, change, drop_local) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_handle(item, change, drop_local) for item in value]
    return value


def list_checkpoints(storage: CheckpointStorageAccess,
                     job_id: JobId) -> list[tuple[CheckpointId, str]]:
    """Completed checkpoints of ``job_id`` in storage (those with ``_metadata``), oldest
    first, as (id, directory URI)."""
    found = []
    base = storage.base_uri.rstrip("/")
    for relative in storage.list(f"{job_id}/"):
        parts = relative.split("/")
        if len(parts) >= 3 and parts[-1] == METADATA_NAME:
            match = _CHECKPOINT_DIR.match(parts[-2])
            if match:
                found.append((CheckpointId(int(match.group(1))),
                              f"{base}/{job_id}/{parts[-2]}"))
    return sorted(found)


def referenced_files(metadata: CheckpointMetadata) -> Iterator[StreamHandle]:
    """Every file the checkpoint's state refers to (operator, keyed and channel state)."""
    for subtask in metadata.subtasks:
        for operator in subtask.state.operators:
            if operator.HasField("operator_state"):
                yield operator.operator_state
            if operator.keyed_state:
                for handle in json.loads(operator.keyed_state):
                    yield from _stream_handles(handle)
        if subtask.state.HasField("channel_state"):
            yield subtask.state.channel_state.data


def _stream_handles(value: Any) -> Iterator[StreamHandle]:
    """Stream handles inside a keyed state handle's JSON form (any kind): every dict with
    a ``uri`` and a ``length``."""
    if isinstance(value, dict):
        if "uri" in value and "length" in value:
            yield StreamHandle(uri=value["uri"], size=int(value["length"]),
                               checksum=value.get("checksum") or "")
            return
        for key, item in value.items():
            if key != "local":  # a local copy lives on a TaskExecutor, not in storage
                yield from _stream_handles(item)
    elif isinstance(value, list):
        for item in value:
            yield from _stream_handles(item)


def missing_files(storage: CheckpointStorageAccess, metadata: CheckpointMetadata) -> list[str]:
    """URIs of files the checkpoint needs that storage does not have (cheap: existence
    only; contents are verified by checksum when tasks read them)."""
    missing = []
    seen: set[str] = set()
    for handle in referenced_files(metadata):
        if handle.uri in seen:
            continue
        seen.add(handle.uri)
        if not storage.exists(handle.uri):
            missing.append(handle.uri)
    return missing


def to_stream_handle(handle: StreamHandle) -> StreamStateHandle:
    return StreamStateHandle(handle.uri, handle.size, handle.checksum)


def from_stream_handle(handle: StreamStateHandle) -> StreamHandle:
    return StreamHandle(uri=handle.uri, size=handle.length, checksum=handle.checksum)
