"""The execution graph: one ExecutionVertex per subtask, with its current attempt and state.

Pure data with Flink's job and task states; the scheduler drives the transitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from weir.core.clock import Clock, wall_clock_ms
from weir.core.ids import (
    AllocationId,
    CheckpointId,
    ExecutionAttemptId,
    JobId,
    ResourceId,
    new_attempt_id,
)
from weir.proto import common_pb2, jobgraph_pb2, jobmaster_pb2

#: The resource and allocation of an attempt that is not deployed.
NOT_DEPLOYED = ResourceId("")
NO_ALLOCATION = AllocationId("")

TERMINAL_TASK_STATES = {common_pb2.FINISHED, common_pb2.CANCELED, common_pb2.FAILED}
TERMINAL_JOB_STATES = {common_pb2.JOB_FINISHED, common_pb2.JOB_FAILED, common_pb2.JOB_CANCELED}


@dataclass
class ExecutionVertex:
    """One subtask of a job vertex. Setting ``state`` to another state notes when the
    current attempt entered it (``state_timestamps``, on ``clock``)."""

    job_vertex: jobgraph_pb2.JobVertex
    subtask_index: int
    #: The JobMaster's clock (epoch ms), read at each state transition.
    clock: Clock = field(default=wall_clock_ms, repr=False, compare=False)
    attempt_id: ExecutionAttemptId = field(default_factory=new_attempt_id)
    attempt_number: int = 0
    #: Where the attempt is deployed (NOT_DEPLOYED and NO_ALLOCATION: nowhere yet).
    resource_id: ResourceId = NOT_DEPLOYED
    allocation_id: AllocationId = NO_ALLOCATION
    metrics: jobmaster_pb2.TaskMetrics = field(default_factory=jobmaster_pb2.TaskMetrics)
    failure: common_pb2.ErrorInfo | None = None
    #: What this attempt's restore cost (None: it restored nothing, or is not running yet).
    restore: jobmaster_pb2.RestoreStats | None = None
    #: When the current attempt entered each state it reached (ExecutionState -> epoch
    #: ms; a state entered again keeps the later time), as Flink's state timestamps.
    state_timestamps: dict[int, int] = field(default_factory=dict, compare=False)
    _state: common_pb2.ExecutionState = field(default=common_pb2.CREATED, init=False,
                                              repr=False)

    def __post_init__(self) -> None:
        self.state_timestamps.setdefault(common_pb2.CREATED, self.clock())

    @property
    def state(self) -> common_pb2.ExecutionState:
        """The current attempt's state (Flink's ExecutionState)."""
        return self._state

    @state.setter
    def state(self, state: common_pb2.ExecutionState) -> None:
        if state != self._state:
            self.state_timestamps[state] = self.clock()
        self._state = state

    @property
    def owner(self) -> str:
        """This subtask's directory name in checkpoints and local state."""
        return f"{self.job_vertex.id}-{self.subtask_index}"

    @property
    def name(self) -> str:
        p = self.job_vertex.parallelism
        return f"{self.job_vertex.name} ({self.subtask_index + 1}/{p})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_TASK_STATES

    def new_attempt(self) -> None:
        """Start over as the next attempt (a restart): new id, not deployed anywhere."""
        self.attempt_id = new_attempt_id()
        self.attempt_number += 1
        self._state = common_pb2.CREATED
        self.state_timestamps = {common_pb2.CREATED: self.clock()}
        self.resource_id = NOT_DEPLOYED
        self.allocation_id = NO_ALLOCATION
        self.metrics = jobmaster_pb2.TaskMetrics()
        self.failure = None
        self.restore = None


