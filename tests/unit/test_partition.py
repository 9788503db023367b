"""Pipelined result partitions: buffering, flushing, backpressure, end and failure."""

from __future__ import annotations

import threading
import time

import pytest

from weir.core.errors import PartitionNotFoundError
from weir.core.records import ESTIMATED_RECORD_BYTES, Elements
from weir.shuffle.pipelined.partition import (
    MAX_SEGMENTS_PER_BUFFER,
    PartitionManager,
    PipelinedResultPartition,
    ProducerFailedError,
    Subpartition,
)

RECORD = ESTIMATED_RECORD_BYTES


class Wakeups:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def partition(n: int = 2, capacity: int = 2, segment_size: int = 10 * RECORD,
              wakeup=None) -> PipelinedResultPartition:
    return PipelinedResultPartition("p1", "job", n, capacity, segment_size,
                                    wakeup or (lambda: None))


def batch(n: int, start: int = 0) -> Elements:
    return Elements.from_records(list(range(start, start + n)))


def drain(sub: Subpartition) -> list:
    """Every record in the buffers queued so far."""
    out = []
    while (buffer := sub.poll()) is not None:
        assert not buffer.end_of_partition
        out.extend(r for e in buffer.elements for r in e.records())
    return out


def test_batches_wait_until_a_segment_is_full() -> None:
    p = partition(segment_size=10 * RECORD)
    p.emit(0, batch(4))
    p.emit(0, batch(5, 4))
    assert p.subpartitions[0].backlog() == 0
    p.emit(0, batch(1, 9))  # 10 records * RECORD bytes: a full segment
    sub = p.subpartitions[0]
    assert sub.backlog() == 1
    buffer = sub.poll()
    assert [len(e) for e in buffer.elements] == [10]  # one batch a buffer
    assert buffer.size == 10 * RECORD
    assert [r for e in buffer.elements for r in e.records()] == list(range(10))
    assert p.subpartitions[1].backlog() == 0


def test_flush_all_hands_over_partial_buffers() -> None:
    p = partition(n=3)
    p.emit(0, batch(1))
    p.emit(2, batch(2))
    p.flush_all()
    assert [s.backlog() for s in p.subpartitions] == [1, 0, 1]
    assert drain(p.subpartitions[2]) == [0, 1]
    p.flush_all()  # nothing pending: no empty buffers
    assert [s.backlog() for s in p.subpartitions] == [1, 0, 0]


def test_oldest_pending_age() -> None:
    p = partition()
    assert p.oldest_pending_age() is None
    before = time.monotonic()
    p.emit(0, batch(1))
    after = time.monotonic()
    now = time.monotonic()
    age = p.oldest_pending_age()
    assert now - after <= age <= time.monotonic() - before
    p.emit(1, batch(1))
    # Still measured from the first pending batch, not the latest.
    now = time.monotonic()
    assert p.oldest_pending_age() >= now - after
    assert p.oldest_pending_age() >= age
    p.flush_all()
    assert p.oldest_pending_age() is None


def test_pending_age_resets_when_a_full_segment_empties_everything() -> None:
    p = partition(segment_size=2 * RECORD)
    p.emit(0, batch(1))
    assert p.oldest_pending_age() is not None
    p.emit(0, batch(1))  # flushes the only pending subpartition
    assert p.oldest_pending_age() is None


def test_backpressure_and_producer_wakeup() -> None:
    wakeups = Wakeups()
    p = partition(n=2, capacity=2, segment_size=RECORD, wakeup=wakeups)
    assert p.is_available()
    p.emit(1, batch(1))
    assert p.is_available()
    p.emit(1, batch(1, 1))
    assert p.subpartitions[1].backlog() == 2
    assert not p.is_available()  # one full subpartition holds the producer back
    assert wakeups.count == 0
    assert p.subpartitions[0].poll() is None  # the other consumer polling changes nothing
    assert not p.is_available()
    assert p.subpartitions[1].poll().elements[0].records() == [0]
    assert p.is_available()
    assert wakeups.count == 1  # called on the full -> not full transition
    assert p.subpartitions[1].poll().elements[0].records() == [1]
    assert wakeups.count == 1  # not again for further polls


