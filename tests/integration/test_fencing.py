"""TaskExecutors cut off from the rest of the cluster cannot corrupt a job.

* One paused past the heartbeat timeout (SIGSTOP) and then resumed: its stale tasks are
  cancelled, their late acknowledgements and data ignored, and the committed output stays
  exactly once.
* One whose data connections are cut mid-job (``ss -K``): the job restarts from its latest
  checkpoint with new attempts, and the committed output is exactly the expected one.
* One whose JobMaster's address stops answering (new connections refused, the established
  one silent): it gives the JobMaster up after heartbeat.rpc-failure-threshold failed calls,
  long before heartbeat.timeout, cancels its tasks, and registers again once the address
  answers. Conversely, the JobMaster gives up a TaskExecutor that its calls cannot reach.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import (
    REPO,
    LocalCluster,
    job_details,
    poll,
    stop_process,
    wait_all_running,
    write_job,
)
from tests.support.exactly_once import (
    ENDED,
    finished_exactly_once,
    kill_busy_taskexecutor,
    running_with_checkpoint_after,
    status_name,
    submit,
)
from tests.support.network_faults import SilencingProxy
from weir.core import options
from weir.core.cluster_directory import TaskExecutorInfo
from weir.proto import common_pb2

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

N = 120_000
RESTARTS = {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
            "restart-strategy.fixed-delay.delay": "200 ms"}


def test_a_paused_taskexecutor_resumed_after_the_timeout_cannot_corrupt_the_job(
        cluster_factory, tmp_path):
    cluster = cluster_factory(4, 2, "heartbeat.interval=500 ms", "heartbeat.timeout=3 s")
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, gate=gate, config={
        "execution.checkpointing.interval": "500 ms", **RESTARTS})
    details = running_with_checkpoint_after(cluster, job_id, 0, 60)
    victim = kill_busy_taskexecutor(cluster, details, signal.SIGSTOP)
    pid = cluster.taskexecutor_pid(victim)
    try:
        # Declared lost after the timeout; the job runs on elsewhere, checkpoints again.
        restarted = poll(lambda: (d := job_details(cluster, job_id)).summary.restarts >= 1
                         and d, 60, interval=0.2, what="the job to restart without it")
        running_with_checkpoint_after(cluster, job_id, restarted.last_checkpoint_id, 60)
    finally:
        os.kill(pid, signal.SIGCONT)
    # Back: its stale tasks must not touch the job, and the job must not fail over it.
    gate.touch()
    finished_exactly_once(cluster, job_id, out, N)
    log = (cluster.dir / "log").glob("taskexecutor-*.log")
    assert any("lost the JobMaster" in p.read_text() or "no heartbeat" in p.read_text()
               for p in log), "the resumed TaskExecutor did not notice it was cut off"


# -- cut data connections ------------------------------------------------------------------


def _ss(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ss", *args], capture_output=True, text=True, timeout=30)


def _why_sockets_cannot_be_cut() -> str | None:
    """Why ``ss -K`` cannot cut another process's TCP connections here (None: it can).

    It needs iproute2, a kernel with SOCK_DESTROY (CONFIG_INET_DIAG_DESTROY) and
    CAP_NET_ADMIN, i.e. root. Tried on a connection of this process: its end must come out
    aborted."""
    if shutil.which("ss") is None:
        return "ss (iproute2) is not installed"
    with socket.create_server(("127.0.0.1", 0)) as listener, \
            socket.create_connection(listener.getsockname()) as client:
        server, _ = listener.accept()
        with server:
            port = client.getsockname()[1]
            result = _ss("-K", "-tnH", "state", "established", f"( sport = :{port} )")
            client.setblocking(False)  # a destroyed socket fails at once, a live one would wait
            try:
                client.recv(1)
            except BlockingIOError:
                return f"ss -K left the connection alone ({result.stderr.strip() or 'not root?'})"
            except OSError:
                pass  # aborted (ECONNABORTED): destroyed from outside, as intended
            return None


def _data_sockets(pid: int, own_port: int, peer_ports: set[int]) -> list[tuple[int, int]]:
    """(local port, remote port) of process ``pid``'s established data connections: those
    its data server accepted, and those it opened to the other TaskExecutors' data servers."""
    found = []
    for line in _ss("-tnpH", "state", "established").stdout.splitlines():
        if f"pid={pid}," not in line:
            continue
        local, remote = line.split()[2:4]
        local_port, remote_port = int(local.rpartition(":")[2]), int(remote.rpartition(":")[2])
        if local_port == own_port or remote_port in peer_ports:
            found.append((local_port, remote_port))
    return found


