"""Who may use a data port, and what one peer can cost it.

In-process tests run a DataServer and real consumers over loopback sockets, so they can look
inside (subscriptions, held requests, threads); the cluster tests attack a real TaskExecutor
from raw sockets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from tests.support.cluster import poll, weir_cli, write_job
from tests.support.dataplane import (
    connect,
    data_address,
    read_error,
    read_frame,
    send,
    thread_count,
)
from weir.core.errors import RemoteTransportError
from weir.core.processes import process_alive
from weir.core.records import Elements
from weir.proto import dataplane_pb2
from weir.shuffle.pipelined import protocol
from weir.shuffle.pipelined.client import ConnectionManager, FloatingBufferPool, RemoteInputChannel
from weir.shuffle.pipelined.partition import PartitionManager, PipelinedResultPartition
from weir.shuffle.pipelined.server import DataServer

SEGMENT = 32 * 1024
TOKEN = "data-plane-token"
Error = dataplane_pb2.ErrorResponse


@pytest.fixture
def plane() -> Iterator[tuple[PartitionManager, DataServer, ConnectionManager]]:
    """A producer and a consumer TaskExecutor's data plane, both holding the token."""
    partitions = PartitionManager()
    server = DataServer("127.0.0.1", 0, partitions, SEGMENT, token=TOKEN)
    server.start()
    connections = ConnectionManager(SEGMENT, token=TOKEN)
    yield partitions, server, connections
    connections.close()
    server.close()


def host_port(server: DataServer) -> tuple[str, int]:
    host, _, port = server.address.rpartition(":")
    return host, int(port)


def produce(partitions: PartitionManager, pid: str, count: int) -> PipelinedResultPartition:
    partition = PipelinedResultPartition(pid, "job", 1, 10_000, segment_size=1,
                                         wakeup=lambda: None)
    partitions.register(partition)
    for i in range(count):
        partition.emit(0, Elements.from_arrow(pa.record_batch({"i": [i]})))
    return partition


def consumer(server: DataServer, connections: ConnectionManager,
             pid: str) -> RemoteInputChannel:
    channel = RemoteInputChannel(connections, server.address, pid, 0, "consumer", 4,
                                 FloatingBufferPool(0), 0.01, 1.0, wakeup=lambda: None)
    channel.request()
    return channel


def take_values(channel: RemoteInputChannel, count: int, timeout: float = 10) -> list[int]:
    values: list[int] = []
    deadline = time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        buffer = channel.take()
        if buffer is None:
            time.sleep(0.002)
        elif buffer.elements:
            values.extend(buffer.elements[0].arrow().column("i").to_pylist())
    return values


def subscribe(sock, pid: str, receiver_id: int = 7, wait_ms: int = 0) -> None:
    send(sock, protocol.PARTITION_REQUEST, dataplane_pb2.PartitionRequest(
        partition_id=pid, subpartition=0, receiver_id=receiver_id, initial_credit=100,
        wait_ms=wait_ms))


def test_a_peer_without_the_token_is_refused_before_any_request(plane):
    partitions, server, _ = plane
    produce(partitions, "secret-partition", 3)
    for token in (None, "a guess"):
        with connect(*host_port(server), token=token) as sock:
            subscribe(sock, "secret-partition")
            error = read_error(sock)
            assert error.kind == Error.NOT_AUTHENTICATED
            assert "security.auth.token" in error.message
            assert sock.recv(1) == b""
    with connect(*host_port(server), handshake=False) as sock:
        subscribe(sock, "secret-partition")       # a request instead of the answer
        assert read_error(sock).kind == Error.NOT_AUTHENTICATED
    assert partitions.subpartition("secret-partition", 0).backlog() == 3, "data left"


def test_a_second_subscriber_is_refused_and_the_consumer_keeps_its_data(plane):
    partitions, server, connections = plane
    partition = produce(partitions, "p", 5)
    real = consumer(server, connections, "p")
    assert take_values(real, 5) == list(range(5))
    with connect(*host_port(server), token=TOKEN) as thief:
        subscribe(thief, "p")
        error = read_error(thief)
        assert error.kind == Error.ALREADY_SUBSCRIBED
        assert error.receiver_id == 7
        for i in range(5, 10):
            partition.emit(0, Elements.from_arrow(pa.record_batch({"i": [i]})))
        assert take_values(real, 5) == list(range(5, 10))
        thief.settimeout(0.3)
        with pytest.raises(TimeoutError):      # and the thief received nothing at all
            read_frame(thief)


def test_a_consumer_whose_partition_goes_away_gets_an_error(plane):
    partitions, server, connections = plane
    produce(partitions, "p", 1)
    channel = consumer(server, connections, "p")
    assert take_values(channel, 1) == [0]
    partitions.release("p")            # e.g. the producing job was cancelled meanwhile

    def failed() -> bool:
        try:
            channel.take()
        except RemoteTransportError as err:
            return "released" in str(err)
        return False

    poll(failed, 10, what="the consumer to hear its partition is gone")


