"""What peers that never authenticate can cost a data port: not the room of genuine ones, not
the accept loop, not the log; and a data server that stops accepting makes its TaskExecutor
leave the cluster instead of looking healthy.

In-process tests run a DataServer and real consumers over loopback sockets; the descriptor
test runs the DataServer in a subprocess with a low open files limit.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.security.test_data_plane_auth import (
    SEGMENT,
    TOKEN,
    consumer,
    host_port,
    plane,
    produce,
    subscribe,
    take_values,
)
from tests.security.test_tls_data_plane import pki
from tests.support.dataplane import connect, read_error, read_frame
from tests.support.resource_manager import ResourceManagerHarness
from weir.client.minicluster import MiniCluster
from weir.core.clock import ManualClock
from weir.core.config import Configuration
from weir.core.tls import TlsFiles
from weir.proto import common_pb2, dataplane_pb2, jobmaster_pb2
from weir.shuffle.pipelined import protocol
from weir.shuffle.pipelined.client import ConnectionManager, FloatingBufferPool, RemoteInputChannel
from weir.shuffle.pipelined.partition import PartitionManager
from weir.shuffle.pipelined.server import DataServer, RateLimitedWarnings
from weir.testing.cluster import poll

__all__ = ["pki", "plane"]   # fixtures shared with the auth and TLS tests

SERVER_LOG = "weir.shuffle.pipelined.server"
Error = dataplane_pb2.ErrorResponse


def open_idle(address: tuple[str, int], count: int, source: str | None = None,
              wait_for_server: bool = True) -> list[socket.socket]:
    """``count`` raw connections that never answer the handshake (from ``source``). With
    ``wait_for_server``, each one is opened once the server dealt with the previous one:
    sent its challenge or closed it (so none waits in the listen backlog)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(address, timeout=10,
                                            source_address=(source, 0) if source else None)
            sockets.append(sock)
            if wait_for_server:
                with contextlib.suppress(ConnectionError):
                    sock.recv(1)   # the challenge's first byte, or the end of a closed one
    except BaseException:
        close_all(sockets)
        raise
    return sockets


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


# -- (a) unauthenticated sockets do not use up the room of authenticated ones -------------------


def test_idle_unauthenticated_sockets_from_the_consumers_host_do_not_lock_it_out(plane):
    partitions, server, connections = plane
    produce(partitions, "p", 3)
    idle = open_idle(host_port(server), protocol.MAX_CONNECTIONS_PER_PEER + 16)
    try:
        channel = consumer(server, connections, "p")
        assert take_values(channel, 3) == [0, 1, 2]
        # The idle ones cost at most the pending pool's share of one host.
        assert server.pending <= server.limits.pending_per_peer
    finally:
        close_all(idle)


def test_idle_sockets_without_a_tls_handshake_do_not_lock_out_a_tls_consumer(pki: TlsFiles):
    partitions = PartitionManager()
    server = DataServer("127.0.0.1", 0, partitions, SEGMENT, token=TOKEN,
                        tls_context=pki.server_context())
    server.start()
    connections = ConnectionManager(SEGMENT, token=TOKEN, tls_context=pki.client_context())
    try:
        produce(partitions, "p", 3)
        # A TLS server says nothing before the client's hello: nothing to wait for. The
        # kernel hands connections over in order, so the consumer's comes after these.
        idle = open_idle(host_port(server), protocol.MAX_CONNECTIONS_PER_PEER + 16,
                         wait_for_server=False)
        try:
            channel = consumer(server, connections, "p")
            assert take_values(channel, 3) == [0, 1, 2]
            assert server.pending <= server.limits.pending_per_peer
        finally:
            close_all(idle)
    finally:
        connections.close()
        server.close()


# -- (b) many source addresses do not fill the global limit ------------------------------------


def test_unauthenticated_sockets_from_many_loopback_addresses_do_not_fill_the_global_limit(
        plane):
    partitions, server, connections = plane
    produce(partitions, "p", 3)
    hosts = [f"127.0.0.{i}" for i in range(2, 18)]       # 16 hosts x 64 = the old global cap
    per_host = protocol.MAX_CONNECTIONS // len(hosts)
    idle: list[socket.socket] = []
    try:
        for host in hosts:
            idle.extend(open_idle(host_port(server), per_host, source=host))
        channel = consumer(server, connections, "p")      # from 127.0.0.1
        assert take_values(channel, 3) == [0, 1, 2]
        assert server.pending <= server.limits.pending
    finally:
        close_all(idle)