def test_cut_data_connections_restart_the_job_from_its_checkpoint_exactly_once(
        cluster_factory, tmp_path):
    why = _why_sockets_cannot_be_cut()
    if why is not None:
        pytest.skip(f"cutting a daemon's TCP connections needs `ss -K` as root: {why}")
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, gate=gate, config={
        "execution.checkpointing.interval": "500 ms", **RESTARTS})
    before = running_with_checkpoint_after(cluster, job_id, 0, 60)
    assert status_name(before) == "RUNNING", before.failure.message
    old_attempts = {s.attempt_id for v in before.vertices for s in v.subtasks}
    daemons = {te.resource_id: te for te in cluster.files.taskexecutors().values()}
    data_port = {rid: te.data_host_port[1] for rid, te in daemons.items()}
    victim = sorted({s.resource_id for v in before.vertices for s in v.subtasks})[0]
    sockets = _data_sockets(daemons[victim].pid, data_port[victim],
                            {port for rid, port in data_port.items() if rid != victim})
    assert sockets, f"{victim} has no data connection to cut: does the job span both?"

    # Only the victim's ends are destroyed; their peers get a reset. The process lives on.
    for local_port, remote_port in sockets:
        _ss("-K", "-tnH", "state", "established",
            f"( sport = :{local_port} and dport = :{remote_port} )")

    restarted = poll(lambda: (d := job_details(cluster, job_id)) and
                     (d.summary.restarts >= 1 or
                      status_name(d) in ENDED) and d,
                     60, interval=0.1, what="the job to restart after its connections broke")
    assert restarted.summary.restarts >= 1, restarted.failure.message
    causes = [(c.reason, c.message) for c in restarted.restart_causes]
    assert any(reason == common_pb2.REMOTE_TRANSPORT or "data connection" in message
               for reason, message in causes), causes
    resumed = running_with_checkpoint_after(cluster, job_id, before.last_checkpoint_id, 60)
    assert status_name(resumed) == "RUNNING", resumed.failure.message
    # Restored from a checkpoint taken before the cut, not started over, and every task
    # runs as a new attempt: what the old attempts still send (data on a partition named
    # after them, acknowledgements under their attempt id) reaches nobody.
    assert resumed.last_restore.checkpoint_id >= before.last_checkpoint_id
    new_attempts = {s.attempt_id for v in resumed.vertices for s in v.subtasks}
    assert not old_attempts & new_attempts, "a task kept its attempt across the restart"

    gate.touch()
    finished_exactly_once(cluster, job_id, out, N)
    # Broken data connections fail tasks, not the TaskExecutor: it stayed registered.
    assert victim in _registered(cluster)


# -- a JobMaster address that stops answering ----------------------------------------------


def _registered(cluster: LocalCluster) -> set[str]:
    client = cluster.client()
    try:
        return {te.resource_id for te in client.cluster_overview().task_executors}
    finally:
        client.close()


def _slots_used(metrics_url: str) -> int:
    body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    return int(float(next(line.split()[1] for line in body.splitlines()
                          if line.startswith("weir_taskexecutor_slots_used "))))


ENDLESS = """
    from weir import StreamExecutionEnvironment, DiscardingSink
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_sequence(0, 10**12).rebalance().map(lambda n: n).sink_to(DiscardingSink())
    env.execute("endless")
"""


