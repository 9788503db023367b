"""What a restarted subtask reads before it processes anything: per operator of its
chain, the keyed state handles and every old subtask's operator state of the checkpoint,
and its own in-flight data (channel state) of an unaligned checkpoint.

Runs on the task thread while the task is INITIALIZING. A missing or damaged file raises
:class:`~weir.core.errors.MissingStateError` / :class:`~weir.core.errors.CorruptStateError`
naming the checkpoint, the file and the cause; the JobMaster then restores from an older
retained checkpoint.
"""

from __future__ import annotations

import json

from weir.checkpoint.channel_state import ChannelState, read_channel_state
from weir.checkpoint.metadata import to_stream_handle
from weir.checkpoint.storage import StreamStateHandle
from weir.core.errors import CorruptStateError, MissingStateError
from weir.core.ids import CheckpointId
from weir.proto import checkpoint_pb2, jobgraph_pb2, jobmaster_pb2
from weir.state.handles import KeyedStateHandle
from weir.state.local_recovery import RestoreStorage
from weir.taskexecutor.operator import StateContext


class TaskStateRestore:
    """The restore part of one task deployment descriptor. Reads go through ``storage``,
    which prefers this TaskExecutor's local copies and counts the bytes."""

    def __init__(self, restore: jobgraph_pb2.TaskRestore, storage: RestoreStorage) -> None:
        self.checkpoint_id = CheckpointId(restore.checkpoint_id)
        self._restore = restore
        self._storage = storage
        self._operators = {op.operator_uid: op for op in restore.operators}

    def context(self, uid: str) -> StateContext:
        """What operator ``uid`` restores from (an empty restored context when the
        checkpoint holds nothing for it)."""
        op = self._operators.get(uid)
        if op is None:
            return StateContext(checkpoint_id=self.checkpoint_id, storage=self._storage)
        try:
            keyed = [KeyedStateHandle.from_dict(handle)
                     for document in op.keyed_state for handle in json.loads(document)]
        except ValueError as err:
            msg = (f"checkpoint {self.checkpoint_id} has unreadable keyed state handles for "
                   f"operator {uid}: {err}")
            raise CorruptStateError(msg) from err
        return StateContext(checkpoint_id=self.checkpoint_id, keyed_handles=keyed,
                            operator_state=self.operator_state(uid), storage=self._storage,
                            owned=not self._restore.not_owned)

    def operator_state(self, uid: str) -> list[bytes | None]:
        """Every old subtask's operator state snapshot of ``uid`` (None: it had none)."""
        op = self._operators.get(uid)
        if op is None:
            return []
        return [self._read(to_stream_handle(handle), f"operator state of {uid}")
                if handle.uri else None for handle in op.operator_state]

    def channel_state(self) -> ChannelState | None:
        """This subtask's in-flight data, when the checkpoint was unaligned."""
        if not self._restore.HasField("channel_state"):
            return None
        handle = to_stream_handle(self._restore.channel_state.data)
        data = self._read(handle, "in-flight data (channel state)")
        return read_channel_state(data, handle.uri)

    def rescaled_channel_state(self) -> tuple[list[ChannelState],
                                              list[tuple[int, ChannelState, list[int]]]]:
        """Restored at another parallelism: the old subtasks' in-flight data whose output
        records this subtask sends again, and every old subtask's (index, data, channels
        per input gate) whose input records it takes its share of."""
        outputs = [self._channel_state(h, "in-flight output data of an old subtask")
                   for h in self._restore.rescaled_outputs]
        inputs = [(index, self._channel_state(h, f"in-flight input data of old subtask "
                                                 f"{index}"), list(h.gate_channels))
                  for index, h in enumerate(self._restore.rescaled_inputs) if h.data.uri]
        return outputs, inputs

    def _channel_state(self, handle: checkpoint_pb2.ChannelStateHandle, what: str
                       ) -> ChannelState:
        stream = to_stream_handle(handle.data)
        return read_channel_state(self._read(stream, what), stream.uri)

    def stats(self, duration_ms: int) -> jobmaster_pb2.RestoreStats:
        """What this restore cost so far (a lazy restore may still be loading)."""
        return jobmaster_pb2.RestoreStats(
            checkpoint_id=self.checkpoint_id, duration_ms=duration_ms,
            local_bytes=self._storage.local_bytes, remote_bytes=self._storage.remote_bytes)

    def _read(self, handle: StreamStateHandle, what: str) -> bytes:
        try:
            return self._storage.read(handle)
        except (MissingStateError, CorruptStateError) as err:
            msg = f"restoring checkpoint {self.checkpoint_id}: the {what} is unusable: {err}"
            raise type(err)(msg) from err
