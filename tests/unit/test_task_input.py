"""A task's input without a network: the task-wide channel numbering over several gates,
which head-operator input a channel feeds, polling order, and block/resume/prioritise by
task-wide channel reaching the right gate and channel."""

from __future__ import annotations

from collections import deque

import pytest

from weir.core.records import Elements
from weir.proto import common_pb2, jobgraph_pb2
from weir.shuffle.api import BufferOrEvent, Event, InputGate, ShuffleEnvironment, TaskShuffleContext
from weir.taskexecutor.task_input import ChannelNumbering, TaskInput


class FakeGate(InputGate):
    """An input gate fed by the test; it records what the task asked of it."""

    def __init__(self, channels: int, fail_request: bool = False) -> None:
        self.channels = channels
        self.queue: deque[BufferOrEvent] = deque()
        self.finished = False
        self.blocked: set[int] = set()
        self.prioritized: list[Event] = []
        self.requested = False
        self.closed = False
        self.maintained = 0
        self.retry_at: float | None = None
        self._fail_request = fail_request

    def request_partitions(self) -> None:
        if self._fail_request:
            raise ConnectionRefusedError("producer unreachable (injected)")
        self.requested = True

    def poll_next(self) -> BufferOrEvent | None:
        return self.queue.popleft() if self.queue else None

    def block_consumption(self, channel: int) -> None:
        assert 0 <= channel < self.channels
        self.blocked.add(channel)

    def resume_consumption(self, channel: int) -> None:
        assert 0 <= channel < self.channels
        self.blocked.discard(channel)

    def prioritize_event(self, event: Event) -> None:
        self.prioritized.append(event)

    def is_finished(self) -> bool:
        return self.finished

    def maintain(self) -> None:
        self.maintained += 1

    def next_retry(self) -> float | None:
        return self.retry_at

    def close(self) -> None:
        self.closed = True


def deployment(channels: int, input_index: int = 0,
               partitioner: int = common_pb2.HASH) -> jobgraph_pb2.InputGateDeployment:
    return jobgraph_pb2.InputGateDeployment(
        input_index=input_index, partitioner=partitioner,
        channels=[jobgraph_pb2.InputChannelDeployment() for _ in range(channels)])


def data(channel: int, value: int = 0) -> BufferOrEvent:
    return BufferOrEvent(channel, elements=[Elements.from_records([value])], size=8)


def two_input() -> tuple[TaskInput, FakeGate, FakeGate]:
    """A two-input task: gate 0 (2 channels, forward) feeds input 0, gate 1 (3 channels,
    hash) feeds input 1."""
    first, second = FakeGate(2), FakeGate(3)
    task_input = TaskInput([first, second], [deployment(2, 0, common_pb2.FORWARD),
                                             deployment(3, 1, common_pb2.HASH)])
    return task_input, first, second


# -- numbering ---------------------------------------------------------------------------------


def test_channels_are_numbered_gate_after_gate() -> None:
    numbering = ChannelNumbering([2, 3])
    assert numbering.num_channels == 5
    assert [numbering.locate(c) for c in range(5)] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert [numbering.channel(g, c) for g, c in [(0, 1), (1, 0), (1, 2)]] == [1, 2, 4]
    assert list(numbering.channels_of(0)) == [0, 1] and list(numbering.channels_of(1)) == [2, 3, 4]


def test_a_gate_without_channels_owns_no_number() -> None:
    numbering = ChannelNumbering([0, 2, 0, 1])
    assert [numbering.gate_of(c) for c in range(3)] == [1, 1, 3]
    assert list(numbering.channels_of(2)) == []


def test_a_channel_outside_the_numbering_counts_as_the_first_gates() -> None:
    # In-flight data of an old checkpoint may come without its gates' sizes.
    assert ChannelNumbering([]).gate_of(4) == 0
    assert ChannelNumbering([2, 2]).gate_of(9) == 0


def test_each_channel_feeds_its_gates_input_of_the_head_operator() -> None:
    task_input, _, _ = two_input()
    assert task_input.num_channels == 5 and task_input.gate_channels == [2, 3]
    assert [task_input.input_of(c) for c in range(5)] == [0, 0, 1, 1, 1]
    assert TaskInput([], []).input_of(0) == 0