def test_held_requests_share_one_timer_thread_and_end_with_their_connection(plane):
    partitions, server, _ = plane
    before = threading.active_count()
    with connect(*host_port(server), token=TOKEN) as sock:
        for receiver in range(1, 301):
            subscribe(sock, f"not-yet-{receiver}", receiver_id=receiver, wait_ms=2**32 - 1)
        poll(lambda: sum(len(w) for w in partitions._waiters.values()) == 300, 10,
             what="the 300 requests to be held")
        assert threading.active_count() - before <= 3, "a thread per held request"
    poll(lambda: not partitions._waiters, 10,
         what="the held requests to be dropped with their connection")
    poll(lambda: server.connections == 0, 10, what="the connection to be gone")


def test_a_held_request_is_answered_within_the_cap(plane, monkeypatch):
    monkeypatch.setattr(protocol, "MAX_HOLD_MS", 200)
    _, server, _ = plane
    with connect(*host_port(server), token=TOKEN) as sock:
        started = time.monotonic()
        subscribe(sock, "never", wait_ms=2**32 - 1)
        assert read_error(sock).kind == Error.PARTITION_NOT_FOUND
        assert time.monotonic() - started < 5


def test_an_idle_connection_is_closed_and_its_consumer_reconnects(plane, monkeypatch):
    monkeypatch.setattr(protocol, "IDLE_TIMEOUT_S", 0.5)
    partitions, server, connections = plane
    with connect(*host_port(server), token=TOKEN) as sock:
        error = read_error(sock)               # served nothing: closed after the timeout
        assert error.kind == Error.CONNECTION_IDLE
    produce(partitions, "p", 3)
    channel = consumer(server, connections, "p")
    assert take_values(channel, 3) == [0, 1, 2]
    channel.close()
    # Its connection goes idle and is closed; a later request on it is sent again.
    poll(lambda: server.connections == 0, 10, what="the idle connection to be closed")
    produce(partitions, "q", 2)
    later = consumer(server, connections, "q")
    assert take_values(later, 2) == [0, 1]


def test_malformed_control_messages_are_refused_not_crashing(plane):
    _, server, _ = plane
    for kind in (protocol.PARTITION_REQUEST, protocol.ADD_CREDIT, 99):
        with connect(*host_port(server), token=TOKEN) as sock:
            sock.sendall(protocol.frame(kind, b"\xff\xff\xff"))
            assert read_error(sock).kind == Error.PROTOCOL_ERROR
    produce(server._partitions, "p", 1)
    with connect(*host_port(server), token=TOKEN) as sock:
        subscribe(sock, "p")
        assert read_frame(sock)[0] == protocol.BUFFER  # still serving


@pytest.mark.extended
def test_taskexecutor_refuses_unauthenticated_and_excess_connections(cluster_factory, tmp_path):
    cluster = cluster_factory(1, 1)          # no token: any answer authenticates
    host, port, pid = data_address(cluster.dir)
    threads = thread_count(pid)
    idle, admitted = [], []
    try:
        # Sockets that never answer the challenge wait in the pending pool: the oldest are
        # closed for newer ones, so they hold at most the pool's share of one host.
        for _ in range(protocol.MAX_CONNECTIONS_PER_PEER + 16):
            idle.append(connect(host, port, handshake=False))
        grown = thread_count(pid) - threads
        assert grown <= protocol.MAX_PENDING_PER_PEER + 4, f"{grown} threads"
        # Those still open are closed after the handshake timeout.
        for sock in idle[-protocol.MAX_PENDING_PER_PEER:]:
            sock.settimeout(protocol.UNAUTHENTICATED_TIMEOUT_S + 20)
            assert read_error(sock).kind == Error.NOT_AUTHENTICATED
        # They never counted against the authenticated connections' limit; these do.
        for _ in range(protocol.MAX_CONNECTIONS_PER_PEER):
            admitted.append(connect(host, port))
        with connect(host, port) as refused:
            assert "too many data connections" in read_error(refused).message
    finally:
        for sock in idle + admitted:
            sock.close()
    poll(lambda: thread_count(pid) <= threads + 2, 20, what="the threads to end")
    assert process_alive(pid)
    log = (cluster.dir / "log" / "taskexecutor-0.log").read_text()
    assert "closing data connection from 127.0.0.1:" in log   # rate-limited: the first
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1, 2, 3]).key_by(lambda n: n % 2).map(lambda n: n).print()
        env.execute("after the probe")
    """)
    assert weir_cli("run", "--dir", str(cluster.dir), str(job)).returncode == 0
