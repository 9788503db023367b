"""From the DataStream program to the JobGraph: parallelism, partitioners, chaining."""

from __future__ import annotations

import pickle
import threading

import cloudpickle
import pytest

from weir import InvalidJobError, StreamExecutionEnvironment
from weir.datastream.connectors.number_seq import SequenceSource
from weir.datastream.data_stream import DataStream
from weir.datastream.graph import (
    BROADCAST,
    FORWARD,
    HASH,
    PARTITIONER_NAMES,
    REBALANCE,
    build_job_graph,
)
from weir.operators.basic import MapOperator
from weir.operators.keys import FunctionKeySpec
from weir.proto import jobgraph_pb2


def env_with(parallelism: int = 2, max_parallelism: int = 128) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment()
    env.set_parallelism(parallelism).set_max_parallelism(max_parallelism)
    return env


def by_name(graph: jobgraph_pb2.JobGraph) -> dict[str, jobgraph_pb2.JobVertex]:
    return {v.name: v for v in graph.vertices}


def edges(graph: jobgraph_pb2.JobGraph) -> set[tuple[str, str, str]]:
    """(producer vertex, consumer vertex, partitioner) for every edge."""
    names = {v.id: v.name for v in graph.vertices}
    return {(names[e.source_vertex], v.name, PARTITIONER_NAMES[e.partitioner])
            for v in graph.vertices for e in v.inputs}


def forward(ds: DataStream) -> DataStream:
    """An explicit forward partitioning (the API only has it implicitly)."""
    return DataStream(ds._env, ds._partition("Forward", FORWARD))


def test_forward_edges_of_equal_parallelism_chain() -> None:
    env = env_with(3)
    env.from_sequence(1, 10).map(lambda x: x).name("A").filter(bool).name("B").print()
    graph = env.get_job_graph("chained")
    assert graph.name == "chained"
    assert [v.name for v in graph.vertices] == ["Source: Sequence -> A -> B -> Sink: Print"]
    vertex = graph.vertices[0]
    assert vertex.parallelism == 3
    assert vertex.max_parallelism == 128
    assert list(vertex.operator_names) == ["Source: Sequence", "A", "B", "Sink: Print"]
    assert not vertex.inputs
    chain = cloudpickle.loads(vertex.chain)
    assert [op.name for op in chain] == ["Map", "Filter", "Print"]
    source = pickle.loads(vertex.source)
    assert isinstance(source, SequenceSource)
    assert (source.start, source.end) == (1, 10)


def test_explicit_forward_of_equal_parallelism_chains() -> None:
    env = env_with(2)
    forward(env.from_sequence(1, 10)).map(str).print()
    assert [v.name for v in env.get_job_graph().vertices] == [
        "Source: Sequence -> Map -> Sink: Print"]


@pytest.mark.parametrize(("partition", "partitioner"), [
    (lambda ds: ds.key_by(lambda x: x % 3), "HASH"),
    (lambda ds: ds.rebalance(), "REBALANCE"),
    (lambda ds: ds.broadcast(), "BROADCAST"),
])
def test_partitioning_breaks_the_chain(partition, partitioner) -> None:
    env = env_with(2)
    partition(env.from_sequence(1, 10).map(lambda x: x)).map(lambda x: x).name("After").print()
    graph = env.get_job_graph()
    assert edges(graph) == {("Source: Sequence -> Map", "After -> Sink: Print", partitioner)}
    assert all(v.parallelism == 2 for v in graph.vertices)


def test_key_by_edge_carries_the_key_selector() -> None:
    env = env_with(2)
    env.from_sequence(1, 10).key_by(lambda x: x % 3).reduce(lambda a, b: a + b).print()
    graph = env.get_job_graph()
    consumer = by_name(graph)["Keyed Reduce -> Sink: Print"]
    (edge,) = consumer.inputs
    assert edge.partitioner == HASH
    key = cloudpickle.loads(edge.key_selector)
    assert isinstance(key, FunctionKeySpec)
    assert key.get_key(7) == 1
    assert edge.input_index == 0


def test_non_hash_edges_have_no_key_selector() -> None:
    env = env_with(2)
    env.from_sequence(1, 10).rebalance().print()
    (edge,) = by_name(env.get_job_graph())["Sink: Print"].inputs
    assert edge.partitioner == REBALANCE
    assert edge.key_selector == b""


def test_different_parallelism_without_partitioner_rebalances() -> None:
    env = env_with(2)
    env.from_sequence(1, 10).map(lambda x: x).set_parallelism(3).print()
    graph = env.get_job_graph()
    assert edges(graph) == {("Source: Sequence", "Map", "REBALANCE"),
                            ("Map", "Sink: Print", "REBALANCE")}
    assert {v.name: v.parallelism for v in graph.vertices} == {
        "Source: Sequence": 2, "Map": 3, "Sink: Print": 2}