def test_forward_and_broadcast_channels_are_the_aligned_ones() -> None:
    gates = [FakeGate(2), FakeGate(1), FakeGate(2)]
    task_input = TaskInput(gates, [deployment(2, partitioner=common_pb2.HASH),
                                   deployment(1, partitioner=common_pb2.BROADCAST),
                                   deployment(2, partitioner=common_pb2.FORWARD)])
    assert task_input.aligned_channels() == [2, 3, 4]


def test_gates_and_deployments_must_pair_up() -> None:
    with pytest.raises(ValueError, match="2 input gates but 1 deployments"):
        TaskInput([FakeGate(1), FakeGate(1)], [deployment(1)])


# -- polling ----------------------------------------------------------------------------------


def test_poll_numbers_what_a_gate_delivers_task_wide() -> None:
    task_input, _, second = two_input()
    second.queue.append(data(2, 7))
    polled = task_input.poll()
    assert polled is not None
    assert (polled.channel, polled.input_index) == (4, 1)
    assert polled.item.elements is not None and polled.item.elements[0].records() == [7]
    assert task_input.poll() is None and not task_input.is_finished()


def test_poll_takes_from_the_gates_in_order_and_skips_finished_ones() -> None:
    task_input, first, second = two_input()
    first.queue.append(data(1, 1))
    second.queue.append(data(0, 2))
    channels = []
    while (polled := task_input.poll()) is not None:
        channels.append(polled.channel)
    assert channels == [1, 2]
    first.finished = True
    first.queue.append(data(0, 3))             # a finished gate is not polled again
    assert task_input.poll() is None
    second.finished = True
    assert task_input.is_finished()


def test_a_task_without_gates_has_finished_its_input() -> None:
    task_input = TaskInput([], [])
    assert task_input.poll() is None and task_input.is_finished()
    assert task_input.num_channels == 0 and task_input.aligned_channels() == []


# -- what checkpoints do -----------------------------------------------------------------------


def test_block_and_resume_reach_the_gate_of_a_task_wide_channel() -> None:
    task_input, first, second = two_input()
    task_input.block(1)
    task_input.block(3)
    assert (first.blocked, second.blocked) == ({1}, {1})
    task_input.resume([1, 3])
    assert (first.blocked, second.blocked) == (set(), set())


def test_barriers_move_ahead_only_where_they_may_overtake_data() -> None:
    task_input, first, second = two_input()
    barrier = Event("checkpoint-barrier", b"1")
    task_input.prioritize_barrier(barrier)
    assert first.prioritized == [] and second.prioritized == [barrier]


# -- lifecycle --------------------------------------------------------------------------------


class FakeShuffle(ShuffleEnvironment):
    def __init__(self, gates: list[FakeGate]) -> None:
        self.gates = gates

    def start(self) -> str:
        return ""

    def create_result_partition_writer(self, task, deployment):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def create_input_gate(self, task: TaskShuffleContext,
                          deployment: jobgraph_pb2.InputGateDeployment) -> InputGate:
        return self.gates.pop(0)

    def release_partitions_of_job(self, job_id: str) -> None:
        pass

    def close(self) -> None:
        pass


CONTEXT = TaskShuffleContext("job", "task (1/1)", "attempt", lambda: None)


def test_open_creates_every_gate_and_starts_fetching() -> None:
    gates = [FakeGate(1), FakeGate(2)]
    task_input = TaskInput.open(FakeShuffle(list(gates)), CONTEXT, [deployment(1), deployment(2)])
    assert task_input.gates == gates and all(g.requested for g in gates)
    task_input.close()
    assert all(g.closed for g in gates)


def test_open_closes_the_gates_it_created_when_one_fails() -> None:
    good, bad = FakeGate(1), FakeGate(1, fail_request=True)
    with pytest.raises(ConnectionRefusedError, match="injected"):
        TaskInput.open(FakeShuffle([good, bad]), CONTEXT, [deployment(1), deployment(1)])
    assert good.closed and bad.closed


def test_housekeeping_reaches_every_gate_and_the_earliest_retry_counts() -> None:
    task_input, first, second = two_input()
    task_input.maintain()
    assert (first.maintained, second.maintained) == (1, 1)
    assert task_input.next_retry() is None and task_input.seconds_until_retry() is None
    first.retry_at, second.retry_at = 50.0, 20.0
    assert task_input.next_retry() == 20.0
    assert task_input.seconds_until_retry() == 0.001      # overdue: soon, never a busy loop
