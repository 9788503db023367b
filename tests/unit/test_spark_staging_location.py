"""Where from_spark() stages by default, the warning when TaskExecutors elsewhere cannot
read it, and what the JobMaster and ``weir staging`` decide from a root's _staging.json."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator

import pytest

from weir.cli.staging import ORPHANED, PREPARING, RETAINED, RUNNING, state_of
from weir.core.config import Configuration
from weir.core.errors import ConfigError
from weir.core.execution import ExecutionContext, set_execution_context
from weir.datastream.connectors.spark import SparkSource, staging_dir
from weir.jobmaster.staging_cleanup import retained_reason, staging_roots
from weir.proto import common_pb2


def _conf(**pairs: str) -> Configuration:
    return Configuration.from_pairs({k.replace("_", "."): v for k, v in pairs.items()})


def test_checkpoints_on_s3_make_staging_default_to_their_bucket():
    conf = Configuration.from_pairs({"state.checkpoints.dir": "s3://ckpts/jobs/"})
    assert staging_dir(conf) == "s3://ckpts/jobs/spark-staging"


def test_spark_staging_dir_wins_over_the_checkpoint_bucket():
    conf = Configuration.from_pairs({"state.checkpoints.dir": "s3://ckpts/jobs",
                                     "spark.staging.dir": "s3://other/stage"})
    assert staging_dir(conf) == "s3://other/stage"


def test_local_checkpoints_keep_the_local_default(tmp_path):
    conf = Configuration.from_pairs({"state.checkpoints.dir": f"file://{tmp_path}/ckpt"})
    assert staging_dir(conf, str(tmp_path / "cluster")) == str(tmp_path / "cluster" / "staging")


def test_a_broken_checkpoint_uri_is_named_with_what_uses_it():
    conf = Configuration.from_pairs({"state.checkpoints.dir": "s3:///no-bucket"})
    with pytest.raises(ConfigError, match=r"state\.checkpoints\.dir.*spark\.staging\.dir"):
        staging_dir(conf)


def test_a_misparsed_per_source_location_is_refused():
    with pytest.raises(ConfigError, match="not a valid URI"):
        SparkSource(lambda s: s.range(1), staging="s3:/x")._staging_location(Configuration())


@pytest.fixture
def context() -> Iterator[list[ExecutionContext]]:
    made: list[ExecutionContext] = []
    yield made
    set_execution_context(None)


def _submit_to(address: str, conf: Configuration, tmp_path) -> ExecutionContext:
    context = ExecutionContext(address=address, token=None, configuration=conf,
                               cluster_dir=str(tmp_path))
    set_execution_context(context)
    return context


@pytest.mark.parametrize(("address", "pairs", "warned"), [
    ("10.1.2.3:6123", {}, True),
    ("jobmaster.example.com:6123", {}, True),
    ("127.0.0.1:6123", {}, False),
    ("localhost:6123", {}, False),
    ("[::1]:6123", {}, False),
    ("10.1.2.3:6123", {"state.checkpoints.dir": "s3://ckpts/jobs"}, False),
    ("10.1.2.3:6123", {"spark.staging.dir": "/shared/nfs/staging"}, False),
])
def test_a_local_default_for_a_remote_jobmaster_is_warned_about(
        address: str, pairs: dict[str, str], warned: bool, tmp_path, context,
        caplog: pytest.LogCaptureFixture):
    conf = Configuration.from_pairs(pairs)
    _submit_to(address, conf, tmp_path)
    with caplog.at_level(logging.WARNING, logger="weir.datastream.connectors.spark"):
        root = SparkSource(lambda s: s.range(1))._staging_location(conf)
    lines = [r.getMessage() for r in caplog.records]
    if not warned:
        assert lines == []
        return
    assert len(lines) == 1, lines
    assert root in lines[0] and "spark.staging.dir" in lines[0] and "s3://" in lines[0]
    assert "TaskExecutors on other hosts" in lines[0]


@pytest.mark.parametrize(("status", "retention", "kept"), [
    (common_pb2.JOB_FINISHED, "RETAIN_ON_CANCELLATION", False),
    (common_pb2.JOB_CANCELED, "RETAIN_ON_CANCELLATION", True),
    (common_pb2.JOB_FAILED, "RETAIN_ON_CANCELLATION", True),
    (common_pb2.JOB_CANCELED, "DELETE_ON_CANCELLATION", False),
    (common_pb2.JOB_FAILED, "DELETE_ON_CANCELLATION", True),
    (common_pb2.JOB_FAILED, "NO_EXTERNALIZED_CHECKPOINTS", False),
    (common_pb2.JOB_FAILED, None, False),
])
def test_staging_is_kept_exactly_when_the_checkpoints_are(status, retention, kept):
    assert (retained_reason(status, retention) is not None) == kept


def test_malformed_job_roots_are_ignored():
    assert staging_roots(Configuration.from_pairs(
        {"spark.staging.job-roots": "/etc"})) == []
    assert staging_roots(Configuration.from_pairs(
        {"spark.staging.job-roots": '{"a": 1}'})) == []


def test_the_state_of_a_staging_root():
    here = socket.gethostname()
    jobs = {"run": "RUNNING", "restarting": "RESTARTING", "done": "FINISHED"}
    assert state_of("run", None, None, jobs, here, here) == RUNNING
    assert state_of("restarting", None, None, jobs, here, here) == RUNNING
    assert state_of("done", None, None, jobs, here, here) == ORPHANED
    assert state_of("forgotten", None, None, jobs, here, here) == ORPHANED
    assert state_of("done", "job CANCELED with RETAIN_ON_CANCELLATION checkpoints", None,
                    jobs, here, here) == RETAINED
    # No job yet: a client still staging on this host, or one that died.
    assert state_of(None, None, os.getpid(), jobs, here, here) == PREPARING
    assert state_of(None, None, os.getpid(), jobs, "elsewhere", here) == ORPHANED
    assert state_of(None, None, 2 ** 22 + 12345, jobs, here, here) == ORPHANED


def test_the_jobmaster_reads_the_manifest_the_connector_writes():
    from weir.datastream.connectors import spark_staging
    from weir.jobmaster import staging_cleanup

    assert staging_cleanup.MANIFEST_NAME == spark_staging.MANIFEST_NAME
    assert staging_cleanup.MANIFEST_FORMAT == spark_staging.MANIFEST_FORMAT


def test_a_hot_update_keeps_the_staging_of_the_kept_spark_source():
    # The update's program prepares no source, so its graph lists no staging; the
    # running job's stays the job's (deleted at its end), and changes no task.
    from weir.jobmaster.job_change import kept_vertices, updated_graph
    from weir.proto import jobgraph_pb2

    key = "spark.staging.job-roots"
    running = jobgraph_pb2.JobGraph(job_id="j", config={key: '["s3://b/stage/q-1"]'})
    new = jobgraph_pb2.JobGraph(job_id="j")
    for graph in (running, new):
        _ = graph.vertices.add(id=1, parallelism=1, operator_uids=["map"])
    result, changed = updated_graph(running, new)
    assert result.config[key] == '["s3://b/stage/q-1"]'
    assert changed == []
    assert sorted(kept_vertices(running, new, changed)) == [1]