def test_the_pending_pool_is_empty_once_idle_sockets_close(plane):
    _, server, _ = plane
    idle = open_idle(host_port(server), 10)
    assert server.pending == 10 and server.connections == 10
    close_all(idle)
    poll(lambda: server.connections == 0, 10, what="the closed sockets to be forgotten")


def test_authenticated_connections_are_still_limited_per_host(plane, monkeypatch):
    partitions, server, _ = plane
    monkeypatch.setattr(server, "limits", server.limits._replace(per_peer=2))
    idle = open_idle(host_port(server), 5)
    admitted = [connect(*host_port(server), token=TOKEN) for _ in range(2)]
    try:
        with connect(*host_port(server), token=TOKEN) as third:
            error = read_error(third)
            assert error.kind == Error.PROTOCOL_ERROR
            assert "too many data connections (2 connections from 127.0.0.1" in error.message
        # The idle unauthenticated ones never counted, and the admitted two are served.
        for i, sock in enumerate(admitted):
            produce(partitions, f"p{i}", 1)
            subscribe(sock, f"p{i}")
            assert read_frame(sock)[0] == protocol.BUFFER
    finally:
        close_all(admitted + idle)


def test_a_pending_connection_that_never_completes_tls_is_closed_at_the_deadline(
        pki: TlsFiles, monkeypatch):
    monkeypatch.setattr(protocol, "UNAUTHENTICATED_TIMEOUT_S", 0.5)
    server = DataServer("127.0.0.1", 0, PartitionManager(), SEGMENT, token=TOKEN,
                        tls_context=pki.server_context())
    server.start()
    try:
        with socket.create_connection(host_port(server), timeout=10) as sock:
            # Half a ClientHello, then a byte now and then: each read of the handshake has a
            # timeout of its own, the handshake as a whole only the server's deadline.
            sock.sendall(b"\x16\x03\x01\x02\x00")
            started = time.monotonic()
            closed = False
            while time.monotonic() - started < 10 and not closed:
                try:
                    sock.sendall(b"\x01")
                    sock.settimeout(0.1)
                    closed = sock.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
            assert closed, "a dribbling TLS handshake was kept open"
            assert time.monotonic() - started < 5
        poll(lambda: server.connections == 0, 10, what="the pending connection to go")
    finally:
        server.close()


# -- (c) running out of descriptors pauses accepting, never ends it -----------------------------

SUBPROCESS_SERVER = textwrap.dedent("""
    import logging, os, resource, sys
    import pyarrow as pa
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from weir.core.records import Elements
    from weir.shuffle.pipelined.partition import PartitionManager, PipelinedResultPartition
    from weir.shuffle.pipelined.server import DataServer

    partitions = PartitionManager()
    partition = PipelinedResultPartition("p", "job", 1, 10_000, segment_size=1,
                                         wakeup=lambda: None)
    partitions.register(partition)
    for i in range(3):
        partition.emit(0, Elements.from_arrow(pa.record_batch({{"i": [i]}})))
    server = DataServer("127.0.0.1", 0, partitions, {segment}, token={token!r})
    server.start()
    print(server.address, flush=True)
    held = []
    for line in sys.stdin:
        if line.strip() == "hog":      # as files, RocksDB and gRPC could take them
            try:
                while True:
                    held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
            for _ in range({free}):
                os.close(held.pop())
            print("hogged", len(held), flush=True)
        elif line.strip() == "free":
            for fd in held:
                os.close(fd)
            held.clear()
            print("freed", flush=True)
        elif line.strip() == "health":
            print("healthy" if server.healthy else server.unhealthy_reason, flush=True)
    server.close()
""")


