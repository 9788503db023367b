"""Credit is conserved by a remote input channel: whatever order pieces, events, backlog
changes and floating buffers come in, a producer with data left never ends up with no
credit while the consumer has nothing queued (which would stall the channel for good).

The producer is simulated (no sockets): it sends while it has credit, as the data server
does, and the channel's announcements go back to it.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

import pyarrow as pa
import pytest

from weir.proto import dataplane_pb2
from weir.shuffle.pipelined.client import FloatingBufferPool, RemoteInputChannel

_Kind = dataplane_pb2.BufferHeader
BATCH = pa.record_batch({"i": list(range(10))})
MESSAGE = BATCH.serialize().to_pybytes()


@dataclass
class SimulatedProducer:
    """What the producer's side of one channel knows: its credit and its queue."""

    credit: int
    queue: deque[str] = field(default_factory=deque)
    sequence: int = 0

    def send(self, kind: int, message: dataplane_pb2.AddCredit) -> None:  # ClientConnection
        self.credit += message.credit

    closed = False

    def next_frames(self) -> list[tuple[dataplane_pb2.BufferHeader, memoryview]]:
        """What the server sends now: events freely, data pieces against credit."""
        frames = []
        while self.queue:
            item = self.queue[0]
            if item == "data" and self.credit <= 0:
                break
            self.queue.popleft()
            self.sequence += 1
            header = dataplane_pb2.BufferHeader(sequence_number=self.sequence,
                                                backlog=sum(i == "data" for i in self.queue))
            if item == "schema":
                header.kind = _Kind.SCHEMA
                body = BATCH.schema.serialize().to_pybytes()
            elif item == "data":
                self.credit -= 1
                header.kind, header.message_end = _Kind.DATA, True
                header.message_size, header.buffers = len(MESSAGE), 1
                body = MESSAGE
            else:
                header.kind, header.event_type = _Kind.EVENT, "barrier"
                body = b""
            frames.append((header, memoryview(body)))
            if len(frames) >= 3:
                break
        return frames


@pytest.mark.parametrize("seed", range(60))
def test_a_producer_with_data_left_always_has_credit_or_the_consumer_has_data(
        seed: int) -> None:
    rng = random.Random(seed)
    exclusive, floating = rng.choice([(1, 0), (2, 0), (2, 4), (2, 8), (1, 6)])
    pool = FloatingBufferPool(floating)
    channel = RemoteInputChannel(None, "producer:1", "p", 0, "test", exclusive,  # type: ignore[arg-type]
                                 pool, 0.01, 1.0, wakeup=lambda: None)
    producer = SimulatedProducer(credit=exclusive)
    channel._connection = producer  # type: ignore[assignment]
    producer.queue.append("schema")
    sent = taken = 0
    for _ in range(3000):
        # The producer adds data (in bursts, so the backlog grows and shrinks) and events.
        if rng.random() < 0.3 and sent < 400:
            for _ in range(rng.randint(1, 12)):
                producer.queue.append("data" if rng.random() < 0.85 else "event")
                sent += 1
        if rng.random() < 0.7:
            frames = producer.next_frames()
            if frames:
                channel.on_buffers(frames)
        for _ in range(rng.randint(0, 3)):
            buffer = channel.take()
            if buffer is not None and buffer.elements is not None:
                taken += 1
        if producer.queue.count("data") and channel.queued() == 0 and not channel._queue:
            assert producer.credit > 0, (
                f"stalled: the producer has {producer.queue.count('data')} buffers and no "
                f"credit, the consumer nothing queued (seed {seed}, exclusive {exclusive}, "
                f"floating {floating}, unannounced {channel._unannounced}, "
                f"floating held {channel.floating})")
    # Drain: everything sent arrives.
    for _ in range(10_000):
        frames = producer.next_frames()
        if frames:
            channel.on_buffers(frames)
        buffer = channel.take()
        if buffer is not None and buffer.elements is not None:
            taken += 1
        if not producer.queue and not channel._queue:
            break
    assert not producer.queue and not channel._queue
    assert pool.in_use == channel.floating
