"""A cluster started with --tls: jobs run over mutual TLS (gRPC and the data plane), and a
client without the cluster's certificate, or trusting another CA, gets nothing."""

from __future__ import annotations

import socket
import stat

import pytest

from tests.support.cluster import LocalCluster, weir_cli, write_job
from tests.support.dataplane import data_address
from weir.core.tls import generate_cluster_pki

JOB = """
import sys
from weir import StreamExecutionEnvironment
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
values = (env.from_sequence(0, 9_999).rebalance().map(lambda n: n * 3)
          .execute_and_collect())
values = list(values)
print(sum(values), len(values))
"""


def test_a_tls_cluster_runs_jobs_and_refuses_clients_without_its_certificate(tmp_path):
    directory = tmp_path / "cluster"
    started = weir_cli("cluster", "start", "--dir", str(directory), "--tls",
                       "--taskexecutors", "2", "--slots", "1")
    cluster = LocalCluster(directory)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        key = directory / "tls" / "node-key.pem"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600

        # Two TaskExecutors of one slot each: the rebalance crosses the data plane.
        job = write_job(tmp_path, JOB)
        ran = cluster.weir("run", str(job))
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split()[-2:] == [str(3 * sum(range(10_000))), "10000"]

        address = cluster.address
        plain = weir_cli("list", "--jobmaster", address, timeout=60)
        assert plain.returncode != 0
        assert len(plain.stderr.strip().splitlines()) == 1, plain.stderr

        stranger = generate_cluster_pki(tmp_path / "stranger", ["127.0.0.1"])
        other_ca = weir_cli("list", "--jobmaster", address,
                            *(f"-D{k}={v}" for k, v in stranger.as_options().items()),
                            timeout=60)
        assert other_ca.returncode != 0
        assert "Traceback" not in other_ca.stderr

        host, port, _ = data_address(directory)
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(b"\x00\x00\x00\x01\x09")      # a HELLO frame in clear
            sock.settimeout(10)
            try:
                reply = sock.recv(64)
            except ConnectionResetError:
                reply = b""
            assert reply[4:5] != b"\x08", "the data port spoke the protocol without TLS"

        for log in (directory / "log").glob("*.log"):
            assert "Traceback" not in log.read_text(), log.name
    finally:
        cluster.stop()


@pytest.mark.extended
def test_a_plain_restart_of_a_tls_cluster_directory_forgets_its_certificates(tmp_path):
    directory = tmp_path / "cluster"
    cluster = LocalCluster(directory)
    try:
        assert weir_cli("cluster", "start", "--dir", str(directory), "--tls",
                        "--taskexecutors", "1").returncode == 0
        cluster.stop()
        cluster.start(1, 1)
        assert not (directory / "tls").exists()
        assert cluster.weir("list").returncode == 0
    finally:
        cluster.stop()
