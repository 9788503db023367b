"""Routes a task's output batches to the subpartitions of its result partitions.

Partitioners are Flink's: forward (same subtask index), rebalance (round robin, here per
batch), hash (key group of each record -> the subtask owning it) and broadcast.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from weir.core.records import Elements, encode_watermark
from weir.proto import common_pb2
from weir.shuffle.api import Event, ResultPartitionWriter
from weir.state.key_groups import operator_indexes


class KeyGroupSelector(Protocol):
    """What a hash partitioner needs of a key selector (``weir.operators.keys.KeySpec`` is one)."""

    def key_groups(self, elements: Elements, max_parallelism: int) -> np.ndarray:
        """The key group of every record of ``elements``, in order."""
        ...


#: Event types of the in-band watermark events.
WATERMARK_EVENT = "watermark"
WATERMARK_STATUS_EVENT = "watermark-status"


class RecordWriter:
    """Partitions batches for one result partition. Used on the task thread only."""

    def __init__(self, writer: ResultPartitionWriter, partitioner: int,
                 key: KeyGroupSelector | None, max_parallelism: int, subtask_index: int,
                 side_output: str = "") -> None:
        self.writer = writer
        #: The side output (OutputTag id) this partition carries; "" for the main output.
        self.side_output = side_output
        self._partitioner = partitioner
        self._key = key
        self._max_parallelism = max_parallelism
        self._n = writer.num_subpartitions
        # Start round robin at a different target per producer, so producers spread out.
        self._next = subtask_index % self._n if self._n else 0

    def emit(self, elements: Elements) -> None:
        n = self._n
        if n == 1 or self._partitioner == common_pb2.FORWARD:
            self.writer.emit(0, elements)
        elif self._partitioner == common_pb2.BROADCAST:
            for target in range(n):
                self.writer.emit(target, elements)
        elif self._partitioner == common_pb2.REBALANCE:
            self.writer.emit(self._next, elements)
            self._next = (self._next + 1) % n
        else:
            assert self._key is not None
            groups = self._key.key_groups(elements, self._max_parallelism)
            targets = operator_indexes(groups, self._max_parallelism, n)
            for target, part in split_by_target(elements, targets, n):
                self.writer.emit(target, part)

    def broadcast_watermark(self, watermark: int) -> None:
        """Send a watermark to every consumer, in order after the data emitted so far."""
        self.writer.broadcast_event(Event(WATERMARK_EVENT, encode_watermark(watermark)))

    def broadcast_watermark_status(self, idle: bool) -> None:
        self.writer.broadcast_event(Event(WATERMARK_STATUS_EVENT, b"idle" if idle else b"active"))


#: Up to this many targets, one pass per target (``flatnonzero``) beats sorting.
_SCAN_TARGETS = 4


def split_by_target(elements: Elements, targets: np.ndarray,
                    n: int) -> list[tuple[int, Elements]]:
    """Split a batch into one batch per target subtask, keeping record order."""
    counts = np.bincount(targets, minlength=n)
    nonzero = np.flatnonzero(counts).tolist()
    if len(nonzero) == 1:
        return [(nonzero[0], elements)]
    if len(nonzero) <= _SCAN_TARGETS:
        positions = [np.flatnonzero(targets == target) for target in nonzero]
    else:
        # A stable sort of 16-bit values is a radix sort: linear, not n log n.
        order = np.argsort(targets.astype(np.int16 if n < 1 << 15 else np.int32),
                           kind="stable")
        bounds = np.concatenate(([0], np.cumsum(counts)))
        positions = [order[bounds[target]:bounds[target + 1]] for target in nonzero]
    take_ts = elements.take_timestamps
    if elements.is_arrow:
        batch = elements.arrow()
        return [(target, Elements.from_arrow(batch.take(indices), take_ts(indices)))
                for target, indices in zip(nonzero, positions, strict=True)]
    records = elements.records()
    return [(target, Elements.from_records([records[i] for i in indices.tolist()],
                                           elements.type_info, take_ts(indices)))
            for target, indices in zip(nonzero, positions, strict=True)]
