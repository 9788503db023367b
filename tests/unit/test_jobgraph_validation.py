"""The JobMaster's check of submitted JobGraphs: each malformed shape is refused with one
line naming the vertex or edge and the problem; graphs built by programs pass."""

from __future__ import annotations

from collections.abc import Callable

import cloudpickle
import pytest

from weir import StreamExecutionEnvironment
from weir.jobmaster.jobgraph_validation import JobGraphValidationError, validate_job_graph
from weir.proto import common_pb2, jobgraph_pb2


def program_graph() -> jobgraph_pb2.JobGraph:
    """source (parallelism 1) -rebalance-> Map (2) -hash-> Map -> Sink (2)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    numbers = env.from_collection(list(range(10)))
    numbers.map(lambda n: n + 1).key_by(lambda n: n % 3).map(lambda n: n * 2).print()
    return env.get_job_graph("validated")


def set_edge(graph, vertex: int, **fields) -> None:
    edge = graph.vertices[vertex].inputs[0]
    for name, value in fields.items():
        setattr(edge, name, value)


def add_vertex_copy(graph, index: int) -> None:
    graph.vertices.add().CopyFrom(graph.vertices[index])


def extend(graph, vertex: int, field: str, values) -> None:
    getattr(graph.vertices[vertex], field).extend(values)


def clear(graph, vertex: int, field: str) -> None:
    graph.vertices[vertex].ClearField(field)


# (mutation, expected message); {s}, {m}, {k}: the ids of the source, Map and keyed vertex.
MALFORMED: dict[str, tuple[Callable[[jobgraph_pb2.JobGraph], None], str]] = {
    "parallelism 0": (lambda g: setattr(g.vertices[1], "parallelism", 0),
                      "vertex {m} ('Map'): parallelism must be at least 1, got 0"),
    "negative parallelism": (lambda g: setattr(g.vertices[1], "parallelism", -4),
                             "vertex {m} ('Map'): parallelism must be at least 1, got -4"),
    "max parallelism below parallelism": (
        lambda g: setattr(g.vertices[2], "max_parallelism", 1),
        "vertex {k} ('Map -> Sink: Print'): parallelism 2 must not exceed max parallelism 1"),
    "max parallelism 0": (lambda g: setattr(g.vertices[1], "max_parallelism", 0),
                          "vertex {m} ('Map'): max"),
    "edge to a missing vertex": (
        lambda g: set_edge(g, 1, source_vertex=999_999),
        "edge 0 into vertex {m} ('Map'): reads vertex 999999, which the job graph does not "
        "have"),
    "self-loop": (lambda g: set_edge(g, 1, source_vertex=g.vertices[1].id),
                  "edge 0 into vertex {m} ('Map'): reads the vertex itself (a self-loop)"),
    "cycle": (lambda g: g.vertices[1].inputs.add(source_vertex=g.vertices[2].id,
                                                  partitioner=common_pb2.REBALANCE),
              "the job graph has a cycle: vertices {m} -> {k} -> {m}"),
    "duplicate vertex ids": (lambda g: setattr(g.vertices[2], "id", g.vertices[1].id),
                             "vertex id {m} is used twice: by 'Map' and by "
                             "'Map -> Sink: Print'"),
    "no vertices": (lambda g: g.ClearField("vertices"), "the job graph has no vertices"),
    "unknown partitioner": (
        lambda g: set_edge(g, 2, partitioner=7),
        "edge 0 into vertex {k} ('Map -> Sink: Print'): unknown partitioner 7 (known: "
        "FORWARD, REBALANCE, HASH, BROADCAST)"),
    "hash edge without a key selector": (
        lambda g: set_edge(g, 2, key_selector=b""),
        "edge 0 into vertex {k} ('Map -> Sink: Print'): a HASH edge needs a key selector"),
    "forward edge between different parallelisms": (
        lambda g: set_edge(g, 1, partitioner=common_pb2.FORWARD),
        "edge 0 into vertex {m} ('Map'): a FORWARD edge needs equal parallelism, but vertex "
        "{s} has 1 and vertex {m} 2"),
    "input index out of range": (
        lambda g: set_edge(g, 1, input_index=5),
        "edge 0 into vertex {m} ('Map'): input index 5 (operators have inputs 0 to 1)"),
    "negative input index": (lambda g: set_edge(g, 1, input_index=-1), "input index -1"),
    "the same producer twice": (
        lambda g: g.vertices[1].inputs.add().CopyFrom(g.vertices[1].inputs[0]),
        "edge 1 into vertex {m} ('Map'): reads vertex {s} a second time"),
    "no chain at all": (lambda g: setattr(g.vertices[1], "chain", b""),
                        "vertex {m} ('Map'): the operator chain is empty"),
    "an empty operator list": (
        lambda g: setattr(g.vertices[1], "chain", cloudpickle.dumps([])),
        "vertex {m} ('Map'): the operator chain has no operators and the vertex no source"),
    "a chain that is not a pickled list": (
        lambda g: setattr(g.vertices[1], "chain", b"garbage"),
        "vertex {m} ('Map'): the operator chain is not a pickled list of operators"),
    "a pickled dict as chain": (
        lambda g: setattr(g.vertices[1], "chain", cloudpickle.dumps({"a": 1})),
        "the operator chain is not a pickled list"),
    "no operator uids": (
        lambda g: (clear(g, 1, "operator_uids"), clear(g, 1, "operator_names")),
        "vertex {m} ('Map'): no operator uids"),
    "names and uids differ in number": (
        lambda g: extend(g, 1, "operator_names", ["extra"]),
        "vertex {m} ('Map'): 2 operator names but 1 operator uids"),
    "a uid used twice": (
        lambda g: g.vertices[2].operator_uids.__setitem__(0, g.vertices[1].operator_uids[0]),
        "vertex {k} ('Map -> Sink: Print'): operator uid '1:operator:Map' is also used in "
        "vertex {m}"),
    "a source with inputs": (
        lambda g: g.vertices[0].inputs.add(source_vertex=g.vertices[1].id,
                                           partitioner=common_pb2.REBALANCE),
        "vertex {s} ('Source: Collection'): a source vertex has 1 input(s)"),
    "neither source nor inputs": (
        lambda g: clear(g, 1, "inputs"),
        "vertex {m} ('Map'): has neither a source nor inputs"),
    "a job id that is not hex": (lambda g: setattr(g, "job_id", "not-a-job-id"),
                                 "job id 'not-a-job-id' is not 32 hex digits"),
    "a bad configuration value": (
        lambda g: g.config.__setitem__("execution.checkpointing.interval", "banana"),
        "job configuration: invalid value for 'execution.checkpointing.interval': not a "
        "duration: 'banana'"),
    "an unknown configuration key": (
        lambda g: g.config.__setitem__("execution.checkpointing.intervall", "10 s"),
        "job configuration: unknown configuration key 'execution.checkpointing.intervall'"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_graph_is_refused_with_one_line(case: str):
    graph = program_graph()
    ids = {"s": graph.vertices[0].id, "m": graph.vertices[1].id, "k": graph.vertices[2].id}
    mutate, expected = MALFORMED[case]
    mutate(graph)
    with pytest.raises(JobGraphValidationError) as raised:
        validate_job_graph(graph)
    message = str(raised.value)
    assert expected.format(**ids) in message
    assert "\n" not in message and len(message) < 500


def test_a_graph_built_by_a_program_passes():
    validate_job_graph(program_graph())


def test_a_source_only_vertex_has_no_operators_and_passes():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2]).rebalance().map(lambda n: n).print()
    graph = env.get_job_graph("source alone")
    assert graph.vertices[0].source and graph.vertices[0].chain == cloudpickle.dumps([])
    validate_job_graph(graph)


def test_a_long_chain_of_vertices_is_checked_without_recursion():
    graph = program_graph()
    template = graph.vertices[1]
    previous = template.id
    for vertex_id in range(10_000, 15_000):
        vertex = graph.vertices.add()
        vertex.CopyFrom(template)
        vertex.id = vertex_id
        vertex.operator_uids[:] = [f"uid-{vertex_id}"]
        vertex.inputs[0].source_vertex = previous
        previous = vertex_id
    validate_job_graph(graph)
    graph.vertices[1].inputs.add(source_vertex=previous, partitioner=common_pb2.REBALANCE)
    with pytest.raises(JobGraphValidationError, match="cycle"):
        validate_job_graph(graph)


def test_a_huge_name_is_cut_in_the_message():
    graph = program_graph()
    graph.vertices[1].name = "x\n" * 100_000
    graph.vertices[1].parallelism = 0
    with pytest.raises(JobGraphValidationError) as raised:
        validate_job_graph(graph)
    assert len(str(raised.value)) < 500 and "\n" not in str(raised.value)
