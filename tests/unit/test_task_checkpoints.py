"""The checkpoints of one task, driven without threads or sockets: fake input channels,
writers and task, a manual clock, an upload pool that runs inline and a file storage.

Each test feeds TaskCheckpoints what a task would (trigger, barrier, data, end of a
channel, tick, notification) and checks what reached the inputs, the writers, the
operators and the coordinator: aligned, unaligned, aligned with timeout, forced-aligned
channels, final checkpoints (FLIP-147), stop-with-savepoint with and without drain, aborts,
and barriers that come between two pieces of one buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest

from weir.checkpoint.barrier import CheckpointBarrier
from weir.checkpoint.barrier_handler import BarrierHandler
from weir.checkpoint.channel_state import read_channel_state
from weir.checkpoint.metadata import to_stream_handle
from weir.checkpoint.storage import CheckpointStorageAccess, create_storage
from weir.core.clock import ManualClock
from weir.core.records import Elements
from weir.proto import checkpoint_pb2, common_pb2
from weir.proto.checkpoint_pb2 import CheckpointOptions, CheckpointTaskMetrics, TaskStateSnapshot
from weir.shuffle.api import Event, OvertakenData, ResultPartitionWriter
from weir.state.descriptors import ListStateDescriptor
from weir.state.operator_state import OperatorStateBackend
from weir.state.snapshot import SnapshotLocation
from weir.taskexecutor.checkpointing import (
    SnapshotParticipant,
    SubtaskCheckpointing,
    UploadPool,
    UploadPoolFullError,
)
from weir.taskexecutor.operator import OperatorSnapshot
from weir.taskexecutor.operator_chain import TaskCounters
from weir.taskexecutor.task_checkpoints import OUTPUT_CHECK_S, TaskCheckpoints

ALIGNED = CheckpointOptions()
UNALIGNED = CheckpointOptions(unaligned=True)
TIMEOUT = CheckpointOptions(aligned_timeout_ms=500)
#: The fake operator's state: the id of the checkpoint it was taken for.
TAKEN_AT = ListStateDescriptor("taken-at")


def barrier(n: int, options: CheckpointOptions = ALIGNED, ts: int = 1_000) -> CheckpointBarrier:
    return CheckpointBarrier(n, ts, options)


def batch(*values: int) -> Elements:
    return Elements.from_records(list(values))


# -- reusable fakes ----------------------------------------------------------------------------


class InlineUploadPool(UploadPool):
    """Runs the asynchronous part at once, on the calling thread."""

    def __init__(self, full: bool = False) -> None:
        self.full = full

    def submit(self, fn: Callable[[], None], timeout: float = 10.0) -> Future[None]:
        if self.full:
            msg = "the checkpoint upload pool is full"
            raise UploadPoolFullError(msg)
        future: Future[None] = Future()
        fn()
        future.set_result(None)
        return future

    def shutdown(self) -> None:
        pass


class Responder:
    """The coordinator's side: what the task acknowledged and declined."""

    def __init__(self) -> None:
        self.acks: dict[int, tuple[TaskStateSnapshot, CheckpointTaskMetrics]] = {}
        self.declines: list[tuple[int, int, str]] = []

    def acknowledge_checkpoint(self, job_id: str, attempt_id: str, checkpoint_id: int,
                               state: TaskStateSnapshot, metrics: CheckpointTaskMetrics) -> None:
        self.acks[checkpoint_id] = (state, metrics)

    def decline_checkpoint(self, job_id: str, attempt_id: str, checkpoint_id: int,
                           reason: int, message: str) -> None:
        self.declines.append((checkpoint_id, reason, message))