def test_a_taskexecutor_gives_up_an_unreachable_jobmaster_after_failed_calls_not_the_timeout(
        cluster_factory, tmp_path: Path):
    timeout_s = 30.0
    settings = ["heartbeat.interval=300 ms", f"heartbeat.timeout={timeout_s:.0f} s",
                "heartbeat.rpc-failure-threshold=2"]
    cluster = cluster_factory(1, 1, *settings)
    proxy = SilencingProxy(cluster.address)
    log, info_file = tmp_path / "proxied-te.log", tmp_path / "proxied-te.json"
    te: subprocess.Popen[bytes] | None = None
    try:
        te = subprocess.Popen(
            [sys.executable, "-m", "weir", "taskexecutor", "--jobmaster", proxy.address,
             "--slots", "1", *(f"-D{s}" for s in settings), "-Dmetrics.reporter.prom.port=0",
             "-Dtaskmanager.resource-id=proxied-te",
             f"-Dprocess.taskmanager.working-dir={tmp_path / 'proxied-te'}",
             "--info-file", str(info_file), "--log-file", str(log)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        info = poll(lambda: TaskExecutorInfo.read(info_file), 60,
                    what="the TaskExecutor behind the proxy to start")
        poll(lambda: "proxied-te" in _registered(cluster), 30,
             what="it to register through the proxy")
        result = cluster.weir("run", "--detached", str(write_job(tmp_path, ENDLESS)))
        assert result.returncode == 0, result.stderr
        details = wait_all_running(cluster, result.stdout.strip())
        assert "proxied-te" in {s.resource_id for v in details.vertices for s in v.subtasks}
        assert _slots_used(info.metrics_url) == 1

        cut_at = time.monotonic()
        proxy.stop_answering()
        line = poll(lambda: next((line for line in log.read_text().splitlines()
                                  if "cannot be reached" in line), None),
                    timeout_s, what="the TaskExecutor to give the JobMaster up")
        noticed_after = time.monotonic() - cut_at
        assert "2 calls in a row failed (UNAVAILABLE)" in line, line
        # About (2 + threshold) heartbeat intervals: a heartbeat overdue by one interval,
        # then a refused call per interval. Without the threshold it takes the whole
        # heartbeat.timeout (measured: 30 s).
        assert noticed_after < timeout_s / 6, f"noticed after {noticed_after:.1f} s"
        poll(lambda: _slots_used(info.metrics_url) == 0, 10,
             what="its tasks to be cancelled")

        proxy.answer_again()
        poll(lambda: log.read_text().count("registered at the JobMaster") >= 2, 30,
             what="it to register again once the address answers")
        poll(lambda: "proxied-te" in _registered(cluster), 10, what="the JobMaster to know it")
    finally:
        if te is not None:
            stop_process(te)
        proxy.close()


def test_the_jobmaster_gives_up_a_taskexecutor_its_calls_cannot_reach(caplog):
    """The other direction, in one process: a TaskExecutor's heartbeat stream goes on while
    its RPC address refuses (its server stopped, as a firewall or a certificate that does
    not name its host would shut it off). The JobMaster's own calls to it decide, after
    heartbeat.rpc-failure-threshold of them, long before heartbeat.timeout."""
    from weir.client.minicluster import MiniCluster
    from weir.core.config import Configuration
    from weir.core.rpc import keep_until_done
    from weir.proto import taskexecutor_pb2

    caplog.set_level(logging.WARNING, logger="weir.jobmaster.resource_manager")
    caplog.set_level(logging.WARNING, logger="weir.jobmaster.daemon")
    conf = Configuration.from_pairs({"heartbeat.interval": "300 ms",
                                     "heartbeat.timeout": "30 s",
                                     "heartbeat.rpc-failure-threshold": "2"})
    with MiniCluster(num_slots=1, configuration=conf) as cluster:
        jm, te = cluster.jobmaster, cluster.task_executors[0]
        assert jm is not None

        def registration() -> Any:
            return jm.main.call(lambda: jm.resources.get(te.resource_id))

        record = registration()
        te._server.stop(None).wait(5)
        started = time.monotonic()

        def call_then_check() -> bool:
            # Any call counts; cancelling an attempt it never had changes nothing there.
            jm.main.call(lambda: keep_until_done(record.stub.CancelTask.future(
                taskexecutor_pb2.CancelTaskRequest(attempt_id="none"), timeout=5)))
            return registration() is not record

        poll(call_then_check, 15, interval=0.1, what="the JobMaster to give it up")
        assert time.monotonic() - started < conf.get(options.HEARTBEAT_TIMEOUT) / 3
        assert any("2 calls to it in a row could not reach it (UNAVAILABLE" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        # Its heartbeat stream was ended for it: it noticed and asks to register anew,
        # which the JobMaster refuses while it cannot reach the address; having been
        # reachable before, the TaskExecutor keeps asking (the fault may heal).
        poll(lambda: any(f"TaskExecutor {te.resource_id} advertises" in r.getMessage()
                         and "cannot reach: Connection refused" in r.getMessage()
                         for r in caplog.records), 15,
             what="the JobMaster to refuse its registration")
        assert registration() is None
        assert te.fatal_error is None and not te.stopped.is_set()
