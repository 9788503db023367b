"""The Prometheus endpoint of every daemon is bounded: half-sent requests neither pile up
threads nor keep a scraper out, and each is cut off at a deadline.

Unauthenticated by design (read-only, loopback unless configured otherwise), so anyone who
can reach it may open connections; what they cost the daemon must not depend on how many.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry, Counter

from tests.support.cluster import LocalCluster, poll
from weir.core import metrics as metrics_module
from weir.core.metrics import MetricsServer

HALF_SENT = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # no blank line: never complete
#: Threads the endpoint may add to its process, whatever the number of connections.
THREADS = 6


def half_sent(url: str, count: int) -> list[socket.socket]:
    host, port = urlsplit(url).hostname, urlsplit(url).port
    assert host is not None and port is not None
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(HALF_SENT)
        sockets.append(sock)
    return sockets


def scrape(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return bytes(answer.read())


def scrape_within(url: str, seconds: float) -> bytes:
    """A scrape, retried as a scraper would until ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return scrape(url)
        except OSError:
            if time.monotonic() > deadline:
                raise


def closed_by_server(sock: socket.socket, deadline: float) -> bool:
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


DEADLINE_S = 2.0


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[MetricsServer]:
    monkeypatch.setattr(metrics_module, "REQUEST_DEADLINE_S", DEADLINE_S, raising=False)
    registry = CollectorRegistry()
    Counter("probe_total", "a metric to find in the answer", registry=registry).inc()
    served = MetricsServer("127.0.0.1", "0", registry)
    yield served
    served.stop()


def test_half_sent_requests_cost_a_bounded_number_of_threads(server: MetricsServer) -> None:
    before = threading.active_count()
    attackers = half_sent(server.url, 300)
    try:
        # Before: a thread per connection, 300 of them, each waiting for its request.
        assert threading.active_count() <= before + THREADS
        assert b"probe_total 1.0" in scrape_within(server.url, 10)
        # Every one of them is closed: the oldest when newer ones came, the rest at the
        # deadline.
        deadline = time.monotonic() + DEADLINE_S + 5
        assert all(closed_by_server(sock, deadline) for sock in attackers)
    finally:
        for sock in attackers:
            sock.close()
    assert threading.active_count() <= before + THREADS


def test_a_request_sent_a_byte_at_a_time_is_cut_off_at_the_deadline(server: MetricsServer
                                                                      ) -> None:
    host, port = urlsplit(server.url).hostname, urlsplit(server.url).port
    assert host is not None and port is not None
    with socket.create_connection((host, port), timeout=10) as slow:
        started = time.monotonic()
        closed = False
        for byte in HALF_SENT * 50:  # each read is well within the read timeout
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            if time.monotonic() - started > DEADLINE_S + 5:
                break
            time.sleep(0.05)  # the attack's pace, not synchronisation
        assert closed or closed_by_server(slow, time.monotonic() + 1)
        assert time.monotonic() - started < DEADLINE_S + 5


def test_stop_ends_every_thread_of_the_endpoint(server: MetricsServer) -> None:
    attackers = half_sent(server.url, 8)
    try:
        server.stop()
        assert poll(lambda: not [t for t in threading.enumerate()
                                 if t.name.startswith("metrics-http")], timeout=10)
    finally:
        for sock in attackers:
            sock.close()


def test_a_daemon_keeps_its_threads_and_its_scrapes(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", 1, 1) as cluster:
        url = cluster.status()["jobmaster"]["metrics_url"]
        tasks = Path(f"/proc/{cluster.jobmaster_pid()}/task")
        before = len(list(tasks.iterdir()))
        attackers = half_sent(url, 300)
        try:
            assert len(list(tasks.iterdir())) <= before + THREADS
            assert b"weir_" in scrape_within(url, 20)
        finally:
            for sock in attackers:
                sock.close()
