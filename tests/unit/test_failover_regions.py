"""Pipelined regions and failover strategies, on JobGraph protos built by hand: region
shapes per topology and runtime mode, the region restart rule, "full", and the option."""

from __future__ import annotations

import pytest

from weir.core.errors import ConfigError, InternalError, InvalidJobError
from weir.jobmaster import options as jm_options
from weir.jobmaster.failover import (
    ApproximateFailoverStrategy,
    RegionTopology,
    RestartAllFailoverStrategy,
    RestartPipelinedRegionFailoverStrategy,
    TaskId,
    create_failover_strategy,
    pipelined_regions,
)
from weir.proto import common_pb2, jobgraph_pb2

FORWARD, HASH, REBALANCE, BROADCAST = (common_pb2.FORWARD, common_pb2.HASH,
                                       common_pb2.REBALANCE, common_pb2.BROADCAST)


def vertex(vertex_id: int, parallelism: int,
           *inputs: tuple[int, int]) -> jobgraph_pb2.JobVertex:
    """A vertex reading (source vertex, partitioner) edges."""
    return jobgraph_pb2.JobVertex(
        id=vertex_id, parallelism=parallelism,
        inputs=[jobgraph_pb2.JobEdge(source_vertex=s, partitioner=p) for s, p in inputs])


def job(*vertices: jobgraph_pb2.JobVertex) -> jobgraph_pb2.JobGraph:
    return jobgraph_pb2.JobGraph(vertices=list(vertices))


def tasks(vertex_id: int, parallelism: int) -> set[TaskId]:
    return {(vertex_id, i) for i in range(parallelism)}


def shapes(graph: jobgraph_pb2.JobGraph, batch: bool) -> list[set[TaskId]]:
    return [set(region.tasks) for region in pipelined_regions(graph, batch)]


def region_restart(graph: jobgraph_pb2.JobGraph, batch: bool, failed: TaskId,
                   **kwargs: object) -> set[TaskId]:
    strategy = create_failover_strategy("region", graph, batch)
    return strategy.tasks_to_restart(failed, **kwargs)  # type: ignore[arg-type]


# -- region shapes ------------------------------------------------------------------------


@pytest.mark.parametrize("partitioner", [HASH, REBALANCE, BROADCAST])
def test_streaming_all_to_all_is_one_region(partitioner: int) -> None:
    graph = job(vertex(1, 2), vertex(2, 3, (1, partitioner)))
    assert shapes(graph, batch=False) == [tasks(1, 2) | tasks(2, 3)]


def test_streaming_all_to_all_failure_restarts_every_task_even_finished_ones() -> None:
    # A finished bounded source subtask is in the failed region and restarts with it.
    graph = job(vertex(1, 2), vertex(2, 3, (1, HASH)))
    assert region_restart(graph, False, (2, 2), finished=[(1, 0)]) == tasks(1, 2) | tasks(2, 3)


def test_forward_pipeline_splits_per_subtask_index() -> None:
    graph = job(vertex(1, 3), vertex(2, 3, (1, FORWARD)), vertex(3, 3, (2, FORWARD)))
    assert shapes(graph, batch=False) == [{(1, i), (2, i), (3, i)} for i in range(3)]
    assert region_restart(graph, False, (2, 1)) == {(1, 1), (2, 1), (3, 1)}
    topology = RegionTopology(graph, batch=False)
    for region in topology.regions:
        assert topology.producer_regions(region) == ()
        assert topology.consumer_regions(region) == ()


def test_independent_pipelines_are_separate_and_fail_separately() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, HASH)),      # pipeline one: all-to-all
                vertex(3, 1), vertex(4, 1, (3, FORWARD)))   # pipeline two
    assert shapes(graph, batch=False) == [tasks(1, 2) | tasks(2, 2), {(3, 0), (4, 0)}]
    assert region_restart(graph, False, (4, 0)) == {(3, 0), (4, 0)}
    assert region_restart(graph, False, (1, 1)) == tasks(1, 2) | tasks(2, 2)


def test_forward_then_hash_merges_everything_in_streaming() -> None:
    # FORWARD alone would split per index; the HASH edge joins every B and C subtask, and
    # through the FORWARD edges every A subtask too.
    graph = job(vertex(1, 2), vertex(2, 2, (1, FORWARD)), vertex(3, 3, (2, HASH)))
    assert shapes(graph, batch=False) == [tasks(1, 2) | tasks(2, 2) | tasks(3, 3)]


