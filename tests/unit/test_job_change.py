"""Which vertices an update leaves running: only whole unchanged pipelined regions."""

from __future__ import annotations

from weir.jobmaster.job_change import kept_vertices
from weir.proto import common_pb2, jobgraph_pb2


def _graph(edges: list[tuple[int, int]], vertices: int = 4, parallelism: int = 2,
           partitioner: int = common_pb2.HASH) -> jobgraph_pb2.JobGraph:
    graph = jobgraph_pb2.JobGraph(job_id="j", config={"pipeline.batch-size": "10"})
    for vid in range(1, vertices + 1):
        vertex = graph.vertices.add(id=vid, name=f"v{vid}", parallelism=parallelism,
                                    max_parallelism=128, operator_uids=[f"op{vid}"],
                                    operator_fingerprints=[f"code{vid}"])
        for source, target in edges:
            if target == vid:
                vertex.inputs.add(source_vertex=source, partitioner=partitioner)
    return graph


def _copy(graph: jobgraph_pb2.JobGraph) -> jobgraph_pb2.JobGraph:
    new = jobgraph_pb2.JobGraph()
    new.CopyFrom(graph)
    return new


TWO_PIPELINES = [(1, 2), (3, 4)]


def test_the_pipeline_without_a_change_keeps_running() -> None:
    running = _graph(TWO_PIPELINES)
    new = _copy(running)
    new.vertices[1].operator_fingerprints[0] = "other code"
    assert kept_vertices(running, new, ["op2"]) == {3, 4}


def test_nothing_keeps_running_when_the_change_is_in_the_only_pipeline() -> None:
    running = _graph([(1, 2), (2, 3), (3, 4)])
    assert kept_vertices(running, _copy(running), ["op4"]) == frozenset()


def test_a_changed_parallelism_or_a_new_consumer_restarts_its_pipeline() -> None:
    running = _graph(TWO_PIPELINES)
    rescaled = _copy(running)
    rescaled.vertices[3].parallelism = 3
    assert kept_vertices(running, rescaled, ["op4"]) == {1, 2}
    fed = _copy(running)
    # Vertex 2 now feeds vertex 4 too: the two pipelines became one region.
    fed.vertices[3].inputs.add(source_vertex=2, partitioner=common_pb2.HASH)
    assert kept_vertices(running, fed, ["op4"]) == frozenset()


def test_other_job_settings_restart_everything() -> None:
    running = _graph(TWO_PIPELINES)
    new = _copy(running)
    new.config["pipeline.batch-size"] = "20"
    assert kept_vertices(running, new, ["op2"]) == frozenset()


def test_renumbered_vertices_do_not_keep_running() -> None:
    running = _graph(TWO_PIPELINES)
    new = _copy(running)
    for vertex in new.vertices:
        vertex.id += 10
        for edge in vertex.inputs:
            edge.source_vertex += 10
    assert kept_vertices(running, new, []) == frozenset()


def test_a_pointwise_pipeline_is_kept_whole_or_not_at_all() -> None:
    # Forward edges: each subtask of 3 -> 4 is a region of its own.
    running = _graph(TWO_PIPELINES, partitioner=common_pb2.FORWARD)
    new = _copy(running)
    new.vertices[0].operator_fingerprints[0] = "other code"
    assert kept_vertices(running, new, ["op1"]) == {3, 4}
