"""Chains of native savepoints in one savepoint directory: a savepoint refers to the files
an earlier savepoint of the same job in the same directory already holds instead of
storing them again.

Layout: ``weir savepoint JOB DIR`` writes ``DIR/savepoint-<job>-<random>/``. A native
savepoint's subtask finds the RocksDB SST files it is about to store in the last savepoint
its own RocksDB instance wrote into ``DIR`` (same file, same length, same checksum) and
records them by that savepoint's URI, the *base*. ``_metadata`` stores every such path
relative to the savepoint (``../savepoint-abc/shared/000123.sst``), so ``DIR`` moved or
copied whole keeps every savepoint in it restorable; nothing refers outside ``DIR``.

``_refs`` (JSON, next to ``_metadata``) lists what a savepoint needs from its siblings:
``files`` relative to ``DIR`` and the ``bases`` its subtasks took them from. A savepoint
that refers to nothing has none. The JobMaster writes it before ``_metadata``, then checks
that every base is still a savepoint (its ``_metadata`` exists); disposal deletes the
``_metadata`` first, then reads every ``_refs`` in ``DIR`` and keeps the files they name.
Whichever comes first, a new savepoint never refers to a file a disposal deletes: either
the disposal sees its ``_refs``, or the savepoint sees its base gone and fails.

Chains are per job: a subtask only remembers savepoints it wrote itself, so two jobs
saving into one ``DIR`` never refer to each other's files.

Example:
    >>> refs = SavepointRefs("job-1", ("savepoint-ab-1",), ("savepoint-ab-1/shared/x.sst",))
    >>> SavepointRefs.decode(refs.encode(), "DIR/savepoint-ab-2/_refs") == refs
    True
    >>> sibling_relative("s3://b/sp/savepoint-a/shared/x.sst", "s3://b/sp/savepoint-b")
    '../savepoint-a/shared/x.sst'
    >>> normalize_uri("s3://b/sp/savepoint-b/../savepoint-a/shared/x.sst")
    's3://b/sp/savepoint-a/shared/x.sst'
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from weir.checkpoint.storage import CheckpointStorageAccess, self_verifying
from weir.core.errors import CorruptStateError, MissingStateError
from weir.proto.checkpoint_pb2 import CheckpointMetadata

log = logging.getLogger(__name__)

#: A savepoint's reference file, next to its ``_metadata``.
REFS_NAME = "_refs"
#: Savepoint directories start with this (``savepoint-<job>-<random>``).
SAVEPOINT_DIR_PREFIX = "savepoint-"
REFS_VERSION = 1
_METADATA_NAME = "_metadata"  # checkpoint.metadata.METADATA_NAME (that module imports this)


def split_directory(directory: str) -> tuple[str, str]:
    """``(parent, name)`` of a savepoint directory URI."""
    parent, _, name = directory.rstrip("/").rpartition("/")
    return parent, name


def sibling_relative(uri: str, directory: str) -> str | None:
    """``../<sibling>/<path>`` when ``uri`` lies in another savepoint directory next to
    ``directory``; None otherwise."""
    parent, name = split_directory(directory)
    prefix = parent + "/"
    if not uri.startswith(prefix + SAVEPOINT_DIR_PREFIX):
        return None
    rest = uri[len(prefix):]
    sibling = rest.split("/", 1)[0]
    if sibling == name or "/" not in rest:
        return None
    return "../" + rest


def normalize_uri(uri: str) -> str:
    """``uri`` with ``..`` segments resolved (object stores take keys literally)."""
    if "/../" not in uri:
        return uri
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return posixpath.normpath(uri)
    if scheme == "file":
        return f"file://{posixpath.normpath(rest)}"
    bucket, _, key = rest.partition("/")
    return f"{scheme}://{bucket}/{posixpath.normpath(key)}"


@dataclass(frozen=True)
class SavepointRefs:
    """What one savepoint needs from its siblings (see the module docstring)."""

    job_id: str
    #: Sibling savepoints (directory names) whose files the subtasks referred to.
    bases: tuple[str, ...]
    #: Files in sibling savepoints, relative to the savepoint directory's parent.
    files: tuple[str, ...]

    def encode(self) -> bytes:
        return json.dumps({"version": REFS_VERSION, "job_id": self.job_id,
                           "bases": list(self.bases), "files": list(self.files)},
                          indent=1).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> SavepointRefs:
        """Parse a ``_refs`` file; CorruptStateError naming ``where`` if it is damaged."""
        try:
            value = json.loads(data)
            if value.get("version") != REFS_VERSION:
                msg = f"version {value.get('version')!r}, this weir reads {REFS_VERSION}"
                raise ValueError(msg)
            job_id, bases, files = value["job_id"], value["bases"], value["files"]
            if not isinstance(job_id, str) or not _strings(bases) or not _strings(files) \
                    or any(not _plain(f) for f in files):
                msg = "job_id, bases and files must be a string and lists of plain paths"
                raise ValueError(msg)
        except (ValueError, KeyError, AttributeError, TypeError) as err:
            msg = (f"the savepoint reference file {where} is corrupt ({err}): the savepoints "
                   "in its directory cannot be disposed of safely; restore it from a copy "
                   "of the directory, or delete the savepoint it belongs to by hand")
            raise CorruptStateError(msg) from err
        return cls(job_id, tuple(bases), tuple(files))


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _plain(path: str) -> bool:
    parts = path.split("/")
    return len(parts) >= 2 and all(p not in ("", ".", "..") for p in parts)


def _savepoint_bases(value: Any) -> Iterator[str]:
    """``savepoint_base`` of every keyed state handle inside a JSON form."""
    if isinstance(value, dict):
        base = value.get("savepoint_base")
        if isinstance(base, str) and base:
            yield base
        for item in value.values():
            yield from _savepoint_bases(item)
    elif isinstance(value, list):
        for item in value:
            yield from _savepoint_bases(item)


def refs_of(metadata: CheckpointMetadata, directory: str) -> SavepointRefs:
    """The references of a savepoint about to be written at ``directory`` (``metadata``
    with absolute URIs, as the tasks acknowledged it)."""
    from weir.checkpoint.metadata import referenced_files

    files = set()
    for handle in referenced_files(metadata):
        relative = sibling_relative(handle.uri, directory)
        if relative is not None:
            files.add(relative[len("../"):])
    bases: set[str] = set()
    for subtask in metadata.subtasks:
        for operator in subtask.state.operators:
            if operator.keyed_state:
                bases.update(_savepoint_bases(json.loads(operator.keyed_state)))
    return SavepointRefs(metadata.job_id, tuple(sorted(bases)), tuple(sorted(files)))


def commit_refs(storage: CheckpointStorageAccess, metadata: CheckpointMetadata) -> None:
    """Before a savepoint's ``_metadata`` (``storage``: its directory): write its
    ``_refs`` if it refers to siblings, then check that every base is still a savepoint.
    Raises MissingStateError if one was disposed of meanwhile (the savepoint fails: its
    directory is deleted and it can be taken again), StorageError."""
    directory = storage.base_uri.rstrip("/")
    refs = refs_of(metadata, directory)
    if not refs.files:
        return
    storage.write(REFS_NAME, refs.encode())
    parent, _ = split_directory(directory)
    for base in refs.bases:
        if not storage.exists(self_verifying(f"{parent}/{base}/{_METADATA_NAME}")):
            msg = (f"the savepoint {parent}/{base} was disposed of while this savepoint "
                   "referred to its files: take the savepoint again")
            raise MissingStateError(msg)


def read_refs(storage: CheckpointStorageAccess, directory: str) -> SavepointRefs | None:
    """The ``_refs`` of the savepoint at ``directory`` (None: it refers to nothing)."""
    uri = f"{directory.rstrip('/')}/{REFS_NAME}"
    handle = self_verifying(uri)
    if not storage.exists(handle):
        return None
    return SavepointRefs.decode(storage.read(handle), uri)


def all_refs(storage: CheckpointStorageAccess) -> dict[str, SavepointRefs]:
    """Every savepoint's ``_refs`` in the directory ``storage`` is based at, by savepoint
    directory name. Raises CorruptStateError naming a damaged one, StorageError."""
    base = storage.base_uri.rstrip("/") + "/"
    found = {}
    for uri in storage.list(""):
        parts = uri[len(base):].split("/")
        if len(parts) == 2 and parts[1] == REFS_NAME:
            found[parts[0]] = SavepointRefs.decode(storage.read(self_verifying(uri)), uri)
    return found


def dependents(parent_storage: CheckpointStorageAccess, name: str) -> list[str]:
    """Sibling savepoints that refer to files of savepoint ``name``."""
    prefix = name + "/"
    return sorted(other for other, refs in all_refs(parent_storage).items()
                  if other != name and any(f.startswith(prefix) for f in refs.files))


def dispose_in_chain(directory: str, own: CheckpointStorageAccess,
                     parent_storage: CheckpointStorageAccess) -> list[str]:
    """Dispose of the savepoint at ``directory`` (``own``: its storage; ``parent_storage``:
    its directory's parent) keeping every file another savepoint's ``_refs`` names, and
    deleting the files of already disposed savepoints only it still needed. Returns the
    files kept (relative to the parent). Raises CorruptStateError (nothing deleted when a
    ``_refs`` file is damaged before the start), StorageError."""
    parent, name = split_directory(directory)
    own_refs = read_refs(own, directory)
    all_refs(parent_storage)  # a damaged _refs stops the disposal before anything goes
    own.delete(f"{directory}/{_METADATA_NAME}")
    # Only now, with the savepoint no longer a base, is the set of referrers final.
    others = {n: r for n, r in all_refs(parent_storage).items() if n != name}
    needed = {f for refs in others.values() for f in refs.files}
    kept = sorted(f for f in needed if f.startswith(name + "/"))
    if kept:
        for uri in own.list(""):
            relative = f"{name}/{uri[len(directory) + 1:]}"
            if relative not in needed and not uri.endswith("/" + REFS_NAME):
                own.delete(uri)
        own.delete(f"{directory}/{REFS_NAME}")  # last: it protected what it refers to
    else:
        own.delete_prefix("")
    for relative in own_refs.files if own_refs else ():
        sibling = relative.split("/", 1)[0]
        if relative in needed or _alive(parent_storage, f"{parent}/{sibling}"):
            continue
        parent_storage.delete(f"{parent}/{relative}")
        _remove_empty(f"{parent}/{sibling}")
    if not kept:
        _remove_empty(directory)
    return kept


def _alive(storage: CheckpointStorageAccess, directory: str) -> bool:
    """A savepoint that is not disposed of: restorable, or still protecting what it
    refers to."""
    return any(storage.exists(self_verifying(f"{directory}/{n}"))
               for n in (_METADATA_NAME, REFS_NAME))


def _remove_empty(directory: str) -> None:
    """Remove a local savepoint directory left without files (S3 has no directories)."""
    if not directory.startswith("file:"):
        return
    from weir.checkpoint.filesystem import FsCheckpointStorageAccess

    path = FsCheckpointStorageAccess.path_from_uri(directory)
    with contextlib.suppress(OSError):
        if not any(p.is_file() for p in path.rglob("*")):
            shutil.rmtree(path)

