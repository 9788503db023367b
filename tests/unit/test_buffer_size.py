"""A network buffer carries at most the buffer size: batches are cut at record boundaries,
in order and with their timestamps; a record larger than a buffer travels alone; a
debloated size is honoured; a subpartition's capacity in buffers bounds it in bytes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from weir.core.records import Elements
from weir.shuffle.api import Event
from weir.shuffle.pipelined.partition import Buffer, PipelinedResultPartition, Subpartition

SEGMENT = 32 * 1024


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


def test_a_large_arrow_batch_spans_buffers_of_at_most_a_segment_in_order() -> None:
    p = partition()
    batch = wide_arrow(20_000)                            # 1.5 MB: ~47 segments
    stamps = np.arange(20_000, dtype=np.int64) * 10
    p.emit(0, Elements.from_arrow(batch, stamps))
    p.flush_all()
    got = buffers(p.subpartitions[0])
    assert len(got) >= batch.nbytes // SEGMENT
    assert all(b.size <= SEGMENT for b in got)
    pieces = [e for b in got for e in b.elements or ()]
    # Zero-copy slices whose real size is the estimate's, within a few offset bytes.
    assert all(e.arrow().nbytes + 8 * len(e) <= SEGMENT + 64 for e in pieces)
    joined = pa.Table.from_batches([e.arrow() for e in pieces]).combine_chunks()
    assert joined.to_batches()[0].equals(batch)
    assert np.array_equal(np.concatenate([e.timestamps for e in pieces]), stamps)


def test_a_large_records_batch_spans_buffers_of_at_most_a_segment_in_order() -> None:
    p = partition()
    records = [(i, "x" * 64) for i in range(10_000)]
    stamps = np.arange(10_000, dtype=np.int64)
    p.emit(0, Elements.from_records(records, timestamps=stamps))
    p.flush_all()
    got = buffers(p.subpartitions[0])
    assert len(got) > 10
    assert all(b.size <= SEGMENT for b in got)
    pieces = [e for b in got for e in b.elements or ()]
    assert [r for e in pieces for r in e.records()] == records
    assert np.array_equal(np.concatenate([e.timestamps for e in pieces]), stamps)
    # The estimate is what the records take in Arrow, with their timestamps.
    assert all(e.wire_batch().nbytes <= SEGMENT + 64 for e in pieces)


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
