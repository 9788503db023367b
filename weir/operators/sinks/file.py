"""The exactly-once file sink: part files committed by two-phase commit.

Records go to an *in-progress* part file whose name starts with ``.`` (on ``s3://``, to a
local file). At a checkpoint's barrier the sink *pre-commits*: it closes the file (rolls)
and records it as *pending* in its operator state — on ``s3://`` the file is uploaded as
the parts of a multipart upload that is not completed yet. When the checkpoint completes
(``notify_checkpoint_complete``) the sink *commits* what was pending up to it: an atomic
rename to the final name on ``file://``, completing the multipart upload on ``s3://``. A
restored sink first commits the pending files of the checkpoint it restores (they were
pre-committed and the checkpoint completed, whether or not the notification arrived), then
deletes the in-progress and pending files of later attempts. So only committed files have
names that do not start with ``.`` or ``_``, and a reader of the directory sees every record
exactly once whatever failed. Without checkpointing, files are committed when the job's
input ends.

Final names are ``<prefix>-<subtask>-<n><suffix>`` (:class:`PartNames`; by default
``part-<subtask>-<n>.parquet`` or ``.jsonl``); ``n`` comes from union operator state, so no
restored or rescaled subtask ever reuses a name.

Example:
    >>> import tempfile
    >>> from weir.checkpoint.storage import create_storage
    >>> from weir.core.ids import CheckpointId
    >>> from weir.state.snapshot import SnapshotLocation
    >>> from weir.taskexecutor.operator import OperatorContext, StateContext
    >>> out = tempfile.mkdtemp()
    >>> sink = FileSinkOperator("sink", out, "json", rolling_bytes=1 << 20)
    >>> sink.setup(OperatorContext("sink", 0, 1, 128), output=None)
    >>> sink.initialize_state(StateContext())
    >>> sink.open()
    >>> sink.process(Elements.from_records([{"n": 1}]))
    >>> where = SnapshotLocation.for_checkpoint(create_storage(out), "job", 1, "sink")
    >>> _ = sink.snapshot_state(CheckpointId(1), 0, where)  # pre-commit: pending, hidden
    >>> committed_parts(out)
    []
    >>> sink.notify_checkpoint_complete(CheckpointId(1))    # commit
    >>> committed_parts(out)
    ['part-0-0.jsonl']
    >>> sink.close()
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.parquet as pq

from weir.checkpoint.options import checkpointing_enabled
from weir.checkpoint.s3 import S3CheckpointStorageAccess
from weir.core.errors import MissingStateError, StateError, StorageError
from weir.core.files import fsync_directory, owned_private_directory
from weir.core.ids import CheckpointId
from weir.core.records import Elements
from weir.core.row import Row
from weir.state.descriptors import ListStateDescriptor
from weir.state.snapshot import SnapshotLocation
from weir.taskexecutor.operator import OperatorSnapshot, StateContext, StreamOperator

log = logging.getLogger(__name__)

#: What a sink writes: Parquet files, JSON lines, or lines of text made by an encoder.
FORMATS = ("parquet", "json", "text")
_DEFAULT_SUFFIX = {"parquet": ".parquet", "json": ".jsonl", "text": ""}


@dataclass(frozen=True)
class PartNames:
    """How part files are named: final ``<prefix>-<subtask>-<n><suffix>``; in progress or
    pending (hidden) ``.<final name>[.<attempt token>].inprogress``.

    Example:
        >>> names = PartNames("part", ".jsonl")
        >>> names.final(3, 7), names.parse(".part-3-7.jsonl.0a1b.inprogress")
        ('part-3-7.jsonl', (3, 7, '0a1b', True))
    """

    prefix: str = "part"
    suffix: str = ".jsonl"

    @classmethod
    def for_format(cls, fmt: str, prefix: str = "part", suffix: str | None = None) -> PartNames:
        """The names of ``fmt``'s parts; the suffix defaults to the format's extension."""
        return cls(prefix, _DEFAULT_SUFFIX[fmt] if suffix is None else suffix)

    @functools.cached_property
    def _pattern(self) -> re.Pattern[str]:
        return re.compile(rf"^\.?{re.escape(self.prefix)}-(\d+)-(\d+){re.escape(self.suffix)}"
                          r"(?:\.([0-9a-f]+))?(\.inprogress)?$")

    def final(self, subtask: int, number: int) -> str:
        return f"{self.prefix}-{subtask}-{number}{self.suffix}"

    def parse(self, name: str) -> tuple[int, int, str | None, bool] | None:
        """(subtask, number, attempt token, hidden) of a part's file name, or None if the
        name is not one of this sink's parts."""
        m = self._pattern.match(name)
        if m is None or (name.startswith(".") != bool(m.group(4))):
            return None
        return int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4))


