"""Raw-socket access to a TaskExecutor's data port, as an attacker (or a fuzzer) has it."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from weir.core.cluster_directory import ClusterDirectory
from weir.proto import dataplane_pb2
from weir.shuffle.pipelined import protocol


def data_address(cluster_dir: Path, index: int = 0) -> tuple[str, int, int]:
    """(host, port, pid) of TaskExecutor ``index`` of a local cluster."""
    info = ClusterDirectory(cluster_dir).taskexecutor(index)
    assert info is not None, f"no taskexecutor-{index} in {cluster_dir}"
    host, port = info.data_host_port
    return host, port, info.pid


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def thread_count(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One whole frame (type, payload); ConnectionError when the peer closes first."""
    data = b""
    while len(data) < protocol.HEADER_SIZE or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} bytes")
        data += chunk
    return data[4], data[protocol.HEADER_SIZE:4 + struct.unpack("!I", data[:4])[0]]


def read_error(sock: socket.socket) -> dataplane_pb2.ErrorResponse:
    """The next frame, which must be an ERROR."""
    kind, payload = read_frame(sock)
    assert kind == protocol.ERROR, f"expected an error frame, got type {kind}"
    return dataplane_pb2.ErrorResponse.FromString(payload)


def connect(host: str, port: int, token: str | None = None,
            handshake: bool = True) -> socket.socket:
    """A raw connection; with ``handshake`` it answers the challenge with ``token``."""
    sock = socket.create_connection((host, port), timeout=10)
    kind, payload = read_frame(sock)
    assert kind == protocol.CHALLENGE, f"the producer opened with frame type {kind}"
    if handshake:
        nonce = dataplane_pb2.Challenge.FromString(payload).nonce
        hello = dataplane_pb2.Hello(mac=protocol.hello_mac(token, nonce))
        sock.sendall(protocol.frame(protocol.HELLO, hello.SerializeToString()))
    return sock


def send(sock: socket.socket, kind: int, message: object) -> None:
    sock.sendall(protocol.frame(kind, message.SerializeToString()))  # type: ignore[attr-defined]