def test_forward_branch_stays_split_beside_a_hash_branch() -> None:
    # Source 1 feeds 2 by FORWARD; an unrelated source 3 feeds 4 by HASH.
    graph = job(vertex(1, 2), vertex(2, 2, (1, FORWARD)), vertex(3, 2), vertex(4, 1, (3, HASH)))
    assert shapes(graph, batch=False) == [
        {(1, 0), (2, 0)}, {(1, 1), (2, 1)}, tasks(3, 2) | tasks(4, 1)]


def test_batch_has_one_region_per_subtask_with_subtask_dependencies() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, FORWARD)), vertex(3, 3, (2, HASH)))
    topology = RegionTopology(graph, batch=True)
    assert [set(r.tasks) for r in topology.regions] == [
        {t} for t in sorted(tasks(1, 2) | tasks(2, 2) | tasks(3, 3))]

    def producers(task: TaskId) -> list[set[TaskId]]:
        return [set(r.tasks) for r in topology.producer_regions(topology.region_of(task))]

    def consumers(task: TaskId) -> list[set[TaskId]]:
        return [set(r.tasks) for r in topology.consumer_regions(topology.region_of(task))]

    assert producers((2, 1)) == [{(1, 1)}]                  # FORWARD: i <- i
    assert producers((3, 2)) == [{(2, 0)}, {(2, 1)}]        # HASH: every producer subtask
    assert producers((1, 0)) == []
    assert consumers((1, 1)) == [{(2, 1)}]
    assert consumers((2, 0)) == [{(3, 0)}, {(3, 1)}, {(3, 2)}]
    assert consumers((3, 0)) == []


# -- the region rule in BATCH -------------------------------------------------------------


def test_batch_consumer_failure_with_available_producers_restarts_only_itself() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, HASH)))
    assert region_restart(graph, True, (2, 0), finished=tasks(1, 2)) == {(2, 0)}


def test_batch_lost_producer_restarts_its_region_and_everything_it_feeds() -> None:
    # A -HASH-> B -FORWARD-> C, all blocking. A and B1 finished; B0 fails because A0's
    # partition was lost with its TaskExecutor. A0 runs again, so both B subtasks read new
    # input (B1 although it finished), and so do both C subtasks. A1's output is intact.
    graph = job(vertex(1, 2), vertex(2, 2, (1, HASH)), vertex(3, 2, (2, FORWARD)))
    restarted = region_restart(graph, True, (2, 0), lost_producers=[(1, 0)],
                               finished=[(1, 0), (1, 1), (2, 1)])
    assert restarted == {(1, 0)} | tasks(2, 2) | tasks(3, 2)


def test_batch_lost_producers_are_followed_upstream_recursively() -> None:
    graph = job(vertex(1, 1), vertex(2, 1, (1, FORWARD)), vertex(3, 1, (2, FORWARD)))
    assert region_restart(graph, True, (3, 0), lost_producers=[(2, 0)]) == {(2, 0), (3, 0)}
    assert region_restart(graph, True, (3, 0),
                          lost_producers=[(1, 0), (2, 0)]) == {(1, 0), (2, 0), (3, 0)}


def test_batch_lost_partition_that_no_restarting_region_reads_is_left_alone() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, FORWARD)))
    assert region_restart(graph, True, (2, 0), lost_producers=[(1, 1)]) == {(2, 0)}


def test_batch_producer_failure_restarts_its_consumers() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, REBALANCE)))
    assert region_restart(graph, True, (1, 1)) == {(1, 1)} | tasks(2, 2)


def test_regions_to_restart_are_in_region_order() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, HASH)))
    strategy = RestartPipelinedRegionFailoverStrategy(RegionTopology(graph, batch=True))
    regions = strategy.regions_to_restart((2, 1), lost_producers=[(1, 1)])
    assert [set(r.tasks) for r in regions] == [{(1, 1)}, {(2, 0)}, {(2, 1)}]
    assert [r.index for r in regions] == sorted(r.index for r in regions)


# -- full, the factory and the option -------------------------------------------------------