def committed_parts(path: str, names: PartNames | None = None) -> list[str]:
    """Names of the committed part files under a ``file://`` sink directory, sorted
    (``names``: default Parquet and JSON-lines parts)."""
    directory = Path(path.removeprefix("file://"))
    kinds = [names] if names else [PartNames.for_format("parquet"), PartNames.for_format("json")]
    return sorted(p.name for p in directory.glob("*")
                  if any((parsed := k.parse(p.name)) and not parsed[3] for k in kinds))


class PartCommitter(ABC):
    """Where part files end up, and how a closed part becomes pending and committed.

    ``token`` is unique to the attempt: its hidden files are its own. An attempt that is
    still running after the job restarted without it (a TaskExecutor paused past the
    heartbeat timeout, then resumed) reuses the restored part numbers, and with shared
    names would write into (or truncate) the new attempt's files."""

    def __init__(self, token: str, names: PartNames) -> None:
        self.token = token
        self.names = names

    def hidden_name(self, name: str, token: str | None) -> str:
        """The hidden in-progress/pending file of part ``name`` of attempt ``token``
        (None: written before attempts had tokens)."""
        return f".{name}.{token}.inprogress" if token else f".{name}.inprogress"

    @abstractmethod
    def in_progress_path(self, name: str) -> Path:
        """The local file a part is written to while in progress."""

    @abstractmethod
    def pre_commit(self, name: str) -> dict[str, Any]:
        """Make the closed in-progress part ``name`` durable but invisible; returns what
        :meth:`commit` needs (JSON-able, kept in operator state)."""

    @abstractmethod
    def commit(self, pending: dict[str, Any]) -> None:
        """Make a pending part visible under its final name. Idempotent: committing a part
        that is committed already does nothing; a pending part that is gone raises
        StateError (its records would be lost)."""

    @abstractmethod
    def clean_up(self, subtask: int, parallelism: int, keep: list[dict[str, Any]]) -> int:
        """Delete the in-progress and pending parts other than ``keep`` (left by attempts
        after the restored checkpoint) that this subtask cleans up: those of the earlier
        subtasks ``i`` with ``i % parallelism == subtask`` (after a rescale too, each earlier
        subtask's parts are cleaned by one subtask only). Returns how many."""

    @abstractmethod
    def committed_numbers(self, subtask: int) -> dict[int, str]:
        """This subtask's committed parts: part number -> what :meth:`delete_committed`
        takes."""

    @abstractmethod
    def delete_committed(self, where: str) -> None:
        """Delete one committed part (an earlier attempt's, replaced by a re-run)."""

    def remove_stale(self, subtask: int, first: int) -> int:
        """Delete this subtask's committed parts numbered ``first`` or higher: what an
        earlier attempt committed beyond the parts the re-run just replaced. Returns how
        many."""
        stale = [where for n, where in self.committed_numbers(subtask).items() if n >= first]
        for where in stale:
            self.delete_committed(where)
        return len(stale)