def test_running_out_of_descriptors_pauses_accepting_and_a_consumer_gets_through(tmp_path):
    script = tmp_path / "server.py"
    # Fewer descriptors free than the pending pool holds: accepting fails before any pending
    # connection would be closed to make room.
    script.write_text(SUBPROCESS_SERVER.format(segment=SEGMENT, token=TOKEN, free=2))
    stderr = tmp_path / "server.log"
    with stderr.open("w") as err, subprocess.Popen(
            [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=err, text=True, cwd=Path(__file__).parents[2]) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            address = process.stdout.readline().strip()
            assert address, f"the server did not start: {stderr.read_text()}"
            host, _, port = address.rpartition(":")

            def command(line: str) -> str:
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write(line + "\n")
                process.stdin.flush()
                return process.stdout.readline().strip()

            assert command("hog").startswith("hogged")
            raw = open_idle((host, int(port)), 40, wait_for_server=False)
            try:
                # Wait (bounded) for the server to hit the limit; the old server died there
                # silently, so this only gives the new one time to say so.
                with contextlib.suppress(TimeoutError):
                    poll(lambda: "cannot accept connections" in stderr.read_text(), 10,
                         what="the server to run out of descriptors")
                assert command("free") == "freed"
            finally:
                close_all(raw)
            connections = ConnectionManager(SEGMENT, token=TOKEN)
            try:
                channel = RemoteInputChannel(connections, address, "p", 0, "consumer", 4,
                                             FloatingBufferPool(0), 0.05, 8.0,
                                             wakeup=lambda: None)
                channel.request()
                assert take_values(channel, 3, timeout=30) == [0, 1, 2]
            finally:
                connections.close()
            log = stderr.read_text()
            assert "cannot accept connections (Too many open files)" in log
            # One line per 10 s, however often accepting failed meanwhile.
            assert log.count("cannot accept connections") <= 3, log
            assert command("health") == "healthy"
        finally:
            process.stdin.close()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def test_connection_limits_stay_below_the_descriptor_limit():
    for descriptors in (64, 256, 1024, 4096, 20_000, 1 << 20):
        limits = protocol.connection_limits(descriptors)
        used = limits.connections + limits.pending
        assert used <= max(descriptors // 2, 8), (descriptors, limits)
        assert limits.pending_per_peer < limits.pending
        assert limits.per_peer <= limits.connections
    big = protocol.connection_limits(1 << 20)
    assert (big.connections, big.per_peer) == (protocol.MAX_CONNECTIONS,
                                              protocol.MAX_CONNECTIONS_PER_PEER)
    assert (big.pending, big.pending_per_peer) == (protocol.MAX_PENDING,
                                                  protocol.MAX_PENDING_PER_PEER)


# -- (d) refusals are logged at a bounded rate ------------------------------------------------


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def limiter() -> Iterator[tuple[RateLimitedWarnings, ListHandler, ManualClock]]:
    logger = logging.getLogger("tests.rate-limited")
    handler = ListHandler()
    logger.addHandler(handler)
    clock = ManualClock()
    yield RateLimitedWarnings(logger, 10.0, clock=lambda: clock() / 1000, max_keys=3), \
        handler, clock
    logger.removeHandler(handler)


def test_one_line_per_peer_per_interval_and_the_next_says_how_many_were_held_back(limiter):
    warnings, handler, clock = limiter
    assert warnings.warning("10.0.0.1", "refused %s", "a")
    for _ in range(5):
        clock.advance(1_000)
        assert not warnings.warning("10.0.0.1", "refused %s", "b")
    assert warnings.warning("10.0.0.2", "refused %s", "c")    # another peer: its own window
    clock.advance(5_000)                                       # 10 s after the first line
    assert warnings.warning("10.0.0.1", "refused %s", "d")
    assert handler.lines == [
        "refused a", "refused c",
        "refused d (5 more about 10.0.0.1 in the last 10 s were not logged)"]


def test_flush_reports_what_a_window_held_back_once_it_ended(limiter):
    warnings, handler, clock = limiter
    warnings.warning("10.0.0.1", "refused")
    warnings.warning("10.0.0.1", "refused")
    warnings.warning("10.0.0.2", "refused")
    clock.advance(9_999)
    warnings.flush()
    assert handler.lines == ["refused", "refused"]              # windows still open
    clock.advance(1)
    warnings.flush()
    warnings.flush()
    assert handler.lines == ["refused", "refused",
                             "1 more warnings about 10.0.0.1 in the last 10 s were not logged"]
    assert warnings.warning("10.0.0.1", "refused again")        # a fresh window, no count
    assert handler.lines[-1] == "refused again"


def test_peers_beyond_the_tracked_number_share_one_window(limiter):
    warnings, handler, _ = limiter
    for i in range(3):
        assert warnings.warning(f"10.0.0.{i}", "refused %s", i)
    # The fourth and later addresses: one window for all of them, so spoofed or many source
    # addresses can neither grow the table nor flood the log.
    assert warnings.warning("10.0.0.3", "refused %s", 3)
    assert not warnings.warning("10.0.0.4", "refused %s", 4)
    assert not warnings.warning("10.0.0.5", "refused %s", 5)
    assert handler.lines == ["refused 0", "refused 1", "refused 2", "refused 3"]


def test_a_flood_of_refused_connections_logs_a_bounded_number_of_lines(plane, caplog):
    _, server, _ = plane
    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    floods = 100
    for i in range(floods):
        with connect(*host_port(server), token="a guess" if i % 2 else None) as sock:
            assert read_error(sock).kind == Error.NOT_AUTHENTICATED
    lines = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
    assert 1 <= len(lines) <= 3, lines     # one, and more only if this took over 10 s
    assert lines[0].startswith("refusing data connection from 127.0.0.1:")


# -- (e) a data server that stops accepting takes its TaskExecutor out -------------------------


class InjectedError(Exception):
    """Stands for a bug that escapes the accept loop."""


def break_accept_loop(server: DataServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next accepted connection raise inside the accept thread, and connect."""
    def broken(*_: object) -> None:
        raise InjectedError("injected failure")

    monkeypatch.setattr(server, "_add", broken)
    with socket.create_connection(host_port(server), timeout=10):
        poll(lambda: not server.healthy, 10, what="the server to notice its accept thread died")


def test_a_dead_accept_thread_marks_the_server_unhealthy_and_refuses_at_once(plane,
                                                                             monkeypatch):
    _, server, _ = plane
    assert server.healthy and server.unhealthy_reason is None
    break_accept_loop(server, monkeypatch)
    assert server.unhealthy_reason is not None
    assert "InjectedError: injected failure" in server.unhealthy_reason
    # Consumers are refused at once rather than left waiting for a challenge.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(host_port(server), timeout=10).close()


def test_a_heartbeat_reporting_the_taskexecutor_unhealthy_removes_it():
    m = ResourceManagerHarness(10.0)
    record = m.register("a", slots=2)
    assert m.rm.allocate("job", 1, spread=False) is not None
    assert m.heartbeat(record.registration_id)
    healthy = m.rm.heartbeat("te-1", jobmaster_pb2.TaskExecutorHeartbeat(
        resource_id="te-1", registration_id=record.registration_id,
        unhealthy_reason="the data server's accept thread failed"))
    assert not healthy                           # its heartbeat stream ends
    assert m.rm.get("te-1") is None and m.rm.total_slots() == 0
    assert m.rm.allocate("job", 1, spread=False) is None
    [(resource_id, reason, message)] = m.lost    # its jobs fail over, with the reason
    assert (resource_id, reason) == ("te-1", common_pb2.TASK_EXECUTOR_LOST)
    assert "reported itself unhealthy: the data server's accept thread failed" in message


def until(predicate: Callable[[], object], what: str, timeout: float = 20) -> None:
    poll(predicate, timeout, what=what)


def test_a_taskexecutor_whose_data_server_died_reports_it_and_leaves(monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    conf = Configuration.from_pairs({"heartbeat.interval": "200 ms"})
    with MiniCluster(num_slots=1, num_task_executors=2, configuration=conf) as cluster:
        assert cluster.jobmaster is not None
        jobmaster = cluster.jobmaster
        broken, other = cluster.task_executors
        server = broken.shuffle._server
        assert isinstance(server, DataServer)
        break_accept_loop(server, monkeypatch)
        until(lambda: jobmaster.main.call(lambda: jobmaster.resources.get(
            broken.resource_id)) is None, "the JobMaster to remove the TaskExecutor")
        until(broken.stopped.is_set, "the TaskExecutor to stop")
        assert broken.fatal_error is not None
        assert "InjectedError: injected failure" in broken.fatal_error
        assert jobmaster.main.call(lambda: jobmaster.resources.get(other.resource_id)) \
            is not None, "the healthy one stays"
        assert jobmaster.main.call(jobmaster.resources.total_slots) == 1
        lost = [r.getMessage() for r in caplog.records if "lost: it reported itself "
                "unhealthy" in r.getMessage()]
        assert lost and "InjectedError" in lost[0]
