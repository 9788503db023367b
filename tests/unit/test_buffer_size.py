"""A buffer carries at most the buffer size, or a piece of a larger batch of up to
MAX_SEGMENTS_PER_BUFFER segments: batches are cut at record boundaries, in order and with
their timestamps; a record larger than a buffer travels alone; a debloated size is
honoured; a subpartition's capacity in segments bounds it in bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from tests.support.pipelined_shuffle import channel, wait_for
from weir.core.records import Elements
from weir.shuffle.api import Event
from weir.shuffle.pipelined.client import FloatingBufferPool
from weir.shuffle.pipelined.gate import LocalInputChannel, PipelinedInputGate
from weir.shuffle.pipelined.partition import (
    MAX_SEGMENTS_PER_BUFFER,
    Buffer,
    PartitionManager,
    PipelinedResultPartition,
    Subpartition,
)

SEGMENT = 32 * 1024
SPAN = MAX_SEGMENTS_PER_BUFFER * SEGMENT


def partition(capacity: int = 10_000, segment: int = SEGMENT) -> PipelinedResultPartition:
    return PipelinedResultPartition("p", "job", 1, capacity, segment, lambda: None)


def buffers(sub: Subpartition) -> list[Buffer]:
    out = []
    while (buffer := sub.poll()) is not None:
        out.append(buffer)
    return out


def wide_arrow(rows: int, start: int = 0) -> pa.RecordBatch:
    return pa.record_batch({"n": np.arange(start, start + rows, dtype=np.int64),
                            "s": [f"{i:064d}" for i in range(start, start + rows)]})


def test_a_large_arrow_batch_travels_in_pieces_of_at_most_a_span_in_order() -> None:
    p = partition()
    batch = wide_arrow(20_000)                            # 1.5 MB: ~47 segments
    stamps = np.arange(20_000, dtype=np.int64) * 10
    p.emit(0, Elements.from_arrow(batch, stamps))
    p.flush_all()
    got = buffers(p.subpartitions[0])
    assert len(got) >= batch.nbytes // SPAN
    assert all(b.size <= SPAN for b in got)
    # Each counts the segments it spans.
    assert [b.units for b in got[:-1]] == [MAX_SEGMENTS_PER_BUFFER] * (len(got) - 1)
    pieces = [e for b in got for e in b.elements or ()]
    # Zero-copy slices whose real size is the estimate's, within a few offset bytes.
    assert all(e.arrow().nbytes + 8 * len(e) <= SPAN + 64 for e in pieces)
    joined = pa.Table.from_batches([e.arrow() for e in pieces]).combine_chunks()
    assert joined.to_batches()[0].equals(batch)
    assert np.array_equal(np.concatenate([e.timestamps for e in pieces]), stamps)


def test_a_large_records_batch_travels_in_pieces_of_at_most_a_span_in_order() -> None:
    p = partition()
    records = [(i, "x" * 64) for i in range(10_000)]       # 760 KB: ~23 segments
    stamps = np.arange(10_000, dtype=np.int64)
    p.emit(0, Elements.from_records(records, timestamps=stamps))
    p.flush_all()
    got = buffers(p.subpartitions[0])
    assert len(got) >= 3
    assert all(b.size <= SPAN for b in got)
    pieces = [e for b in got for e in b.elements or ()]
    assert [r for e in pieces for r in e.records()] == records
    assert np.array_equal(np.concatenate([e.timestamps for e in pieces]), stamps)
    # The estimate is what the records take in Arrow, with their timestamps.
    assert all(e.wire_batch().nbytes <= SPAN + 64 for e in pieces)


def test_batches_fill_a_buffer_before_it_is_handed_over_and_keep_their_order() -> None:
    p = partition()
    for i in range(100):                                   # 100 batches of 50 records
        p.emit(0, Elements.from_records([(i * 50 + j, "y" * 64) for j in range(50)]))
    p.flush_all()
    got = buffers(p.subpartitions[0])
    assert [r[0] for b in got for e in b.elements or () for r in e.records()] == \
        list(range(5000))
    assert all(b.size <= SEGMENT for b in got)
    # Every buffer but the last is full: no record of this size would have fitted.
    assert all(b.size > SEGMENT - 76 for b in got[:-1])
    assert all(len(b.elements or ()) == 1 for b in got)   # one batch a buffer


def test_a_record_larger_than_a_segment_travels_alone() -> None:
    p = partition()
    p.emit(0, Elements.from_records([(1, "small")]))
    p.emit(0, Elements.from_records([(2, "z" * (2 * SEGMENT))]))
    p.emit(0, Elements.from_records([(3, "small")]))
    huge = Elements.from_arrow(pa.record_batch({"b": [b"a" * SEGMENT, b"b" * SEGMENT]}))
    p.emit(0, huge)
    p.flush_all()
    got = [[r[0][:1] if isinstance(r[0], bytes) else r[0] for e in b.elements or ()
            for r in e.records()] for b in buffers(p.subpartitions[0])]
    assert got == [[1], [2], [3], [b"a"], [b"b"]]


def test_a_debloated_buffer_size_is_honoured() -> None:
    p = partition()
    sub = p.subpartitions[0]
    sub.flush_size = 4096                                  # announced by the consumer
    p.emit(0, Elements.from_arrow(wide_arrow(5000)))
    p.flush_all()
    got = buffers(sub)
    assert len(got) > 80 and all(b.size <= 4096 for b in got)
    assert sum(len(e) for b in got for e in b.elements or ()) == 5000


def test_a_subpartition_of_capacity_4_holds_at_most_4_segments() -> None:
    p = partition(capacity=4)
    sub = p.subpartitions[0]
    emitted = 0
    while p.is_available():                               # the task's check between units
        p.emit(0, Elements.from_records([(emitted + j, "w" * 64) for j in range(100)]))
        emitted += 100
    # A unit of work may end past the capacity: what it emitted is at most a buffer.
    queued = sum(b.size for b in list(sub._queue))
    assert sub.backlog() == 4
    assert queued <= 4 * SEGMENT
    # A barrier's flush adds the partly filled buffer: still at most 4 segments and the
    # unit's share, and the barrier overtakes exactly that.
    overtaken = p.broadcast_event(Event("checkpoint-barrier", b"1"), priority=True)[0]
    assert sum(e.estimated_bytes() for e in overtaken) <= 4 * SEGMENT + 100 * 76
    assert [r[0] for e in overtaken for r in e.records()] == list(range(emitted))


def test_a_subpartition_holds_one_oversize_record_beyond_its_segments() -> None:
    p = partition(capacity=4)
    sub = p.subpartitions[0]
    for i in range(3):
        p.emit(0, Elements.from_records([(i, "v" * (SEGMENT - 100))]))
    assert p.is_available()
    p.emit(0, Elements.from_records([(3, "u" * (5 * SEGMENT))]))  # one record, 5 segments
    assert not p.is_available() and sub.backlog() == 4
    assert sum(b.size for b in list(sub._queue)) <= 3 * SEGMENT + 5 * SEGMENT + 100


def test_concat_keeps_order_timestamps_and_refuses_what_cannot_join() -> None:
    a = Elements.from_records([1, 2], timestamps=np.array([10, 20]))
    b = Elements.from_records([3], timestamps=np.array([30]))
    joined = Elements.concat([a, b])
    assert joined is not None and joined.records() == [1, 2, 3]
    assert list(joined.timestamps) == [10, 20, 30]
    assert Elements.concat([a, Elements.from_records([4])]) is None   # stamps on one only
    x = Elements.from_arrow(pa.record_batch({"x": [1]}))
    y = Elements.from_arrow(pa.record_batch({"y": ["a"]}))
    assert Elements.concat([x, y]) is None                            # two schemas
    assert Elements.concat([x, x]).arrow().column("x").to_pylist() == [1, 1]  # type: ignore[union-attr]


# --- the consumer: small buffers of one channel reach the task together ----------------------


def eager(partitions: PartitionManager, pid: str) -> PipelinedResultPartition:
    """A producer whose every batch is a buffer (a small one here)."""
    part = PipelinedResultPartition(pid, "job", 1, 10_000, SEGMENT, lambda: None)
    partitions.register(part)
    return part


def emit_flushed(part: PipelinedResultPartition, start: int, rows: int = 10) -> None:
    part.emit(0, Elements.from_records([(start + i, "r" * 64) for i in range(rows)]))
    part.flush_all()


def two_channels_polled(batch_bytes: int | None = None) -> list[Any]:
    """What a gate of two local channels delivers: 60 buffers of 760 bytes on channel a,
    10 records on b, then on a an event and 10 more records (``batch_bytes``: what the task
    asked the gate to join at most; by default a segment)."""
    partitions = PartitionManager()
    a, b = eager(partitions, "a"), eager(partitions, "b")
    gate = PipelinedInputGate([LocalInputChannel(partitions, pid, 0, lambda: None, 0.01, 1.0)
                               for pid in ("a", "b")], FloatingBufferPool(0),
                              batch_bytes=SEGMENT)
    if batch_bytes is not None:
        gate.set_batch_bytes(batch_bytes)
    gate.request_partitions()
    for i in range(60):
        emit_flushed(a, 10 * i)
    emit_flushed(b, 1000)
    a.broadcast_event(Event("watermark", b"1"))           # joining stops at an event
    emit_flushed(a, 600)
    items = []
    while (item := gate.poll_next()) is not None:
        items.append(item)
    return items


def data_of(items: list[Any]) -> list[tuple[int, list[int], int]]:
    """(channel, record numbers, size) of each data item delivered."""
    return [(i.channel, [r[0] for e in i.elements or () for r in e.records()], i.size)
            for i in items if i.elements]


def test_a_gate_hands_small_buffers_of_one_channel_over_together_up_to_a_segment() -> None:
    items = two_channels_polled()
    data = data_of(items)
    # Channel a: 43 buffers make a segment (43 x 760 <= 32 KiB), then the other 17; the
    # batch after the event comes on its own. Channel b in between, never mixed in.
    assert [(c, len(records)) for c, records, _ in data] == [(0, 430), (1, 10), (0, 170),
                                                             (0, 10)]
    assert all(size <= SEGMENT for *_, size in data)
    assert [r for c, records, _ in data if c == 0 for r in records] == list(range(610))
    assert all(len(i.elements or ()) == 1 for i in items if i.elements)  # one batch
    assert [(i.channel, i.event.type if i.event else "data") for i in items] == [
        (0, "data"), (1, "data"), (0, "data"), (0, "watermark"), (0, "data")]


def test_a_fast_vectorised_task_takes_more_of_a_channel_up_to_an_event() -> None:
    items = two_channels_polled(batch_bytes=1 << 20)
    data = data_of(items)
    # Channel a's 60 buffers, beyond a segment, as one batch; channel b's; after the event,
    # the last one of a.
    assert [(c, len(records)) for c, records, _ in data] == [(0, 600), (1, 10), (0, 10)]
    assert [r for c, records, _ in data if c == 0 for r in records] == list(range(610))
    assert all(len(i.elements or ()) == 1 for i in items if i.elements)


def test_a_remote_channel_takes_only_data_that_fits(plane) -> None:
    partitions, server, connections = plane
    part = eager(partitions, "r")
    ch, _ = channel(server, connections, pid="r", exclusive=8)
    ch.request()
    emit_flushed(part, 0)
    emit_flushed(part, 10, rows=100)
    part.broadcast_event(Event("watermark", b"1"))
    emit_flushed(part, 200)
    wait_for(lambda: ch.queued() == 3 and any(getattr(b, "event", None) for b in list(ch._queue))
             and len(ch._queue) >= 5, what="everything to arrive")
    assert ch.take(max_size=100) is None                  # the first batch is larger
    first = ch.take(max_size=SEGMENT)
    assert first is not None and len(first.elements[0]) == 10
    assert ch.take(max_size=1000) is None                 # 100 records do not fit in 1000 B
    assert len(ch.take(max_size=SEGMENT).elements[0]) == 100
    assert ch.take(max_size=SEGMENT) is None              # an event is next: left for take()
    assert ch.take().event == Event("watermark", b"1")
    assert len(ch.take(max_size=SEGMENT).elements[0]) == 10
