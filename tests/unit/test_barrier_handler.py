"""Barrier handling of a task, without a network: ordering, blocking, abort by a newer
barrier, ended channels, the aligned-timeout switch, overtaken buffers persisted once."""

from __future__ import annotations

from weir.checkpoint.barrier import CheckpointBarrier
from weir.checkpoint.barrier_handler import (
    AbortCheckpoint,
    BarrierHandler,
    Block,
    InputStateComplete,
    PersistData,
    PrioritizeInputBarriers,
    Resume,
    TakeSnapshot,
)
from weir.core.clock import ManualClock
from weir.proto import checkpoint_pb2
from weir.proto.checkpoint_pb2 import CheckpointOptions

ALIGNED = CheckpointOptions()
UNALIGNED = CheckpointOptions(unaligned=True)
TIMEOUT = CheckpointOptions(aligned_timeout_ms=1000)


def barrier(n: int, options: CheckpointOptions = ALIGNED, ts: int = 0) -> CheckpointBarrier:
    return CheckpointBarrier(n, ts, options)


def kinds(actions: object) -> list[str]:
    return [type(a).__name__ for a in actions]  # type: ignore[attr-defined]


def persisted(handler: BarrierHandler, channel: int, times: int = 1) -> list[int]:
    ids = []
    for _ in range(times):
        ids += [a.checkpoint_id for a in handler.on_data(channel, 10)
                if isinstance(a, PersistData)]
    return ids


# -- aligned -----------------------------------------------------------------------------------


def test_aligned_blocks_each_channel_until_all_delivered() -> None:
    clock = ManualClock(100)
    h = BarrierHandler(3, clock)
    assert h.on_barrier(1, barrier(1)) == [Block(1)]
    assert h.is_blocked(1) and not h.is_blocked(0)
    h.on_data(0, 500)                               # still flowing on the others
    clock.advance(30)
    assert h.on_barrier(0, barrier(1)) == [Block(0)]
    h.on_data(2, 700)
    clock.advance(20)
    actions = h.on_barrier(2, barrier(1))
    snapshot = actions[0]
    assert isinstance(snapshot, TakeSnapshot) and not snapshot.unaligned
    assert (snapshot.alignment_ms, snapshot.start_delay_ms, snapshot.processed_bytes) == (
        50, 100, 1200)
    assert actions[1:] == [Resume((0, 1)), InputStateComplete(1)]
    assert not h.is_blocked(0) and h.current_checkpoint_id is None
    assert persisted(h, 0) == []                    # aligned: nothing is persisted


def test_an_older_barrier_is_ignored() -> None:
    h = BarrierHandler(2, ManualClock(0))
    h.on_barrier(0, barrier(2))
    assert h.on_barrier(1, barrier(1)) == []
    assert h.current_checkpoint_id == 2


def test_a_newer_barrier_aborts_the_current_alignment() -> None:
    h = BarrierHandler(3, ManualClock(0))
    h.on_barrier(0, barrier(1))
    h.on_barrier(1, barrier(1))
    actions = h.on_barrier(2, barrier(2))
    assert actions[0] == Resume((0, 1))
    assert isinstance(actions[1], AbortCheckpoint)
    assert (actions[1].checkpoint_id, actions[1].reason) == (
        1, checkpoint_pb2.CHECKPOINT_DECLINED_SUBSUMED)
    assert actions[2] == Block(2)
    assert h.on_barrier(0, barrier(1)) == []        # late barrier of the aborted one
    assert h.current_checkpoint_id == 2


def test_an_ended_channel_counts_as_aligned() -> None:
    h = BarrierHandler(3, ManualClock(0))
    h.on_end_of_partition(2)
    h.on_barrier(0, barrier(1))
    assert kinds(h.on_barrier(1, barrier(1))) == ["TakeSnapshot", "Resume",
                                                  "InputStateComplete"]