def test_overfilled_subpartition_wakes_the_producer_once_below_capacity() -> None:
    wakeups = Wakeups()
    p = partition(n=1, capacity=2, segment_size=RECORD, wakeup=wakeups)
    for i in range(4):  # the producer may overshoot: it only checks between batches
        p.emit(0, batch(1, i))
    sub = p.subpartitions[0]
    sub.poll()
    sub.poll()
    assert not p.is_available()
    assert wakeups.count == 0
    sub.poll()
    assert p.is_available()
    assert wakeups.count == 1


def test_a_large_batch_travels_in_pieces_of_several_segments_counted_as_segments() -> None:
    wakeups = Wakeups()
    span = MAX_SEGMENTS_PER_BUFFER
    p = partition(n=1, capacity=4, segment_size=10 * RECORD, wakeup=wakeups)
    p.emit(0, batch(3))                       # pending: 3 records
    p.emit(0, batch(10 * span + 15, 3))      # a whole span and a piece of 15 records
    sub = p.subpartitions[0]
    # The pending 3 records went out first, alone; then a piece of a whole span and one of
    # 15 records (1.5 segments, so two), and nothing stays pending.
    sizes = [b.size for b in list(sub._queue)]
    units = [b.units for b in list(sub._queue)]
    assert sizes == [3 * RECORD, 10 * span * RECORD, 15 * RECORD]
    assert units == [1, span, 2]
    assert sub.backlog() == 1 + span + 2 and not p.is_available()
    assert drain(sub) == list(range(10 * span + 18))  # in order, nothing lost
    assert sub.backlog() == 0 and p.is_available() and wakeups.count == 1


def test_a_small_rest_of_a_large_batch_waits_for_more() -> None:
    p = partition(n=1, capacity=100, segment_size=10 * RECORD)
    p.emit(0, batch(13))  # a piece of 13 records: 2 segments, alone
    sub = p.subpartitions[0]
    assert [(b.size, b.units) for b in sub._queue] == [(13 * RECORD, 2)]
    p.emit(0, batch(10 * MAX_SEGMENTS_PER_BUFFER + 4, 13))  # a span, and 4 left pending
    assert [b.units for b in sub._queue] == [2, MAX_SEGMENTS_PER_BUFFER]
    p.flush_all()
    assert [b.units for b in sub._queue] == [2, MAX_SEGMENTS_PER_BUFFER, 1]
    assert drain(sub) == list(range(10 * MAX_SEGMENTS_PER_BUFFER + 17))


def test_a_record_larger_than_a_segment_counts_as_one_and_debloating_keeps_buffers_small(
        ) -> None:
    p = partition(n=1, capacity=100, segment_size=RECORD)
    big = Elements.from_records(["x" * (5 * RECORD)] * 3)  # records of 5 segments each
    p.emit(0, big)
    sub = p.subpartitions[0]
    assert [b.units for b in sub._queue] == [1, 1, 1]  # one record a buffer, one each
    drain(sub)
    q = partition(n=1, capacity=100, segment_size=10 * RECORD)
    q.subpartitions[0].flush_size = 4 * RECORD  # a debloating consumer asked for 4 records
    q.emit(0, batch(30))
    assert [(b.size, b.units) for b in q.subpartitions[0]._queue] == [(4 * RECORD, 1)] * 7
    q.flush_all()
    assert drain(q.subpartitions[0]) == list(range(30))


