"""Input a task has taken but not processed yet, handed to its operators in chunks.

A buffer from an input gate, a batch from a source reader or a batch of restored in-flight
data holds up to thousands of records; processed whole, it would keep the task from its
mailbox (a source's checkpoint trigger, cancellation) and from priority events (an
unaligned barrier) for as long as all of them take. :class:`PendingInput` queues what was
taken and hands it out in chunks sized so that a chunk takes about ``target_s`` to process
(it measures the chain's cost per record as it goes): between two chunks the task turns its
loop, so a barrier waits for a few records — one, when a record takes longer than the
target — not for a buffer. Fast records go in large chunks, so the loop's own cost stays
small. A chunk is also cut so that its output stays within ``output_target_bytes`` (a
network buffer): the task checks its outputs for room between chunks only, so what one
chunk emits is what an output may hold beyond its capacity.

A chain of vectorised operators only (``chunked`` False) gets whole batches: their cost
grows with every piece a batch is cut into (a keyed aggregation's work per batch grows
with the distinct keys in it), a batch takes them milliseconds, and what a channel holds
(its credit) and the source's batch size bound it.

What a checkpoint needs of the queue: the batches of one channel not processed yet (a
priority barrier of that channel overtook them in its queue: they were sent before it, so
they are in-flight data of the checkpoint), or all of it (a source's trigger: its reader's
position is past them, unless it rewinds: ``SourceReader.snapshot_state_unread``).

Example:
    >>> from weir.core.records import Elements
    >>> pending = PendingInput(target_s=0.002, initial_records=2)
    >>> pending.add(channel=0, input_index=0, batches=[Elements.from_records([1, 2, 3])],
    ...             nbytes=30)
    >>> chunk = pending.next_chunk()
    >>> chunk.elements.records(), chunk.nbytes
    ([1, 2], 20)
    >>> [e.records() for e in pending.of_channel(0)]
    [[3]]
    >>> pending.record_cost(2, 0.004)   # 2 ms a record: one record a chunk from now on
    >>> pending.next_chunk().elements.records(), bool(pending)
    ([3], False)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from weir.core.records import Elements

#: How long a chunk should take to process (seconds): the longest a barrier or a mail waits
#: behind records that take less than that each.
CHUNK_TARGET_S = 0.002
#: The first chunk of a task: one record, as the cost of its records is not known yet (a
#: chunk's output leaves when the chunk is done, so the first record of a slow job must
#: not wait for the next 15). Growth reaches full size within a few chunks.
INITIAL_CHUNK_RECORDS = 1
#: The largest chunk (a vectorised chain may get through a whole buffer in the target).
MAX_CHUNK_RECORDS = 1 << 16
#: A chunk grows at most this many times per measurement (one fast chunk is no proof).
_MAX_GROWTH = 8


@dataclass(slots=True)
class Chunk:
    """Records of ``channel`` (feeding the head operator's input ``input_index``) to
    process now; ``nbytes``: their share of the bytes their buffer took on the wire."""

    channel: int
    input_index: int
    elements: Elements
    nbytes: int


@dataclass(slots=True)
class _Entry:
    channel: int
    input_index: int
    elements: Elements
    nbytes: int
    #: Records of ``elements`` handed out already.
    offset: int = 0

    def rest(self) -> Elements:
        return self.elements.slice(self.offset, len(self.elements) - self.offset)


class PendingInput:
    """The task's taken-but-unprocessed input, in the order it was taken. Task thread
    only."""

    def __init__(self, target_s: float = CHUNK_TARGET_S,
                 initial_records: int = INITIAL_CHUNK_RECORDS,
                 max_records: int = MAX_CHUNK_RECORDS, *, chunked: bool = True,
                 output_target_bytes: int | None = None) -> None:
        self._entries: deque[_Entry] = deque()
        self._target_s = target_s
        #: The most a chunk should emit (the segment size): the task checks its outputs
        #: for room between chunks, so one chunk's output is what a subpartition may hold
        #: beyond its capacity, and an unaligned checkpoint persist on top of it.
        self._output_target = output_target_bytes
        self._max = max_records
        #: False: every batch is handed out whole (a vectorised chain).
        self.chunked = chunked
        #: Records per chunk, adapted to the measured cost of a record.
        self.chunk_records = max(1, min(initial_records, max_records))

    def __bool__(self) -> bool:
        return bool(self._entries)

    def add(self, channel: int, input_index: int, batches: Iterable[Elements],
            nbytes: int = 0) -> None:
        """Queue ``batches`` taken from ``channel`` (``nbytes`` on the wire in all)."""
        batches = [b for b in batches if len(b)]
        records = sum(len(b) for b in batches)
        for batch in batches:
            share = nbytes * len(batch) // records if records else 0
            self._entries.append(_Entry(channel, input_index, batch, share))

    def next_chunk(self) -> Chunk | None:
        """The next records to process, taken from the queue (None when it is empty)."""
        if not self._entries:
            return None
        entry = self._entries[0]
        size = len(entry.elements)
        count = min(self.chunk_records, size - entry.offset) if self.chunked else size
        if entry.offset == 0 and count == size:
            self._entries.popleft()
            return Chunk(entry.channel, entry.input_index, entry.elements, entry.nbytes)
        elements = entry.elements.slice(entry.offset, count)
        nbytes = entry.nbytes * count // size
        entry.offset += count
        if entry.offset == size:
            self._entries.popleft()
        return Chunk(entry.channel, entry.input_index, elements, nbytes)

    def record_cost(self, records: int, seconds: float, output_bytes: int = 0) -> None:
        """A chunk of ``records`` took ``seconds`` to process and emitted ``output_bytes``:
        size the next ones to take about the target time, and to emit at most the output
        target (at once: a chunk that emitted too much is not repeated)."""
        if records <= 0 or not self.chunked:
            return
        if seconds <= 0:
            wanted = self.chunk_records * _MAX_GROWTH
        else:
            wanted = int(self._target_s * records / seconds)
        # Halfway towards what this chunk suggests: one outlier moves the size only so far.
        wanted = min(wanted, self.chunk_records * _MAX_GROWTH)
        size = (self.chunk_records + wanted) // 2
        if self._output_target is not None and output_bytes > 0:
            size = min(size, records * self._output_target // output_bytes)
        self.chunk_records = max(1, min(self._max, size))

    def of_channel(self, channel: int) -> list[Elements]:
        """What of ``channel`` was taken and not processed yet, in order."""
        return [entry.rest() for entry in self._entries if entry.channel == channel]

    def everything(self) -> list[tuple[int, Elements]]:
        """All that was taken and not processed yet, in order, with its channels."""
        return [(entry.channel, entry.rest()) for entry in self._entries]

    def records(self) -> int:
        """How many records wait."""
        return sum(len(entry.elements) - entry.offset for entry in self._entries)
