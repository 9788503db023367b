"""Checkpoint storage with faults injected and its traffic recorded: a reusable test
implementation (no mocks) of :class:`~weir.checkpoint.storage.CheckpointStorageAccess`."""

from __future__ import annotations

import threading
from pathlib import Path

from weir.checkpoint.filesystem import FsCheckpointStorageAccess
from weir.checkpoint.storage import StreamStateHandle
from weir.core.errors import StorageError


class FaultyStorage(FsCheckpointStorageAccess):
    """File storage that records every read and upload, and can be told to hold a read at
    a gate (``gates``: URI -> Event it waits for, at most ``gate_timeout`` seconds), to fail
    a read (``failures``: URI -> the exception to raise) or to fail every upload from the
    ``fail_on_upload``-th one on (with StorageError). With ``list_gate`` set, every listing
    waits for that event first (at most ``gate_timeout`` seconds)."""

    def __init__(self, base: Path, fail_on_upload: int | None = None,
                 gate_timeout: float = 30.0) -> None:
        super().__init__(base)
        self.fail_on_upload = fail_on_upload
        self.gate_timeout = gate_timeout
        self.gates: dict[str, threading.Event] = {}
        self.failures: dict[str, Exception] = {}
        self.reads: list[str] = []
        self.uploads: list[StreamStateHandle] = []
        self.list_gate: threading.Event | None = None

    def read(self, handle: StreamStateHandle) -> bytes:
        self.reads.append(handle.uri)
        gate = self.gates.get(handle.uri)
        if gate is not None and not gate.wait(self.gate_timeout):
            msg = f"test gate for {handle.uri} never opened"
            raise TimeoutError(msg)
        failure = self.failures.get(handle.uri)
        if failure is not None:
            raise failure
        return super().read(handle)

    def list(self, relative_prefix: str = "") -> list[str]:
        gate = self.list_gate
        if gate is not None and not gate.wait(self.gate_timeout):
            msg = f"test gate for listing {relative_prefix} never opened"
            raise TimeoutError(msg)
        return super().list(relative_prefix)

    def write_file(self, relative_path: str, local_path: Path | str, *,
                   background: bool = False) -> StreamStateHandle:
        if self.fail_on_upload is not None and len(self.uploads) + 1 >= self.fail_on_upload:
            msg = f"injected failure uploading {relative_path}"
            raise StorageError(msg)
        handle = super().write_file(relative_path, local_path, background=background)
        self.uploads.append(handle)
        return handle

    def shared_uploads(self) -> list[StreamStateHandle]:
        """The uploads into the shared directory (incremental checkpoints' files)."""
        return [h for h in self.uploads if "/shared/" in h.uri]

    def files(self, prefix: str) -> set[str]:
        """The URIs of every object under ``prefix``."""
        return set(self.list(prefix))
