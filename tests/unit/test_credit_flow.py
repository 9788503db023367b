"""Credit-based exchange over real loopback sockets: producer and consumer in one process."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from tests.support.pipelined_shuffle import SEGMENT, batch, channel, drain, producer, wait_for
from weir.core.errors import PartitionNotFoundError, RemoteTransportError
from weir.core.records import Elements
from weir.shuffle.api import Event
from weir.shuffle.pipelined.client import FloatingBufferPool, RemoteInputChannel
from weir.shuffle.pipelined.gate import LocalInputChannel
from weir.shuffle.pipelined.partition import (
    MAX_SEGMENTS_PER_BUFFER,
    PartitionManager,
    PipelinedResultPartition,
)


def test_no_buffer_is_sent_without_credit_and_credits_come_back(plane):
    partitions, server, connections = plane
    part = producer(partitions)
    for i in range(50):
        part.emit(0, batch(i))  # an eager producer: every batch is a buffer of its own
    ch, _ = channel(server, connections, exclusive=2)
    ch.request()
    wait_for(lambda: ch.queued() == 2, what="the two exclusive buffers to fill")
    time.sleep(0.2)  # give a misbehaving producer the chance to overrun the credit
    assert ch.queued() == 2, "the producer sent more buffers than the channel had credit for"
    first = drain(ch, 1)
    wait_for(lambda: ch.queued() == 2, what="one more buffer against the returned credit")
    rest = drain(ch, 49)
    values = [b.elements[0].arrow().column("i")[0].as_py() for b in first + rest]
    assert values == list(range(50)), "order within a channel must be kept"


def test_backlog_borrows_floating_buffers_up_to_the_pool(plane):
    partitions, server, connections = plane
    part = producer(partitions, subs=2)
    for i in range(40):
        part.emit(0, batch(i))
        part.emit(1, batch(100 + i))
    pool = FloatingBufferPool(3)
    a, _ = channel(server, connections, sub=0, exclusive=1, pool=pool)
    b, _ = channel(server, connections, sub=1, exclusive=1, pool=pool)
    a.request()
    b.request()
    wait_for(lambda: a.queued() + b.queued() == 2 + 3, what="exclusive + floating buffers")
    time.sleep(0.2)
    assert a.queued() + b.queued() == 5, "channels may not hold more than their buffers"
    assert pool.in_use == 3
    got_a = drain(a, 40)
    got_b = drain(b, 40)
    assert [g.elements[0].arrow().column("i")[0].as_py() for g in got_a] == list(range(40))
    assert [g.elements[0].arrow().column("i")[0].as_py() for g in got_b] == \
        list(range(100, 140))
    wait_for(lambda: pool.in_use == 0, what="floating buffers to return to the pool")


def test_a_large_batch_travels_in_pieces_of_several_segments_and_a_large_record_alone(
        plane):
    partitions, server, connections = plane
    part = PipelinedResultPartition("big", "job", 1, 100, SEGMENT, lambda: None)
    partitions.register(part)
    payload = pa.record_batch({"s": ["x" * 100] * 5000, "n": list(range(5000))})
    assert payload.nbytes > 10 * SEGMENT
    large = pa.record_batch({"s": ["y" * (3 * SEGMENT)], "n": [-1]})
    part.emit(0, Elements.from_arrow(payload))
    part.emit(0, Elements.from_arrow(large))
    part.emit(0, batch(7))
    part.finish()
    ch, _ = channel(server, connections, pid="big", exclusive=2)
    ch.request()
    got = []
    while True:
        buffer = drain(ch, 1)[0]
        if buffer.end_of_partition:
            break
        got.append(buffer.elements[0].arrow())
    # The batch travelled in pieces of up to MAX_SEGMENTS_PER_BUFFER segments, in order, and
    # the record larger than a segment alone; on the wire each went as network buffers of
    # at most a segment, reassembled while credit (2 buffers here) kept flowing.
    pieces = got[:-2]
    span = MAX_SEGMENTS_PER_BUFFER * SEGMENT
    assert len(pieces) >= payload.nbytes // span
    assert all(p.nbytes <= span for p in pieces) and max(p.nbytes for p in pieces) > SEGMENT
    assert pa.Table.from_batches(pieces).combine_chunks().to_batches()[0].equals(payload)
    assert got[-2].equals(large)
    assert got[-1].column("i")[0].as_py() == 7
    assert ch.buffers_in > 2 * len(pieces) + 2 and ch.largest_buffer <= SEGMENT


def test_priority_event_overtakes_queued_buffers_which_are_returned(plane):
    partitions, server, connections = plane
    part = producer(partitions)
    ch, _ = channel(server, connections, exclusive=2)
    ch.request()
    for i in range(6):
        part.emit(0, batch(i))
    wait_for(lambda: ch.queued() == 2, what="credit to be used up")
    overtaken = part.broadcast_event(Event("checkpoint-barrier", b"7"), priority=True)
    # Buffers 2..5 were still queued at the producer: the event overtook them.
    assert [e.arrow().column("i")[0].as_py() for e in overtaken[0]] == [2, 3, 4, 5]
    wait_for(lambda: any(getattr(b, "event", None) for b in list(ch._queue)),
             what="the event to arrive without credit")
    first = drain(ch, 1)[0]
    assert first.event == Event("checkpoint-barrier", b"7") and first.priority
    rest = drain(ch, 6)
    assert [b.elements[0].arrow().column("i")[0].as_py() for b in rest] == list(range(6))


def test_in_order_event_and_local_priority(plane):
    partitions, _, _ = plane
    part = producer(partitions)
    part.emit(0, batch(0))
    part.broadcast_event(Event("watermark", b"10"))
    part.emit(0, batch(1))
    overtaken = part.broadcast_event(Event("barrier", b"1"), priority=True)
    sub = partitions.subpartition("p1", 0)
    got = [sub.poll() for _ in range(4)]
    assert got[0].event == Event("barrier", b"1")
    assert [g.elements[0].arrow().column("i")[0].as_py() if g.elements else g.event.type
            for g in got[1:]] == [0, "watermark", 1]
    assert [e.arrow().column("i")[0].as_py() for e in overtaken[0]] == [0, 1]


def test_early_request_is_retried_until_the_producer_registers(plane):
    partitions, server, connections = plane
    ch, _ = channel(server, connections, pid="late", exclusive=2)
    ch.request()
    time.sleep(0.1)  # the first requests find nothing
    part = producer(partitions, pid="late")
    part.emit(0, batch(42))
    part.finish()
    got = drain(ch, 2)
    assert got[0].elements[0].arrow().column("i")[0].as_py() == 42
    assert got[1].end_of_partition


def test_producer_holds_an_early_request_and_answers_when_the_partition_registers(plane):
    partitions, server, connections = plane
    woke = threading.Event()
    # A back-off of 30 s: only the producer's answer on registration can be this quick.
    ch = RemoteInputChannel(connections, server.address, "slow-deploy", 0, "test consumer", 2,
                            FloatingBufferPool(0), 30.0, 60.0, wakeup=woke.set)
    ch.request()
    wait_for(lambda: any(c._held for c in server._connections), what="the request to be held")
    registered = time.monotonic()
    part = producer(partitions, pid="slow-deploy")
    part.emit(0, batch(7))
    part.finish()
    got = drain(ch, 2, timeout=5)
    assert time.monotonic() - registered < 5
    assert got[0].elements[0].arrow().column("i")[0].as_py() == 7
    assert got[1].end_of_partition
    assert not any(c._held for c in server._connections)


def test_local_channel_retries_as_soon_as_the_partition_registers():
    partitions = PartitionManager()
    woke = threading.Event()
    local = LocalInputChannel(partitions, "local-late", 0, woke.set, 30.0, 60.0)
    local.request()
    assert local.take() is None and local.retry_due() is not None
    part = producer(partitions, pid="local-late")
    assert woke.is_set(), "registration wakes the waiting consumer"
    part.emit(0, batch(3))
    part.finish()
    got = local.take()
    assert got is not None and got.elements[0].arrow().column("i")[0].as_py() == 3
    local.close()


def test_request_for_a_partition_that_never_comes_fails_clearly(plane):
    _, server, connections = plane
    ch, woke = channel(server, connections, pid="never", max_backoff=0.1)
    ch.request()
    assert woke.wait(10)
    with pytest.raises(PartitionNotFoundError, match="never"):
        wait_for(lambda: ch.take() is not None, timeout=10)


def test_producer_death_fails_the_consumer_with_the_cause(plane):
    partitions, server, connections = plane
    part = producer(partitions)
    ch, _ = channel(server, connections, exclusive=2)
    ch.request()
    part.emit(0, batch(1))
    drain(ch, 1)
    server.close()  # the producer's TaskExecutor goes away mid-stream
    with pytest.raises(RemoteTransportError, match="lost the data connection"):
        wait_for(lambda: ch.take() is not None, timeout=10)


def test_channels_share_one_connection_per_producer(plane):
    partitions, server, connections = plane
    part = producer(partitions, subs=3)
    channels = [channel(server, connections, sub=i)[0] for i in range(3)]
    for ch in channels:
        ch.request()
    for i in range(3):
        part.emit(i, batch(i))
    for i, ch in enumerate(channels):
        assert drain(ch, 1)[0].elements[0].arrow().column("i")[0].as_py() == i
    assert len({ch._connection for ch in channels}) == 1
    assert len(server._connections) == 1


def test_pieces_free_their_buffers_until_a_complete_batch_waits_for_the_task(plane):
    partitions, server, connections = plane
    part = PipelinedResultPartition("span", "job", 1, 100, SEGMENT, lambda: None)
    partitions.register(part)
    # Records larger than a segment: each travels alone, as a batch of many buffers.
    first = pa.record_batch({"s": ["a" * 400_000], "n": [0]})
    second = pa.record_batch({"s": ["b" * 400_000], "n": [1]})
    part.emit(0, Elements.from_arrow(first))
    part.emit(0, Elements.from_arrow(second))
    part.finish()
    ch, _ = channel(server, connections, pid="span", exclusive=2)
    ch.request()
    # The first batch is far larger than the channel's two buffers: it can only arrive
    # because each piece frees its buffer once copied into the batch. Then, with a whole
    # batch waiting for the task, the next pieces hold their buffers: two, no more.
    wait_for(lambda: ch.queued() == 2, what="the first batch and two held buffers")
    message = len(first.serialize())
    assert message > 10 * SEGMENT
    assert ch.bytes_in <= message + 2 * SEGMENT
    got = []
    while True:
        buffer = drain(ch, 1)[0]
        if buffer.end_of_partition:
            break
        got.append(buffer.elements[0].arrow())
    assert [g.equals(b) for g, b in zip(got, [first, second], strict=True)] == [True, True]
