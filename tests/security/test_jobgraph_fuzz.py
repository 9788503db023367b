"""Fuzzed JobGraphs: the validator only ever answers with its own error, and a JobMaster
daemon answers every raw submission with a status, keeps serving and leaks no slot."""

from __future__ import annotations

import secrets
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.cluster import LocalCluster, poll, write_job
from weir import StreamExecutionEnvironment
from weir.core.rpc import create_channel
from weir.jobmaster.jobgraph_validation import JobGraphValidationError, validate_job_graph
from weir.proto import dispatcher_pb2, dispatcher_pb2_grpc, jobgraph_pb2

INT32 = (-(2**31), 2**31 - 1)
CONFIG_KEYS = ["execution.checkpointing.interval", "parallelism.default",
               "restart-strategy.type", "execution.runtime-mode", "slot.request.timeout",
               "state.checkpoints.num-retained", "no.such.key"]


def program_graph() -> jobgraph_pb2.JobGraph:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    numbers = env.from_collection(list(range(10)))
    numbers.map(lambda n: n + 1).key_by(lambda n: n % 3).map(lambda n: n * 2).print()
    return env.get_job_graph("fuzzed")


BASE = program_graph()
BASE_BYTES = BASE.SerializeToString()
CHAINS = [v.chain for v in BASE.vertices]


def small_ints() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(-3, 5), st.sampled_from([*INT32, 0, 128, 32768, 32769]),
                     st.integers(*INT32))


def blobs() -> st.SearchStrategy[bytes]:
    return st.one_of(st.sampled_from([b"", cloudpickle.dumps([]), *CHAINS]),
                     st.binary(max_size=64),
                     st.sampled_from(CHAINS).flatmap(
                         lambda c: st.integers(0, len(c)).map(lambda n: c[:n])))


@st.composite
def mutation(draw: st.DrawFn) -> tuple[Any, ...]:
    kind = draw(st.sampled_from(["vertex-int", "vertex-blob", "vertex-text", "uids", "edge",
                                 "add-edge", "drop-edge", "drop-vertex", "copy-vertex",
                                 "config", "job-id"]))
    return (kind, draw(st.integers(0, 5)), draw(st.integers(0, 3)),
            draw(small_ints()), draw(blobs()), draw(st.text(max_size=12)),
            draw(st.sampled_from(["id", "parallelism", "max_parallelism"])),
            draw(st.sampled_from(["chain", "source"])),
            draw(st.sampled_from(["source_vertex", "partitioner", "input_index", "key"])),
            draw(st.sampled_from(CONFIG_KEYS)))


def apply(graph: jobgraph_pb2.JobGraph, m: tuple[Any, ...]) -> None:
    kind, vi, ei, number, blob, text, int_field, blob_field, edge_field, key = m
    vertices = graph.vertices
    if kind == "job-id":
        graph.job_id = text
        return
    if kind == "config":
        graph.config[key] = text if number % 2 else str(number)
        return
    if not vertices:
        return
    vertex = vertices[vi % len(vertices)]
    if kind == "vertex-int":
        setattr(vertex, int_field, number)
    elif kind == "vertex-blob":
        setattr(vertex, blob_field, blob)
    elif kind == "vertex-text":
        vertex.name = text
    elif kind == "uids":
        target = vertex.operator_uids if number % 2 else vertex.operator_names
        if number % 3 == 0 and len(target):
            del target[-1]
        else:
            target.append(text)
    elif kind == "add-edge":
        vertex.inputs.add(source_vertex=number if number % 2 else vertices[ei % len(vertices)].id,
                          partitioner=ei, key_selector=blob, input_index=number % 3)
    elif kind in ("edge", "drop-edge") and vertex.inputs:
        edge = vertex.inputs[ei % len(vertex.inputs)]
        if kind == "drop-edge":
            vertex.inputs.remove(edge)
        elif edge_field == "key":
            edge.key_selector = blob
        else:
            setattr(edge, edge_field, number)
    elif kind == "drop-vertex":
        del vertices[vi % len(vertices)]
    elif kind == "copy-vertex":
        vertices.add().CopyFrom(vertex)


@st.composite
def fuzzed_graphs(draw: st.DrawFn) -> jobgraph_pb2.JobGraph:
    """A program's graph with a fresh job id, then mutated field by field or byte by byte."""
    graph = jobgraph_pb2.JobGraph()
    graph.CopyFrom(BASE)
    graph.job_id = secrets.token_hex(16)
    if draw(st.booleans()):
        for m in draw(st.lists(mutation(), min_size=1, max_size=4)):
            apply(graph, m)
        return graph
    data = bytearray(graph.SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(data) - 1))
        if draw(st.booleans()):
            data[position] = draw(st.integers(0, 255))
        else:
            del data[position:position + draw(st.integers(1, 16))]
    try:
        return jobgraph_pb2.JobGraph.FromString(bytes(data))
    except DecodeError:
        return graph


def check(graph: jobgraph_pb2.JobGraph) -> bool:
    """Validate ``graph``; True if it passed. Any exception but the validator's escapes."""
    try:
        validate_job_graph(graph)
    except JobGraphValidationError as err:
        assert "\n" not in str(err) and str(err)
        return False
    return True


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(fuzzed_graphs())
def test_the_validator_raises_only_its_own_error_on_mutated_graphs(graph):
    check(graph)


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=2048))
def test_the_validator_raises_only_its_own_error_on_random_bytes(data: bytes):
    try:
        graph = jobgraph_pb2.JobGraph.FromString(data)
    except DecodeError:
        return
    check(graph)


