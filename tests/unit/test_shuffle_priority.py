"""What unaligned checkpoints need of the shuffle: priority events that overtake data on
both sides of a connection and say how much they overtook, events moved ahead later (the
aligned-checkpoint timeout), and blocked channels that still deliver priority events."""

from __future__ import annotations

import pyarrow as pa

from tests.support.pipelined_shuffle import batch, channel, drain, producer, wait_for
from weir.core.records import Elements
from weir.shuffle.api import Event
from weir.shuffle.pipelined.client import FloatingBufferPool
from weir.shuffle.pipelined.gate import LocalInputChannel, PipelinedInputGate
from weir.shuffle.pipelined.partition import PartitionManager

BARRIER = Event("checkpoint-barrier", b"7")


def arrived(ch) -> None:
    wait_for(lambda: ch.has_priority_event(), what="the event to arrive without credit")


def overtaken_ids(buffer) -> list:
    assert buffer.overtaken is not None
    wait_for(lambda: buffer.overtaken.complete, what="the overtaken batches to arrive")
    return [e.arrow().column("i")[0].as_py() for e in buffer.overtaken.batches()]


def ids(buffers: list) -> list:
    return [b.elements[0].arrow().column("i")[0].as_py() if b.elements else b.event.type
            for b in buffers]


def test_remote_priority_event_counts_what_it_overtook_at_the_consumer(plane) -> None:
    partitions, server, connections = plane
    part = producer(partitions)
    ch, _ = channel(server, connections, exclusive=2)
    ch.request()
    for i in range(6):
        part.emit(0, batch(i))
    wait_for(lambda: ch.queued() == 2, what="credit to be used up")
    overtaken = part.broadcast_event(BARRIER, priority=True)
    assert [e.arrow().column("i")[0].as_py() for e in overtaken[0]] == [2, 3, 4, 5]
    arrived(ch)
    first = drain(ch, 1)[0]
    # 0 and 1 had arrived: they belong before the barrier and follow it.
    assert first.event == BARRIER and first.priority and overtaken_ids(first) == [0, 1]
    assert ids(drain(ch, 6)) == [0, 1, 2, 3, 4, 5]


def test_a_half_sent_spanning_batch_counts_as_overtaken(plane) -> None:
    partitions, server, connections = plane
    part = producer(partitions)
    ch, _ = channel(server, connections, exclusive=2)
    ch.request()
    part.emit(0, batch(0, rows=10))                  # one buffer
    # A record larger than a segment: alone in its buffer, which spans several network
    # buffers of 32 KiB.
    big = Elements.from_arrow(pa.record_batch({"i": [1], "row": [0],
                                               "blob": [b"x" * 320_000]}))
    part.emit(0, big)
    part.emit(0, batch(2, rows=10))
    # Batch 0 and the first piece of batch 1 use both credits; the rest of batch 1 waits
    # at the producer, already taken out of its subpartition.
    wait_for(lambda: ch.queued() == 2, what="both credits to be used")
    overtaken = part.broadcast_event(BARRIER, priority=True)
    assert [e.arrow().column("i")[0].as_py() for e in overtaken[0]] == [2]
    arrived(ch)
    first = drain(ch, 1)[0]
    assert first.event == BARRIER
    # The consumer granted credit for the rest of batch 1 at once: it is captured before
    # the task has taken anything queued.
    assert overtaken_ids(first) == [0, 1]
    rest = drain(ch, 3)
    assert ids(rest) == [0, 1, 2]
    assert rest[1].elements[0].arrow().column("blob")[0].as_py() == b"x" * 320_000


def test_remote_event_moved_ahead_at_the_consumer(plane) -> None:
    partitions, server, connections = plane
    part = producer(partitions)
    ch, _ = channel(server, connections, exclusive=4)
    ch.request()
    part.emit(0, batch(0))
    part.emit(0, batch(1))
    part.broadcast_event(BARRIER)                   # in band, after 0 and 1
    part.emit(0, batch(2))
    wait_for(lambda: ch.queued() == 3, what="everything to arrive")
    assert not part.is_event_queued(BARRIER)        # it left the producer
    assert ch.prioritize(BARRIER)
    assert not ch.prioritize(Event("checkpoint-barrier", b"8"))
    first = drain(ch, 1)[0]
    assert first.event == BARRIER and first.priority and overtaken_ids(first) == [0, 1]
    assert ids(drain(ch, 3)) == [0, 1, 2]


def test_producer_moves_a_queued_event_ahead_and_keeps_what_it_passed() -> None:
    partitions = PartitionManager()
    part = producer(partitions, subs=2)
    part.emit(0, batch(0))
    part.emit(1, batch(10))
    part.broadcast_event(BARRIER)
    part.emit(0, batch(1))
    assert part.is_event_queued(BARRIER)
    passed = part.prioritize_event(BARRIER)
    assert [[e.arrow().column("i")[0].as_py() for e in sub] for sub in passed] == [[0], [10]]
    sub0 = partitions.subpartition("p1", 0)
    got = [sub0.poll() for _ in range(3)]
    assert got[0].event == BARRIER and got[0].priority and got[0].overtaken is None
    assert ids(got[1:]) == [0, 1]
    assert part.prioritize_event(BARRIER)[0] == []  # moved already: nothing passed twice
    sub1 = partitions.subpartition("p1", 1)
    sub1.poll()
    assert not part.is_event_queued(BARRIER) or sub0.contains_event(BARRIER) is False


def local_gate(partitions: PartitionManager, pids: list[str]) -> PipelinedInputGate:
    channels = [LocalInputChannel(partitions, pid, 0, lambda: None, 0.01, 1.0) for pid in pids]
    gate = PipelinedInputGate(channels, FloatingBufferPool(0))
    gate.request_partitions()
    return gate


def poll_all(gate: PipelinedInputGate) -> list:
    out = []
    while (item := gate.poll_next()) is not None:
        out.append(item)
    return out


def describe(items: list) -> list:
    return [(i.channel, i.elements[0].arrow().column("i")[0].as_py()) if i.elements
            else (i.channel, i.event.type, i.priority,
                  len(i.overtaken.batches()) if i.overtaken else 0) for i in items]


def test_blocked_channel_gives_only_priority_events() -> None:
    partitions = PartitionManager()
    a = producer(partitions, pid="a")
    b = producer(partitions, pid="b")
    gate = local_gate(partitions, ["a", "b"])
    a.emit(0, batch(1))
    b.emit(0, batch(2))
    gate.block_consumption(0)
    assert describe(poll_all(gate)) == [(1, 2)]
    a.broadcast_event(BARRIER, priority=True)
    assert describe(poll_all(gate)) == [(0, "checkpoint-barrier", True, 0)]
    gate.resume_consumption(0)
    assert describe(poll_all(gate)) == [(0, 1)]


def test_consumer_moves_a_local_event_ahead_and_counts_what_it_passed() -> None:
    partitions = PartitionManager()
    a = producer(partitions, pid="a")
    gate = local_gate(partitions, ["a"])
    a.emit(0, batch(1))
    a.emit(0, batch(2))
    a.broadcast_event(BARRIER)
    a.emit(0, batch(3))
    gate.prioritize_event(BARRIER)
    assert describe(poll_all(gate)) == [(0, "checkpoint-barrier", True, 2), (0, 1), (0, 2),
                                        (0, 3)]
    # The producer finds nothing to move any more: the consumer persists the passed data.
    assert a.prioritize_event(BARRIER) == [[]]
