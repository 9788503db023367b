"""Failover strategies: which tasks a task failure restarts (Flink's ``FailoverStrategy``).
Pure: built once from the JobGraph, then asked one failure at a time; no I/O, no clock.

A *pipelined region* (Flink's ``SchedulingPipelinedRegion``) is a connected component of the
subtask graph over pipelined exchanges. In STREAMING every exchange is pipelined; in BATCH
every exchange is blocking (the scheduler deploys stage by stage), so each subtask is a
region of its own. Blocking exchanges between regions are their result-partition
dependencies: FORWARD feeds subtask ``i`` from subtask ``i`` only, every other partitioner
feeds each consumer subtask from every producer subtask.

The region rule (Flink's ``RestartPipelinedRegionFailoverStrategy``), applied until no
region is added:

1. the region of the failed task restarts;
2. a restarting region that reads a result partition which is no longer available (its
   producer is in ``lost_producers``) restarts the producer's region too;
3. every consumer region of a restarting region restarts, finished or not: its input is
   produced again and need not be the same (non-deterministic functions or partitioning).

Regions none of these reach are left alone. ``finished`` does not change the answer of the
region or full strategy (Flink restarts the finished regions it reaches); it is in the
protocol for strategies that spare finished tasks.

Example:
    >>> from weir.proto import common_pb2, jobgraph_pb2
    >>> forward = jobgraph_pb2.JobEdge(source_vertex=1, partitioner=common_pb2.FORWARD)
    >>> graph = jobgraph_pb2.JobGraph(vertices=[
    ...     jobgraph_pb2.JobVertex(id=1, parallelism=2),
    ...     jobgraph_pb2.JobVertex(id=2, parallelism=2, inputs=[forward])])
    >>> [sorted(region.tasks) for region in pipelined_regions(graph, batch=False)]
    [[(1, 0), (2, 0)], [(1, 1), (2, 1)]]
    >>> strategy = create_failover_strategy("region", graph, batch=False)
    >>> sorted(strategy.tasks_to_restart((2, 1)))
    [(1, 1), (2, 1)]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from weir.core.errors import InternalError, InvalidJobError
from weir.jobmaster import options as jm_options
from weir.proto import common_pb2, jobgraph_pb2

#: A subtask: (job vertex id, subtask index).
TaskId = tuple[int, int]


@dataclass(frozen=True)
class Region:
    """One pipelined region: tasks that exchange data only through pipelined channels and
    therefore fail and restart together. ``index`` is its position in
    :attr:`RegionTopology.regions` (ordered by smallest task id)."""

    index: int
    tasks: frozenset[TaskId]


def _channels(consumer: jobgraph_pb2.JobVertex, edge: jobgraph_pb2.JobEdge,
              parallelism: dict[int, int]) -> Iterator[tuple[TaskId, TaskId]]:
    """(producer, consumer) subtask pairs of one edge, as the scheduler wires channels."""
    source = edge.source_vertex
    if source not in parallelism:
        msg = f"vertex {consumer.id} reads vertex {source}, which is not in the job"
        raise InvalidJobError(msg)
    if edge.partitioner == common_pb2.FORWARD:
        if parallelism[source] != consumer.parallelism:
            msg = (f"FORWARD edge {source} -> {consumer.id} needs equal parallelism, got "
                   f"{parallelism[source]} and {consumer.parallelism}")
            raise InvalidJobError(msg)
        for i in range(consumer.parallelism):
            yield (source, i), (consumer.id, i)
    else:
        for i in range(parallelism[source]):
            for j in range(consumer.parallelism):
                yield (source, i), (consumer.id, j)


def subtask_inputs(job_graph: jobgraph_pb2.JobGraph) -> dict[TaskId, frozenset[TaskId]]:
    """Every subtask of the job, with the subtasks whose output it reads (see the module
    docstring: FORWARD feeds subtask ``i`` from subtask ``i`` only).

    Example:
        >>> from weir.proto import common_pb2, jobgraph_pb2
        >>> forward = jobgraph_pb2.JobEdge(source_vertex=1, partitioner=common_pb2.FORWARD)
        >>> inputs = subtask_inputs(jobgraph_pb2.JobGraph(vertices=[
        ...     jobgraph_pb2.JobVertex(id=1, parallelism=2),
        ...     jobgraph_pb2.JobVertex(id=2, parallelism=2, inputs=[forward])]))
        >>> sorted(inputs[(2, 1)]), sorted(inputs[(1, 1)])
        ([(1, 1)], [])
    """
    parallelism = {v.id: v.parallelism for v in job_graph.vertices}
    inputs: dict[TaskId, set[TaskId]] = {
        (vid, i): set() for vid, p in parallelism.items() for i in range(p)}
    for vertex in job_graph.vertices:
        for edge in vertex.inputs:
            for producer, consumer in _channels(vertex, edge, parallelism):
                inputs[consumer].add(producer)
    return {task: frozenset(feeding) for task, feeding in inputs.items()}


class RegionTopology:
    """The pipelined regions of a job and the result-partition dependencies between them.

    Example:
        >>> from weir.proto import common_pb2, jobgraph_pb2
        >>> edge = jobgraph_pb2.JobEdge(source_vertex=1, partitioner=common_pb2.HASH)
        >>> graph = jobgraph_pb2.JobGraph(vertices=[
        ...     jobgraph_pb2.JobVertex(id=1, parallelism=2),
        ...     jobgraph_pb2.JobVertex(id=2, parallelism=1, inputs=[edge])])
        >>> topology = RegionTopology(graph, batch=True)
        >>> [sorted(r.tasks) for r in topology.producer_regions(topology.region_of((2, 0)))]
        [[(1, 0)], [(1, 1)]]
    """

    def __init__(self, job_graph: jobgraph_pb2.JobGraph, *, batch: bool) -> None:
        inputs = subtask_inputs(job_graph)
        self.tasks: frozenset[TaskId] = frozenset(inputs)
        self._inputs = inputs
        #: Tasks whose output other tasks read.
        self.producers: frozenset[TaskId] = frozenset(
            producer for feeding in inputs.values() for producer in feeding)
        self.regions: tuple[Region, ...] = _components(inputs, pipelined=not batch)
        self._region_of = {task: r for r in self.regions for task in r.tasks}
        # Only exchanges that cross a region boundary are result-partition dependencies.
        self._blocking_inputs: list[set[TaskId]] = [set() for _ in self.regions]
        producers: list[set[int]] = [set() for _ in self.regions]
        consumers: list[set[int]] = [set() for _ in self.regions]
        for consumer, feeding in inputs.items():
            into = self._region_of[consumer].index
            for producer in feeding:
                out = self._region_of[producer].index
                if out != into:
                    self._blocking_inputs[into].add(producer)
                    producers[into].add(out)
                    consumers[out].add(into)
        self._producers = [tuple(self.regions[i] for i in sorted(s)) for s in producers]
        self._consumers = [tuple(self.regions[i] for i in sorted(s)) for s in consumers]

    def region_of(self, task: TaskId) -> Region:
        """The region holding ``task``; InternalError for a task not in the job."""
        try:
            return self._region_of[task]
        except KeyError as err:
            msg = f"task {task} is not a subtask of this job"
            raise InternalError(msg) from err

    def inputs_of(self, task: TaskId) -> frozenset[TaskId]:
        """The tasks whose output ``task`` reads."""
        return self._inputs[task]

    def producer_regions(self, region: Region) -> tuple[Region, ...]:
        """Regions whose result partitions ``region`` reads, in region order."""
        return self._producers[region.index]

    def consumer_regions(self, region: Region) -> tuple[Region, ...]:
        """Regions that read ``region``'s result partitions, in region order."""
        return self._consumers[region.index]

    def blocking_inputs(self, region: Region) -> frozenset[TaskId]:
        """Tasks outside ``region`` whose result partitions ``region`` reads."""
        return frozenset(self._blocking_inputs[region.index])


