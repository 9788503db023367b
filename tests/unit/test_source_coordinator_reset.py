"""The source coordinator's split tracking for region failover: a reader restored from
checkpoint n gets back exactly the splits it was handed after n's snapshot."""

from __future__ import annotations

import cloudpickle

from weir.core.source import Source, SplitEnumerator, StaticSplitEnumerator
from weir.jobmaster.source_coordinator import SourceCoordinator
from weir.proto import jobgraph_pb2

SOURCE = 1


class Splits(Source):
    """One split per item, handed out one per request."""

    def __init__(self, items: list[int]) -> None:
        self.items = items

    def create_enumerator(self, parallelism: int) -> SplitEnumerator:
        return StaticSplitEnumerator(list(self.items))

    def create_reader(self, context):
        raise AssertionError("these tests read no splits")


def coordinator(items: list[int], parallelism: int = 2) -> SourceCoordinator:
    graph = jobgraph_pb2.JobGraph(vertices=[jobgraph_pb2.JobVertex(
        id=SOURCE, parallelism=parallelism, source=cloudpickle.dumps(Splits(items)))])
    return SourceCoordinator(graph)


def take(sources: SourceCoordinator, subtask: int, checkpoint_passed: int = 0) -> list:
    response = sources.request_splits(SOURCE, subtask, checkpoint_passed)
    return [cloudpickle.loads(s) for s in response.splits]


def everything(sources: SourceCoordinator, subtask: int) -> list:
    splits = []
    while (got := take(sources, subtask, 10**6)):
        splits += got
    return splits


def test_a_reset_reader_gets_back_what_it_got_after_the_checkpoint():
    sources = coordinator(list(range(10)))
    before = take(sources, 0)                       # in the reader's state at checkpoint 1
    sources.snapshot(1)
    sources.checkpoint_done(1, completed=True)
    after = take(sources, 0, checkpoint_passed=1)   # not in checkpoint 1
    other = take(sources, 1, checkpoint_passed=1)   # another reader's: never handed back
    assert before and after and other
    sources.reset_subtasks({(SOURCE, 0)}, 1)
    again = everything(sources, 0)
    assert after[0] in again and before[0] not in again and other[0] not in again


def test_a_reader_reset_without_a_checkpoint_gets_back_everything_it_had():
    sources = coordinator(list(range(6)))
    first = take(sources, 0) + take(sources, 0)
    sources.reset_subtasks({(SOURCE, 0)}, 0)
    assert set(first) <= set(everything(sources, 0))


def test_a_completed_checkpoint_forgets_what_it_covers():
    sources = coordinator(list(range(6)))
    old = take(sources, 0)
    sources.snapshot(1)
    sources.checkpoint_done(1, completed=True)
    sources.snapshot(2)
    sources.checkpoint_done(2)                      # aborted: checkpoint 1 still counts
    sources.reset_subtasks({(SOURCE, 0)}, 1)
    assert old[0] not in everything(sources, 0)
