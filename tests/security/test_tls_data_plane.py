"""The data plane over mutual TLS: data flows between holders of the cluster's certificate;
a peer without one, or one that does not trust the cluster's CA, gets nothing."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from weir.core.records import Elements
from weir.core.tls import TlsFiles, generate_cluster_pki
from weir.shuffle.pipelined.client import ConnectionManager, FloatingBufferPool, RemoteInputChannel
from weir.shuffle.pipelined.partition import PartitionManager, PipelinedResultPartition
from weir.shuffle.pipelined.server import DataServer

SEGMENT = 32 * 1024


@pytest.fixture
def pki(tmp_path: Path) -> TlsFiles:
    return generate_cluster_pki(tmp_path / "tls", ["127.0.0.1", "localhost"])


@pytest.fixture
def server(pki: TlsFiles) -> Iterator[DataServer]:
    partitions = PartitionManager()
    server = DataServer("127.0.0.1", 0, partitions, SEGMENT, token="t",
                        tls_context=pki.server_context())
    server.start()
    yield server
    server.close()


def test_batches_cross_a_tls_connection_in_order_with_credit(server, pki):
    partition = PipelinedResultPartition("p", "job", 2, 16, SEGMENT, lambda: None)
    server._partitions.register(partition)
    connections = ConnectionManager(SEGMENT, token="t", tls_context=pki.client_context())
    channels = [RemoteInputChannel(connections, server.address, "p", sub, "consumer", 2,
                                   FloatingBufferPool(4), 0.01, 1.0, wakeup=lambda: None)
                for sub in (0, 1)]
    try:
        for channel in channels:
            channel.request()
        rows, batches = 2_000, 300      # ~ 10 MB each way: many TLS records, both threads busy
        got: list[list[int]] = [[], []]
        sent = 0
        deadline = time.monotonic() + 60
        while len(got[0]) + len(got[1]) < 2 * rows * batches:
            assert time.monotonic() < deadline, "the transfer stalled"
            if sent < batches and partition.is_available():
                for sub in (0, 1):
                    partition.emit(sub, Elements.from_arrow(pa.record_batch(
                        {"i": list(range(sent * rows, (sent + 1) * rows))})))
                sent += 1
                if sent == batches:
                    partition.flush_all()
            for sub, channel in enumerate(channels):
                buffer = channel.take()
                if buffer is not None and buffer.elements:
                    got[sub].extend(buffer.elements[0].arrow().column("i").to_pylist())
        assert got[0] == got[1] == list(range(rows * batches))
    finally:
        for channel in channels:
            channel.close()
        connections.close()


def host_port(server: DataServer) -> tuple[str, int]:
    host, _, port = server.address.rpartition(":")
    return host, int(port)


def test_a_client_without_a_certificate_is_refused(server, pki):
    context = ssl.create_default_context(cafile=str(pki.truststore))  # trusts, no cert
    with socket.create_connection(host_port(server), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        # TLS 1.3: the server's refusal arrives with the first read, not the handshake.
        try:
            received = sock.recv(1)
        except (ssl.SSLError, ConnectionError):
            received = b""
        assert received == b"", "the server talked to a client without a certificate"


def test_a_client_that_does_not_trust_the_cluster_ca_does_not_connect(server, tmp_path):
    stranger = generate_cluster_pki(tmp_path / "stranger", ["127.0.0.1"])
    with socket.create_connection(host_port(server), timeout=10) as raw, \
            pytest.raises(ssl.SSLCertVerificationError):
        stranger.client_context().wrap_socket(raw, server_hostname="127.0.0.1")


def test_a_plain_tcp_peer_gets_nothing(server):
    with socket.create_connection(host_port(server), timeout=10) as sock:
        sock.sendall(b"\x00\x00\x00\x05\x01hello")
        sock.settimeout(10)
        data = b""
        try:
            while chunk := sock.recv(4096):
                data += chunk
        except ConnectionResetError:
            pass  # closed with our bytes unread: a reset instead of a plain close
        assert b"hello" not in data and b"\x08" not in data[:5], "a challenge in clear"
