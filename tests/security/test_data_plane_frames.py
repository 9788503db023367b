"""The data plane refuses a frame larger than a buffer before allocating it, whether the
peer has authenticated or not."""

from __future__ import annotations

import struct

from tests.support.cluster import weir_cli, write_job
from tests.support.dataplane import connect, data_address, read_error, rss_bytes
from weir.core.processes import process_alive
from weir.proto import dataplane_pb2
from weir.shuffle.pipelined import protocol


def test_a_header_announcing_a_gigabyte_gets_an_error_frame_and_no_memory(cluster_factory,
                                                                           tmp_path):
    cluster = cluster_factory(1, 1)
    host, port, pid = data_address(cluster.dir)
    before = rss_bytes(pid)
    for handshake in (False, True, False, True):
        with connect(host, port, handshake=handshake) as sock:
            sock.sendall(struct.pack("!IB", 1 << 30, protocol.BUFFER) + b"x" * 20)  # 25 bytes
            error = read_error(sock)
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
