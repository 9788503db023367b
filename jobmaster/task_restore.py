"""Which state of a completed checkpoint each subtask of a restarted job gets.

Matching is by operator uid. Keyed state goes to the subtasks whose key groups overlap the
old handles' (at the same parallelism: each its own); operator state is handed over for
every old subtask, so that list state can be redistributed and union state given whole
(at the same parallelism without union state: each its own only);
in-flight data (channel state) only restores at the parallelism it was taken at.

Example:
    >>> from weir.proto import checkpoint_pb2, jobgraph_pb2
    >>> metadata = checkpoint_pb2.CheckpointMetadata(checkpoint_id=4)
    >>> layout = metadata.vertices.add(vertex_id=1, parallelism=1, max_parallelism=128)
    >>> sub = metadata.subtasks.add(vertex_id=1, subtask_index=0)
    >>> _ = sub.state.operators.add(operator_uid="sink",
    ...     operator_state=checkpoint_pb2.StreamHandle(uri="file:///c/op", size=3))
    >>> vertex = jobgraph_pb2.JobVertex(id=1, parallelism=1, max_parallelism=128,
    ...                                 operator_uids=["sink"])
    >>> restore = task_restore(metadata, vertex, 0)
    >>> restore.checkpoint_id, [h.uri for h in restore.operators[0].operator_state]
    (4, ['file:///c/op'])
"""

from __future__ import annotations

import json

from weir.core.errors import StateError
from weir.proto import checkpoint_pb2, jobgraph_pb2
from weir.state.handles import KeyedStateHandle
from weir.state.key_groups import key_group_range_for_operator


def task_restore(metadata: checkpoint_pb2.CheckpointMetadata, vertex: jobgraph_pb2.JobVertex,
                 subtask_index: int, without_channel_state: bool = False
                 ) -> jobgraph_pb2.TaskRestore:
    """The restore part of subtask ``subtask_index`` of ``vertex``'s deployment."""
    restore = jobgraph_pb2.TaskRestore(checkpoint_id=metadata.checkpoint_id)
    old = sorted((s for s in metadata.subtasks if s.vertex_id == vertex.id),
                 key=lambda s: s.subtask_index)
    layout = next((v for v in metadata.vertices if v.vertex_id == vertex.id), None)
    old_parallelism = layout.parallelism if layout is not None else len(old)
    mine = next((s for s in old if s.subtask_index == subtask_index), None)
    if mine is not None and mine.finished and old_parallelism == vertex.parallelism:
        restore.finished = True
        return restore
    owned = key_group_range_for_operator(vertex.max_parallelism, vertex.parallelism,
                                         subtask_index)
    by_subtask = {s.subtask_index: {o.operator_uid: o for o in s.state.operators}
                  for s in old}
    for uid in (u for u in vertex.operator_uids if u):
        operator = restore.operators.add(operator_uid=uid)
        states = [by_subtask.get(index, {}).get(uid) for index in range(old_parallelism)]
        # Without union state and rescaling, the others' operator state is not needed
        # (and reading only its own lets a task restore it from its local copy).
        own_only = old_parallelism == vertex.parallelism and all(
            s is None or not s.HasField("operator_state") or s.operator_state_split_only
            for s in states)
        for index, state in enumerate(states):
            if state is None:
                operator.operator_state.add()
                continue
            if state.HasField("operator_state") and (index == subtask_index or not own_only):
                operator.operator_state.add().CopyFrom(state.operator_state)
            else:
                operator.operator_state.add()
            if state.keyed_state and any(
                    len(KeyedStateHandle.from_dict(h).overlap(owned))
                    for h in json.loads(state.keyed_state)):
                operator.keyed_state.append(state.keyed_state)
    if mine is not None and mine.state.HasField("channel_state") and not without_channel_state:
        if old_parallelism != vertex.parallelism:
            msg = (f"checkpoint {metadata.checkpoint_id} holds in-flight data of '{vertex.name}' "
                   f"at parallelism {old_parallelism}; it restores only at that parallelism "
                   "(or set execution.checkpointing.recover-without-channel-state."
                   "checkpoint-id to drop it, losing those records)")
            raise StateError(msg)
        restore.channel_state.CopyFrom(mine.state.channel_state)
    return restore
