"""Which state of a completed checkpoint each subtask of a restarted job gets, and which
split enumerator state each source vertex gets (:func:`master_states_for`).

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

from weir.proto import checkpoint_pb2, jobgraph_pb2
from weir.state.handles import KeyedStateHandle
from weir.state.key_groups import key_group_range_for_operator


def task_restore(metadata: checkpoint_pb2.CheckpointMetadata, vertex: jobgraph_pb2.JobVertex,
                 subtask_index: int, without_channel_state: bool = False,
                 owned: bool = True) -> jobgraph_pb2.TaskRestore:
    """The restore part of subtask ``subtask_index`` of ``vertex``'s deployment.

    Operators find their state by uid, wherever the snapshot's job had them (another
    vertex, chain or parallelism: a savepoint of an earlier version of the program). A
    subtask's in-flight data and its finished flag belong to the whole old vertex: they
    carry over only to a vertex with the same id and operators. ``owned`` False: the
    snapshot is not the job's (NO_CLAIM)."""
    restore = jobgraph_pb2.TaskRestore(checkpoint_id=metadata.checkpoint_id,
                                       not_owned=not owned)
    layouts = {v.vertex_id: v for v in metadata.vertices}
    subtasks: dict[int, dict[int, checkpoint_pb2.SubtaskCheckpointState]] = {}
    for s in metadata.subtasks:
        subtasks.setdefault(s.vertex_id, {})[s.subtask_index] = s
    home = {uid: v.vertex_id for v in metadata.vertices for uid in v.operator_uids if uid}
    for s in metadata.subtasks:
        for o in s.state.operators:
            home.setdefault(o.operator_uid, s.vertex_id)
    same = vertex.id in layouts and list(layouts[vertex.id].operator_uids) in (
        [], list(vertex.operator_uids))
    old_parallelism = _parallelism(layouts, subtasks, vertex.id)
    mine = subtasks.get(vertex.id, {}).get(subtask_index) if same else None
    if mine is not None and mine.finished and old_parallelism == vertex.parallelism:
        restore.finished = True
        return restore
    owned_groups = key_group_range_for_operator(vertex.max_parallelism, vertex.parallelism,
                                                subtask_index)
    for uid in (u for u in vertex.operator_uids if u):
        operator = restore.operators.add(operator_uid=uid)
        old_vertex = home.get(uid)
        if old_vertex is None:
            continue  # new operator: starts empty
        parallelism = _parallelism(layouts, subtasks, old_vertex)
        by_subtask = subtasks.get(old_vertex, {})
        states = [_operator_state(by_subtask.get(index), uid) for index in range(parallelism)]
        # Without union state and rescaling, the others' operator state is not needed
        # (and reading only its own lets a task restore it from its local copy).
        own_only = parallelism == vertex.parallelism and all(
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
                    len(KeyedStateHandle.from_dict(h).overlap(owned_groups))
                    for h in json.loads(state.keyed_state)):
                operator.keyed_state.append(state.keyed_state)
    if without_channel_state or not same:
        return restore
    if old_parallelism == vertex.parallelism:
        if mine is not None and mine.state.HasField("channel_state"):
            restore.channel_state.CopyFrom(mine.state.channel_state)
        return restore
    # Rescaled: every subtask filters every old subtask's input records; old subtask j's
    # output records go out again from subtask j % parallelism, through its partitioners.
    old = subtasks.get(vertex.id, {})
    channels = [old[j].state.channel_state if j in old and old[j].state.HasField(
        "channel_state") else None for j in range(old_parallelism)]
    if any(channels):
        for channel in channels:
            restore.rescaled_inputs.add().CopyFrom(
                channel or checkpoint_pb2.ChannelStateHandle())
        for j, channel in enumerate(channels):
            if channel is not None and j % vertex.parallelism == subtask_index:
                restore.rescaled_outputs.add().CopyFrom(channel)
    return restore


def _parallelism(layouts: dict[int, checkpoint_pb2.VertexLayout],
                 subtasks: dict[int, dict[int, checkpoint_pb2.SubtaskCheckpointState]],
                 vertex_id: int) -> int:
    layout = layouts.get(vertex_id)
    return layout.parallelism if layout is not None else len(subtasks.get(vertex_id, {}))


def _operator_state(subtask: checkpoint_pb2.SubtaskCheckpointState | None, uid: str
                    ) -> checkpoint_pb2.OperatorSubtaskState | None:
    if subtask is None:
        return None
    return next((o for o in subtask.state.operators if o.operator_uid == uid), None)


def master_states_for(metadata: checkpoint_pb2.CheckpointMetadata,
                      job_graph: jobgraph_pb2.JobGraph) -> list[checkpoint_pb2.MasterState]:
    """The checkpoint's split enumerator states, each for the vertex of ``job_graph``
    whose source has the uid it had (an updated program may number vertices anew)."""
    uids = {v.vertex_id: v.operator_uids[0] for v in metadata.vertices if v.operator_uids}
    vertices = {v.operator_uids[0]: v.id for v in job_graph.vertices
                if v.source and v.operator_uids}
    states = []
    for state in metadata.master_states:
        uid = uids.get(state.vertex_id)
        vertex_id = vertices.get(uid, state.vertex_id) if uid else state.vertex_id
        states.append(checkpoint_pb2.MasterState(vertex_id=vertex_id,
                                                 enumerator=state.enumerator))
    return states
