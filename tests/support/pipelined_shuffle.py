"""A pipelined data plane in one process, for the shuffle's unit tests: a partition manager
and its data server on loopback, a connection manager to reach it, and helpers to make
producers, remote channels and batches.

The ``plane`` fixture is registered for every test (tests/conftest.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from weir.core.records import Elements
from weir.shuffle.pipelined.client import ConnectionManager, FloatingBufferPool, RemoteInputChannel
from weir.shuffle.pipelined.partition import PartitionManager, PipelinedResultPartition
from weir.shuffle.pipelined.server import DataServer
from weir.testing.cluster import poll

SEGMENT = 32 * 1024


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0,
             what: str = "condition") -> Any:
    """Poll ``predicate`` every 5 ms; TimeoutError naming ``what`` after ``timeout`` s."""
    return poll(predicate, timeout, interval=0.005, what=what)


@pytest.fixture
def plane() -> Iterator[tuple[PartitionManager, DataServer, ConnectionManager]]:
    """(partitions, their data server on 127.0.0.1, a connection manager), closed after."""
    partitions = PartitionManager()
    server = DataServer("127.0.0.1", 0, partitions, SEGMENT)
    server.start()
    connections = ConnectionManager(SEGMENT)
    yield partitions, server, connections
    connections.close()
    server.close()


def batch(i: int, rows: int = 100) -> Elements:
    return Elements.from_arrow(pa.record_batch({"i": [i] * rows, "row": list(range(rows))}))


class EagerPartition(PipelinedResultPartition):
    """A producer that hands every emitted batch over as a buffer of its own, as a task
    with ``execution.buffer-timeout: 0`` does (a batch larger than the segment size still
    spans several buffers)."""

    def emit(self, subpartition: int, elements: Elements) -> None:
        super().emit(subpartition, elements)
        self.flush_all()


def producer(partitions: PartitionManager, pid: str = "p1", subs: int = 1,
             capacity: int = 1000) -> PipelinedResultPartition:
    partition = EagerPartition(pid, "job", subs, capacity, segment_size=SEGMENT,
                               wakeup=lambda: None)
    partitions.register(partition)
    return partition


def channel(server: DataServer, connections: ConnectionManager, pid: str = "p1",
            sub: int = 0, exclusive: int = 2, pool: FloatingBufferPool | None = None,
            max_backoff: float = 5.0) -> tuple[RemoteInputChannel, threading.Event]:
    woke = threading.Event()
    ch = RemoteInputChannel(connections, server.address, pid, sub, "test consumer",
                            exclusive, pool or FloatingBufferPool(0), 0.01, max_backoff,
                            wakeup=woke.set)
    return ch, woke


def drain(ch: RemoteInputChannel, count: int, timeout: float = 10.0) -> list[Any]:
    """``count`` buffers taken from ``ch`` (polled every 2 ms); fails after ``timeout`` s."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        buffer = ch.take()
        if buffer is not None:
            got.append(buffer)
        elif time.monotonic() > deadline:
            pytest.fail(f"only {len(got)} of {count} buffers arrived")
        else:
            time.sleep(0.002)
    return got