class ExecutionGraph:
    """All subtasks of a job and the job's status."""

    def __init__(self, job_graph: jobgraph_pb2.JobGraph, clock: Clock = wall_clock_ms
                 ) -> None:
        self.job_graph = job_graph
        self.job_id = JobId(job_graph.job_id)
        self.status = common_pb2.JOB_CREATED
        self._clock = clock
        self.vertices: dict[int, list[ExecutionVertex]] = {
            v.id: [ExecutionVertex(v, i, clock) for i in range(v.parallelism)]
            for v in job_graph.vertices}
        self.by_attempt: dict[ExecutionAttemptId, ExecutionVertex] = {
            ev.attempt_id: ev for evs in self.vertices.values() for ev in evs}
        self.failure: common_pb2.ErrorInfo | None = None
        #: Task-local recovery: owner -> (checkpoint id, resource id of the TaskExecutor
        #: that kept a local copy of that owner's state in that checkpoint).
        self.local_state: dict[str, tuple[CheckpointId, ResourceId]] = {}
        #: The last restore, summed over tasks (None: never restored).
        self.last_restore: jobmaster_pb2.RestoreStats | None = None
        #: When the job was submitted and when it ended (epoch seconds).
        self.start_time = clock() / 1000
        self.end_time: float | None = None

    def replace(self, job_graph: jobgraph_pb2.JobGraph,
                keep: frozenset[int] = frozenset()) -> None:
        """Run ``job_graph`` from now on (a rescale or update): new subtasks, every one a
        new attempt not deployed anywhere, except those of the vertices in ``keep``, which
        run on as they are; the job's status and history stay."""
        self.job_graph = job_graph
        self.vertices = {v.id: self.vertices[v.id] if v.id in keep else
                         [ExecutionVertex(v, i, self._clock) for i in range(v.parallelism)]
                         for v in job_graph.vertices}
        for vertex in job_graph.vertices:
            if vertex.id in keep:
                for ev in self.vertices[vertex.id]:
                    ev.job_vertex = vertex
        self.by_attempt = {ev.attempt_id: ev for ev in self.all()}

    def new_attempts(self) -> None:
        """Every subtask starts over as its next attempt (a full restart)."""
        for ev in self.all():
            ev.new_attempt()
        self.by_attempt = {ev.attempt_id: ev for ev in self.all()}

    def new_attempt(self, ev: ExecutionVertex) -> None:
        """One subtask starts over as its next attempt (a region restart)."""
        self.by_attempt.pop(ev.attempt_id, None)
        ev.new_attempt()
        self.by_attempt[ev.attempt_id] = ev

    def all(self) -> list[ExecutionVertex]:
        return [ev for evs in self.vertices.values() for ev in evs]

    def job_vertex(self, vertex_id: int) -> jobgraph_pb2.JobVertex:
        return next(v for v in self.job_graph.vertices if v.id == vertex_id)

    def consumers_of(self, vertex_id: int) -> list[tuple[jobgraph_pb2.JobVertex,
                                                         jobgraph_pb2.JobEdge]]:
        return [(v, e) for v in self.job_graph.vertices for e in v.inputs
                if e.source_vertex == vertex_id]

    def is_terminal(self) -> bool:
        return self.status in TERMINAL_JOB_STATES

    def summary(self) -> jobmaster_pb2.JobSummary:
        evs = self.all()
        return jobmaster_pb2.JobSummary(
            job_id=self.job_id, name=self.job_graph.name, status=self.status,
            start_time_ms=round(self.start_time * 1000),
            end_time_ms=round(self.end_time * 1000) if self.end_time else 0,
            tasks_total=len(evs),
            tasks_running=sum(ev.state == common_pb2.RUNNING for ev in evs),
            tasks_finished=sum(ev.state == common_pb2.FINISHED for ev in evs))

    def details(self) -> jobmaster_pb2.JobDetails:
        details = jobmaster_pb2.JobDetails(summary=self.summary())
        for v in self.job_graph.vertices:
            vd = details.vertices.add(vertex_id=v.id, name=v.name, parallelism=v.parallelism)
            for ev in self.vertices[v.id]:
                sub = vd.subtasks.add(subtask_index=ev.subtask_index, state=ev.state,
                                      attempt_id=ev.attempt_id, resource_id=ev.resource_id,
                                      metrics=ev.metrics, attempt_number=ev.attempt_number,
                                      state_timestamps=ev.state_timestamps)
                if ev.restore is not None:
                    sub.restore.CopyFrom(ev.restore)
        if self.failure is not None:
            details.failure.CopyFrom(self.failure)
        if self.last_restore is not None:
            details.last_restore.CopyFrom(self.last_restore)
        return details
