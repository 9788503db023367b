"""The input of one task: its input gates, under one task-wide channel numbering.

A task reads from one input gate per upstream vertex, and each gate has one channel per
producing subtask. Barrier alignment, the watermark valve and channel state number the
channels across all gates — gate 0's first, then gate 1's, and so on
(:class:`ChannelNumbering`) — while a gate knows only its own. :class:`TaskInput` owns the
gates and that numbering: it polls them, says which input of the head operator a channel
feeds (a two-input operator has two), and blocks, resumes or prioritises by task-wide
channel.

Everything runs on the task thread, except :attr:`TaskInput.gates`, which metric collectors
read.
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from weir.proto import jobgraph_pb2
from weir.shuffle.api import BufferOrEvent, Event, InputGate, ShuffleEnvironment, TaskShuffleContext
from weir.taskexecutor.checkpointing import ALIGNED_PARTITIONERS


class ChannelNumbering:
    """The task-wide numbers of the channels of several gates, given each gate's number of
    channels: gate 0's channels come first, then gate 1's, and so on.

    Example:
        >>> numbering = ChannelNumbering([2, 3])
        >>> numbering.num_channels, numbering.gate_of(3), numbering.locate(3)
        (5, 1, (1, 1))
        >>> numbering.channel(1, 0), list(numbering.channels_of(1))
        (2, [2, 3, 4])
    """

    def __init__(self, gate_channels: Iterable[int]) -> None:
        #: Channels per gate, in gate order.
        self.gate_channels: tuple[int, ...] = tuple(gate_channels)
        offsets = []
        total = 0
        for count in self.gate_channels:
            offsets.append(total)
            total += count
        self._offsets = tuple(offsets)
        self.num_channels = total

    def gate_of(self, channel: int) -> int:
        """The gate of task-wide ``channel``; 0 for a channel outside the numbering (in-flight
        data recorded without the gates' sizes counts as the first gate's)."""
        if not 0 <= channel < self.num_channels:
            return 0
        return bisect.bisect_right(self._offsets, channel) - 1

    def locate(self, channel: int) -> tuple[int, int]:
        """(gate, channel within that gate) of task-wide ``channel``."""
        gate = self.gate_of(channel)
        return gate, channel - self._offsets[gate]

    def channel(self, gate: int, channel: int) -> int:
        """The task-wide number of ``gate``'s ``channel``."""
        return self._offsets[gate] + channel

    def channels_of(self, gate: int) -> range:
        """The task-wide numbers of ``gate``'s channels."""
        start = self._offsets[gate]
        return range(start, start + self.gate_channels[gate])


class Polled(NamedTuple):
    """What :meth:`TaskInput.poll` took: ``item`` of task-wide ``channel``, which feeds the
    head operator's input ``input_index``."""

    channel: int
    input_index: int
    item: BufferOrEvent


