"""The data plane refuses a frame larger than a buffer before allocating it."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

from tests.support.cluster import weir_cli, write_job
from weir.core.processes import process_alive
from weir.proto import dataplane_pb2
from weir.shuffle.pipelined import protocol


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while len(data) < protocol.HEADER_SIZE or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} bytes")
        data += chunk
    return data[4], data[protocol.HEADER_SIZE:4 + struct.unpack("!I", data[:4])[0]]


def test_a_header_announcing_a_gigabyte_gets_an_error_frame_and_no_memory(cluster_factory,
                                                                           tmp_path):
    cluster = cluster_factory(1, 1)
    info = json.loads((cluster.dir / "taskexecutor-0.json").read_text())
    host, _, port = info["data_address"].rpartition(":")
    pid = info["pid"]
    before = rss_bytes(pid)
    for _ in range(4):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(struct.pack("!IB", 1 << 30, protocol.BUFFER) + b"x" * 20)  # 25 bytes
            kind, payload = read_frame(sock)
            assert kind == protocol.ERROR
            error = dataplane_pb2.ErrorResponse.FromString(payload)
            assert error.kind == dataplane_pb2.ErrorResponse.PROTOCOL_ERROR
            assert "1,073,741,824 bytes" in error.message
            assert sock.recv(1) == b""                    # and the connection is closed
    assert process_alive(pid)
    assert rss_bytes(pid) - before < 64 << 20, "the TaskExecutor allocated the frame"
    log = (cluster.dir / "log" / "taskexecutor-0.log").read_text()
    assert "refusing data connection from 127.0.0.1:" in log
    # and it still runs jobs
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1, 2, 3]).key_by(lambda n: n % 2).map(lambda n: n).print()
        env.execute("after the probe")
    """)
    ran = weir_cli("run", "--dir", str(cluster.dir), str(job))
    assert ran.returncode == 0, ran.stderr