@pytest.mark.parametrize("batch", [False, True])
def test_full_restarts_every_task(batch: bool) -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, FORWARD)), vertex(3, 1), vertex(4, 1, (3, HASH)))
    strategy = create_failover_strategy("full", graph, batch)
    assert isinstance(strategy, RestartAllFailoverStrategy)
    every = tasks(1, 2) | tasks(2, 2) | tasks(3, 1) | tasks(4, 1)
    assert strategy.tasks_to_restart((4, 0), finished=[(3, 0)]) == every


def approximate(graph: jobgraph_pb2.JobGraph, failed: TaskId, **kwargs: object) -> set[TaskId]:
    strategy = create_failover_strategy("approximate", graph, False)
    assert isinstance(strategy, ApproximateFailoverStrategy)
    return strategy.tasks_to_restart(failed, **kwargs)  # type: ignore[arg-type]


def test_approximate_restarts_a_sink_side_task_alone() -> None:
    graph = job(vertex(1, 2), vertex(2, 3, (1, HASH)))
    assert approximate(graph, (2, 2)) == {(2, 2)}
    # A TaskExecutor loss that took only this task (its producers still run) is the same.
    assert approximate(graph, (2, 2), lost_producers=[(2, 2)]) == {(2, 2)}


def test_approximate_falls_back_to_regions_for_a_task_others_read() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, HASH)), vertex(3, 2, (2, FORWARD)))
    assert approximate(graph, (2, 0)) == region_restart(graph, False, (2, 0))
    assert approximate(graph, (1, 1)) == tasks(1, 2) | tasks(2, 2) | tasks(3, 2)
    assert approximate(graph, (3, 1)) == {(3, 1)}


def test_approximate_falls_back_to_regions_when_an_input_is_lost() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, HASH)))
    assert approximate(graph, (2, 0), lost_producers=[(1, 1)]) == tasks(1, 2) | tasks(2, 2)


def test_approximate_in_batch_restarts_regions() -> None:
    graph = job(vertex(1, 2), vertex(2, 2, (1, FORWARD)))
    strategy = create_failover_strategy("approximate", graph, True)
    assert isinstance(strategy, RestartPipelinedRegionFailoverStrategy)


def test_unknown_strategy_name_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        create_failover_strategy("restart-everything", job(vertex(1, 1)), False)
    message = str(caught.value)
    assert "\n" not in message
    assert "jobmanager.execution.failover-strategy" in message
    assert "region, full, approximate" in message


def test_option_defaults_to_region_and_validates() -> None:
    assert jm_options.FAILOVER_STRATEGY.default_value() == "region"
    assert jm_options.FAILOVER_STRATEGY.parse("Full") == "full"
    with pytest.raises(ConfigError):
        jm_options.FAILOVER_STRATEGY.parse("individual")


def test_a_task_outside_the_job_is_an_internal_error() -> None:
    graph = job(vertex(1, 1))
    for name in ("region", "full"):
        with pytest.raises(InternalError, match=r"\(7, 0\)"):
            create_failover_strategy(name, graph, False).tasks_to_restart((7, 0))


def test_forward_with_unequal_parallelism_is_refused() -> None:
    with pytest.raises(InvalidJobError, match="FORWARD"):
        pipelined_regions(job(vertex(1, 2), vertex(2, 3, (1, FORWARD))), False)


# -- determinism ----------------------------------------------------------------------------


def test_regions_do_not_depend_on_vertex_or_edge_order() -> None:
    a, b, c = vertex(1, 2), vertex(2, 2, (1, FORWARD)), vertex(3, 2)
    d = vertex(4, 2, (3, FORWARD), (2, FORWARD))
    d_swapped = vertex(4, 2, (2, FORWARD), (3, FORWARD))
    for batch in (False, True):
        first = pipelined_regions(job(a, b, c, d), batch)
        second = pipelined_regions(job(d_swapped, c, b, a), batch)
        assert first == second == pipelined_regions(job(a, b, c, d), batch)
        assert [min(r.tasks) for r in first] == sorted(min(r.tasks) for r in first)
        assert [r.index for r in first] == list(range(len(first)))
    # Two inputs by FORWARD join both sources' subtask i with 2_i and 4_i.
    assert shapes(job(a, b, c, d), batch=False) == [
        {(1, i), (2, i), (3, i), (4, i)} for i in range(2)]