class TaskInput:
    """The input gates of one task, with their ``deployments`` (same order).

    Example (a task without inputs, a source's):
        >>> task_input = TaskInput([], [])
        >>> task_input.num_channels, task_input.poll(), task_input.is_finished()
        (0, None, True)
    """

    def __init__(self, gates: Sequence[InputGate],
                 deployments: Sequence[jobgraph_pb2.InputGateDeployment]) -> None:
        if len(gates) != len(deployments):
            msg = f"{len(gates)} input gates but {len(deployments)} deployments"
            raise ValueError(msg)
        #: The gates, in the order of the deployment descriptor (read by metric collectors).
        self.gates: list[InputGate] = list(gates)
        self.deployments = list(deployments)
        self.numbering = ChannelNumbering(len(d.channels) for d in deployments)
        #: Per gate, which input of the head operator it feeds (two-input operators).
        self._input_indexes = [d.input_index for d in deployments]

    @classmethod
    def open(cls, shuffle: ShuffleEnvironment, task: TaskShuffleContext,
             deployments: Sequence[jobgraph_pb2.InputGateDeployment]) -> TaskInput:
        """Create the gate of every deployment and start fetching, gate by gate (task
        thread, while the task initialises). Raises what creating or requesting raised,
        after closing the gates created so far."""
        gates: list[InputGate] = []
        try:
            for deployment in deployments:
                gate = shuffle.create_input_gate(task, deployment)
                gates.append(gate)
                gate.request_partitions()
        except BaseException:
            for gate in gates:
                with contextlib.suppress(Exception):
                    gate.close()
            raise
        return cls(gates, deployments)

    # -- numbering --------------------------------------------------------------------------

    @property
    def num_channels(self) -> int:
        return self.numbering.num_channels

    @property
    def gate_channels(self) -> list[int]:
        """Channels per gate (recorded with in-flight data, to share it out on rescaling)."""
        return list(self.numbering.gate_channels)

    def input_of(self, channel: int) -> int:
        """The head operator's input that task-wide ``channel`` feeds."""
        return self._input_indexes[self.numbering.gate_of(channel)] if self.gates else 0

    def aligned_channels(self) -> list[int]:
        """The channels of forward and broadcast edges: their barriers stay in band, even
        in unaligned checkpoints, and their data is never persisted."""
        return [channel for gate, deployment in enumerate(self.deployments)
                if deployment.partitioner in ALIGNED_PARTITIONERS
                for channel in self.numbering.channels_of(gate)]

    # -- reading ----------------------------------------------------------------------------

    def poll(self) -> Polled | None:
        """The next buffer or event of the first gate that has one, gates in order; None
        when none has anything now. Raises what a gate raises (a failed channel)."""
        for index, gate in enumerate(self.gates):
            if gate.is_finished():
                continue
            item = gate.poll_next()
            if item is not None:
                return Polled(self.numbering.channel(index, item.channel),
                              self._input_indexes[index], item)
        return None

    def poll_priority(self) -> Polled | None:
        """A priority event (an unaligned barrier) waiting at the head of any channel,
        taken; None when there is none. Cheap: the task asks between chunks of the records
        it processes, so that a barrier waits for a few records, not a whole buffer."""
        for index, gate in enumerate(self.gates):
            item = gate.poll_priority()
            if item is not None:
                return Polled(self.numbering.channel(index, item.channel),
                              self._input_indexes[index], item)
        return None

    def is_finished(self) -> bool:
        """Every channel of every gate delivered the end of its partition."""
        return all(gate.is_finished() for gate in self.gates)

    def set_batch_bytes(self, limit: int) -> None:
        """Every gate hands over up to ``limit`` bytes of a channel at once."""
        for gate in self.gates:
            gate.set_batch_bytes(limit)

    def maintain(self) -> None:
        """The gates' periodic housekeeping (every turn of the task loop)."""
        for gate in self.gates:
            gate.maintain()

    def next_retry(self) -> float | None:
        """When (``time.monotonic()``) a gate retries a partition request next, if any."""
        due = [retry for gate in self.gates
               if (retry := getattr(gate, "next_retry", lambda: None)()) is not None]
        return min(due) if due else None

    def seconds_until_retry(self) -> float | None:
        """How long the task may sleep before a gate's next retry (at least 1 ms)."""
        due = self.next_retry()
        return None if due is None else max(0.001, due - time.monotonic())

    # -- what checkpoints do to the input ---------------------------------------------------

    def block(self, channel: int) -> None:
        """Take nothing but priority events from task-wide ``channel`` until resumed."""
        gate, local = self.numbering.locate(channel)
        self.gates[gate].block_consumption(local)

    def resume(self, channels: Iterable[int]) -> None:
        """Take data from these task-wide channels again."""
        for channel in channels:
            gate, local = self.numbering.locate(channel)
            self.gates[gate].resume_consumption(local)

    def prioritize_barrier(self, event: Event) -> None:
        """Move barrier ``event`` ahead of the data queued before it, in every gate whose
        barriers may overtake data (not forward or broadcast edges)."""
        for gate, deployment in zip(self.gates, self.deployments, strict=True):
            if deployment.partitioner not in ALIGNED_PARTITIONERS:
                gate.prioritize_event(event)

    def close(self) -> None:
        """Close every gate, going on past failures (task thread, when the task ends)."""
        for gate in self.gates:
            with contextlib.suppress(Exception):
                gate.close()