def test_a_channel_ending_during_alignment_completes_it() -> None:
    h = BarrierHandler(2, ManualClock(0))
    h.on_barrier(0, barrier(1))
    assert kinds(h.on_end_of_partition(1)) == ["TakeSnapshot", "Resume",
                                               "InputStateComplete"]


def test_abort_from_the_coordinator_resumes_and_ignores_later_barriers() -> None:
    h = BarrierHandler(2, ManualClock(0))
    h.on_barrier(0, barrier(1))
    assert h.on_abort(1) == [Resume((0,))]
    assert h.on_barrier(1, barrier(1)) == []
    assert h.on_barrier(1, barrier(2)) == [Block(1)]   # the next one works


def test_at_least_once_never_blocks() -> None:
    h = BarrierHandler(2, ManualClock(0), at_least_once=True)
    assert h.on_barrier(0, barrier(1)) == []
    assert not h.is_blocked(0)
    assert kinds(h.on_barrier(1, barrier(1))) == ["TakeSnapshot", "InputStateComplete"]


# -- unaligned ---------------------------------------------------------------------------------


def test_unaligned_snapshots_on_the_first_barrier_and_persists_until_each_barrier() -> None:
    h = BarrierHandler(3, ManualClock(0))
    actions = h.on_barrier(1, barrier(1, UNALIGNED), priority=True)
    assert isinstance(actions[0], TakeSnapshot) and actions[0].unaligned
    assert len(actions) == 1                        # nothing blocked, nothing complete
    assert persisted(h, 0, 2) == [1, 1]             # before channel 0's barrier
    assert persisted(h, 1) == []                    # after channel 1's barrier
    assert h.on_barrier(0, barrier(1, UNALIGNED), priority=True) == []
    assert persisted(h, 0) == []
    assert persisted(h, 2) == [1]
    assert h.on_barrier(2, barrier(1, UNALIGNED), priority=True) == [InputStateComplete(1)]
    assert persisted(h, 2) == []


def test_overtaken_buffers_are_persisted_once_captured_not_again_when_taken() -> None:
    h = BarrierHandler(2, ManualClock(0))
    h.on_barrier(0, barrier(1, UNALIGNED), priority=True, overtaken=True)
    assert persisted(h, 0, 2) == []                 # the channel captured them already
    assert h.on_barrier(1, barrier(1, UNALIGNED), priority=True) == []
    assert h.on_overtaken_captured(1, 0) == [InputStateComplete(1)]
    assert h.on_overtaken_captured(1, 0) == []      # once


def test_capture_of_an_older_checkpoint_is_ignored() -> None:
    h = BarrierHandler(1, ManualClock(0))
    h.on_barrier(0, barrier(1, UNALIGNED), priority=True, overtaken=True)
    h.on_barrier(0, barrier(2, UNALIGNED), priority=True, overtaken=True)
    assert h.on_overtaken_captured(1, 0) == []
    assert h.on_overtaken_captured(2, 0) == [InputStateComplete(2)]


def test_a_single_channel_with_nothing_overtaken_completes_at_once() -> None:
    h = BarrierHandler(1, ManualClock(0))
    assert kinds(h.on_barrier(0, barrier(1, UNALIGNED), priority=True)) == [
        "TakeSnapshot", "InputStateComplete"]


def test_an_in_band_barrier_in_unaligned_mode_persists_what_came_before_it() -> None:
    # A channel that is not forced-aligned may still deliver its barrier in band (its
    # producer had nothing queued): what it delivered before is in-flight data.
    h = BarrierHandler(2, ManualClock(0))
    assert kinds(h.on_barrier(0, barrier(1, UNALIGNED), priority=True)) == ["TakeSnapshot"]
    assert persisted(h, 1, 3) == [1, 1, 1]
    assert h.on_barrier(1, barrier(1, UNALIGNED), priority=False) == [InputStateComplete(1)]


