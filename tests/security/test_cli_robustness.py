"""The CLI under awkward input: a file as the cluster directory, a closed output pipe, weir
options after the job file or among the program's arguments, and a checkpoint directory the
job could never use. Each ends with one clear line (or quietly, for the pipe) and never with
a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import (
    REPO,
    LocalCluster,
    job_names,
    user_error_line,
    weir_cli,
    write_job,
)
from tests.support.seaweedfs import SeaweedS3

ARGV_JOB = """
    import sys
    from weir import StreamExecutionEnvironment
    print("argv", sys.argv[1:])
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2]).print()
    env.execute("argv")
"""

CHECKPOINTED_JOB = """
    from weir import StreamExecutionEnvironment
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(200)
    env.from_sequence(1, 10 ** 9).map(lambda n: n).print()
    env.execute("checkpointed")
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = LocalCluster(tmp_path_factory.mktemp("cli") / "cluster").start(1, 2)
    yield cluster
    cluster.stop()






def test_a_regular_file_as_cluster_directory(tmp_path: Path):
    not_a_dir = tmp_path / "cluster"
    not_a_dir.write_text("I am a file")
    user_error_line(weir_cli("cluster", "start", "--dir", str(not_a_dir)), str(not_a_dir), "a file")
    user_error_line(weir_cli("cluster", "start", "--dir", str(not_a_dir / "below")),
                    str(not_a_dir / "below"))
    assert not_a_dir.read_text() == "I am a file"


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run weir with stdout a pipe nobody reads any more (`weir ... | head -1` after head
    exited), with the buffering a user's shell gives it."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(REPO)
    try:
        return subprocess.run([sys.executable, "-m", "weir", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, env=env,
                              cwd=REPO)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [
    ("--help",),
    ("cluster", "status"),
    ("list",),
])
def test_a_closed_output_pipe_ends_quietly(cluster: LocalCluster, args: tuple[str, ...]):
    if args != ("--help",):
        args = (*args, "--dir", str(cluster.dir))
    result = _into_closed_pipe(*args)
    assert result.stderr == ""
    assert result.returncode == 0


def test_weir_options_right_after_the_job_file_are_weirs(cluster: LocalCluster,
                                                         tmp_path: Path):
    # The README's form: `weir run job.py [--dir DIR] [--detached] [-D ...] [ARGS...]`.
    # Before, "--dir D" went to the program and the job to the default cluster (or nowhere).
    job = write_job(tmp_path, ARGV_JOB)
    ran = weir_cli("run", str(job), "--dir", str(cluster.dir), "-Dparallelism.default=1",
                   "input.txt", "-x")
    assert ran.returncode == 0, ran.stderr
    assert "argv ['input.txt', '-x']" in ran.stdout
    assert "argv" in job_names(cluster)


def test_weir_options_after_program_arguments_are_refused(cluster: LocalCluster,
                                                          tmp_path: Path):
    job = write_job(tmp_path, ARGV_JOB)
    before = job_names(cluster)
    for misplaced in (["input.txt", "--dir", str(cluster.dir)],
                      ["input.txt", f"--jobmaster={cluster.address}"],
                      ["input.txt", "-Dparallelism.default=2"], ["input.txt", "--detached"]):
        flag = misplaced[1].split("=")[0]
        user_error_line(weir_cli("run", "--dir", str(cluster.dir), str(job), *misplaced),
                        f"'{flag}", "follows the program's arguments", "--")
    assert job_names(cluster) == before, "nothing may be submitted"


def test_options_after_a_double_dash_go_to_the_program(cluster: LocalCluster, tmp_path: Path):
    job = write_job(tmp_path, ARGV_JOB)
    ran = weir_cli("run", "--dir", str(cluster.dir), str(job), "--", "--dir", "elsewhere")
    assert ran.returncode == 0, ran.stderr
    assert "argv ['--dir', 'elsewhere']" in ran.stdout
    ran = weir_cli("run", str(job), "--dir", str(cluster.dir), "--", "-Dx", "y")
    assert ran.returncode == 0, ran.stderr
    assert "argv ['-Dx', 'y']" in ran.stdout
    plain = weir_cli("run", "--dir", str(cluster.dir), str(job), "a", "-x")
    assert plain.returncode == 0, plain.stderr
    assert "argv ['a', '-x']" in plain.stdout


def _checkpointed_run(cluster: LocalCluster, tmp_path: Path, **conf: str):
    """Submit CHECKPOINTED_JOB detached with ``conf`` in a --conf file (which the job's
    configuration carries to the cluster); returns the result and how many jobs it added."""
    job = write_job(tmp_path, CHECKPOINTED_JOB)
    conf_file = tmp_path / "weir.yaml"
    conf_file.write_text("".join(f"{key}: {value!r}\n" for key, value in conf.items()))
    conf_file.chmod(0o600)
    before = len(job_names(cluster))
    result = weir_cli("run", "--dir", str(cluster.dir), "--detached", "--conf", str(conf_file),
                      str(job), timeout=120)
    client = cluster.client()
    try:
        for job_id in result.stdout.split():  # (only if the refusal failed)
            client.cancel_job(job_id)
    finally:
        client.close()
    return result, len(job_names(cluster)) - before


def test_a_relative_checkpoint_directory_is_refused_before_the_job_starts(
        cluster: LocalCluster, tmp_path: Path):
    result, submitted = _checkpointed_run(cluster, tmp_path, **{"state.checkpoints.dir": "chk"})
    user_error_line(result, "state.checkpoints.dir", "'chk'", "not absolute")
    assert submitted == 0


def test_an_unreachable_s3_endpoint_is_refused_before_the_job_starts(
        cluster: LocalCluster, tmp_path: Path):
    result, submitted = _checkpointed_run(cluster, tmp_path, **{
        "state.checkpoints.dir": "s3://weir/checkpoints", "s3.endpoint": "http://127.0.0.1:1",
        "s3.access-key": "weir", "s3.secret-key": "secret"})
    user_error_line(result, "state.checkpoints.dir s3://weir/checkpoints",
                    "cannot reach S3 endpoint", "s3.endpoint")
    assert submitted == 0


def test_a_wrong_s3_secret_is_refused_before_the_job_starts(
        cluster: LocalCluster, tmp_path: Path, seaweed_s3: SeaweedS3, s3_bucket: str):
    result, submitted = _checkpointed_run(cluster, tmp_path, **{
        "state.checkpoints.dir": f"s3://{s3_bucket}/checkpoints",
        "s3.endpoint": seaweed_s3.endpoint, "s3.access-key": seaweed_s3.access_key,
        "s3.secret-key": "not-the-secret"})
    user_error_line(result, f"s3://{s3_bucket}/checkpoints", "s3.secret-key")
    assert submitted == 0
