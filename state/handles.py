"""Keyed state handles: what a snapshot of one subtask's keyed state left in storage.

A handle is small and JSON-able (``to_dict``/``from_dict``): a task acknowledges a
checkpoint with it, the checkpoint metadata keeps it, and a restore gets it back. Every
handle carries the key-group range it covers, so a restore at another parallelism picks
the handles overlapping its own range. Kinds:

* ``canonical`` — one file in the backend-independent canonical format (state/canonical.py),
  written by either backend; ``hashmap`` always writes this kind.
* ``changelog`` — a checkpoint of the changelog state backend (state/changelog.py): the
  handles of its last materialization (either kind above) and the state change log after it.
* ``rocksdb-incremental`` — a RocksDB checkpoint of the instance: its SST files are
  *shared* (uploaded once under ``<dir>/shared/``, reused by later checkpoints, reference
  counted by ``weir.checkpoint.shared_registry``), its other files (MANIFEST, CURRENT, OPTIONS,
  ...) are *private* to the checkpoint.

Either kind may name a verified local copy (``local``, task-local recovery) that a restore
prefers to the remote files.

Example:
    >>> from weir.checkpoint.storage import StreamStateHandle
    >>> from weir.state.key_groups import KeyGroupRange
    >>> data = StreamStateHandle("file:///c/job/chk-3/op-0/state", 120, "crc32:0000abcd")
    >>> handle = CanonicalStateHandle(KeyGroupRange(0, 63), 3, data)
    >>> restored = KeyedStateHandle.from_dict(handle.to_dict())
    >>> restored == handle, restored.kind, restored.state_size
    (True, 'canonical', 120)
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from weir.checkpoint.storage import StreamStateHandle
from weir.core.ids import CheckpointId
from weir.state.key_groups import KeyGroupRange

KIND_CANONICAL = "canonical"
KIND_ROCKSDB_INCREMENTAL = "rocksdb-incremental"


@dataclass(frozen=True)
class LocalCopy:
    """A secondary copy of a snapshot's files on the TaskExecutor's disk: file name ->
    ``file://`` handle (length and CRC-32 recorded when the copy was written)."""

    directory: str
    files: dict[str, StreamStateHandle]

    def to_dict(self) -> dict[str, Any]:
        return {"directory": self.directory,
                "files": {name: h.to_dict() for name, h in sorted(self.files.items())}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalCopy:
        return cls(str(data["directory"]),
                   {name: StreamStateHandle.from_dict(h) for name, h in data["files"].items()})


def _range_to_list(key_groups: KeyGroupRange) -> list[int]:
    return [key_groups.start, key_groups.end]


def _range_from(data: Any) -> KeyGroupRange:
    start, end = data
    return KeyGroupRange(int(start), int(end))


class KeyedStateHandle(ABC):
    """Common interface of the keyed state handles (see the module docstring)."""

    kind: ClassVar[str]
    key_group_range: KeyGroupRange
    checkpoint_id: CheckpointId
    local: LocalCopy | None

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form; :meth:`from_dict` reads it back."""

    @staticmethod
    def from_dict(data: dict[str, Any]) -> KeyedStateHandle:
        """The handle of any kind from its :meth:`to_dict` form; ValueError if malformed."""
        try:
            kind = data["kind"]
            if kind == "changelog" and kind not in _KINDS:
                from weir.state.changelog import ChangelogStateHandle  # imports this module

                _KINDS[kind] = ChangelogStateHandle
            cls = _KINDS[kind]
            return cls._from_dict(data)
        except (KeyError, TypeError, ValueError) as err:
            msg = f"not a keyed state handle ({type(err).__name__}: {err}): {data!r}"
            raise ValueError(msg) from err

    @classmethod
    @abstractmethod
    def _from_dict(cls, data: dict[str, Any]) -> KeyedStateHandle: ...

    @abstractmethod
    def shared_state(self) -> list[StreamStateHandle]:
        """Objects shared with other checkpoints (owned by the SharedStateRegistry)."""

    @abstractmethod
    def private_state(self) -> list[StreamStateHandle]:
        """Objects owned by this checkpoint alone (deleted with it)."""

    @property
    def state_size(self) -> int:
        """Bytes of every object the handle refers to (what a restore reads)."""
        return sum(h.length for h in (*self.shared_state(), *self.private_state()))

    @property
    @abstractmethod
    def checkpointed_size(self) -> int:
        """Bytes this checkpoint uploaded (less than ``state_size`` when incremental)."""

    def with_local(self, local: LocalCopy | None) -> KeyedStateHandle:
        """The same handle naming another (or no) local copy."""
        return dataclasses.replace(self, local=local)  # type: ignore[type-var]

    def overlap(self, key_groups: KeyGroupRange) -> KeyGroupRange:
        return self.key_group_range.intersection(key_groups)


@dataclass(frozen=True, eq=True)
class CanonicalStateHandle(KeyedStateHandle):
    """One canonical-format file (see the module docstring)."""

    key_group_range: KeyGroupRange
    checkpoint_id: CheckpointId
    data: StreamStateHandle
    local: LocalCopy | None = None
    #: Kind (value, list, map, ...) of each state in the snapshot, by name.
    state_kinds: dict[str, str] = field(default_factory=dict, compare=False)
    kind: ClassVar[str] = KIND_CANONICAL

    #: Name of the file inside a local copy.
    LOCAL_NAME: ClassVar[str] = "state.canonical"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "key_group_range": _range_to_list(self.key_group_range),
                "checkpoint_id": self.checkpoint_id, "data": self.data.to_dict(),
                "local": self.local.to_dict() if self.local else None,
                "state_kinds": dict(sorted(self.state_kinds.items()))}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> CanonicalStateHandle:
        local = data.get("local")
        return cls(_range_from(data["key_group_range"]), CheckpointId(int(data["checkpoint_id"])),
                   StreamStateHandle.from_dict(data["data"]),
                   LocalCopy.from_dict(local) if local else None,
                   {str(k): str(v) for k, v in (data.get("state_kinds") or {}).items()})

    def shared_state(self) -> list[StreamStateHandle]:
        return []

    def private_state(self) -> list[StreamStateHandle]:
        return [self.data]

    @property
    def checkpointed_size(self) -> int:
        return self.data.length


@dataclass(frozen=True, eq=True)
class IncrementalRocksDBStateHandle(KeyedStateHandle):
    """A RocksDB checkpoint: shared SST files and private metadata files, by local file
    name, plus the state name -> column family mapping."""

    key_group_range: KeyGroupRange
    checkpoint_id: CheckpointId
    #: Identifies the RocksDB instance lineage whose SST names the handle uses.
    backend_id: str
    column_families: dict[str, str]
    shared: dict[str, StreamStateHandle]
    private: dict[str, StreamStateHandle]
    #: Bytes uploaded by this checkpoint (new shared files and the private ones).
    uploaded_bytes: int = 0
    local: LocalCopy | None = None
    kind: ClassVar[str] = KIND_ROCKSDB_INCREMENTAL
    files_reused: int = field(default=0, compare=False)
    state_kinds: dict[str, str] = field(default_factory=dict, compare=False)
    #: SST file name -> first and last key group of its rows (files without an entry may
    #: hold any): a rescaling restore fetches only the files it needs.
    sst_key_groups: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False)
    #: A native savepoint's: the sibling savepoint (directory name) whose files it refers
    #: to instead of storing them ("": none; see checkpoint/savepoint_chain.py).
    savepoint_base: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Any]:
        extra = {"savepoint_base": self.savepoint_base} if self.savepoint_base else {}
        return {
            **extra,
            "kind": self.kind, "key_group_range": _range_to_list(self.key_group_range),
            "checkpoint_id": self.checkpoint_id, "backend_id": self.backend_id,
            "column_families": dict(sorted(self.column_families.items())),
            "shared": {n: h.to_dict() for n, h in sorted(self.shared.items())},
            "private": {n: h.to_dict() for n, h in sorted(self.private.items())},
            "uploaded_bytes": self.uploaded_bytes, "files_reused": self.files_reused,
            "local": self.local.to_dict() if self.local else None,
            "state_kinds": dict(sorted(self.state_kinds.items())),
            "sst_key_groups": {n: list(r) for n, r in sorted(self.sst_key_groups.items())},
        }

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> IncrementalRocksDBStateHandle:
        local = data.get("local")
        return cls(
            _range_from(data["key_group_range"]), CheckpointId(int(data["checkpoint_id"])),
            str(data["backend_id"]),
            {str(k): str(v) for k, v in data["column_families"].items()},
            {n: StreamStateHandle.from_dict(h) for n, h in data["shared"].items()},
            {n: StreamStateHandle.from_dict(h) for n, h in data["private"].items()},
            int(data.get("uploaded_bytes", 0)),
            LocalCopy.from_dict(local) if local else None,
            files_reused=int(data.get("files_reused", 0)),
            state_kinds={str(k): str(v) for k, v in (data.get("state_kinds") or {}).items()},
            sst_key_groups={str(n): (int(r[0]), int(r[1]))
                            for n, r in (data.get("sst_key_groups") or {}).items()},
            savepoint_base=str(data.get("savepoint_base") or ""))

    def shared_state(self) -> list[StreamStateHandle]:
        return [self.shared[name] for name in sorted(self.shared)]

    def private_state(self) -> list[StreamStateHandle]:
        return [self.private[name] for name in sorted(self.private)]

    def files(self) -> dict[str, StreamStateHandle]:
        """Every file of the RocksDB checkpoint by its local name."""
        return {**self.shared, **self.private}

    def files_for(self, key_groups: KeyGroupRange) -> list[str] | None:
        """The SST files that may hold rows of ``key_groups``, or None when that is not
        known to be fewer than all of them (the whole checkpoint is needed)."""
        if not self.sst_key_groups:
            return None
        wanted = [name for name in sorted(self.shared)
                  if name not in self.sst_key_groups
                  or _overlaps(self.sst_key_groups[name], key_groups)]
        return wanted if len(wanted) < len(self.shared) else None

    @property
    def checkpointed_size(self) -> int:
        return self.uploaded_bytes


def _overlaps(first_last: tuple[int, int], key_groups: KeyGroupRange) -> bool:
    return first_last[0] <= key_groups.end and first_last[1] >= key_groups.start


_KINDS: dict[str, type[KeyedStateHandle]] = {
    KIND_CANONICAL: CanonicalStateHandle,
    KIND_ROCKSDB_INCREMENTAL: IncrementalRocksDBStateHandle,
}
