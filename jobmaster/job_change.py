"""The job graph a running job changes to: another parallelism (``weir rescale``) or a new
version of its program (``weir update``). Pure functions of job graphs; the scheduler
takes the checkpoint and deploys the result.

Rescaling sets the parallelism of every vertex that runs at the job's parallelism (the
highest), or of the vertices holding the named operators. A forward edge whose ends no
longer have the same parallelism becomes a rebalance edge, as Flink does.

An update keeps what it can of the running job: a source whose uid is running already
keeps the running source (its splits, its Spark preparation: the new program's sources
are not prepared). The state of every operator must find its uid in the new program, at
the same max parallelism; otherwise the update is refused and the job keeps running.

Example:
    >>> from weir.proto import common_pb2, jobgraph_pb2
    >>> graph = jobgraph_pb2.JobGraph(job_id="j")
    >>> _ = graph.vertices.add(id=1, parallelism=2, max_parallelism=128, operator_uids=["src"])
    >>> sink = graph.vertices.add(id=2, parallelism=2, max_parallelism=128,
    ...                           operator_uids=["sink"])
    >>> _ = sink.inputs.add(source_vertex=1, partitioner=common_pb2.FORWARD)
    >>> rescaled = rescaled_graph(graph, 0, {"sink": 3})
    >>> [v.parallelism for v in rescaled.vertices]
    [2, 3]
    >>> common_pb2.PartitionerType.Name(rescaled.vertices[1].inputs[0].partitioner)
    'REBALANCE'
"""

from __future__ import annotations

from collections.abc import Mapping

import cloudpickle

from weir.core import options
from weir.core.errors import UserError
from weir.jobmaster.failover import pipelined_regions
from weir.proto import common_pb2, jobgraph_pb2


class JobChangeRefusedError(UserError):
    """The change cannot be made; the job keeps running as it was."""


def rescaled_graph(graph: jobgraph_pb2.JobGraph, parallelism: int,
                   per_operator: Mapping[str, int]) -> jobgraph_pb2.JobGraph:
    """``graph`` with the new parallelism (see the module docstring); raises
    JobChangeRefusedError for an unknown uid or a parallelism out of range."""
    result = jobgraph_pb2.JobGraph()
    result.CopyFrom(graph)
    if parallelism < 0 or (parallelism == 0 and not per_operator):
        msg = "give the new parallelism: --parallelism N and/or --operator UID=N"
        raise JobChangeRefusedError(msg)
    default = max(v.parallelism for v in graph.vertices)
    targets: dict[int, int] = {}
    if parallelism:
        targets.update({v.id: parallelism for v in result.vertices
                        if v.parallelism == default})
    for uid, value in per_operator.items():
        vertex = next((v for v in result.vertices if uid in v.operator_uids), None)
        if vertex is None:
            known = ", ".join(sorted(u for v in result.vertices for u in v.operator_uids))
            msg = f"the job has no operator with uid {uid!r} (its operators: {known})"
            raise JobChangeRefusedError(msg)
        targets[vertex.id] = value
    for vertex in result.vertices:
        value = targets.get(vertex.id, vertex.parallelism)
        if not 1 <= value <= vertex.max_parallelism:
            msg = (f"parallelism {value} for '{vertex.name}' is out of range: it must be "
                   f"between 1 and its max parallelism {vertex.max_parallelism}")
            raise JobChangeRefusedError(msg)
        vertex.parallelism = value
    _fix_forward_edges(result)
    return result


def updated_graph(running: jobgraph_pb2.JobGraph, new: jobgraph_pb2.JobGraph
                  ) -> tuple[jobgraph_pb2.JobGraph, list[str]]:
    """The graph to run for an update from ``running`` to ``new``, and the uids of the
    operators that changed (new, other code, other parallelism or place). Raises
    JobChangeRefusedError for a new source that would need preparing (a Spark source)."""
    result = jobgraph_pb2.JobGraph()
    result.CopyFrom(new)
    result.job_id = running.job_id
    # The kept Spark sources' staging stays the job's to delete when it ends.
    staged = running.config.get(options.SPARK_STAGING_JOB_ROOTS.key)
    if staged is not None:
        result.config[options.SPARK_STAGING_JOB_ROOTS.key] = staged
    sources = {v.operator_uids[0]: v for v in running.vertices
               if v.source and v.operator_uids}
    for vertex in result.vertices:
        if vertex.source:
            uid = vertex.operator_uids[0] if vertex.operator_uids else ""
            if uid in sources:
                vertex.source = sources[uid].source
                if sources[uid].operator_fingerprints and vertex.operator_fingerprints:
                    vertex.operator_fingerprints[0] = sources[uid].operator_fingerprints[0]
            elif getattr(cloudpickle.loads(vertex.source), "needs_preparation", False):
                msg = (f"the update adds the source '{vertex.name}' (uid {uid!r}), which must "
                       "be prepared (a Spark source): submit the new program as a new job "
                       "(`weir stop` and `weir run -s`) instead")
                raise JobChangeRefusedError(msg)
    before = _operators(running)
    changed = sorted(uid for uid, now in _operators(result).items() if before.get(uid) != now)
    return result, changed


