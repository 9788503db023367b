"""Reference counts of the state files that retained checkpoints share.

An incremental checkpoint refers to SST files uploaded by earlier checkpoints (under
``<job>/shared/``). A shared file may be deleted only when no retained checkpoint refers
to it any more: the checkpoint coordinator registers every completed checkpoint's keyed
state handles, and unregisters a checkpoint when it is subsumed (retention) or discarded;
a file whose count drops to zero is deleted from the storage.

Order matters, as in Flink: register the new completed checkpoint *before* unregistering
the ones it subsumes, so the files they share stay alive throughout. A checkpoint's
private files (``<job>/chk-<n>/``) are not counted here; they go with the checkpoint.

The registry knows handles only through their ``shared_state()`` (a list of
:class:`~checkpoint.storage.StreamStateHandle`), so it does not depend on the state
backends.

Example:
    >>> import tempfile
    >>> from weir.checkpoint.storage import create_storage
    >>> storage = create_storage(tempfile.mkdtemp())
    >>> sst = storage.write("job/shared/a-000009.sst", b"rows")
    >>> class Handle:
    ...     def shared_state(self):
    ...         return [sst]
    >>> registry = SharedStateRegistry(storage)
    >>> registry.register_checkpoint(1, [Handle()])
    >>> registry.register_checkpoint(2, [Handle()])    # reuses the file
    >>> registry.unregister_checkpoint(1), storage.exists(sst)
    ([], True)
    >>> registry.unregister_checkpoint(2) == [sst], storage.exists(sst)
    (True, False)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from weir.checkpoint.storage import CheckpointStorageAccess, StreamStateHandle, target_uri
from weir.core.errors import StorageError
from weir.core.ids import CheckpointId

log = logging.getLogger(__name__)


class HasSharedState(Protocol):
    """Anything that names the shared files it refers to (a keyed state handle)."""

    def shared_state(self) -> list[StreamStateHandle]: ...


class SharedStateRegistry:
    """Counts, per shared file (by URI), the registered checkpoints that refer to it.

    Thread-safe. Deletion failures are logged, not raised: a leaked file costs space, a
    failed checkpoint subsumption would cost much more."""

    def __init__(self, storage: CheckpointStorageAccess,
                 delete: Callable[[StreamStateHandle], None] | None = None) -> None:
        """``delete``: how a released file is deleted (default: from ``storage``; files
        of a claimed snapshot live elsewhere)."""
        self._storage = storage
        self._delete = delete or storage.delete
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._files: dict[str, StreamStateHandle] = {}
        self._checkpoints: dict[int, frozenset[str]] = {}

    def register_checkpoint(self, checkpoint_id: CheckpointId, handles: Iterable[HasSharedState]
                            ) -> None:
        """Count the shared files of a completed checkpoint's handles (once per file,
        however many handles name it). Registering a checkpoint twice is an error."""
        files = {target_uri(f): f for handle in handles for f in handle.shared_state()}
        with self._lock:
            if checkpoint_id in self._checkpoints:
                msg = f"checkpoint {checkpoint_id} is already registered"
                raise ValueError(msg)
            self._checkpoints[checkpoint_id] = frozenset(files)
            for uri, handle in files.items():
                self._counts[uri] = self._counts.get(uri, 0) + 1
                self._files.setdefault(uri, handle)

    def unregister_checkpoint(self, checkpoint_id: CheckpointId) -> list[StreamStateHandle]:
        """Drop a subsumed or discarded checkpoint's references; deletes and returns the
        files no registered checkpoint refers to any more. Unknown ids are ignored."""
        doomed: list[StreamStateHandle] = []
        with self._lock:
            uris = self._checkpoints.pop(checkpoint_id, frozenset())
            for uri in sorted(uris):
                count = self._counts[uri] - 1
                if count:
                    self._counts[uri] = count
                else:
                    del self._counts[uri]
                    doomed.append(self._files.pop(uri))
        for handle in doomed:
            try:
                self._delete(handle)
            except StorageError as err:
                log.warning("could not delete shared state file %s: %s", handle.uri, err)
        return doomed

    def reference_count(self, target: StreamStateHandle | str) -> int:
        with self._lock:
            return self._counts.get(target_uri(target), 0)

    @property
    def checkpoints(self) -> list[int]:
        """Ids of the registered checkpoints, ascending."""
        with self._lock:
            return sorted(self._checkpoints)

    def __len__(self) -> int:
        """Number of shared files referred to."""
        with self._lock:
            return len(self._counts)
