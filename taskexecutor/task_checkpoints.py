"""The checkpoints of one task, each owned here from its trigger or first barrier to the
coordinator's verdict.

The task forwards what happens to it — a trigger (a source, or a task whose inputs all
ended), a barrier, data about to be processed, the end of a channel, a notification from
the coordinator, a turn of its loop — and :class:`TaskCheckpoints` does the rest:

* it asks the task's :class:`~weir.checkpoint.barrier_handler.BarrierHandler` (an I/O-free
  state machine) what a barrier, a piece of data or the end of a channel means, and carries
  out its decisions;
* it drives :class:`~weir.taskexecutor.checkpointing.SubtaskCheckpointing`: the snapshot
  and the barrier to the outputs, in-flight input persisted as channel state, the upload
  and the acknowledgement, aborts;
* it keeps what one checkpoint needs between events: the data a priority barrier overtook,
  while the channel still captures it; the checkpoints taken after end of input (FLIP-147:
  the task may end once one of them completed); the savepoint a stop-with-savepoint took,
  after which no input is processed and no timer fires; and triggers that came while a
  source awaited splits (they run when the splits arrived).

What needs the task itself goes through two narrow interfaces: :class:`CheckpointInputs`
(block, resume, prioritise barriers in the input gates; a
:class:`~weir.taskexecutor.task_input.TaskInput`) and :class:`CheckpointedTask` (what a
snapshot covers, end of input for ``stop --drain``, the operators' notifications, wake-up).

Nothing here assumes that a buffer is processed whole: :meth:`TaskCheckpoints.on_data`
takes any run of batches the task is about to process, a whole buffer or a part of one, and
a priority barrier may come between two runs of one buffer. What the task took from the
barrier's own channel before the barrier but has not processed yet was sent before it: the
task passes it as ``unprocessed`` with the barrier, and it is persisted with the data the
barrier overtook in the channel.

Everything runs on the task thread.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from weir.checkpoint.barrier import CheckpointBarrier
from weir.checkpoint.barrier_handler import (
    AbortCheckpoint,
    Action,
    BarrierHandler,
    Block,
    InputStateComplete,
    PersistData,
    PrioritizeInputBarriers,
    Resume,
    TakeSnapshot,
)
from weir.core.clock import Clock
from weir.core.ids import CheckpointId
from weir.core.records import Elements
from weir.shuffle.api import Event, OvertakenData
from weir.taskexecutor.checkpointing import SnapshotParticipant, SubtaskCheckpointing
from weir.taskexecutor.operator_chain import TaskCounters

log = logging.getLogger(__name__)

#: How often (seconds) the task looks whether its barriers left its outputs, or whether
#: overtaken data finished arriving, while a checkpoint waits for either.
OUTPUT_CHECK_S = 0.01


class CheckpointInputs(Protocol):
    """The task's input channels, numbered task-wide, as checkpoints act on them."""

    def block(self, channel: int) -> None:
        """Take nothing but priority events from ``channel`` until it is resumed."""

    def resume(self, channels: Sequence[int]) -> None:
        """Take data from these channels again."""

    def prioritize_barrier(self, event: Event) -> None:
        """Move barrier ``event`` ahead of the data queued before it (where barriers may
        overtake data)."""


class CheckpointedTask(Protocol):
    """What a checkpoint needs of its task. Called on the task thread."""

    @property
    def data_finished(self) -> bool:
        """The task finished its operators (end of input): its barriers go in band and its
        checkpoints are final ones."""

    @property
    def awaiting_splits(self) -> bool:
        """A source asked for splits and awaits the answer: a trigger waits for it, since
        the splits it brings were assigned before the enumerator's snapshot."""

    def snapshot_participants(self) -> dict[str, SnapshotParticipant]:
        """What a snapshot covers, by operator uid: the operators, the source reader."""

    def drain(self) -> None:
        """``stop --drain``: end the input now (what was taken is processed, event time
        goes to its end, operators flush), before the savepoint's barrier."""

    def unprocessed(self) -> list[tuple[int, Elements]]:
        """What the task took and has not processed yet, with the task-wide channel it came
        from (a source's: channel 0), in order."""

    def notify_operators(self, checkpoint_id: CheckpointId, complete: bool) -> None:
        """Tell every operator that ``checkpoint_id`` completed (or was aborted)."""

    def wake(self) -> None:
        """The task may have something to do (it may end now)."""


