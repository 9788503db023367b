"""PyFlink's JobClient: ``execute_async()`` gives a client whose methods return
CompletableFutures (``get_job_status().result()``, ``get_job_execution_result().result()``,
``trigger_savepoint(dir).result()``, ``stop_with_savepoint(...).result()``), and
``JobExecutionResult.get_net_runtime()`` is in milliseconds, as in PyFlink."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest

from tests.support.cluster import poll
from weir.common import JobClient, JobExecutionResult, JobStatus
from weir.core.errors import InvalidJobError, JobExecutionError
from weir.datastream import StreamExecutionEnvironment
from weir.datastream.connectors.base import DiscardingSink


def test_a_finished_jobs_futures() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection(list(range(100))).map(lambda n: n * 2).sink_to(DiscardingSink())
    started = time.monotonic()
    client = env.execute_async("futures")
    future = client.get_job_execution_result()
    result = future.result(timeout=60)
    elapsed_ms = (time.monotonic() - started) * 1000
    assert isinstance(result, JobExecutionResult) and future.done()
    assert result.get_job_id() == client.get_job_id() == client.job_id
    assert isinstance(result.get_net_runtime(), int) and 0 <= result.get_net_runtime() <= \
        elapsed_ms + 1
    assert client.get_job_status().result() is JobStatus.FINISHED
    assert client.get_accumulators().result() == {}
    assert future.result() is result  # computed once


def test_a_failed_jobs_result_future_raises_the_failure() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_config()  # PyFlink programs often touch it first
    env.from_collection(["1", "x"]).map(int).sink_to(DiscardingSink())
    client = env.execute_async("fails")
    future = client.get_job_execution_result()
    with pytest.raises(JobExecutionError, match="invalid literal"):
        future.result(timeout=60)
    assert isinstance(future.exception(), JobExecutionError)
    assert client.get_job_status().result() is JobStatus.FAILED


def test_savepoints_through_the_job_client(tmp_path: Path) -> None:
    incoming = tmp_path / "incoming"
    incoming.mkdir()  # watched and empty: the job runs until stopped
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(60_000)
    env.get_checkpoint_config().set_checkpoint_storage_dir((tmp_path / "ckpt").as_uri())
    env.from_source(str(incoming), format="parquet", monitor_interval=0.1) \
        .sink_to(DiscardingSink())
    client = env.execute_async("savepoints")
    try:
        # As in Flink, a savepoint is declined until every task runs: try until then.
        taken = poll(partial(_savepoint_or_none, client, str(tmp_path / "sp1")), 60,
                     what="a savepoint of the running job")
        assert (Path(taken.removeprefix("file://")) / "_metadata").is_file(), taken
        assert client.get_job_status().result() is JobStatus.RUNNING
        stopped = client.stop_with_savepoint(False, str(tmp_path / "sp2")).result()
        assert (Path(stopped.removeprefix("file://")) / "_metadata").is_file(), stopped
        client.get_job_execution_result().result(timeout=60)
        assert client.get_job_status().result().is_globally_terminal_state()
    finally:
        client.close()


def _savepoint_or_none(client: JobClient, directory: str) -> str | None:
    try:
        return client.trigger_savepoint(directory).result()
    except InvalidJobError as err:
        if "TASK_NOT_READY" not in str(err):
            raise
        return None