def _components(inputs: Mapping[TaskId, Collection[TaskId]], *, pipelined: bool
                ) -> tuple[Region, ...]:
    """Connected components over the exchanges (none when no exchange is pipelined)."""
    neighbours: dict[TaskId, set[TaskId]] = {task: set() for task in inputs}
    if pipelined:
        for consumer, feeding in inputs.items():
            for producer in feeding:
                neighbours[consumer].add(producer)
                neighbours[producer].add(consumer)
    seen: set[TaskId] = set()
    regions: list[Region] = []
    # Visiting tasks in sorted order starts each component at its smallest task, so the
    # regions come out ordered by smallest task id without a sort.
    for start in sorted(inputs):
        if start in seen:
            continue
        seen.add(start)
        component, queue = {start}, deque([start])
        while queue:
            for other in neighbours[queue.popleft()] - seen:
                seen.add(other)
                component.add(other)
                queue.append(other)
        regions.append(Region(len(regions), frozenset(component)))
    return tuple(regions)


def pipelined_regions(job_graph: jobgraph_pb2.JobGraph, batch: bool) -> list[Region]:
    """The pipelined regions of ``job_graph``, ordered by smallest task id (see module doc)."""
    return list(RegionTopology(job_graph, batch=batch).regions)


class FailoverStrategy(Protocol):
    """Decides which tasks restart after one task failed. Pure; called on the JobMaster's
    main thread once per failure that the restart strategy allows to restart."""

    #: The job's regions and the tasks each task reads, which the strategy decides on.
    topology: RegionTopology

    def tasks_to_restart(self, failed: TaskId, *, lost_producers: Collection[TaskId] = (),
                         finished: Collection[TaskId] = ()) -> set[TaskId]:
        """Tasks to cancel and deploy again, ``failed`` included.

        ``lost_producers``: tasks whose result partitions are gone (their TaskExecutor died,
        or a consumer reported PARTITION_NOT_FOUND). ``finished``: tasks that have finished.
        Raises InternalError when ``failed`` is not a task of the job.
        """
        ...