@dataclass
class _Capture:
    """In-flight input of ``channel`` that belongs to ``checkpoint_id`` although it
    reaches the task after the barrier: what the task had taken but not processed, then
    what the barrier overtook in the channel (complete once all of it arrived)."""

    checkpoint_id: CheckpointId
    channel: int
    unprocessed: tuple[Elements, ...]
    overtaken: OvertakenData | None

    @property
    def complete(self) -> bool:
        return self.overtaken is None or self.overtaken.complete

    def batches(self) -> list[Elements]:
        rest = self.overtaken.batches() if self.overtaken is not None else []
        return [*self.unprocessed, *rest]


class TaskCheckpoints:
    """The checkpoints of one task (see the module docstring). ``handler`` and ``inputs``:
    the task's barrier alignment and its input channels, both None for a task without
    inputs (a source). Every method runs on the task thread; none blocks. A snapshot that
    fails declines its checkpoint (through SubtaskCheckpointing) instead of raising; what
    ``task`` raises (user code finishing operators on ``stop --drain``, or notified)
    propagates and fails the task."""

    def __init__(self, checkpointing: SubtaskCheckpointing, task: CheckpointedTask,
                 counters: TaskCounters, clock: Clock, *, handler: BarrierHandler | None = None,
                 inputs: CheckpointInputs | None = None, name: str = "") -> None:
        if (handler is None) != (inputs is None):
            msg = "a barrier handler needs the input channels it aligns, and only then"
            raise ValueError(msg)
        self.checkpointing = checkpointing
        self._task = task
        self._counters = counters
        self._clock = clock
        self._handler = handler
        self._inputs = inputs
        self._name = name
        #: Overtaken data whose channel still captures it (unaligned).
        self._captures: list[_Capture] = []
        #: Checkpoints taken after end of input (FLIP-147): once one completed, the task
        #: may end.
        self._finish_checkpoints: set[CheckpointId] = set()
        self._final_checkpoint_done = False
        #: Stop-with-savepoint without drain: the savepoint this task took its part of; no
        #: input is processed and no timer fires after it. Once it completed the task ends
        #: without finishing its operators; if it is aborted, the task goes on.
        self._stop_savepoint: CheckpointId | None = None
        self._stopped = False
        #: Triggers that came while a source awaited splits.
        self._deferred_triggers: list[CheckpointBarrier] = []
        #: A trigger that came because this task's producers finished, while some of its
        #: channels still deliver their last data: taken once they all ended.
        self._trigger_at_end: CheckpointBarrier | None = None

    # -- what the task asks -----------------------------------------------------------------

    @property
    def last_checkpoint_id(self) -> int:
        """The newest checkpoint whose barrier this task emitted (0: none yet)."""
        return self.checkpointing.last_checkpoint_id

    @property
    def input_suspended(self) -> bool:
        """A stop-with-savepoint took its snapshot here: no input, no timers, until it
        completed (the task ends) or was aborted (it goes on)."""
        return self._stop_savepoint is not None

    @property
    def stopped(self) -> bool:
        """The stop-with-savepoint completed: the task ends without finishing operators."""
        return self._stopped

    @property
    def final_checkpoint_done(self) -> bool:
        """A checkpoint taken after end of input completed: the task may end (FLIP-147)."""
        return self._final_checkpoint_done

    def seconds_until_due(self) -> float | None:
        """How long the task may sleep before :meth:`on_tick` has something to do (an
        alignment timing out, barriers to watch leave the outputs, overtaken data to
        persist); None: nothing is due."""
        timeout: float | None = None
        if self._handler is not None:
            due_ms = self._handler.next_timeout_ms()
            if due_ms is not None:
                timeout = max(0.001, (due_ms - self._clock()) / 1000)
        if self.checkpointing.has_pending_outputs or self._captures:
            timeout = OUTPUT_CHECK_S if timeout is None else min(timeout, OUTPUT_CHECK_S)
        return timeout

    # -- events -----------------------------------------------------------------------------

    def on_trigger(self, barrier: CheckpointBarrier) -> None:
        """Take checkpoint ``barrier``: a source now; a task whose producers all finished
        once every one of its channels ended (its input side is complete then). What the
        task took and has not processed yet (a source's reader is past it) is in-flight
        data of the checkpoint: persisted as channel state, processed after the snapshot."""
        if self._task.awaiting_splits:
            self._deferred_triggers.append(barrier)
            return
        if self._handler is not None and not self._handler.inputs_ended:
            # Triggered because every producer finished (FLIP-147): what they sent before
            # their end of partition belongs before this snapshot, as if the barrier came
            # last on each channel still open (only data of a finished producer is left
            # there, e.g. what an unaligned barrier overtook).
            self._trigger_at_end = barrier
            return
        if barrier.options.drain and not self._task.data_finished:
            # stop --drain: the source ends here; event time advances to the end and the
            # operators flush, before the savepoint's barrier (the final checkpoint).
            self._task.drain()
        # A source's start delay: from the trigger to its mail running on this thread.
        delay_ms = max(0, self._clock() - barrier.timestamp_ms)
        if self._take_snapshot(barrier, unaligned=barrier.options.unaligned,
                               start_delay_ms=delay_ms):
            for channel, elements in self._task.unprocessed():
                self.checkpointing.persist_input(barrier.checkpoint_id, channel, elements)
            self.checkpointing.input_complete(barrier.checkpoint_id)

    def on_splits_arrived(self) -> None:
        """The answer to a source's split request was handled: run the triggers that
        waited for it."""
        deferred, self._deferred_triggers = self._deferred_triggers, []
        for barrier in deferred:
            self.on_trigger(barrier)

    def on_barrier(self, channel: int, barrier: CheckpointBarrier, priority: bool = False,
                   overtaken: OvertakenData | None = None,
                   unprocessed: Sequence[Elements] = ()) -> None:
        """Barrier ``barrier`` arrived on task-wide ``channel``; ``priority``: ahead of the
        data sent before it; ``overtaken``: that data, as the channel captures it;
        ``unprocessed``: batches of this channel the task had taken before the barrier
        and not processed yet (it processes them after, as it does the overtaken data)."""
        if self._handler is None:
            return
        captured = overtaken is not None or bool(unprocessed)
        self._execute(self._handler.on_barrier(channel, barrier, priority, captured))
        if captured:
            self._captures.append(_Capture(barrier.checkpoint_id, channel,
                                           tuple(unprocessed), overtaken))
            self._check_captures()

    def on_data(self, channel: int, batches: Sequence[Elements], nbytes: int) -> None:
        """The task is about to process ``batches`` (``nbytes`` on the wire) of ``channel``:
        a buffer, or a part of one. Unaligned, data that came before its channel's barrier
        is persisted as channel state too."""
        if self._handler is None:
            return
        for action in self._handler.on_data(channel, nbytes):
            if isinstance(action, PersistData):
                for elements in batches:
                    self.checkpointing.persist_input(action.checkpoint_id, channel, elements)
            else:
                self._execute((action,))

    def on_end_of_partition(self, channel: int) -> None:
        """``channel`` delivered all its data: it counts as aligned from now on."""
        if self._handler is not None:
            self._execute(self._handler.on_end_of_partition(channel))
            waiting = self._trigger_at_end
            if waiting is not None and self._handler.inputs_ended:
                self._trigger_at_end = None
                self.on_trigger(waiting)

    def on_notify(self, checkpoint_id: CheckpointId, complete: bool) -> None:
        """The coordinator completed (or aborted) ``checkpoint_id``."""
        if complete:
            self.checkpointing.completed(checkpoint_id)
            self._task.notify_operators(checkpoint_id, complete=True)
            if any(n <= checkpoint_id for n in self._finish_checkpoints):
                self._final_checkpoint_done = True
                self._task.wake()
            if self._stop_savepoint is not None and self._stop_savepoint <= checkpoint_id:
                self._stopped = True
                log.info("task %s stops with savepoint %d", self._name, self._stop_savepoint)
            return
        self._task.notify_operators(checkpoint_id, complete=False)
        if self._trigger_at_end is not None and \
                self._trigger_at_end.checkpoint_id <= checkpoint_id:
            self._trigger_at_end = None
        if self._handler is not None:
            self._execute(self._handler.on_abort(checkpoint_id))
        self.checkpointing.abort(checkpoint_id)
        self._finish_checkpoints.discard(checkpoint_id)
        if self._stop_savepoint == checkpoint_id:
            self._stop_savepoint = None  # the stop failed: the job goes on

    def on_tick(self) -> None:
        """A turn of the task loop: switch a timed-out alignment to unaligned, persist
        overtaken data that finished arriving, release checkpoints whose barriers left the
        outputs (or move them ahead once the aligned-checkpoint timeout passed)."""
        if self._handler is not None:
            self._execute(self._handler.on_tick())
            if self._captures:
                self._check_captures()
        if self.checkpointing.has_pending_outputs:
            self.checkpointing.maintain()

    def close(self) -> None:
        """The task ends: what was not uploaded yet is cancelled."""
        self.checkpointing.close()

    # -- internals --------------------------------------------------------------------------

    def _take_snapshot(self, barrier: CheckpointBarrier, unaligned: bool,
                       alignment_ms: int = 0, start_delay_ms: int = 0,
                       processed_bytes: int = 0) -> bool:
        ended = self._task.data_finished
        taken = self.checkpointing.take_snapshot(
            barrier, self._task.snapshot_participants(), unaligned=unaligned, ended=ended,
            alignment_ms=alignment_ms, start_delay_ms=start_delay_ms,
            processed_bytes=processed_bytes)
        if taken and ended:
            self._finish_checkpoints.add(barrier.checkpoint_id)
        elif taken and barrier.options.terminate:
            self._stop_savepoint = barrier.checkpoint_id
        self._counters.checkpoint_alignment_ms = alignment_ms
        self._counters.checkpoint_start_delay_ms = start_delay_ms
        return taken

    def _execute(self, actions: Sequence[Action]) -> None:
        """Carry out what the barrier handler decided."""
        inputs = self._inputs
        for action in actions:
            if isinstance(action, Block):
                assert inputs is not None
                inputs.block(action.channel)
            elif isinstance(action, Resume):
                assert inputs is not None
                inputs.resume(action.channels)
            elif isinstance(action, TakeSnapshot):
                self._take_snapshot(action.barrier, action.unaligned, action.alignment_ms,
                                    action.start_delay_ms, action.processed_bytes)
            elif isinstance(action, PrioritizeInputBarriers):
                assert inputs is not None
                inputs.prioritize_barrier(action.barrier.to_event())
            elif isinstance(action, InputStateComplete):
                self.checkpointing.input_complete(action.checkpoint_id)
            elif isinstance(action, AbortCheckpoint):
                self.checkpointing.abort(action.checkpoint_id, action.reason, action.message)

    def _check_captures(self) -> None:
        """Persist the overtaken data channels finished capturing (unaligned)."""
        handler = self._handler
        assert handler is not None
        waiting = []
        for capture in self._captures:
            checkpoint_id, channel = capture.checkpoint_id, capture.channel
            # Persisted only once the snapshot is taken: before, the checkpoint waits for
            # its forced-aligned channels and nothing of it is recorded yet.
            if not capture.complete or not handler.snapshot_taken(checkpoint_id):
                if handler.current_checkpoint_id == checkpoint_id:
                    waiting.append(capture)
                continue
            for elements in capture.batches():
                self.checkpointing.persist_input(checkpoint_id, channel, elements)
            self._execute(handler.on_overtaken_captured(checkpoint_id, channel))
        self._captures = waiting
