"""Checkpoint barriers and the other in-band events of checkpointing, as they travel
through the shuffle (event type + opaque payload).

A barrier carries its checkpoint id, the trigger timestamp (the aligned-checkpoint timeout
is measured from it) and the checkpoint's options. ``END_OF_DATA`` tells a consumer that
its producer read all its input and finished its operators, but still takes part in
checkpoints until the final one completed (FLIP-147); end of partition follows later.

Example:
    >>> b = CheckpointBarrier(7, 1_700_000_000_000, CheckpointOptions(unaligned=True))
    >>> CheckpointBarrier.from_event(b.to_event()) == b
    True
    >>> b.to_event().type
    'checkpoint-barrier'
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from weir.core.ids import CheckpointId
from weir.proto.checkpoint_pb2 import CheckpointOptions
from weir.shuffle.api import Event

BARRIER_EVENT = "checkpoint-barrier"
END_OF_DATA_EVENT = "end-of-data"

_HEADER = struct.Struct(">qq")


@dataclass(frozen=True)
class CheckpointBarrier:
    """Barrier ``checkpoint_id``: everything before it on a channel belongs to the
    checkpoint, everything after it does not."""

    checkpoint_id: CheckpointId
    timestamp_ms: int
    options: CheckpointOptions

    def to_event(self) -> Event:
        return Event(BARRIER_EVENT, _HEADER.pack(self.checkpoint_id, self.timestamp_ms)
                     + self.options.SerializeToString(deterministic=True))

    @staticmethod
    def from_event(event: Event) -> CheckpointBarrier:
        checkpoint_id, timestamp = _HEADER.unpack_from(event.payload)
        options = CheckpointOptions.FromString(event.payload[_HEADER.size:])
        return CheckpointBarrier(CheckpointId(checkpoint_id), timestamp, options)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, CheckpointBarrier)
                and (self.checkpoint_id, self.timestamp_ms) == (other.checkpoint_id,
                                                                 other.timestamp_ms)
                and self.options == other.options)

    def __hash__(self) -> int:
        return hash((self.checkpoint_id, self.timestamp_ms))

    @property
    def timeoutable(self) -> bool:
        """Aligned, but switches to unaligned after ``options.aligned_timeout_ms``."""
        return not self.options.unaligned and self.options.aligned_timeout_ms > 0


def end_of_data_event() -> Event:
    return Event(END_OF_DATA_EVENT)