def test_an_ending_channel_stops_recording() -> None:
    h = BarrierHandler(2, ManualClock(0))
    h.on_barrier(0, barrier(1, UNALIGNED), priority=True)
    assert persisted(h, 1) == [1]
    assert h.on_end_of_partition(1) == [InputStateComplete(1)]


def test_a_newer_barrier_abandons_an_unfinished_unaligned_checkpoint() -> None:
    h = BarrierHandler(2, ManualClock(0))
    h.on_barrier(0, barrier(1, UNALIGNED), priority=True)
    actions = h.on_barrier(0, barrier(2, UNALIGNED), priority=True)
    assert isinstance(actions[0], AbortCheckpoint) and actions[0].checkpoint_id == 1
    assert isinstance(actions[1], TakeSnapshot) and actions[1].barrier.checkpoint_id == 2
    assert persisted(h, 1) == [2]


# -- forced-aligned channels (forward and broadcast edges) ------------------------------------


def test_forced_aligned_channels_align_before_an_unaligned_snapshot() -> None:
    # Channel 0 is a broadcast edge (barrier in band), channel 1 a keyed one.
    h = BarrierHandler(2, ManualClock(0), aligned_channels=[0])
    assert persisted(h, 1) == []                      # nothing started: nothing recorded
    # The keyed channel's priority barrier comes first: the snapshot waits for the
    # broadcast channel, and the keyed channel (holding what its barrier overtook) waits
    # with it, so nothing it overtook is processed before the snapshot.
    assert h.on_barrier(1, barrier(1, UNALIGNED), priority=True, overtaken=True) == [Block(1)]
    assert not h.snapshot_taken(1)
    assert persisted(h, 0, 2) == []                   # the broadcast channel: never recorded
    actions = h.on_barrier(0, barrier(1, UNALIGNED), priority=False)
    assert kinds(actions) == ["TakeSnapshot", "Resume"]
    assert actions[0].unaligned and actions[1] == Resume((1,))
    assert h.snapshot_taken(1)
    assert h.on_overtaken_captured(1, 1) == [InputStateComplete(1)]


def test_once_forced_aligned_channels_are_in_the_others_are_recorded() -> None:
    h = BarrierHandler(3, ManualClock(0), aligned_channels=[0])
    actions = h.on_barrier(0, barrier(1, UNALIGNED))
    assert kinds(actions) == ["TakeSnapshot"] and actions[0].unaligned
    assert persisted(h, 1) == [1] and persisted(h, 2) == [1] and persisted(h, 0) == []
    assert h.on_barrier(1, barrier(1, UNALIGNED), priority=True) == []
    assert h.on_barrier(2, barrier(1, UNALIGNED), priority=True) == [InputStateComplete(1)]


def test_only_forced_aligned_channels_take_an_unaligned_snapshot_when_all_arrived() -> None:
    h = BarrierHandler(2, ManualClock(0), aligned_channels=[0, 1])
    assert h.on_barrier(0, barrier(1, UNALIGNED)) == [Block(0)]
    assert persisted(h, 1) == []
    actions = h.on_barrier(1, barrier(1, UNALIGNED))
    assert kinds(actions) == ["TakeSnapshot", "Resume", "InputStateComplete"]
    assert actions[0].unaligned      # downstream, keyed edges still get priority barriers


def test_an_ended_forced_aligned_channel_releases_the_snapshot() -> None:
    h = BarrierHandler(2, ManualClock(0), aligned_channels=[0])
    assert h.on_barrier(1, barrier(1, UNALIGNED), priority=True) == [Block(1)]
    assert kinds(h.on_end_of_partition(0)) == ["TakeSnapshot", "Resume", "InputStateComplete"]