class RestartAllFailoverStrategy:
    """Flink's "full": every task of the job restarts.

    Example:
        >>> from weir.proto import jobgraph_pb2
        >>> graph = jobgraph_pb2.JobGraph(vertices=[jobgraph_pb2.JobVertex(id=1, parallelism=2)])
        >>> sorted(RestartAllFailoverStrategy(RegionTopology(graph, batch=False))
        ...        .tasks_to_restart((1, 0)))
        [(1, 0), (1, 1)]
    """

    def __init__(self, topology: RegionTopology) -> None:
        self.topology = topology

    def tasks_to_restart(self, failed: TaskId, *, lost_producers: Collection[TaskId] = (),
                         finished: Collection[TaskId] = ()) -> set[TaskId]:
        """Every task of the job (see :class:`FailoverStrategy`)."""
        self.topology.region_of(failed)  # a failure of a foreign task is our bug
        return set(self.topology.tasks)


class RestartPipelinedRegionFailoverStrategy:
    """Flink's "region": the smallest set of regions that recovers from a failure, by the
    three rules of the module docstring.

    Example:
        >>> from weir.proto import common_pb2, jobgraph_pb2
        >>> edge = jobgraph_pb2.JobEdge(source_vertex=1, partitioner=common_pb2.FORWARD)
        >>> graph = jobgraph_pb2.JobGraph(vertices=[
        ...     jobgraph_pb2.JobVertex(id=1, parallelism=1),
        ...     jobgraph_pb2.JobVertex(id=2, parallelism=1, inputs=[edge])])
        >>> strategy = RestartPipelinedRegionFailoverStrategy(RegionTopology(graph, batch=True))
        >>> sorted(strategy.tasks_to_restart((2, 0), finished=[(1, 0)]))
        [(2, 0)]
        >>> sorted(strategy.tasks_to_restart((2, 0), lost_producers=[(1, 0)]))
        [(1, 0), (2, 0)]
    """

    def __init__(self, topology: RegionTopology) -> None:
        self.topology = topology

    def regions_to_restart(self, failed: TaskId, *,
                           lost_producers: Collection[TaskId] = ()) -> list[Region]:
        """The regions the rules reach from ``failed``'s region, in region order."""
        topology = self.topology
        lost = frozenset(lost_producers)
        start = topology.region_of(failed)
        reached, queue = {start}, deque([start])
        while queue:
            region = queue.popleft()
            unavailable = [topology.region_of(p) for p in topology.blocking_inputs(region) & lost]
            for other in (*unavailable, *topology.consumer_regions(region)):
                if other not in reached:
                    reached.add(other)
                    queue.append(other)
        return sorted(reached, key=lambda r: r.index)

    def tasks_to_restart(self, failed: TaskId, *, lost_producers: Collection[TaskId] = (),
                         finished: Collection[TaskId] = ()) -> set[TaskId]:
        """The tasks of :meth:`regions_to_restart`; ``finished`` spares none of them."""
        regions = self.regions_to_restart(failed, lost_producers=lost_producers)
        return {task for region in regions for task in region.tasks}


