"""Bad input: one clear line on stderr, a non-zero exit, no traceback."""

from __future__ import annotations

from pathlib import Path

from tests.support.cluster import LocalCluster, weir_cli, write_job


def _one_clear_line(result, *needles: str) -> None:
    assert result.returncode != 0
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_unreachable_jobmaster(tmp_path: Path):
    _one_clear_line(weir_cli("list", "--jobmaster", "127.0.0.1:1", timeout=60),
                    "cannot reach the JobMaster at 127.0.0.1:1")
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1]).print()
        env.execute()
    """)
    _one_clear_line(weir_cli("run", "--jobmaster", "127.0.0.1:1", str(job), timeout=60),
                    "cannot reach the JobMaster")


def test_no_cluster_in_directory(tmp_path: Path):
    _one_clear_line(weir_cli("list", "--dir", str(tmp_path / "none")), "no cluster is running")


def test_invalid_and_unknown_config(tmp_path: Path):
    _one_clear_line(weir_cli("jobmaster", "-D", "heartbeat.interval=soon"),
                    "invalid value for 'heartbeat.interval'")
    _one_clear_line(weir_cli("jobmaster", "-D", "heartbeat.intervall=1s"),
                    "unknown configuration key 'heartbeat.intervall'",
                    "did you mean 'heartbeat.interval'")
    conf = tmp_path / "weir.yaml"
    conf.write_text("taskmanager:\n  numberOfTaskSlots: -3\n")
    _one_clear_line(weir_cli("taskexecutor", "--jobmaster", "127.0.0.1:1", "--conf", str(conf)),
                    "taskmanager.numberOfTaskSlots", "must be greater than 0")


def test_job_file_that_raises(shared_cluster: LocalCluster, tmp_path: Path):
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        rate = 10 / 0
    """)
    _one_clear_line(shared_cluster.weir("run", str(job)),
                    "raised ZeroDivisionError", "line 4: rate = 10 / 0")


def test_unpicklable_function_is_refused_at_submission(shared_cluster: LocalCluster,
                                                       tmp_path: Path):
    job = write_job(tmp_path, """
        import threading
        from weir import StreamExecutionEnvironment
        lock = threading.Lock()
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1, 2]).map(lambda n: (lock, n)).name("Locked Map").print()
        env.execute()
    """)
    before = len(shared_cluster.client().list_jobs())
    _one_clear_line(shared_cluster.weir("run", str(job)),
                    "cannot serialize the function of operator 'Locked Map'")
    assert len(shared_cluster.client().list_jobs()) == before, "nothing may be submitted"


def test_unknown_job_id(shared_cluster: LocalCluster):
    unknown = "0" * 32
    _one_clear_line(shared_cluster.weir("status", unknown), f"no job with id '{unknown}'")
    _one_clear_line(shared_cluster.weir("cancel", unknown), "no job with id")


def test_missing_job_file_and_job_without_execute(shared_cluster: LocalCluster, tmp_path: Path):
    _one_clear_line(shared_cluster.weir("run", str(tmp_path / "nope.py")), "job file not found")
    job = write_job(tmp_path, "print('no job here')\n")
    _one_clear_line(shared_cluster.weir("run", str(job)), "did not submit a job")
