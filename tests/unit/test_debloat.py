"""Buffer debloating: the sizing rule, and producers honouring an announced size."""

from __future__ import annotations

import time

import pyarrow as pa

from tests.support.pipelined_shuffle import channel, drain
from weir.core.records import Elements
from weir.shuffle.pipelined.debloat import BufferDebloater


def make(**overrides):
    args = dict(target=1.0, period=0.1, samples=1, threshold=0.25, min_size=256,
                max_size=32768, buffers_in_flight=8)
    args.update(overrides)
    return BufferDebloater(**args)


def test_buffer_size_follows_throughput_within_bounds():
    d = make()
    now = 0.0
    d.tick(now)
    d.on_consumed(8_000)  # 80 kB/s: 1 s of data is 80 kB, over 8 buffers = 10 kB each
    assert d.tick(now + 0.1) == 10_000
    d.on_consumed(1)  # nearly idle: the minimum
    assert d.tick(now + 0.2) == 256
    d.on_consumed(10_000_000)  # very fast: capped at the segment size
    assert d.tick(now + 0.3) == 32768


def test_small_changes_are_not_announced():
    d = make()
    d.tick(0.0)
    d.on_consumed(8_000)
    assert d.tick(0.1) == 10_000
    d.on_consumed(8_000 * 1.2)  # +20%: below the 25% threshold
    assert d.tick(0.2) is None
    assert d.buffer_size == 10_000
    d.on_consumed(8_000 * 2)
    assert d.tick(0.3) == 20_000


def test_moving_average_smooths_a_single_spike():
    d = make(samples=9)  # alpha 0.2
    d.tick(0.0)
    d.on_consumed(8_000)
    d.tick(0.1)
    d.on_consumed(80_000)  # one burst at 10x
    d.tick(0.2)
    assert d.throughput is not None and d.throughput < 300_000


def test_estimated_time_to_consume():
    d = make()
    d.tick(0.0)
    d.on_consumed(10_000)
    d.tick(0.1)  # 100 kB/s
    assert abs(d.estimated_time_to_consume_ms(50_000) - 500.0) < 1e-6


def test_producer_splits_and_flushes_at_the_announced_size(plane):
    from weir.shuffle.pipelined.partition import PipelinedResultPartition

    partitions, server, connections = plane
    part = PipelinedResultPartition("db", "job", 1, 100, 32 * 1024, lambda: None)
    partitions.register(part)
    ch, _ = channel(server, connections, pid="db", exclusive=2)
    ch.request()
    ch.announce_buffer_size(1024)
    sub = partitions.subpartition("db", 0)
    deadline = time.monotonic() + 10
    while sub.flush_size != 1024 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sub.flush_size == 1024
    rows = pa.record_batch({"n": list(range(20_000))})  # 160 kB
    part.emit(0, Elements.from_arrow(rows))
    part.finish()
    got = []
    while True:
        buffer = drain(ch, 1)[0]
        if buffer.end_of_partition:
            break
        got.extend(buffer.elements[0].arrow().column("n").to_pylist())
    assert got == list(range(20_000))
    # The 160 kB batch crossed the wire in pieces of the announced size.
    assert ch.largest_buffer <= 1024 and ch.buffers_in > 100