class LocalPartCommitter(PartCommitter):
    """``file://``: hidden files in the target directory, committed by atomic rename."""

    def __init__(self, directory: Path, token: str, names: PartNames) -> None:
        super().__init__(token, names)
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def in_progress_path(self, name: str) -> Path:
        return self.directory / self.hidden_name(name, self.token)

    def pre_commit(self, name: str) -> dict[str, Any]:
        path = self.in_progress_path(name)
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
        return {"kind": "file", "name": name, "token": self.token}

    def commit(self, pending: dict[str, Any]) -> None:
        name = pending["name"]
        hidden = self.directory / self.hidden_name(name, pending.get("token"))
        final = self.directory / name
        if hidden.exists():
            os.replace(hidden, final)
            fsync_directory(self.directory)
        elif not final.exists():
            msg = (f"pending part file {hidden} is gone, so its records cannot be committed "
                   "(was the sink directory changed by hand?)")
            raise StateError(msg)

    def clean_up(self, subtask: int, parallelism: int, keep: list[dict[str, Any]]) -> int:
        kept = {self.hidden_name(p["name"], p.get("token")) for p in keep}
        removed = 0
        for path in self.directory.glob(f".{self.names.prefix}-*"):
            part = self.names.parse(path.name)
            if part and part[3] and part[0] % parallelism == subtask \
                    and path.name not in kept:
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def committed_numbers(self, subtask: int) -> dict[int, str]:
        return {part[1]: str(path)
                for path in self.directory.glob(f"{self.names.prefix}-{subtask}-*")
                if (part := self.names.parse(path.name)) and not part[3]
                and part[0] == subtask}

    def delete_committed(self, where: str) -> None:
        Path(where).unlink(missing_ok=True)


class S3PartCommitter(PartCommitter):
    """``s3://``: in-progress parts are local files; pre-commit uploads one as the parts of
    a multipart upload, commit completes the upload (the object appears atomically)."""

    def __init__(self, storage: S3CheckpointStorageAccess, local_dir: Path, token: str,
                 names: PartNames) -> None:
        super().__init__(token, names)
        self.storage = storage
        self.local_dir = local_dir
        local_dir.mkdir(parents=True, exist_ok=True)

    def in_progress_path(self, name: str) -> Path:
        return self.local_dir / self.hidden_name(name, self.token)

    def pre_commit(self, name: str) -> dict[str, Any]:
        path = self.in_progress_path(name)
        upload_id, parts = self.storage.upload_parts(name, path)
        path.unlink(missing_ok=True)
        return {"kind": "s3", "name": name, "upload_id": upload_id, "parts": parts}

    def commit(self, pending: dict[str, Any]) -> None:
        self.storage.complete_upload(pending["name"], pending["upload_id"], pending["parts"])

    def clean_up(self, subtask: int, parallelism: int, keep: list[dict[str, Any]]) -> int:
        kept = {p["upload_id"] for p in keep if "upload_id" in p}
        removed = 0
        for name, upload_id in self.storage.list_uploads(f"{self.names.prefix}-"):
            part = self.names.parse(name.rsplit("/", 1)[-1])
            if part and part[0] % parallelism == subtask and upload_id not in kept:
                self.storage.abort_upload(name, upload_id)
                removed += 1
        for path in self.local_dir.glob(f".{self.names.prefix}-*"):
            part = self.names.parse(path.name)
            if part and part[0] % parallelism == subtask:
                path.unlink(missing_ok=True)
        return removed

    def committed_numbers(self, subtask: int) -> dict[int, str]:
        base = self.storage.base_uri.rstrip("/") + "/"
        return {part[1]: uri for uri in self.storage.list()
                if uri.startswith(base) and "/" not in uri[len(base):]
                and (part := self.names.parse(uri[len(base):])) and not part[3]
                and part[0] == subtask}

    def delete_committed(self, where: str) -> None:
        self.storage.delete(where)