def test_explicit_forward_with_different_parallelism_is_invalid() -> None:
    env = env_with(2)
    forward(env.from_sequence(1, 10)).map(lambda x: x).name("Wide").set_parallelism(4).print()
    with pytest.raises(InvalidJobError, match=r"'Source: Sequence'.*'Wide'.*rebalance"):
        env.get_job_graph()


def test_fan_out_does_not_chain() -> None:
    env = env_with(2)
    ds = env.from_sequence(1, 10)
    ds.map(lambda x: x).name("Left").print()
    ds.filter(lambda x: x > 3).name("Right").print()
    graph = env.get_job_graph()
    assert sorted(v.name for v in graph.vertices) == [
        "Left -> Sink: Print", "Right -> Sink: Print", "Source: Sequence"]
    assert edges(graph) == {("Source: Sequence", "Left -> Sink: Print", "FORWARD"),
                            ("Source: Sequence", "Right -> Sink: Print", "FORWARD")}


def test_union_has_an_edge_per_input_and_does_not_chain() -> None:
    env = env_with(2)
    a = env.from_sequence(1, 5)
    b = env.from_sequence(6, 10).map(lambda x: x).name("B")
    c = env.from_collection([0])
    a.union(b, c.rebalance()).map(lambda x: x).name("U").print()
    graph = env.get_job_graph()
    (union_vertex,) = [v for v in graph.vertices if v.name.startswith("U")]
    assert union_vertex.name == "U -> Sink: Print"
    got = sorted(edge for edge in edges(graph) if edge[1] == union_vertex.name)
    assert got == [("Source: Collection", "U -> Sink: Print", "REBALANCE"),
                   ("Source: Sequence", "U -> Sink: Print", "FORWARD"),
                   ("Source: Sequence -> B", "U -> Sink: Print", "FORWARD")]
    assert all(e.input_index == 0 for e in union_vertex.inputs)


def test_from_collection_runs_with_parallelism_one() -> None:
    env = env_with(4)
    env.from_collection([1, 2, 3]).map(lambda x: x).print()
    graph = env.get_job_graph()
    assert {v.name: v.parallelism for v in graph.vertices} == {
        "Source: Collection": 1, "Map -> Sink: Print": 4}
    assert edges(graph) == {("Source: Collection", "Map -> Sink: Print", "REBALANCE")}


def test_watermarks_are_assigned_at_their_inputs_parallelism() -> None:
    """As Flink's assignTimestampsAndWatermarks: a non-parallel source's records are stamped
    in its own chain (their order kept), unless the assigner's parallelism is set."""
    from weir import WatermarkStrategy

    env = env_with(4)
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    env.from_collection([1, 2, 3]).assign_timestamps_and_watermarks(strategy) \
        .map(lambda x: x).print()
    assert {v.name: v.parallelism for v in env.get_job_graph().vertices} == {
        "Source: Collection -> Timestamps/Watermarks": 1, "Map -> Sink: Print": 4}
    env = env_with(4)
    env.from_sequence(1, 9).set_parallelism(3).assign_timestamps_and_watermarks(strategy) \
        .print()
    assert {v.name: v.parallelism for v in env.get_job_graph().vertices} == {
        "Source: Sequence -> Timestamps/Watermarks": 3, "Sink: Print": 4}
    env = env_with(4)
    env.from_collection([1]).assign_timestamps_and_watermarks(strategy) \
        .set_parallelism(2).print()
    assert {v.name: v.parallelism for v in env.get_job_graph().vertices} == {
        "Source: Collection": 1, "Timestamps/Watermarks": 2, "Sink: Print": 4}


def test_from_collection_with_another_parallelism_is_invalid() -> None:
    env = env_with(1)
    env.from_collection([1]).set_parallelism(2).print()
    with pytest.raises(InvalidJobError, match=r"only runs with parallelism 1"):
        env.get_job_graph()


def test_from_collection_at_parallelism_one_chains() -> None:
    env = env_with(1)
    env.from_collection([1]).map(lambda x: x).print()
    assert [v.name for v in env.get_job_graph().vertices] == [
        "Source: Collection -> Map -> Sink: Print"]


def test_uids_are_recorded_per_operator() -> None:
    env = env_with(1)
    ds = env.from_sequence(1, 3).uid("src").map(lambda x: x).uid("the-map")
    ds.key_by(lambda x: x).reduce(lambda a, b: a).uid("reduce").print().uid("sink")
    graph = env.get_job_graph()
    vertices = by_name(graph)
    assert list(vertices["Source: Sequence -> Map"].operator_uids) == ["src", "the-map"]
    assert list(vertices["Keyed Reduce -> Sink: Print"].operator_uids) == ["reduce", "sink"]
    chain = cloudpickle.loads(vertices["Source: Sequence -> Map"].chain)
    assert chain[0].uid == "the-map"


