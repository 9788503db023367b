"""Split enumerators of a job's sources, living in the JobMaster (FLIP-27). Main thread only.

Checkpoints: at a trigger, every enumerator is snapshotted (the splits not handed out yet)
before the sources are told to take checkpoint n. A split handed out before that snapshot
belongs to its reader's state at n: the reader takes no trigger while a split request is on
its way, so such a split reaches it before its barrier. A split handed out after it must
not be read before the reader's barrier n — or it would be in both states — so until a
reader reports that it emitted barrier n (``checkpoint_passed`` of its requests), it is
told to ask again shortly instead (Flink closes its operator event valve the same way).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import cloudpickle

from weir.core import relocations
from weir.core.config import Configuration
from weir.core.ids import CheckpointId
from weir.core.source import EnumeratorContext, SplitEnumerator
from weir.proto import checkpoint_pb2, jobgraph_pb2, jobmaster_pb2

log = logging.getLogger(__name__)

#: How soon a reader behind a pending checkpoint asks again.
VALVE_RETRY_MS = 20


class SourceCoordinator:
    """Creates each source vertex's enumerator on first use and answers split requests.

    ``configuration`` is the JobMaster's merged with the job's: enumerators list storage
    with the JobMaster's credentials, which the job graph does not carry.
    """

    def __init__(self, job_graph: jobgraph_pb2.JobGraph,
                 configuration: Configuration | None = None) -> None:
        self._configuration = configuration if configuration is not None else Configuration()
        self._vertices = {v.id: v for v in job_graph.vertices if v.source}
        self._enumerators: dict[int, SplitEnumerator] = {}
        #: Checkpoints whose enumerator snapshot was taken and that are still pending.
        self._pending: set[CheckpointId] = set()
        #: The newest checkpoint whose enumerator snapshot was taken.
        self._last_snapshot = 0
        #: Splits handed out per (vertex, subtask) with the newest snapshot before each:
        #: a subtask restored from checkpoint n lacks those handed out at or after n's
        #: snapshot (Flink's SplitAssignmentTracker), which go back to the enumerator.
        self._assigned: dict[tuple[int, int], list[tuple[int, Any]]] = {}

    def replace_graph(self, job_graph: jobgraph_pb2.JobGraph) -> None:
        """The job runs ``job_graph`` from now on (rescale, update): enumerators are
        created again, for the new parallelism (``restore`` gives them their state)."""
        self.close()
        self._enumerators.clear()
        self._vertices = {v.id: v for v in job_graph.vertices if v.source}
        self._pending.clear()
        self._assigned.clear()

    def enumerator(self, vertex_id: int) -> SplitEnumerator:
        enumerator = self._enumerators.get(vertex_id)
        if enumerator is None:
            vertex = self._vertices[vertex_id]
            source = cloudpickle.loads(vertex.source)
            enumerator = source.create_enumerator_in(self._context(vertex))
            self._enumerators[vertex_id] = enumerator
        return enumerator

    def request_splits(self, vertex_id: int, subtask_index: int,
                       checkpoint_passed: int = 0) -> jobmaster_pb2.SplitResponse:
        if self._pending and checkpoint_passed < max(self._pending):
            return jobmaster_pb2.SplitResponse(retry_after_ms=VALVE_RETRY_MS)
        assignment = self.enumerator(vertex_id).request_splits(subtask_index)
        if assignment.splits:
            self._assigned.setdefault((vertex_id, subtask_index), []).extend(
                (self._last_snapshot, split) for split in assignment.splits)
        response = jobmaster_pb2.SplitResponse(
            splits=[cloudpickle.dumps(s) for s in assignment.splits],
            no_more_splits=assignment.no_more_splits)
        if assignment.retry_after is not None:
            response.retry_after_ms = max(1, int(assignment.retry_after * 1000))
        return response

    # -- checkpoints ------------------------------------------------------------------------

    def snapshot(self, checkpoint_id: CheckpointId) -> list[checkpoint_pb2.MasterState]:
        """Every enumerator's state for ``checkpoint_id``; raises what an enumerator's
        ``snapshot_state`` raises (NotImplementedError: it cannot be checkpointed)."""
        states = [checkpoint_pb2.MasterState(
                      vertex_id=vertex_id,
                      enumerator=cloudpickle.dumps(
                          self.enumerator(vertex_id).snapshot_state(checkpoint_id)))
                  for vertex_id in sorted(self._vertices)]
        self._pending.add(checkpoint_id)
        self._last_snapshot = max(self._last_snapshot, checkpoint_id)
        return states

    def checkpoint_done(self, checkpoint_id: CheckpointId, completed: bool = False) -> None:
        """``checkpoint_id`` completed (every reader passed it) or was aborted. Once it
        completed, no restore goes back before it: splits handed out before its snapshot
        are in the readers' state for good."""
        self._pending = {n for n in self._pending if n > checkpoint_id}
        if completed:
            for key, splits in self._assigned.items():
                self._assigned[key] = [(n, s) for n, s in splits if n >= checkpoint_id]

    def reset_subtasks(self, subtasks: Iterable[tuple[int, int]],
                       checkpoint_id: CheckpointId | None) -> None:
        """Only these (vertex, subtask) readers restart, from ``checkpoint_id`` (None: from
        the start): the splits they got after that checkpoint's snapshot are handed out
        again (region failover; the other readers keep running)."""
        since = checkpoint_id or 0
        for vertex_id, subtask_index in sorted(subtasks):
            if vertex_id not in self._vertices:
                continue
            assigned = self._assigned.pop((vertex_id, subtask_index), [])
            again = [split for n, split in assigned if n >= since]
            keep = [(n, split) for n, split in assigned if n < since]
            if keep:
                self._assigned[(vertex_id, subtask_index)] = keep
            if again:
                log.info("source %d subtask %d restarts from checkpoint %d: %d split(s) go "
                         "back to its enumerator", vertex_id, subtask_index, since,
                         len(again))
                self.enumerator(vertex_id).add_splits_back(again, subtask_index)

    def clear_checkpoint_valve(self) -> None:
        """The job restarts: no checkpoint is pending any more."""
        self._pending.clear()

    def restore(self, states: Iterable[checkpoint_pb2.MasterState]) -> None:
        """Replace the enumerators by ones continuing from a checkpoint's master states
        (sources without a state start afresh)."""
        self.close()
        for state in states:
            vertex = self._vertices.get(state.vertex_id)
            if vertex is None:
                continue
            source = cloudpickle.loads(vertex.source)
            self._enumerators[state.vertex_id] = source.restore_enumerator_in(
                self._context(vertex), relocations.loads(state.enumerator))

    def _context(self, vertex: jobgraph_pb2.JobVertex) -> EnumeratorContext:
        return EnumeratorContext(vertex.parallelism, self._configuration)

    def close(self) -> None:
        for enumerator in self._enumerators.values():
            try:
                enumerator.close()
            except Exception:  # closing must reach every enumerator
                log.exception("closing a split enumerator failed")
        self._enumerators.clear()
        self._pending.clear()
        self._assigned.clear()