class FakeWriter(ResultPartitionWriter):
    """One subpartition; ``queued`` is what a priority barrier overtakes."""

    num_subpartitions = 1

    def __init__(self) -> None:
        self.events: list[tuple[Event, bool]] = []
        self.queued: list[Elements] = []
        self.event_queued = False

    def emit(self, subpartition: int, elements: Elements) -> None:
        self.queued.append(elements)

    def flush_all(self) -> None:
        pass

    def is_available(self) -> bool:
        return True

    def oldest_pending_age(self) -> float | None:
        return None

    def broadcast_event(self, event: Event, priority: bool = False) -> list[list[Elements]]:
        self.events.append((event, priority))
        overtaken, self.queued = (self.queued, []) if priority else ([], self.queued)
        return [overtaken]

    def prioritize_event(self, event: Event) -> list[list[Elements]]:
        self.events.append((event, True))
        self.event_queued = False
        overtaken, self.queued = self.queued, []
        return [overtaken]

    def is_event_queued(self, event: Event) -> bool:
        return self.event_queued

    def finish(self) -> None:
        pass

    def fail(self, cause: BaseException) -> None:
        pass

    def release(self) -> None:
        pass


class FakeInputs:
    """The task's input channels: records what checkpoints did to them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def block(self, channel: int) -> None:
        self.calls.append(("block", channel))

    def resume(self, channels: Sequence[int]) -> None:
        self.calls.append(("resume", tuple(channels)))

    def prioritize_barrier(self, event: Event) -> None:
        self.calls.append(("prioritize", CheckpointBarrier.from_event(event).checkpoint_id))


class FakeOperator:
    """A participant whose state is the checkpoint id (or that fails to snapshot)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def snapshot_state(self, checkpoint_id: int, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot:
        if self.fail:
            msg = "snapshot failed (injected)"
            raise ValueError(msg)
        backend = OperatorStateBackend()
        backend.get_list_state(TAKEN_AT).add(checkpoint_id)
        return OperatorSnapshot(operator_state=backend.snapshot())


class FakeTask:
    """The task's side of its checkpoints."""

    def __init__(self) -> None:
        self.data_finished = False
        self.awaiting_splits = False
        self.operator = FakeOperator()
        self.drained = 0
        self.notified: list[tuple[int, bool]] = []
        self.woken = 0
        #: What the task took and has not processed yet: (channel, batch).
        self.pending: list[tuple[int, Elements]] = []

    def snapshot_participants(self) -> dict[str, SnapshotParticipant]:
        return {"op": self.operator}

    def unprocessed(self) -> list[tuple[int, Elements]]:
        return list(self.pending)

    def drain(self) -> None:
        self.drained += 1
        self.data_finished = True

    def notify_operators(self, checkpoint_id: int, complete: bool) -> None:
        self.notified.append((checkpoint_id, complete))

    def wake(self) -> None:
        self.woken += 1


class Harness:
    """A task with ``channels`` input channels (0: a source) and one output."""

    def __init__(self, tmp_path: Path, channels: int = 0, aligned: Sequence[int] = (),
                 at_least_once: bool = False, pool: UploadPool | None = None) -> None:
        self.clock = ManualClock(1_000)
        self.storage = create_storage(str(tmp_path / "checkpoints"))
        self.savepoints = create_storage(str(tmp_path / "savepoints"))
        self.responder = Responder()
        self.writer = FakeWriter()
        self.task = FakeTask()
        self.counters = TaskCounters()
        self.subtask = SubtaskCheckpointing(
            job_id="job", attempt_id="attempt", owner="1-0", writers=[self.writer],
            partitioners=[common_pb2.HASH], storage=lambda: self.storage,
            pool=pool or InlineUploadPool(), responder=self.responder, clock_ms=self.clock,
            savepoint_storage=lambda uri: self.savepoints, gate_channels=[channels])
        self.inputs = FakeInputs() if channels else None
        handler = BarrierHandler(channels, self.clock, at_least_once, aligned) \
            if channels else None
        self.checkpoints = TaskCheckpoints(self.subtask, self.task, self.counters, self.clock,
                                           handler=handler, inputs=self.inputs, name="t (1/1)")

    @property
    def calls(self) -> list[tuple[str, object]]:
        assert self.inputs is not None
        return self.inputs.calls

    def barriers_out(self) -> list[tuple[int, bool]]:
        """(checkpoint id, priority) of every barrier the task emitted."""
        return [(CheckpointBarrier.from_event(e).checkpoint_id, p)
                for e, p in self.writer.events]

    def persisted_inputs(self, checkpoint_id: int) -> dict[int, list[list[int]]]:
        """The acknowledged in-flight input of ``checkpoint_id``, per channel."""
        state, _ = self.responder.acks[checkpoint_id]
        if not state.channel_state.data.uri:
            return {}
        data = self.storage.read(to_stream_handle(state.channel_state.data))
        restored = read_channel_state(data)
        return {channel: [e.records() for e in batches]
                for channel, batches in restored.inputs.items()}

    def persisted_outputs(self, checkpoint_id: int) -> list[list[int]]:
        state, _ = self.responder.acks[checkpoint_id]
        if not state.channel_state.data.uri:
            return []
        restored = read_channel_state(
            self.storage.read(to_stream_handle(state.channel_state.data)))
        return [e.records() for batches in restored.outputs.values() for e in batches]


def snapshot_of(storage: CheckpointStorageAccess, state: TaskStateSnapshot) -> list[int]:
    """The checkpoint ids the operator's acknowledged state was taken at."""
    (operator,) = state.operators
    backend = OperatorStateBackend()
    backend.restore([storage.read(to_stream_handle(operator.operator_state))], 0, 1)
    return list(backend.get_list_state(TAKEN_AT).get())


# -- sources: triggered ------------------------------------------------------------------------


def test_a_source_snapshots_at_its_trigger_and_acknowledges(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.clock.advance(250)
    h.checkpoints.on_trigger(barrier(1, ts=1_000))
    assert h.barriers_out() == [(1, False)]
    state, metrics = h.responder.acks[1]
    assert snapshot_of(h.storage, state) == [1]
    assert metrics.start_delay_ms == 250 and not metrics.unaligned
    assert h.counters.checkpoint_start_delay_ms == 250
    assert h.checkpoints.last_checkpoint_id == 1
    h.checkpoints.on_notify(1, complete=True)
    assert h.task.notified == [(1, True)] and not h.checkpoints.final_checkpoint_done


def test_triggers_wait_for_the_splits_a_source_asked_for(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.task.awaiting_splits = True
    h.checkpoints.on_trigger(barrier(1))
    h.checkpoints.on_trigger(barrier(2))
    assert h.writer.events == [] and h.responder.acks == {}
    h.task.awaiting_splits = False
    h.checkpoints.on_splits_arrived()
    assert h.barriers_out() == [(1, False), (2, False)] and set(h.responder.acks) == {1, 2}
    h.checkpoints.on_splits_arrived()                 # nothing deferred any more
    assert len(h.writer.events) == 2


def test_a_failing_snapshot_declines_and_the_task_goes_on(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.task.operator.fail = True
    h.checkpoints.on_trigger(barrier(1))
    assert [(n, reason) for n, reason, _ in h.responder.declines] == [
        (1, checkpoint_pb2.TASK_CHECKPOINT_FAILURE)]
    assert "injected" in h.responder.declines[0][2] and h.writer.events == []
    h.task.operator.fail = False
    h.checkpoints.on_trigger(barrier(2))
    assert set(h.responder.acks) == {2}


def test_a_full_upload_pool_declines_the_checkpoint(tmp_path: Path) -> None:
    h = Harness(tmp_path, pool=InlineUploadPool(full=True))
    h.checkpoints.on_trigger(barrier(1))
    assert h.barriers_out() == [(1, False)] and h.responder.acks == {}
    assert [(n, reason) for n, reason, _ in h.responder.declines] == [
        (1, checkpoint_pb2.CHECKPOINT_ASYNC_EXCEPTION)]


# -- aligned -----------------------------------------------------------------------------------


def test_aligned_blocks_each_channel_until_every_barrier_arrived(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=2)
    h.checkpoints.on_barrier(0, barrier(1))
    assert h.calls == [("block", 0)] and h.writer.events == []
    h.clock.advance(40)
    h.checkpoints.on_data(1, [batch(1, 2)], nbytes=300)   # still flowing: not persisted
    h.checkpoints.on_barrier(1, barrier(1))
    assert h.calls == [("block", 0), ("resume", (0,))]
    assert h.barriers_out() == [(1, False)]
    _, metrics = h.responder.acks[1]
    assert (metrics.alignment_duration_ms, metrics.processed_bytes) == (40, 300)
    assert h.counters.checkpoint_alignment_ms == 40
    assert h.persisted_inputs(1) == {}


def test_at_least_once_never_blocks(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=2, at_least_once=True)
    h.checkpoints.on_barrier(0, barrier(1))
    h.checkpoints.on_barrier(1, barrier(1))
    assert h.calls == [] and set(h.responder.acks) == {1}


def test_an_ended_channel_counts_as_aligned(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=2)
    h.checkpoints.on_barrier(0, barrier(1))
    h.checkpoints.on_end_of_partition(1)
    assert h.calls == [("block", 0), ("resume", (0,))] and set(h.responder.acks) == {1}


def test_a_newer_barrier_declines_the_alignment_of_an_older_one(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=2)
    h.checkpoints.on_barrier(0, barrier(1))
    h.checkpoints.on_barrier(1, barrier(2))
    assert h.calls == [("block", 0), ("resume", (0,)), ("block", 1)]
    assert [(n, reason) for n, reason, _ in h.responder.declines] == [
        (1, checkpoint_pb2.CHECKPOINT_DECLINED_SUBSUMED)]


def test_an_aborted_alignment_resumes_and_ignores_its_late_barriers(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=2)
    h.checkpoints.on_barrier(0, barrier(1))
    h.checkpoints.on_notify(1, complete=False)
    assert h.calls == [("block", 0), ("resume", (0,))]
    assert h.task.notified == [(1, False)]
    h.checkpoints.on_barrier(1, barrier(1))
    assert h.writer.events == [] and h.responder.acks == {} and len(h.calls) == 2


# -- unaligned ---------------------------------------------------------------------------------


def test_unaligned_persists_what_came_before_each_channels_barrier(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=2)
    h.writer.emit(0, batch(90))                       # queued output: overtaken
    overtaken = OvertakenData(expected=2, batches=[batch(10)])
    h.checkpoints.on_barrier(0, barrier(1, UNALIGNED), priority=True, overtaken=overtaken)
    assert h.barriers_out() == [(1, True)] and h.calls == []
    h.checkpoints.on_data(1, [batch(20), batch(21)], nbytes=64)
    h.checkpoints.on_tick()                           # channel 0 still captures
    assert h.checkpoints.seconds_until_due() == OUTPUT_CHECK_S
    overtaken.add(batch(11))
    h.checkpoints.on_tick()
    h.checkpoints.on_data(0, [batch(12)], nbytes=32)  # after its barrier: not persisted
    assert h.responder.acks == {}
    h.checkpoints.on_barrier(1, barrier(1, UNALIGNED), priority=True)
    assert h.persisted_inputs(1) == {0: [[10], [11]], 1: [[20], [21]]}
    assert h.persisted_outputs(1) == [[90]]
    assert h.responder.acks[1][1].unaligned
    assert h.checkpoints.seconds_until_due() is None


def test_a_barrier_between_two_pieces_of_one_buffer(tmp_path: Path) -> None:
    """The task may look for priority events between records: a barrier then comes
    while a buffer is half processed. What the task took from the barrier's channel and
    did not process yet is in-flight data; so is, on another channel, every piece
    processed after the snapshot — and none processed before it."""
    h = Harness(tmp_path, channels=2)
    h.checkpoints.on_data(1, [batch(1)], nbytes=10)   # first half of a buffer of channel 1
    h.checkpoints.on_data(0, [batch(5)], nbytes=10)   # first half of a buffer of channel 0
    h.checkpoints.on_barrier(0, barrier(1, UNALIGNED), priority=True,
                             unprocessed=[batch(6)])  # the rest of channel 0's buffer
    h.checkpoints.on_data(1, [batch(2)], nbytes=10)   # second half of channel 1's buffer
    h.checkpoints.on_data(0, [batch(6)], nbytes=10)   # channel 0's rest, processed now
    h.checkpoints.on_barrier(1, barrier(1, UNALIGNED), priority=True)
    assert h.persisted_inputs(1) == {0: [[6]], 1: [[2]]}


def test_the_rest_of_a_buffer_comes_before_what_the_barrier_overtook(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=1)
    overtaken = OvertakenData(expected=1)
    h.checkpoints.on_barrier(0, barrier(1, UNALIGNED), priority=True, overtaken=overtaken,
                             unprocessed=[batch(1)])
    assert h.responder.acks == {}                     # the channel still captures
    overtaken.add(batch(2))
    h.checkpoints.on_tick()
    assert h.persisted_inputs(1) == {0: [[1], [2]]}


def test_forced_aligned_channels_hold_the_snapshot_of_an_unaligned_checkpoint(
        tmp_path: Path) -> None:
    # Channel 0 is a forward edge: its data is never persisted, so the snapshot waits for
    # its barrier; channel 1, whose barrier came first, is blocked meanwhile.
    h = Harness(tmp_path, channels=2, aligned=[0])
    overtaken = OvertakenData(expected=1, batches=[batch(7)])
    h.checkpoints.on_barrier(1, barrier(1, UNALIGNED), priority=True, overtaken=overtaken)
    assert h.calls == [("block", 1)] and h.writer.events == []
    h.checkpoints.on_data(0, [batch(3)], nbytes=8)
    h.checkpoints.on_tick()                           # nothing recorded before the snapshot
    h.checkpoints.on_barrier(0, barrier(1, UNALIGNED))
    assert h.barriers_out() == [(1, True)] and h.calls[-1] == ("resume", (1,))
    assert h.responder.acks == {}                     # the capture is persisted next tick
    h.checkpoints.on_tick()
    assert h.persisted_inputs(1) == {1: [[7]]}


# -- aligned with timeout ----------------------------------------------------------------------


def test_an_alignment_that_times_out_continues_unaligned(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=2)
    h.checkpoints.on_barrier(0, barrier(1, TIMEOUT))
    assert h.calls == [("block", 0)]
    assert h.checkpoints.seconds_until_due() == 0.5
    h.clock.advance(200)
    h.checkpoints.on_tick()
    assert h.writer.events == [] and h.checkpoints.seconds_until_due() == 0.3
    h.clock.advance(300)
    h.checkpoints.on_tick()
    assert h.barriers_out() == [(1, True)]
    assert h.calls[1:] == [("resume", (0,)), ("prioritize", 1)]
    h.checkpoints.on_data(1, [batch(4)], nbytes=8)    # before channel 1's barrier: persisted
    h.checkpoints.on_barrier(1, barrier(1, TIMEOUT), priority=True)
    assert h.persisted_inputs(1) == {1: [[4]]} and h.responder.acks[1][1].unaligned


def test_an_aligned_barrier_waits_in_the_outputs_until_the_timeout(tmp_path: Path) -> None:
    # A source's barrier of an aligned-with-timeout checkpoint goes in band; while it waits
    # behind output data, the checkpoint waits too, and once the timeout passed the
    # barrier overtakes that data, which is persisted.
    h = Harness(tmp_path)
    h.writer.event_queued = True
    h.checkpoints.on_trigger(barrier(1, TIMEOUT))
    h.writer.emit(0, batch(8))
    assert h.barriers_out() == [(1, False)] and h.responder.acks == {}
    assert h.checkpoints.seconds_until_due() == OUTPUT_CHECK_S
    h.clock.advance(500)
    h.checkpoints.on_tick()
    assert h.barriers_out() == [(1, False), (1, True)]
    assert h.persisted_outputs(1) == [[8]] and h.responder.acks[1][1].unaligned


# -- the end of a task -------------------------------------------------------------------------


def test_a_checkpoint_after_end_of_input_is_final(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.task.data_finished = True
    h.checkpoints.on_trigger(barrier(1, UNALIGNED))
    assert h.barriers_out() == [(1, False)]           # after end of data: in band
    h.checkpoints.on_trigger(barrier(2))
    h.checkpoints.on_notify(2, complete=False)        # an aborted final checkpoint
    assert not h.checkpoints.final_checkpoint_done
    h.checkpoints.on_notify(1, complete=True)
    assert h.checkpoints.final_checkpoint_done and h.task.woken == 1


def test_a_trigger_waits_for_the_last_data_of_finished_producers(tmp_path: Path) -> None:
    # Triggered because its producers finished, while a channel still delivers what an
    # unaligned barrier overtook: the snapshot comes after that data and its end.
    h = Harness(tmp_path, channels=2)
    h.checkpoints.on_end_of_partition(0)
    h.checkpoints.on_trigger(barrier(3))
    assert h.writer.events == [] and h.responder.acks == {}
    h.task.data_finished = True
    h.checkpoints.on_end_of_partition(1)
    assert h.barriers_out() == [(3, False)] and set(h.responder.acks) == {3}
    h.checkpoints.on_notify(3, complete=True)
    assert h.checkpoints.final_checkpoint_done


def test_an_aborted_trigger_waiting_for_the_end_of_input_is_dropped(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=1)
    h.checkpoints.on_trigger(barrier(3))
    h.checkpoints.on_notify(3, complete=False)
    h.checkpoints.on_end_of_partition(0)
    assert h.writer.events == [] and h.responder.acks == {}


def test_a_completed_newer_checkpoint_covers_a_final_one(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.task.data_finished = True
    h.checkpoints.on_trigger(barrier(1))
    h.checkpoints.on_notify(3, complete=True)
    assert h.checkpoints.final_checkpoint_done


def stop_options(drain: bool = False) -> CheckpointOptions:
    return CheckpointOptions(savepoint=True, terminate=True, drain=drain,
                             target_location="file:///savepoints")


def test_stop_with_savepoint_suspends_input_until_it_completed(tmp_path: Path) -> None:
    h = Harness(tmp_path, channels=1)
    h.checkpoints.on_barrier(0, barrier(1, stop_options()))
    assert h.checkpoints.input_suspended and not h.checkpoints.stopped
    state, _ = h.responder.acks[1]
    assert snapshot_of(h.savepoints, state) == [1]
    h.checkpoints.on_notify(1, complete=True)
    assert h.checkpoints.stopped and not h.checkpoints.final_checkpoint_done
    assert h.task.drained == 0


def test_a_failed_stop_with_savepoint_lets_the_task_go_on(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.checkpoints.on_trigger(barrier(1, stop_options()))
    assert h.checkpoints.input_suspended
    h.checkpoints.on_notify(1, complete=False)
    assert not h.checkpoints.input_suspended and not h.checkpoints.stopped


def test_stop_with_drain_ends_the_input_before_the_barrier(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.checkpoints.on_trigger(barrier(1, stop_options(drain=True)))
    assert h.task.drained == 1
    # Drained, the savepoint is the final checkpoint: the task ends once it completed,
    # having finished its operators, and its input is not suspended meanwhile.
    assert not h.checkpoints.input_suspended
    h.checkpoints.on_notify(1, complete=True)
    assert h.checkpoints.final_checkpoint_done and not h.checkpoints.stopped


def test_a_drained_task_is_not_drained_again(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.task.data_finished = True
    h.checkpoints.on_trigger(barrier(1, stop_options(drain=True)))
    assert h.task.drained == 0 and set(h.responder.acks) == {1}


def test_a_handler_comes_with_the_inputs_it_aligns(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with pytest.raises(ValueError, match="barrier handler"):
        TaskCheckpoints(h.subtask, h.task, TaskCounters(), h.clock,
                        handler=BarrierHandler(1, h.clock))


# -- a buffer split into chunks (PendingInput), as the task processes it ----------------------


def flat(batches: list[list[int]]) -> list[int]:
    return [value for records in batches for value in records]


class ChunkedTask:
    """What the task loop does with a buffer: queue it in a PendingInput, process it chunk
    by chunk (``on_data`` before each), and pass the barrier its channel's unprocessed
    records. ``processed`` is every record the operators got, in order."""

    def __init__(self, h: Harness, chunk: int) -> None:
        from weir.taskexecutor.pending_input import PendingInput

        self.h = h
        self.pending = PendingInput(initial_records=chunk, max_records=chunk)
        h.task.unprocessed = self.pending.everything  # type: ignore[method-assign]
        self.processed: list[int] = []

    def take(self, channel: int, *values: int) -> None:
        self.pending.add(channel, 0, [batch(*values)], nbytes=10 * len(values))

    def process_chunk(self) -> None:
        chunk = self.pending.next_chunk()
        assert chunk is not None
        self.h.checkpoints.on_data(chunk.channel, (chunk.elements,), chunk.nbytes)
        self.processed.extend(chunk.elements.records())

    def process_all(self) -> None:
        while self.pending:
            self.process_chunk()

    def priority_barrier(self, channel: int, n: int, overtaken: OvertakenData | None = None
                         ) -> None:
        self.h.checkpoints.on_barrier(channel, barrier(n, UNALIGNED), priority=True,
                                      overtaken=overtaken,
                                      unprocessed=self.pending.of_channel(channel))


def test_a_barrier_between_two_chunks_of_its_channels_buffer(tmp_path: Path) -> None:
    """The barrier's channel had records taken but not processed: they were sent before it,
    so they are persisted and processed once, after the snapshot."""
    h = Harness(tmp_path, channels=2)
    task = ChunkedTask(h, chunk=3)
    task.take(0, *range(10))
    task.process_chunk()                               # 0, 1, 2 before the checkpoint
    task.priority_barrier(0, 1, OvertakenData(1, [batch(10, 11)]))
    assert h.barriers_out() == [(1, True)]             # the snapshot was taken at once
    task.process_all()                                 # 3..9 after the snapshot
    task.take(0, 10, 11)                               # what the barrier overtook
    task.process_all()
    h.checkpoints.on_barrier(1, barrier(1, UNALIGNED), priority=True)
    h.checkpoints.on_tick()
    assert task.processed == list(range(12))           # each record once, in order
    persisted = h.persisted_inputs(1)
    assert flat(persisted[0]) == [*range(3, 10), 10, 11]
    assert 1 not in persisted


def test_a_barrier_of_another_channel_persists_this_ones_rest_as_it_is_processed(
        tmp_path: Path) -> None:
    """Channel 0's buffer is half processed when channel 1's barrier comes first: the rest
    of channel 0's buffer precedes channel 0's barrier, so it is persisted chunk by chunk as
    it is processed — and not again when that barrier arrives."""
    h = Harness(tmp_path, channels=2)
    task = ChunkedTask(h, chunk=4)
    task.take(0, *range(8))
    task.process_chunk()                               # 0..3
    task.priority_barrier(1, 1)
    task.process_all()                                 # 4..7: before channel 0's barrier
    task.priority_barrier(0, 1)
    h.checkpoints.on_tick()
    assert task.processed == list(range(8))
    assert flat(h.persisted_inputs(1)[0]) == [4, 5, 6, 7]


def test_a_sources_trigger_mid_batch_persists_the_rest_of_the_batch(tmp_path: Path) -> None:
    """A source's reader that cannot rewind is past the whole batch it returned: what the
    task had not processed of it at the trigger is in-flight data of the checkpoint
    (restored first), processed once, after the snapshot. (Readers that rewind store a
    position instead: test_source_rewind.py.)"""
    h = Harness(tmp_path)
    task = ChunkedTask(h, chunk=2)
    task.take(0, 1, 2, 3, 4, 5)
    task.process_chunk()
    h.checkpoints.on_trigger(barrier(1))
    task.process_all()
    assert task.processed == [1, 2, 3, 4, 5]
    assert flat(h.persisted_inputs(1)[0]) == [3, 4, 5]
    assert h.barriers_out() == [(1, False)]


def test_aligned_barriers_never_find_records_pending(tmp_path: Path) -> None:
    """In band, a barrier is taken only once the buffer before it was processed whole: an
    aligned checkpoint persists nothing."""
    h = Harness(tmp_path, channels=2)
    task = ChunkedTask(h, chunk=2)
    task.take(0, 1, 2, 3)
    task.process_all()
    h.checkpoints.on_barrier(0, barrier(1), unprocessed=task.pending.of_channel(0))
    task.take(1, 4, 5)
    task.process_all()
    h.checkpoints.on_barrier(1, barrier(1))
    assert task.processed == [1, 2, 3, 4, 5] and h.persisted_inputs(1) == {}