def test_a_timeout_waits_for_forced_aligned_channels_and_prioritizes_the_others() -> None:
    clock = ManualClock(0)
    h = BarrierHandler(3, clock, aligned_channels=[0])
    assert h.on_barrier(1, barrier(1, TIMEOUT, ts=0)) == [Block(1)]
    clock.advance(1_000)
    # Timed out: the keyed channel 2's barrier is moved ahead, the snapshot still waits.
    actions = h.on_tick()
    assert [type(a) for a in actions] == [PrioritizeInputBarriers]
    assert h.on_tick() == []
    assert h.on_barrier(2, barrier(1, TIMEOUT, ts=0), priority=True, overtaken=True) == \
        [Block(2)]
    actions = h.on_barrier(0, barrier(1, TIMEOUT, ts=0))
    assert kinds(actions) == ["TakeSnapshot", "Resume"]
    assert actions[0].unaligned and actions[1] == Resume((1, 2))
    assert h.on_overtaken_captured(1, 2) == [InputStateComplete(1)]


# -- aligned with timeout ----------------------------------------------------------------------


def test_timeout_switches_to_unaligned_on_tick() -> None:
    clock = ManualClock(0)
    h = BarrierHandler(3, clock)
    assert h.on_barrier(0, barrier(1, TIMEOUT, ts=0)) == [Block(0)]
    assert h.on_barrier(1, barrier(1, TIMEOUT, ts=0)) == [Block(1)]
    assert h.next_timeout_ms() == 1000
    clock.advance(999)
    assert h.on_tick() == []
    clock.advance(1)
    actions = h.on_tick()
    assert isinstance(actions[0], TakeSnapshot) and actions[0].unaligned
    assert actions[1:] == [Resume((0, 1)), PrioritizeInputBarriers(barrier(1, TIMEOUT))]
    assert persisted(h, 2) == [1]                   # channel 2 is still before its barrier
    assert persisted(h, 0) == []                    # channels 0, 1 delivered theirs
    # The prioritized barrier arrives with the buffers it passed on channel 2.
    assert h.on_barrier(2, barrier(1, TIMEOUT), priority=True, overtaken=True) == []
    assert h.on_overtaken_captured(1, 2) == [InputStateComplete(1)]


def test_timeout_measured_from_the_trigger_switches_on_a_late_first_barrier() -> None:
    clock = ManualClock(5000)                       # the first barrier comes 5 s late
    h = BarrierHandler(2, clock)
    actions = h.on_barrier(0, barrier(1, TIMEOUT, ts=0))
    assert isinstance(actions[0], TakeSnapshot) and actions[0].unaligned
    assert actions[0].start_delay_ms == 5000
    assert actions[1:] == [PrioritizeInputBarriers(barrier(1, TIMEOUT))]


def test_timely_alignment_stays_aligned() -> None:
    clock = ManualClock(0)
    h = BarrierHandler(2, clock)
    h.on_barrier(0, barrier(1, TIMEOUT))
    clock.advance(500)
    actions = h.on_barrier(1, barrier(1, TIMEOUT))
    assert isinstance(actions[0], TakeSnapshot) and not actions[0].unaligned
    assert h.next_timeout_ms() is None


def test_a_priority_barrier_during_alignment_switches_at_once() -> None:
    h = BarrierHandler(3, ManualClock(0))
    h.on_barrier(0, barrier(1, TIMEOUT))
    actions = h.on_barrier(1, barrier(1, TIMEOUT), priority=True, overtaken=True)
    assert kinds(actions) == ["TakeSnapshot", "Resume", "PrioritizeInputBarriers"]
    assert persisted(h, 1) == []                    # captured by the channel, not here
    assert persisted(h, 2) == [1]
    h.on_barrier(2, barrier(1, TIMEOUT))
    assert h.on_overtaken_captured(1, 1) == [InputStateComplete(1)]


def test_plain_aligned_barriers_never_time_out() -> None:
    clock = ManualClock(0)
    h = BarrierHandler(2, clock)
    h.on_barrier(0, barrier(1))
    clock.advance(10**9)
    assert h.next_timeout_ms() is None and h.on_tick() == []