def test_missing_uids_are_generated_the_same_for_the_same_program() -> None:
    def build() -> list[str]:
        env = env_with(1)
        env.from_sequence(1, 3).map(lambda x: x).print()
        return list(env.get_job_graph().vertices[0].operator_uids)

    first, second = build(), build()
    assert first == second                         # state matches again after a restart
    assert len(set(first)) == 3 and all(first)


def test_duplicate_uids_are_refused() -> None:
    env = env_with(1)
    env.from_sequence(1, 3).map(lambda x: x).uid("same").map(lambda x: x).uid("same").print()
    with pytest.raises(InvalidJobError, match="'same' is set on more than one operator"):
        env.get_job_graph()


def test_unpicklable_function_names_the_operator() -> None:
    env = env_with(1)
    lock = threading.Lock()

    def guarded(x):
        with lock:
            return x

    env.from_sequence(1, 3).map(lambda x: x).name("Fine").map(guarded).name("Locked").print()
    with pytest.raises(InvalidJobError, match=r"operator 'Locked'.*lock") as info:
        env.get_job_graph()
    assert "Fine" not in str(info.value)


def test_unpicklable_key_selector_is_reported() -> None:
    env = env_with(1)
    lock = threading.Lock()
    env.from_sequence(1, 3).key_by(lambda x: (lock, x)[1]).reduce(max).print()
    with pytest.raises(InvalidJobError, match=r"cannot serialize.*'Keyed Reduce"):
        env.get_job_graph()


def test_no_sink_is_invalid() -> None:
    env = env_with(1)
    env.from_sequence(1, 3).map(lambda x: x)
    with pytest.raises(InvalidJobError, match=r"no sink"):
        env.get_job_graph()
    with pytest.raises(InvalidJobError, match=r"no sink"):
        env.execute_async()


def test_max_parallelism_below_parallelism_is_invalid() -> None:
    env = env_with(4)
    env.from_sequence(1, 3).map(lambda x: x).name("Narrow").set_max_parallelism(2).print()
    with pytest.raises(InvalidJobError, match=r"'Narrow'.*parallelism 4 must not exceed max "
                                              "parallelism 2"):
        env.get_job_graph()


def test_environment_max_parallelism_below_parallelism_is_invalid() -> None:
    env = env_with(8, max_parallelism=4)
    env.from_sequence(1, 3).print()
    with pytest.raises(InvalidJobError, match=r"must not exceed max parallelism 4"):
        env.get_job_graph()


def test_operator_max_parallelism_is_recorded() -> None:
    env = env_with(2)
    env.from_sequence(1, 3).key_by(lambda x: x).reduce(max).set_max_parallelism(16).print()
    vertices = by_name(env.get_job_graph())
    assert vertices["Source: Sequence"].max_parallelism == 128
    assert vertices["Keyed Reduce -> Sink: Print"].max_parallelism == 16


def test_parallelism_must_be_positive() -> None:
    env = env_with(1)
    with pytest.raises(ValueError, match=r"at least 1"):
        env.from_sequence(1, 3).set_parallelism(0)
    with pytest.raises(ValueError, match=r"at least 1"):
        env.set_parallelism(0)


def test_keyed_aggregations_by_column_are_vectorised() -> None:
    env = env_with(1)
    env.from_collection([{"k": "a", "v": 1}]).key_by("k").sum("v").print()
    env.from_collection([("a", 1)]).key_by(0).sum(1).print()
    graph = env.get_job_graph()
    chains = [cloudpickle.loads(v.chain) for v in graph.vertices if v.inputs]
    kinds = sorted(type(chain[0]).__name__ for chain in chains)
    assert kinds == ["FieldAggregateOperator", "VectorizedAggregateOperator"]


def test_collect_sink_is_flagged() -> None:
    env = env_with(1)
    env.from_sequence(1, 3).print()
    assert not env.get_job_graph().has_collect_sink


def test_build_job_graph_carries_ids_and_config() -> None:
    env = env_with(1)
    sink = env.from_sequence(1, 3).print()
    graph = build_job_graph([sink._t], job_id="ab" * 16, job_name="j", default_parallelism=1,
                            default_max_parallelism=8, config={"pipeline.batch-size": "7"})
    assert graph.job_id == "ab" * 16
    assert dict(graph.config) == {"pipeline.batch-size": "7"}
    assert graph.vertices[0].max_parallelism == 8


def test_operators_fail_early_on_non_callables() -> None:
    with pytest.raises(TypeError, match=r"callable or an object with a 'map' method"):
        MapOperator("Map", 42)
    env = env_with(1)
    with pytest.raises(TypeError, match=r"key_by expects"):
        env.from_sequence(1, 3).key_by(3.5)


def test_partitioner_constants_are_distinct() -> None:
    assert len({FORWARD, REBALANCE, HASH, BROADCAST}) == 4
