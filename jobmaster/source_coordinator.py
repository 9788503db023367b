"""Split enumerators of a job's sources, living in the JobMaster (FLIP-27). Main thread only."""

from __future__ import annotations

import logging

import cloudpickle

from weir.core.source import SplitEnumerator
from weir.proto import jobgraph_pb2, jobmaster_pb2

log = logging.getLogger(__name__)


class SourceCoordinator:
    """Creates each source vertex's enumerator on first use and answers split requests."""

    def __init__(self, job_graph: jobgraph_pb2.JobGraph) -> None:
        self._vertices = {v.id: v for v in job_graph.vertices if v.source}
        self._enumerators: dict[int, SplitEnumerator] = {}

    def enumerator(self, vertex_id: int) -> SplitEnumerator:
        enumerator = self._enumerators.get(vertex_id)
        if enumerator is None:
            vertex = self._vertices[vertex_id]
            source = cloudpickle.loads(vertex.source)
            enumerator = source.create_enumerator(vertex.parallelism)
            self._enumerators[vertex_id] = enumerator
        return enumerator

    def request_splits(self, vertex_id: int, subtask_index: int) -> jobmaster_pb2.SplitResponse:
        assignment = self.enumerator(vertex_id).request_splits(subtask_index)
        response = jobmaster_pb2.SplitResponse(
            splits=[cloudpickle.dumps(s) for s in assignment.splits],
            no_more_splits=assignment.no_more_splits)
        if assignment.retry_after is not None:
            response.retry_after_ms = max(1, int(assignment.retry_after * 1000))
        return response

    def close(self) -> None:
        for enumerator in self._enumerators.values():
            try:
                enumerator.close()
            except Exception:  # closing must reach every enumerator
                log.exception("closing a split enumerator failed")
        self._enumerators.clear()
