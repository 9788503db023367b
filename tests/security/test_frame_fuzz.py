"""Fuzzing the data port: whatever bytes a peer sends, before or after authenticating, the
server never crashes a thread, never allocates beyond its frame cap, and either keeps
serving or answers with an error frame and closes."""

from __future__ import annotations

import socket
import struct
import threading
import tracemalloc
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.dataplane import connect, read_frame, send
from weir.core.records import Elements
from weir.proto import dataplane_pb2
from weir.shuffle.pipelined import protocol
from weir.shuffle.pipelined.partition import PartitionManager, PipelinedResultPartition
from weir.shuffle.pipelined.server import DataServer

TOKEN = "fuzz-token"
SEGMENT = 32 * 1024

frames = st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=256)), max_size=8)
headers = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 255), st.binary(max_size=64))


@pytest.fixture(scope="module")
def server() -> Iterator[DataServer]:
    partitions = PartitionManager()
    partition = PipelinedResultPartition("p", "job", 2, 1000, 1, lambda: None)
    partitions.register(partition)
    partition.emit(0, Elements.from_arrow(pa.record_batch({"i": [1]})))
    server = DataServer("127.0.0.1", 0, partitions, SEGMENT, token=TOKEN)
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def thread_errors() -> Iterator[list[BaseException]]:
    errors: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)  # type: ignore[assignment]
    yield errors
    threading.excepthook = previous


def address(server: DataServer) -> tuple[str, int]:
    host, _, port = server.address.rpartition(":")
    return host, int(port)


def outcome(sock: socket.socket) -> str:
    """'error' (an error frame, then the close), 'open' (still serving), or 'closed'."""
    sock.settimeout(0.2)
    try:
        while True:
            kind, payload = read_frame(sock)
            if kind == protocol.ERROR:
                dataplane_pb2.ErrorResponse.FromString(payload)  # well formed
                if dataplane_pb2.ErrorResponse.FromString(payload).receiver_id == 0:
                    return "error"
    except TimeoutError:
        return "open"
    except ConnectionError:
        return "closed"


def fuzz(server: DataServer, errors: list[BaseException], payload: bytes,
         handshake: bool, may_close: bool = False) -> None:
    tracemalloc.start()
    try:
        with connect(*address(server), token=TOKEN, handshake=handshake) as sock:
            sock.sendall(payload)
            result = outcome(sock)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not errors, f"a server thread died: {errors[0]!r}"
    assert result in ("error", "open") or may_close, "closed without saying why"
    assert peak < 4 * protocol.MAX_CONTROL_FRAME + (1 << 20), f"allocated {peak:,} bytes"


@pytest.mark.extended
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=512))
def test_random_bytes_before_the_handshake(server, thread_errors, raw):
    fuzz(server, thread_errors, raw, handshake=False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=frames)
def test_random_frames_after_the_handshake(server, thread_errors, frames):
    payload = b"".join(protocol.frame(kind, body) for kind, body in frames)
    # A CLOSE frame is the peer's own goodbye: the only close without an error frame.
    fuzz(server, thread_errors, payload, handshake=True,
         may_close=any(kind == protocol.CLOSE for kind, _ in frames))


@pytest.mark.extended
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=headers)
def test_random_frame_headers(server, thread_errors, header):
    length, kind, rest = header
    fuzz(server, thread_errors, struct.pack("!IB", length, kind) + rest, handshake=True)


@pytest.mark.extended
def test_still_serving_after_the_fuzzing(server, thread_errors):
    with connect(*address(server), token=TOKEN) as sock:
        send(sock, protocol.PARTITION_REQUEST, dataplane_pb2.PartitionRequest(
            partition_id="p", subpartition=0, receiver_id=1, initial_credit=10))
        sock.settimeout(10)
        assert read_frame(sock)[0] == protocol.BUFFER
    assert not thread_errors