def test_consumer_listener_is_called_for_data_and_on_subscribe() -> None:
    p = partition(n=1, segment_size=RECORD)
    calls = Wakeups()
    p.emit(0, batch(1))
    p.subpartitions[0].subscribe(calls)
    assert calls.count == 1  # data was already waiting
    p.emit(0, batch(1))
    assert calls.count == 2
    p.subpartitions[0].subscribe(None)
    p.emit(0, batch(1))
    assert calls.count == 2


def test_end_of_partition() -> None:
    p = partition(n=2)
    p.emit(0, batch(3))
    p.finish()
    assert p.finished
    for index, expected in [(0, [0, 1, 2]), (1, [])]:
        sub = p.subpartitions[index]
        assert drain_until_end(sub) == expected
        assert sub.consumed
        assert sub.poll() is None


def drain_until_end(sub: Subpartition) -> list:
    out = []
    while True:
        buffer = sub.poll()
        assert buffer is not None, "end of partition missing"
        if buffer.end_of_partition:
            assert buffer.elements is None
            return out
        out.extend(r for e in buffer.elements for r in e.records())


def test_failure_reaches_the_consumer_after_the_data() -> None:
    p = partition(n=2, segment_size=RECORD)
    p.emit(0, batch(1))
    p.fail(RuntimeError("boom"))
    assert p.subpartitions[0].poll().elements[0].records() == [0]
    for sub in p.subpartitions:
        with pytest.raises(ProducerFailedError, match=r"boom"):
            sub.poll()


def test_failure_wakes_a_waiting_consumer() -> None:
    p = partition(n=1)
    sub = p.subpartitions[0]
    errors = []
    started = threading.Event()

    def consume() -> None:
        started.set()
        try:
            sub.poll(timeout=30)
        except ProducerFailedError as err:
            errors.append(err)

    thread = threading.Thread(target=consume)
    thread.start()
    assert started.wait(5)
    p.fail(RuntimeError("producer died"))
    thread.join(10)
    assert not thread.is_alive()
    assert len(errors) == 1


def test_poll_waits_for_data() -> None:
    p = partition(n=1, segment_size=RECORD)
    sub = p.subpartitions[0]
    got = []
    thread = threading.Thread(target=lambda: got.append(sub.poll(timeout=30)))
    thread.start()
    p.emit(0, batch(1, 42))
    thread.join(10)
    assert not thread.is_alive()
    assert got[0].elements[0].records() == [42]


def test_release_drops_buffers_and_unblocks_the_producer() -> None:
    p = partition(n=1, capacity=1, segment_size=RECORD)
    p.emit(0, batch(1))
    assert not p.is_available()
    p.release()
    assert p.is_available()
    # A consumer still reading is told, not left waiting for buffers that will never come.
    with pytest.raises(ProducerFailedError, match="released"):
        p.subpartitions[0].poll()


def test_metrics() -> None:
    p = partition(n=2, capacity=2, segment_size=RECORD)
    p.emit(0, batch(1))
    metrics = p.metrics()
    assert metrics["outPoolUsage"] == pytest.approx(1 / 4)
    assert metrics["buffersOut"] == 1
    assert metrics["bytesOut"] == RECORD


def test_partition_manager() -> None:
    manager = PartitionManager()
    p = partition(n=2)
    manager.register(p)
    assert len(manager) == 1
    assert manager.subpartition("p1", 1) is p.subpartitions[1]
    with pytest.raises(PartitionNotFoundError, match=r"no subpartition 2"):
        manager.subpartition("p1", 2)
    with pytest.raises(PartitionNotFoundError, match=r"p2"):
        manager.subpartition("p2", 0)
    manager.release_consumed("p1")
    assert len(manager) == 1  # not consumed yet
    p.finish()
    for sub in p.subpartitions:
        drain_until_end(sub)
    manager.release_consumed("p1")
    assert len(manager) == 0
    other = PipelinedResultPartition("p3", "job2", 1, 1, RECORD, lambda: None)
    manager.register(other)
    manager.release_job("job2")
    assert len(manager) == 0
    assert other.subpartitions[0].released
