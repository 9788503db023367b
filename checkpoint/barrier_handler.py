"""How a task with inputs reacts to checkpoint barriers: an I/O-free state machine.

The task feeds it what its input gates deliver — a barrier on a channel (with how many data
buffers that barrier overtook there), a data buffer, the end of a channel — plus clock
ticks and aborts from the coordinator, and performs the actions it returns: block or resume
channels, take the operator snapshot and emit the barrier downstream, move queued barriers
ahead of the data, persist a data buffer as channel state, report the input side of a
checkpoint complete, or decline it.

Modes (Flink's semantics):

* **Aligned** (EXACTLY_ONCE): a channel that delivered barrier n is blocked until barrier n
  arrived on every channel (a channel that ended counts as aligned); then the snapshot is
  taken and the barrier forwarded, before any later record. An older barrier is ignored; a
  newer one aborts n (declined as subsumed) and starts the newer one.
* **At least once**: channels are never blocked; the snapshot is taken when the last
  channel delivered barrier n.
* **Unaligned**: on the first barrier n the snapshot is taken at once and the barrier
  forwarded with priority; from then on, every data buffer a channel delivers before its
  barrier n is processed *and* persisted as input channel state, and so are the buffers
  barrier n overtook on that channel (the channel captures those itself, as they are
  queued or arrive: the task need not process them first). The input side is complete
  when every channel delivered barrier n (or ended) and its overtaken buffers were
  captured.
* **Aligned with timeout**: a barrier that is aligned but carries ``aligned_timeout_ms``
  starts an aligned checkpoint; once ``timeout`` passed since the trigger (checked on every
  barrier and by :meth:`on_tick`), or when a barrier arrives with priority (an upstream
  task switched), the checkpoint continues unaligned, and barriers still queued in front
  of this task are moved ahead of the data.
* **Forced-aligned channels** (``aligned_channels``: those of forward and broadcast edges,
  whose producers keep barriers in band, as Flink does): their data is never persisted,
  since in-flight data of such an edge could not be handed to the right subtasks after
  rescaling (every subtask needs every broadcast record). An unaligned checkpoint
  therefore waits, as an aligned one does, until barrier n arrived on each of them, and
  only then takes its snapshot and records the other channels; a channel whose barrier
  arrives before that is blocked meanwhile, so what a priority barrier overtook there is
  processed only after the snapshot (and persisted once).

Example:
    >>> from weir.core.clock import ManualClock
    >>> from weir.proto.checkpoint_pb2 import CheckpointOptions
    >>> handler = BarrierHandler(2, ManualClock(0))
    >>> b = CheckpointBarrier(1, 0, CheckpointOptions())
    >>> handler.on_barrier(0, b)
    [Block(channel=0)]
    >>> [type(a).__name__ for a in handler.on_barrier(1, b)]
    ['TakeSnapshot', 'Resume', 'InputStateComplete']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from weir.checkpoint.barrier import CheckpointBarrier
from weir.core.clock import Clock
from weir.core.ids import CheckpointId
from weir.proto import checkpoint_pb2

# -- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """Stop taking data from ``channel`` (its barrier arrived; others are awaited)."""

    channel: int


@dataclass(frozen=True)
class Resume:
    """Take data from these channels again."""

    channels: tuple[int, ...]


@dataclass(frozen=True)
class TakeSnapshot:
    """Snapshot the operators now and emit ``barrier`` downstream (with priority when
    ``unaligned``: the output buffers it overtakes are persisted as channel state)."""

    barrier: CheckpointBarrier
    unaligned: bool
    alignment_ms: int
    start_delay_ms: int
    processed_bytes: int


@dataclass(frozen=True)
class PrioritizeInputBarriers:
    """Move barrier ``barrier`` ahead of the data still queued in every input channel."""

    barrier: CheckpointBarrier


@dataclass(frozen=True)
class PersistData:
    """Persist the data buffer just taken as input channel state of ``checkpoint_id``
    (and process it as usual)."""

    checkpoint_id: CheckpointId


@dataclass(frozen=True)
class InputStateComplete:
    """Every input channel delivered what belongs to ``checkpoint_id``."""

    checkpoint_id: CheckpointId


@dataclass(frozen=True)
class AbortCheckpoint:
    """Decline ``checkpoint_id`` (it cannot complete at this task)."""

    checkpoint_id: CheckpointId
    reason: checkpoint_pb2.CheckpointFailureReason
    message: str


Action = (Block | Resume | TakeSnapshot | PrioritizeInputBarriers | PersistData
          | InputStateComplete | AbortCheckpoint)

_NOTHING: tuple[Action, ...] = ()


@dataclass
class _Checkpoint:
    """The checkpoint this task is aligning or recording in-flight data for."""

    barrier: CheckpointBarrier
    first_barrier_ms: int
    received: set[int] = field(default_factory=set)
    blocked: set[int] = field(default_factory=set)
    snapshot_taken: bool = False
    unaligned: bool = False
    #: Unaligned, but the snapshot waits for the forced-aligned channels.
    wants_unaligned: bool = False
    #: Unaligned: channels whose barrier has not arrived (their data is persisted).
    recording: set[int] = field(default_factory=set)
    #: Unaligned: channels whose overtaken buffers are not all captured yet.
    capturing: set[int] = field(default_factory=set)
    processed_bytes: int = 0

    @property
    def checkpoint_id(self) -> CheckpointId:
        return self.barrier.checkpoint_id


class BarrierHandler:
    """Barrier alignment of one task over ``num_channels`` input channels (numbered across
    all its input gates). Used on the task thread only."""

    def __init__(self, num_channels: int, clock: Clock, at_least_once: bool = False,
                 aligned_channels: Iterable[int] = ()) -> None:
        self.num_channels = num_channels
        self._clock = clock
        self._at_least_once = at_least_once
        #: Channels whose data is never persisted: they always align.
        self._aligned_only = frozenset(aligned_channels)
        self._ended: set[int] = set()
        self._current: _Checkpoint | None = None
        #: The newest checkpoint id seen; older barriers are ignored.
        self._latest = 0
        #: Checkpoints up to this id were aborted: their barriers are ignored.
        self._aborted = 0

    # -- queries --------------------------------------------------------------------------

    @property
    def current_checkpoint_id(self) -> CheckpointId | None:
        return self._current.checkpoint_id if self._current is not None else None

    def snapshot_taken(self, checkpoint_id: CheckpointId) -> bool:
        """Whether the current checkpoint ``checkpoint_id`` took its snapshot (its
        in-flight data can be persisted from now on)."""
        cp = self._current
        return cp is not None and cp.checkpoint_id == checkpoint_id and cp.snapshot_taken

    @property
    def inputs_ended(self) -> bool:
        """Every channel delivered all its data."""
        return len(self._ended) == self.num_channels

    def is_blocked(self, channel: int) -> bool:
        return self._current is not None and channel in self._current.blocked

    def next_timeout_ms(self) -> int | None:
        """When :meth:`on_tick` may switch the current alignment to unaligned."""
        cp = self._current
        if cp is None or cp.snapshot_taken or not cp.barrier.timeoutable:
            return None
        return cp.barrier.timestamp_ms + cp.barrier.options.aligned_timeout_ms

    # -- events ---------------------------------------------------------------------------

    def on_barrier(self, channel: int, barrier: CheckpointBarrier, priority: bool = False,
                   overtaken: bool = False) -> list[Action]:
        """Barrier ``barrier`` arrived on ``channel``; ``overtaken``: it overtook buffers
        there, which the channel captures (report them with :meth:`on_overtaken_captured`)."""
        actions: list[Action] = []
        n = barrier.checkpoint_id
        if n < self._latest or n <= self._aborted:
            return actions  # an old or aborted checkpoint: ignored
        if n > self._latest:
            actions += self._abandon(checkpoint_pb2.CHECKPOINT_DECLINED_SUBSUMED,
                                     f"barrier {n} arrived before checkpoint "
                                     f"{self._latest} was complete here")
            self._latest = n
            self._current = _Checkpoint(barrier, self._clock())
        cp = self._current
        if cp is None or cp.checkpoint_id != n or channel in cp.received:
            return actions  # aborted already, or a duplicate
        cp.received.add(channel)
        if cp.snapshot_taken:
            if cp.unaligned:
                cp.recording.discard(channel)
                if overtaken:
                    cp.capturing.add(channel)
                actions += self._maybe_complete(cp)
            return actions
        if overtaken:
            cp.capturing.add(channel)
        if cp.wants_unaligned or barrier.options.unaligned or priority or self._timed_out(cp):
            actions += self._want_unaligned(cp)
            if cp.snapshot_taken:
                return actions + self._maybe_complete(cp)
        aligned = self._maybe_aligned(cp)
        if not aligned and not self._at_least_once:
            cp.blocked.add(channel)
            actions.append(Block(channel))
        return actions + aligned

    def on_data(self, channel: int, nbytes: int) -> Sequence[Action]:
        """A data buffer of ``nbytes`` was taken from ``channel`` (hot path)."""
        cp = self._current
        if cp is None:
            return _NOTHING
        if not cp.snapshot_taken:
            cp.processed_bytes += nbytes
            return _NOTHING
        if channel in cp.recording:
            return (PersistData(cp.checkpoint_id),)
        return _NOTHING

    def on_overtaken_captured(self, checkpoint_id: CheckpointId, channel: int) -> list[Action]:
        """``channel`` captured every buffer barrier ``checkpoint_id`` overtook there (the
        task persisted them)."""
        cp = self._current
        if cp is None or cp.checkpoint_id != checkpoint_id:
            return []
        cp.capturing.discard(channel)
        return self._maybe_complete(cp)

    def on_end_of_partition(self, channel: int) -> list[Action]:
        """``channel`` delivered all its data: it counts as aligned from now on."""
        self._ended.add(channel)
        cp = self._current
        if cp is None:
            return []
        cp.blocked.discard(channel)
        if cp.snapshot_taken:
            cp.recording.discard(channel)
            return self._maybe_complete(cp)
        if cp.wants_unaligned and self._forced_aligned(cp):
            return self._switch_to_unaligned(cp) + self._maybe_complete(cp)
        return self._maybe_aligned(cp)

    def on_tick(self) -> list[Action]:
        """Switch a timed-out alignment to unaligned."""
        cp = self._current
        if cp is None or cp.snapshot_taken or cp.wants_unaligned or not self._timed_out(cp):
            return []
        return self._want_unaligned(cp) + (self._maybe_complete(cp) if cp.snapshot_taken
                                           else [])

    def on_abort(self, checkpoint_id: CheckpointId) -> list[Action]:
        """The coordinator aborted ``checkpoint_id``: stop aligning or recording for it;
        its barriers still to come are ignored."""
        actions: list[Action] = []
        cp = self._current
        if cp is not None and cp.checkpoint_id <= checkpoint_id:
            if cp.blocked:
                actions.append(Resume(tuple(sorted(cp.blocked))))
            self._current = None
        self._aborted = max(self._aborted, checkpoint_id)
        return actions

    # -- internals ------------------------------------------------------------------------

    def _timed_out(self, cp: _Checkpoint) -> bool:
        due = self.next_timeout_ms()
        return due is not None and self._clock() >= due

    def _snapshot(self, cp: _Checkpoint, unaligned: bool) -> TakeSnapshot:
        now = self._clock()
        cp.snapshot_taken = True
        cp.unaligned = unaligned
        return TakeSnapshot(cp.barrier, unaligned, alignment_ms=now - cp.first_barrier_ms,
                            start_delay_ms=max(0, cp.first_barrier_ms
                                               - cp.barrier.timestamp_ms),
                            processed_bytes=cp.processed_bytes)

    def _want_unaligned(self, cp: _Checkpoint) -> list[Action]:
        """The checkpoint goes unaligned: now, or once the forced-aligned channels are."""
        actions: list[Action] = []
        if self._forced_aligned(cp):
            actions += self._switch_to_unaligned(cp)
        if not cp.wants_unaligned:
            cp.wants_unaligned = True
            if cp.barrier.timeoutable and any(
                    c not in cp.received and c not in self._ended
                    and c not in self._aligned_only for c in range(self.num_channels)):
                # Barriers still queued behind data in this task's inputs move ahead.
                actions.append(PrioritizeInputBarriers(cp.barrier))
        return actions

    def _forced_aligned(self, cp: _Checkpoint) -> bool:
        return all(c in cp.received or c in self._ended for c in self._aligned_only)

    def _switch_to_unaligned(self, cp: _Checkpoint) -> list[Action]:
        actions: list[Action] = [self._snapshot(cp, unaligned=True)]
        if cp.blocked:
            actions.append(Resume(tuple(sorted(cp.blocked))))
            cp.blocked.clear()
        cp.recording = {c for c in range(self.num_channels)
                        if c not in cp.received and c not in self._ended}
        return actions

    def _maybe_aligned(self, cp: _Checkpoint) -> list[Action]:
        if any(c not in cp.received and c not in self._ended
               for c in range(self.num_channels)):
            return []
        if cp.wants_unaligned:  # every channel is in: nothing left to record
            return self._switch_to_unaligned(cp) + self._maybe_complete(cp)
        actions: list[Action] = [self._snapshot(cp, unaligned=False)]
        if cp.blocked:
            actions.append(Resume(tuple(sorted(cp.blocked))))
            cp.blocked.clear()
        self._current = None
        actions.append(InputStateComplete(cp.checkpoint_id))
        return actions

    def _maybe_complete(self, cp: _Checkpoint) -> list[Action]:
        if not cp.snapshot_taken or cp.recording or cp.capturing or self._current is not cp:
            return []
        self._current = None
        return [InputStateComplete(cp.checkpoint_id)]

    def _abandon(self, reason: checkpoint_pb2.CheckpointFailureReason, message: str
                 ) -> list[Action]:
        """Give up the current checkpoint (a newer barrier came)."""
        cp = self._current
        if cp is None:
            return []
        actions: list[Action] = []
        if cp.blocked:
            actions.append(Resume(tuple(sorted(cp.blocked))))
        self._current = None
        actions.append(AbortCheckpoint(cp.checkpoint_id, reason, message))
        return actions