class ApproximateFailoverStrategy:
    """Approximate task-local recovery (the "approximate" of Flink's fault-tolerance 2.0
    work): only the failed task restarts, from the latest checkpoint, while its producers
    keep running. That is possible when no other task reads its output (it ends the
    pipeline: a sink-side task) and none of its inputs is lost; otherwise the region rule
    applies. The guarantee this buys is at-most-once for the restarted task's input (see
    the README's failover section): what it processed since the checkpoint, and what was
    in flight to it, is lost; nothing is processed twice.

    Example:
        >>> from weir.proto import common_pb2, jobgraph_pb2
        >>> edge = jobgraph_pb2.JobEdge(source_vertex=1, partitioner=common_pb2.HASH)
        >>> graph = jobgraph_pb2.JobGraph(vertices=[
        ...     jobgraph_pb2.JobVertex(id=1, parallelism=2),
        ...     jobgraph_pb2.JobVertex(id=2, parallelism=2, inputs=[edge])])
        >>> strategy = ApproximateFailoverStrategy(RegionTopology(graph, batch=False))
        >>> sorted(strategy.tasks_to_restart((2, 1)))
        [(2, 1)]
        >>> sorted(strategy.tasks_to_restart((1, 0)))
        [(1, 0), (1, 1), (2, 0), (2, 1)]
        >>> sorted(strategy.tasks_to_restart((2, 1), lost_producers=[(1, 0)]))
        [(1, 0), (1, 1), (2, 0), (2, 1)]
    """

    def __init__(self, topology: RegionTopology) -> None:
        self.topology = topology
        self._region = RestartPipelinedRegionFailoverStrategy(topology)

    def tasks_to_restart(self, failed: TaskId, *, lost_producers: Collection[TaskId] = (),
                         finished: Collection[TaskId] = ()) -> set[TaskId]:
        """``failed`` alone when it may restart by itself, else its regions' tasks."""
        topology = self.topology
        topology.region_of(failed)
        if failed not in topology.producers and \
                not topology.inputs_of(failed) & frozenset(lost_producers):
            return {failed}
        return self._region.tasks_to_restart(failed, lost_producers=lost_producers,
                                             finished=finished)


def create_failover_strategy(name: str, job_graph: jobgraph_pb2.JobGraph,
                             batch: bool) -> FailoverStrategy:
    """The strategy ``jobmanager.execution.failover-strategy`` names: "region", "full" or
    "approximate" (approximate restarts regions in BATCH, where nothing keeps running).
    Raises ConfigError naming the option and its accepted values for any other name.
    """
    kind = jm_options.FAILOVER_STRATEGY.parse(name)
    topology = RegionTopology(job_graph, batch=batch)
    if kind == "full":
        return RestartAllFailoverStrategy(topology)
    if kind == "approximate" and not batch:
        return ApproximateFailoverStrategy(topology)
    return RestartPipelinedRegionFailoverStrategy(topology)