# -- against a JobMaster daemon -------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # Short timeouts: an accepted graph that needs more slots than exist fails soon, and a
    # task that does not confirm its cancellation gives its slot back soon.
    cluster = LocalCluster(tmp_path_factory.mktemp("fuzz") / "cluster")
    cluster.start(1, 2, "slot.request.timeout=5 s", "task.cancellation.timeout=5 s")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def stub(cluster: LocalCluster) -> Iterator[dispatcher_pb2_grpc.DispatcherStub]:
    channel = create_channel(cluster.address)
    yield dispatcher_pb2_grpc.DispatcherStub(channel)
    channel.close()


def free_slots(stub: dispatcher_pb2_grpc.DispatcherStub) -> tuple[int, int]:
    overview = stub.GetClusterOverview(dispatcher_pb2.ClusterOverviewRequest(), timeout=10)
    return overview.slots_free, overview.slots_total


def test_a_jobmaster_answers_every_fuzzed_submission_and_leaks_no_slot(cluster, stub):
    outcomes: dict[str, int] = {}

    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow,
                                     HealthCheck.function_scoped_fixture])
    @given(fuzzed_graphs())
    def submit(graph: jobgraph_pb2.JobGraph) -> None:
        try:
            response = stub.SubmitJob(dispatcher_pb2.SubmitJobRequest(job_graph=graph),
                                      timeout=30)
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, \
                f"{err.code()}: {err.details()}"
            assert "\n" not in err.details()
            outcomes["refused"] = outcomes.get("refused", 0) + 1
        else:
            outcomes["accepted"] = outcomes.get("accepted", 0) + 1
            stub.CancelJob(dispatcher_pb2.JobIdRequest(job_id=response.job_id), timeout=10)
        _, total = poll(lambda: (s := free_slots(stub))[0] == s[1] and s, timeout=30,
                        what="every slot to be free again")
        assert total == 2

    submit()
    assert outcomes.get("refused", 0) > 0
    listing = cluster.weir("list")
    assert listing.returncode == 0, listing.stderr
    assert free_slots(stub) == (2, 2)


def test_weir_run_of_a_malformed_graph_prints_one_line(cluster, tmp_path: Path):
    # The client builds only well-formed graphs: break one after it is built, as a client
    # of another version (or a hand-made one) might send it.
    job = write_job(tmp_path, """
        import weir.datastream.stream_execution_environment
        from weir import StreamExecutionEnvironment
        from weir.proto import common_pb2

        build = weir.datastream.stream_execution_environment.build_job_graph

        def self_loop(*args, **kwargs):
            graph = build(*args, **kwargs)
            last = graph.vertices[-1]
            last.inputs.add(source_vertex=last.id, partitioner=common_pb2.REBALANCE)
            return graph

        weir.datastream.stream_execution_environment.build_job_graph = self_loop
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1, 2, 3]).rebalance().map(lambda n: n * 2).print()
        env.execute("looped")
    """)
    ran = cluster.weir("run", str(job))
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert "self-loop" in lines[0] and "Traceback" not in ran.stderr


# -- names ----------------------------------------------------------------------------------

def test_a_huge_job_or_operator_name_is_refused_in_one_line():
    graph = jobgraph_pb2.JobGraph()
    graph.CopyFrom(BASE)
    graph.name = "n" * 10_000_000
    with pytest.raises(JobGraphValidationError, match=r"the job name has 10,000,000 char"):
        validate_job_graph(graph)
    graph.name = "fine"
    graph.vertices[0].operator_names[0] = "o" * 5000
    with pytest.raises(JobGraphValidationError, match=r"operator name .* has 5,000 char") as err:
        validate_job_graph(graph)
    assert len(str(err.value)) < 500


def test_a_jobmaster_refuses_a_10_mb_job_name_and_scrapes_stay_small(cluster, stub):
    graph = jobgraph_pb2.JobGraph()
    graph.CopyFrom(BASE)
    graph.name = "n" * 10_000_000
    with pytest.raises(grpc.RpcError) as refused:
        stub.SubmitJob(dispatcher_pb2.SubmitJobRequest(job_graph=graph), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "job name has 10,000,000 characters" in (refused.value.details() or "")
    # The longest accepted name is cut in every label the scrapes repeat.
    graph.name = "a" * 1024
    graph.job_id = secrets.token_hex(16)
    response = stub.SubmitJob(dispatcher_pb2.SubmitJobRequest(job_graph=graph), timeout=30)
    try:
        url = cluster.status()["jobmaster"]["metrics_url"]
        def scraped() -> str | None:
            with urllib.request.urlopen(url, timeout=10) as answer:
                text = answer.read().decode()
            return text if response.job_id in text else None

        text = poll(scraped, timeout=30, what="the job's metrics")
        assert "a" * 80 + '"' in text and "a" * 81 not in text
    finally:
        stub.CancelJob(dispatcher_pb2.JobIdRequest(job_id=response.job_id), timeout=10)
