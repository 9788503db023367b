"""A second TaskExecutor with the resource id of a live one is refused and exits; the first
keeps its registration and runs jobs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cluster import REPO, poll, write_job

JOB = """
    from weir import StreamExecutionEnvironment
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection(list(range(100))).rebalance().map(lambda n: n * 2).print()
    env.execute("after the duplicate")
"""


def test_a_duplicate_resource_id_is_refused_and_the_first_keeps_running(cluster_factory,
                                                                          tmp_path: Path):
    cluster = cluster_factory(1, 2)
    [first] = cluster.status()["taskexecutors"]
    assert first["registered"]
    log = tmp_path / "duplicate.err"
    with log.open("w") as err:
        duplicate = subprocess.Popen(
            [sys.executable, "-m", "weir", "taskexecutor", "--jobmaster", cluster.address,
             "--slots", "3", f"-Dtaskmanager.resource-id={first['resource_id']}",
             "-Dmetrics.reporter.prom.port=0"],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        poll(lambda: duplicate.poll() is not None, timeout=30,
             what="the duplicate TaskExecutor to exit")
    finally:
        with contextlib.suppress(OSError):
            duplicate.kill()
        duplicate.wait(10)
    assert duplicate.returncode == 1
    output = log.read_text()
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    assert errors[0].startswith(
        f"error: the JobMaster at {cluster.address} refused the registration: a TaskExecutor "
        f"with resource id '{first['resource_id']}' is already registered and alive "
        f"({first['address']}, pid {first['pid']}, last heartbeat "), output
    assert "taskmanager.resource-id" in errors[0] and "Traceback" not in output

    [still] = cluster.status()["taskexecutors"]
    assert still["registered"] and still["pid"] == first["pid"]
    assert still["slots_total"] == 2 and still["slots_free"] == 2
    ran = cluster.weir("run", str(write_job(tmp_path, JOB)))
    assert ran.returncode == 0, ran.stderr
    listing = cluster.weir("list")
    assert "after the duplicate" in listing.stdout and "FINISHED" in listing.stdout