class FileSinkOperator(StreamOperator):
    """Writes exactly-once part files under a ``file://`` directory or an ``s3://`` prefix
    (see the module docstring). Lifecycle: ``setup``, ``initialize_state``, ``open``,
    then batches and checkpoints on the task thread."""

    PART_COUNTER_STATE = "file-sink-part-counter"
    PENDING_STATE = "file-sink-pending"
    #: Every subtask's pending parts (union state): after a rescale, a subtask cleaning
    #: up an earlier subtask's files must keep the parts another one commits.
    ALL_PENDING_STATE = "file-sink-pending-all"

    def __init__(self, name: str, path: str, fmt: str, rolling_bytes: int, *,
                 names: PartNames | None = None, encoder: Callable[[Any], str] | None = None,
                 rollover_seconds: float | None = None) -> None:
        super().__init__(name)
        if fmt not in FORMATS:
            msg = f"file sink format must be one of {', '.join(FORMATS)}, got {fmt!r}"
            raise ValueError(msg)
        self.path = path
        self.fmt = fmt
        self.rolling_bytes = rolling_bytes
        self.names = names or PartNames.for_format(fmt)
        #: ``text``: one line per record (``str`` by default).
        self.encoder = encoder or str
        #: Roll a part this old (seconds since it was opened) at its next record.
        self.rollover_seconds = rollover_seconds
        self._opened_at = 0.0
        self._committer: PartCommitter | None = None
        self._counter = 0
        self._writer: pq.ParquetWriter | None = None
        self._file: TextIO | None = None
        self._schema: pa.Schema | None = None
        self._current: str | None = None
        self._written = 0
        #: Closed parts not pre-committed yet, and pre-committed ones by checkpoint.
        self._closed: list[str] = []
        self._pending: list[dict[str, Any]] = []
        self._checkpointing = False
        #: This attempt's own hidden files (see PartCommitter).
        self._token = uuid.uuid4().hex[:12]

    # -- state --------------------------------------------------------------------------

    def initialize_state(self, context: StateContext) -> None:
        super().initialize_state(context)
        assert self.ctx is not None and self.operator_state is not None
        self._committer = self._create_committer()
        self._checkpointing = checkpointing_enabled(self.ctx.get_configuration())
        counters = self.operator_state.get_union_list_state(
            ListStateDescriptor(self.PART_COUNTER_STATE))
        pending = self.operator_state.get_list_state(ListStateDescriptor(self.PENDING_STATE))
        everyone = self.operator_state.get_union_list_state(
            ListStateDescriptor(self.ALL_PENDING_STATE))
        if context.is_restored:
            self._counter = max(counters.get(), default=0)
            restored = pending.get()
            for part in restored:
                self._committer.commit(part)
            removed = self._committer.clean_up(self.ctx.subtask_index, self.ctx.parallelism,
                                               [*restored, *everyone.get()])
            log.info("%s restored from checkpoint %s: committed %d pending part(s), removed "
                     "%d left by later attempts", self.name, context.checkpoint_id,
                     len(restored), removed)

    def _create_committer(self) -> PartCommitter:
        assert self.ctx is not None
        if self.path.startswith("s3://"):
            storage = S3CheckpointStorageAccess.from_uri(self.path, self.ctx.get_configuration())
            # This user's own directory: a shared predictable path in /tmp could be a
            # symlink planted by another user, redirecting the parts before upload.
            root = owned_private_directory(
                os.path.join(tempfile.gettempdir(), f"weir-file-sink-{os.geteuid()}"),
                fix="remove it so that weir creates its own")
            local = Path(root) / f"{self.ctx.job_id or 'job'}-{self.name}".replace("/", "_")
            return S3PartCommitter(storage, local, self._token, self.names)
        return LocalPartCommitter(Path(self.path.removeprefix("file://")), self._token,
                                  self.names)

    def snapshot_state(self, checkpoint_id: CheckpointId, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot:
        """Pre-commit: roll the in-progress part and make every closed part pending for
        ``checkpoint_id``."""
        assert self.operator_state is not None and self._committer is not None
        self._close_part()
        for name in self._closed:
            self._pending.append({**self._committer.pre_commit(name),
                                  "checkpoint": checkpoint_id})
        self._closed = []
        self.operator_state.get_union_list_state(
            ListStateDescriptor(self.PART_COUNTER_STATE)).update([self._counter])
        self.operator_state.get_list_state(
            ListStateDescriptor(self.PENDING_STATE)).update(self._pending)
        self.operator_state.get_union_list_state(
            ListStateDescriptor(self.ALL_PENDING_STATE)).update(self._pending)
        return super().snapshot_state(checkpoint_id, timestamp_ms, location)

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> None:
        """Commit every part pre-committed for ``checkpoint_id`` or before."""
        assert self._committer is not None
        left = []
        for part in self._pending:
            if part["checkpoint"] > checkpoint_id:
                left.append(part)
                continue
            try:
                self._committer.commit(part)
            except MissingStateError:
                raise  # its records are gone: never hide that
            except StorageError as err:
                # Storage is away: the part stays pending, in the next checkpoints too, and
                # the next completed checkpoint (or a restore) commits it.
                log.warning("%s: committing %s failed, retried with the next checkpoint: %s",
                            self.name, part["name"], err)
                left.append(part)
        self._pending = left
        super().notify_checkpoint_complete(checkpoint_id)

    # -- writing ------------------------------------------------------------------------

    def open(self) -> None:
        if self._committer is None:  # used without a task (no state): a fresh start
            self.initialize_state(StateContext())

    def _roll(self) -> Path:
        """Close the current part and start the next: the in-progress path to write."""
        assert self.ctx is not None and self._committer is not None
        self._close_part()
        name = self.names.final(self.ctx.subtask_index, self._counter)
        self._counter += 1
        self._current = name
        self._written = 0
        self._opened_at = time.monotonic()
        return self._committer.in_progress_path(name)

    def _must_roll(self) -> bool:
        return self._written >= self.rolling_bytes or (
            self.rollover_seconds is not None
            and time.monotonic() - self._opened_at >= self.rollover_seconds)

    def process(self, elements: Elements, input_index: int = 0) -> None:
        if self.fmt == "parquet":
            batch = elements.arrow()
            schema = batch.schema.remove_metadata()
            writer = self._writer
            if writer is None or schema != self._schema or self._must_roll():
                self._schema = schema
                writer = self._writer = pq.ParquetWriter(str(self._roll()), schema)
            writer.write_batch(batch.replace_schema_metadata(None))
            self._written += batch.nbytes
        else:
            # Line by line, so that a part rolls at its size even inside one large batch.
            encode = self._encode_json if self.fmt == "json" else self.encoder
            file = self._file
            for record in elements.records():
                if file is None or self._must_roll():
                    path = self._roll()
                    file = self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in _close_part
                line = encode(record) + "\n"
                file.write(line)
                self._written += len(line)

    @staticmethod
    def _encode_json(record: Any) -> str:
        return json.dumps(_jsonable(record), default=str)

    def _close_part(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None:
            self._file.flush()
            self._file.close()
            self._file = None
        if self._current is not None:
            self._closed.append(self._current)
            self._current = None

    def finish(self) -> None:
        """End of input: with checkpointing, the final checkpoint commits what is left;
        without, it is committed now. A re-run without checkpointing (a restarted BATCH
        region, or any restart of a job that takes no checkpoints) starts numbering at 0
        again, so its parts replace the earlier attempt's under the same names; what the
        earlier attempt committed beyond them is deleted, so the directory holds this
        attempt's records once."""
        self._close_part()
        if not self._checkpointing:
            assert self._committer is not None and self.ctx is not None
            for name in self._closed:
                self._committer.commit(self._committer.pre_commit(name))
            self._closed = []
            if self.ctx.attempt_number > 0:
                removed = self._committer.remove_stale(self.ctx.subtask_index, self._counter)
                if removed:
                    log.info("%s (attempt %d) replaced the parts of an earlier attempt and "
                             "deleted %d more it had committed", self.name,
                             self.ctx.attempt_number, removed)

    def close(self) -> None:
        # Not committed: a failed or cancelled attempt deletes its parts that are not
        # pending (only this attempt has them); pending ones may still be committed by
        # the restored subtask, which deletes the rest.
        with contextlib.suppress(Exception):
            if self._writer is not None:
                self._writer.close()
            if self._file is not None:
                self._file.close()
        self._writer = self._file = None
        if self._committer is not None:
            unfinished = [*self._closed, *([self._current] if self._current else [])]
            for name in unfinished:
                with contextlib.suppress(OSError):
                    self._committer.in_progress_path(name).unlink(missing_ok=True)
        self._closed, self._current = [], None


def _jsonable(record: Any) -> Any:
    if isinstance(record, Row) and record._fields:
        return record.as_dict()
    if isinstance(record, tuple):
        return list(record)
    return record