def kept_vertices(running: jobgraph_pb2.JobGraph, new: jobgraph_pb2.JobGraph,
                  changed: list[str]) -> frozenset[int]:
    """The vertices an update from ``running`` to ``new`` can leave running: those of the
    pipelined regions in which nothing changed. A region keeps running when each of its
    vertices is in both graphs under the same id, with the same operators (none of them in
    ``changed``), parallelism, inputs and consumers, and the same sources; the regions of
    a streaming job are its connected components, so a kept region exchanges no data with
    a restarted one. Empty when the job-wide settings differ (every task uses them).

    Example:
        >>> from weir.proto import jobgraph_pb2
        >>> graph = jobgraph_pb2.JobGraph(job_id="j")
        >>> for vid, uid in ((1, "a"), (2, "b")):
        ...     _ = graph.vertices.add(id=vid, parallelism=1, operator_uids=[uid])
        >>> sorted(kept_vertices(graph, graph, ["a"]))
        [2]
    """
    if _job_settings(running) != _job_settings(new):
        return frozenset()
    before = {v.id: v for v in running.vertices}
    old_regions = {frozenset(r.tasks) for r in pipelined_regions(running, batch=False)}
    same = {v.id for v in new.vertices
            if (old := before.get(v.id)) is not None and _vertex_key(old, running) ==
            _vertex_key(v, new) and not set(v.operator_uids) & set(changed)}
    kept: set[int] = set()
    for region in pipelined_regions(new, batch=False):
        vertices = {vertex_id for vertex_id, _ in region.tasks}
        if vertices <= same and frozenset(region.tasks) in old_regions:
            kept |= vertices
    # A vertex split over several regions (pointwise edges) stays only if all of it does.
    for region in pipelined_regions(new, batch=False):
        if not {v for v, _ in region.tasks} <= kept:
            kept -= {v for v, _ in region.tasks}
    return frozenset(kept)


def _job_settings(graph: jobgraph_pb2.JobGraph) -> bytes:
    settings = jobgraph_pb2.JobGraph()
    settings.CopyFrom(graph)
    del settings.vertices[:]
    settings.name = ""
    # Which file the program came from changes no task's behaviour.
    settings.config.pop(options.PROGRAM_FILE.key, None)
    # Nor where the client staged Spark's output (an update's program stages nothing).
    settings.config.pop(options.SPARK_STAGING_JOB_ROOTS.key, None)
    return settings.SerializeToString(deterministic=True)


def _vertex_key(vertex: jobgraph_pb2.JobVertex, graph: jobgraph_pb2.JobGraph
                ) -> tuple[object, ...]:
    consumers = sorted((v.id, e.partitioner) for v in graph.vertices for e in v.inputs
                       if e.source_vertex == vertex.id)
    code = tuple(vertex.operator_fingerprints) or vertex.chain
    return (tuple(vertex.operator_uids), code, vertex.parallelism, vertex.max_parallelism,
            vertex.source, tuple((e.source_vertex, e.partitioner) for e in vertex.inputs),
            tuple(consumers))


def _operators(graph: jobgraph_pb2.JobGraph) -> dict[str, tuple[object, ...]]:
    """Per operator uid: what must stay equal for it to count as unchanged (its code, its
    parallelism and how its vertex is fed)."""
    result: dict[str, tuple[object, ...]] = {}
    uids = {v.id: tuple(v.operator_uids) for v in graph.vertices}
    for vertex in graph.vertices:
        inputs = tuple((uids.get(e.source_vertex), e.partitioner) for e in vertex.inputs)
        prints = list(vertex.operator_fingerprints)
        for index, uid in enumerate(vertex.operator_uids):
            code = prints[index] if index < len(prints) else vertex.chain
            result[uid] = (code, vertex.parallelism, inputs if index == 0 else ())
    return result


def _fix_forward_edges(graph: jobgraph_pb2.JobGraph) -> None:
    parallelism = {v.id: v.parallelism for v in graph.vertices}
    for vertex in graph.vertices:
        for edge in vertex.inputs:
            if edge.partitioner == common_pb2.FORWARD and \
                    parallelism[edge.source_vertex] != vertex.parallelism:
                edge.partitioner = common_pb2.REBALANCE
