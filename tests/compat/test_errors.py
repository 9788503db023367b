"""What a PyFlink user sees when things go right or wrong: ``python job.py`` ends quietly;
a failure in a user function names the user's file, line and code in the output of
``python job.py`` and ``weir run`` (short), in ``weir status`` (their traceback) and in
the TaskExecutor's log; and the job's cause is that failure, not its downstream echo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import REPO, weir_cli, write_job
from tests.support.exactly_once import status_name, wait_ended

WORDS = '''
from weir import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
(env.from_collection(["to be", "or not to be"]).flat_map(lambda line: line.split())
 .key_by(lambda w: w).map(lambda w: (w, 1)).print())
env.execute("words")
'''

FAILING = '''
from weir import StreamExecutionEnvironment


def parse(line):
    return int(line)  # "x" is no number


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.from_collection(["1", "2", "x", "4"]).rebalance().map(parse).print()
env.execute("parse")
'''
FAILING_LINE = 6


def _python(job: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(job)], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_python_job_py_ends_quietly(tmp_path: Path) -> None:
    result = _python(write_job(tmp_path, WORDS))
    assert result.returncode == 0, result.stderr
    assert sorted(line.split("> ")[1] for line in result.stdout.splitlines()) == sorted(
        str((w, 1)) for w in ["to", "be", "or", "not", "to", "be"])
    assert "WARNING" not in result.stderr and "lost" not in result.stderr, result.stderr


def test_a_user_function_failure_points_at_the_users_line(tmp_path: Path) -> None:
    job = write_job(tmp_path, FAILING)
    result = _python(job)
    assert result.returncode != 0
    where = f"{job}:{FAILING_LINE} in parse: return int(line)"
    assert where in result.stderr, result.stderr
    assert "ValueError: invalid literal for int()" in result.stderr


@pytest.mark.extended
def test_weir_run_status_and_the_taskexecutor_log_show_the_users_traceback(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(1, 2)
    job = write_job(tmp_path, FAILING)
    result = cluster.weir("run", "--detached", str(job))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip().splitlines()[-1]
    final = wait_ended(cluster, job_id)
    assert status_name(final) == "FAILED"
    # The cause is the failure in user code, located; not a consumer's lost connection.
    assert final.failure.message.startswith("ValueError"), final.failure.message
    assert f"{job}:{FAILING_LINE} in parse" in final.failure.message
    status = weir_cli("status", "--dir", str(cluster.dir), job_id)
    assert f'File "{job}", line {FAILING_LINE}, in parse' in status.stdout, status.stdout
    assert "return int(line)" in status.stdout
    assert "taskexecutor" not in status.stdout.split("cause:")[1].split("TASK")[0], \
        "weir's own frames are not the user's traceback"
    logs = "".join(p.read_text() for p in (cluster.dir / "log").glob("taskexecutor-*.log"))
    assert f'File "{job}", line {FAILING_LINE}, in parse' in logs
    attached = cluster.weir("run", str(job))
    assert attached.returncode != 0
    assert f"{job}:{FAILING_LINE} in parse" in attached.stderr, attached.stderr
