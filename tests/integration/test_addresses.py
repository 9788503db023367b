"""Daemons bound to one address and reached at another: real JobMaster and TaskExecutor
processes started by hand (as on a cluster of hosts), on loopback addresses other than
127.0.0.1, which Linux serves without any setup."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import REPO, poll, stop_process, weir_cli, write_job
from weir.client.cluster_client import JobMasterClient
from weir.core.addresses import local_address_toward, split_host_port

START_TIMEOUT_S = 60

JOB = """
    from weir import StreamExecutionEnvironment
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    doubled = env.from_collection(list(range(1000))).rebalance().map(lambda n: n * 2)
    print("sum", sum(doubled.execute_and_collect("across TaskExecutors")))
"""


class Daemons:
    """``weir jobmaster`` and ``weir taskexecutor`` processes of one test, each with its
    stderr in a file; every one still running is stopped (SIGTERM) at the end."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.processes: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        stderr = self.dir / f"{name}.err"
        with stderr.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "weir", *args, "-Dmetrics.reporter.prom.port=0",
                 "--info-file", str(self.dir / f"{name}.json")],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=out, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(REPO)})
        self.processes.append(proc)
        return proc, stderr

    def info(self, name: str, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        """The daemon's info file, once written (it fails if the daemon exits first)."""
        path = self.dir / f"{name}.json"

        def written() -> dict[str, Any] | None:
            assert proc.poll() is None, (self.dir / f"{name}.err").read_text()
            return json.loads(path.read_text()) if path.exists() else None

        return poll(written, START_TIMEOUT_S, interval=0.1, what=f"{name}'s info file")

    def jobmaster(self, *options: str) -> str:
        """Start a JobMaster with ``options`` (KEY=VALUE); returns the address it reports."""
        proc, _ = self.spawn("jobmaster", "jobmaster", "-Djobmaster.rpc.port=0", "-Drest.port=0",
                             *(f"-D{o}" for o in options))
        return str(self.info("jobmaster", proc)["address"])

    def taskexecutor(self, name: str, jobmaster: str, *options: str
                     ) -> tuple[subprocess.Popen[bytes], Path]:
        return self.spawn(name, "taskexecutor", "--jobmaster", jobmaster, "--slots", "1",
                          *(f"-D{o}" for o in options))

    def stop(self) -> None:
        for proc in reversed(self.processes):
            stop_process(proc)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    started = Daemons(tmp_path)
    yield started
    started.stop()


def registered(jobmaster: str, count: int) -> dict[str, Any]:
    """The TaskExecutors registered at ``jobmaster`` (by resource id), once ``count`` are."""
    client = JobMasterClient(jobmaster, timeout=10)
    try:
        return poll(lambda: (tes := client.cluster_overview().task_executors) and
                    len(tes) == count and {te.resource_id: te for te in tes},
                    START_TIMEOUT_S, interval=0.1, what=f"{count} TaskExecutors to register")
    finally:
        client.close()


def exited(proc: subprocess.Popen[bytes], stderr: Path) -> list[str]:
    """Wait for ``proc`` to exit non-zero; returns its stderr's lines."""
    poll(lambda: proc.poll() is not None, START_TIMEOUT_S, interval=0.1,
         what="the TaskExecutor to exit")
    assert proc.returncode == 1, stderr.read_text()
    output = stderr.read_text()
    assert "Traceback" not in output, output
    return output.splitlines()


def test_taskexecutors_bound_to_every_interface_advertise_their_host_and_run_a_job(
        daemons: Daemons, tmp_path: Path):
    """The JobMaster binds 0.0.0.0 and is reached at jobmaster.rpc.address; one
    TaskExecutor binds 0.0.0.0 (gRPC, data, metrics) and advertises 127.0.0.2, the other
    binds and advertises a host name. A job's data crosses from one to the other."""
    jobmaster = daemons.jobmaster("jobmaster.rpc.bind-host=0.0.0.0",
                                  "jobmaster.rpc.address=127.0.0.4")
    assert jobmaster.startswith("127.0.0.4:")
    wildcard, _ = daemons.taskexecutor(
        "wildcard", jobmaster, "taskmanager.resource-id=wildcard",
        "taskmanager.bind-host=0.0.0.0", "taskmanager.host=127.0.0.2",
        "metrics.reporter.prom.host=0.0.0.0")
    daemons.taskexecutor("named", jobmaster, "taskmanager.resource-id=named",
                         "taskmanager.host=localhost")
    tes = registered(jobmaster, 2)

    te = tes["wildcard"]
    assert split_host_port(te.rpc_address)[0] == "127.0.0.2"
    assert split_host_port(te.data_address)[0] == "127.0.0.2"
    assert te.metrics_url.startswith("http://127.0.0.2:")
    assert daemons.info("wildcard", wildcard)["address"] == te.rpc_address
    with urllib.request.urlopen(te.metrics_url, timeout=10) as page:
        assert b"weir_taskexecutor_slots_total" in page.read()
    assert split_host_port(tes["named"].rpc_address)[0] == "localhost"
    assert split_host_port(tes["named"].data_address)[0] == "localhost"
    for address in (te.rpc_address, te.data_address, te.metrics_url,
                    tes["named"].rpc_address, tes["named"].data_address):
        assert "0.0.0.0" not in address

    ran = weir_cli("run", "--jobmaster", jobmaster, str(write_job(tmp_path, JOB)))
    assert ran.returncode == 0, ran.stderr
    assert "sum 999000" in ran.stdout
    log = (tmp_path / "jobmaster.err").read_text()
    assert f"JobMaster started at {jobmaster} (bound to 0.0.0.0:" in log


def test_a_taskexecutor_advertising_an_address_it_does_not_bind_is_refused_in_one_line(
        daemons: Daemons):
    jobmaster = daemons.jobmaster()
    proc, stderr = daemons.taskexecutor("misadvertised", jobmaster,
                                        "taskmanager.resource-id=te-1",
                                        "taskmanager.host=127.0.0.2",
                                        "taskmanager.bind-host=127.0.0.3")
    lines = exited(proc, stderr)
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, lines
    # Written once it started, before it registered.
    rpc = json.loads((daemons.dir / "misadvertised.json").read_text())["address"]
    assert errors[0] == (
        f"error: the JobMaster at {jobmaster} refused the registration: TaskExecutor te-1 "
        f"advertises {rpc} (taskmanager.host), which the JobMaster at {jobmaster} cannot "
        "reach: Connection refused; set taskmanager.host to an address other hosts can "
        "reach")
    assert rpc.startswith("127.0.0.2:")
    client = JobMasterClient(jobmaster, timeout=10)
    try:
        assert list(client.cluster_overview().task_executors) == []
    finally:
        client.close()


def test_a_taskexecutor_that_cannot_reach_its_jobmaster_names_the_address_and_the_flag(
        daemons: Daemons):
    with socket.create_server(("127.0.0.1", 0)) as unused:
        nobody = f"127.0.0.1:{unused.getsockname()[1]}"
    proc, stderr = daemons.taskexecutor("lonely", nobody,
                                        "taskmanager.registration.timeout=3 s")
    lines = exited(proc, stderr)
    warnings = [line for line in lines if "cannot reach the JobMaster" in line]
    assert len(warnings) == 1, lines
    assert f"cannot reach the JobMaster at {nobody} (--jobmaster): " in warnings[0]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, lines
    assert errors[0].startswith(f"error: could not register with the JobMaster at {nobody} "
                                "(--jobmaster) within 3 s (UNAVAILABLE: ")


@pytest.mark.extended
def test_a_wildcard_taskexecutor_without_a_host_advertises_its_interface_toward_the_jobmaster(
        daemons: Daemons):
    jobmaster = daemons.jobmaster("jobmaster.rpc.bind-host=127.0.0.5")
    daemons.taskexecutor("wildcard", jobmaster, "taskmanager.resource-id=wildcard",
                         "taskmanager.bind-host=0.0.0.0")
    te = registered(jobmaster, 1)["wildcard"]
    expected = local_address_toward(jobmaster)
    assert split_host_port(te.rpc_address)[0] == expected
    assert split_host_port(te.data_address)[0] == expected
    assert expected != "0.0.0.0"


@pytest.mark.extended
def test_a_wildcard_jobmaster_without_an_rpc_address_advertises_its_host_name(
        daemons: Daemons, tmp_path: Path):
    jobmaster = daemons.jobmaster("jobmaster.rpc.bind-host=0.0.0.0")
    assert split_host_port(jobmaster)[0] == socket.getfqdn()
    log = (tmp_path / "jobmaster.err").read_text()
    assert (f"jobmaster.rpc.bind-host 0.0.0.0 binds every interface and "
            f"jobmaster.rpc.address is unset: advertising the host name, {jobmaster}") in log
    try:
        socket.getaddrinfo(socket.getfqdn(), None)
    except OSError:
        return  # the host's name does not resolve here: no TaskExecutor could use it
    daemons.taskexecutor("te", jobmaster, "taskmanager.resource-id=te")
    assert "te" in registered(jobmaster, 1)
