"""Pending input: what a task took is handed out in chunks, in order, each record once,
sized to take about the target time — one record a chunk when a record takes longer."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from weir.core.records import Elements
from weir.taskexecutor.pending_input import PendingInput


def drain(pending: PendingInput) -> list[list[object]]:
    chunks = []
    while (chunk := pending.next_chunk()) is not None:
        chunks.append(chunk.elements.records())
    return chunks


def test_chunks_cover_every_record_once_in_order_across_batches_and_channels() -> None:
    pending = PendingInput(initial_records=3, max_records=3)
    pending.add(0, 0, [Elements.from_records(list(range(7))),
                       Elements.from_records([]), Elements.from_records([7, 8])])
    pending.add(1, 1, [Elements.from_records(["a", "b"])])
    assert pending.records() == 11
    assert [e.records() for e in pending.of_channel(1)] == [["a", "b"]]
    chunks = drain(pending)
    assert chunks == [[0, 1, 2], [3, 4, 5], [6], [7, 8], ["a", "b"]]
    assert not pending and pending.records() == 0


def test_arrow_batches_are_sliced_with_their_timestamps() -> None:
    pending = PendingInput(initial_records=4, max_records=4)
    batch = pa.record_batch({"word": [f"w{i}" for i in range(10)]})
    timestamps = np.arange(100, 110, dtype=np.int64)
    pending.add(0, 0, [Elements.from_arrow(batch, timestamps)], nbytes=1000)
    first = pending.next_chunk()
    assert first is not None and first.elements.is_arrow
    assert first.elements.arrow().column(0).to_pylist() == ["w0", "w1", "w2", "w3"]
    assert first.elements.timestamps.tolist() == [100, 101, 102, 103]
    assert first.nbytes == 400
    rest = pending.everything()
    assert [(channel, e.timestamps.tolist()) for channel, e in rest] == [
        (0, list(range(104, 110)))]


def test_the_chunk_size_follows_the_cost_of_a_record() -> None:
    pending = PendingInput(target_s=0.002, initial_records=16, max_records=10_000)
    for _ in range(20):                       # 1 ms a record: two records make the target
        pending.record_cost(pending.chunk_records, pending.chunk_records * 0.001)
    assert pending.chunk_records == 2
    for _ in range(20):                       # 10 ms a record: one record a chunk
        pending.record_cost(pending.chunk_records, pending.chunk_records * 0.010)
    assert pending.chunk_records == 1
    for _ in range(40):                       # 1 µs a record: up to the target, capped
        pending.record_cost(pending.chunk_records, pending.chunk_records * 1e-6)
    assert 1_000 <= pending.chunk_records <= 2_000
    pending.record_cost(10, 0.0)              # too fast to measure: grows, within bounds
    assert pending.chunk_records <= 10_000


def test_one_fast_chunk_does_not_make_the_next_one_huge() -> None:
    pending = PendingInput(target_s=0.002, initial_records=2, max_records=1 << 16)
    pending.record_cost(2, 1e-7)
    assert pending.chunk_records <= 2 * 8


def test_a_vectorised_chain_gets_whole_batches() -> None:
    pending = PendingInput(initial_records=2, chunked=False)
    pending.add(0, 0, [Elements.from_records(list(range(5))), Elements.from_records([5])])
    pending.record_cost(5, 10.0)
    assert drain(pending) == [[0, 1, 2, 3, 4], [5]]


def test_a_chunk_that_emitted_more_than_a_buffer_is_cut_at_once() -> None:
    # Cheap records, but each emits 1 KiB (a flat_map fanning out): 1000 records took 1 ms
    # and emitted 1000 KiB. The task checks its outputs for room between chunks only, so
    # the next chunk must emit about the target, 32 KiB: 32 records, not more records.
    pending = PendingInput(target_s=0.002, initial_records=1000, max_records=1 << 16,
                           output_target_bytes=32 * 1024)
    pending.record_cost(1000, 0.001, output_bytes=1000 * 1024)
    assert pending.chunk_records == 32
    # A record whose own output exceeds the target goes alone.
    pending.record_cost(32, 0.0001, output_bytes=32 * 64 * 1024)
    assert pending.chunk_records == 1
    # Output within the target lets the time rule grow the chunk again.
    pending.record_cost(1, 0.00001, output_bytes=100)
    assert pending.chunk_records > 1
