"""Savepoints on a real cluster: stop-with-savepoint and resume, moving a savepoint,
canonical savepoints across backends and parallelism, disposing, and what a wrong
savepoint or a failed one does.

Every run is the exactly-once job (tests/support/exactly_once.py): its committed output,
over the run that stopped and the run that resumed, must be exactly the output computed
without weir.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, job_details, poll
from tests.support.exactly_once import (
    committed_output,
    expected_output,
    finished_exactly_once,
    kill_busy_taskexecutor,
    status_name,
    submit,
)

N = 6000
#: The second half of the input is held back (50 times slower, minutes) until the test
#: opens the gate: every stop and savepoint comes while the job runs.
HELD = {"pause_every": 100, "held_slowdown": 50.0}


def _config(tmp_path: Path, backend: str = "rocksdb", **extra: str) -> dict[str, str]:
    return {"execution.checkpointing.interval": "300 ms",
            "state.checkpoints.dir": (tmp_path / "checkpoints").as_uri(),
            "state.backend.type": backend, "restart-strategy.type": "fixed-delay",
            # Small source batches: a trigger waits for the batch in hand, whose records
            # the throttle sleeps on.
            "pipeline.batch-size": "50",
            "restart-strategy.fixed-delay.attempts": "5",
            "restart-strategy.fixed-delay.delay": "200 ms", **extra}


def _running_with_checkpoint(cluster: LocalCluster, job_id: str) -> Any:
    return poll(lambda: (d := job_details(cluster, job_id)).last_checkpoint_id > 0
                and status_name(d) == "RUNNING" and d, 60, interval=0.1,
                what="a completed checkpoint")


def _last_line(result: Any) -> str:
    assert result.returncode == 0, result.stderr + result.stdout
    return str(result.stdout.strip().splitlines()[-1])


def test_stop_with_savepoint_then_resume_is_exactly_once(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = _config(tmp_path)
    job_id = submit(cluster, tmp_path, out, N, config=config, gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    path = _last_line(cluster.weir("stop", job_id, "--savepoint-path",
                                   (tmp_path / "savepoints").as_uri()))
    assert path.startswith((tmp_path / "savepoints").as_uri() + "/savepoint-")
    details = job_details(cluster, job_id)
    assert status_name(details) == "FINISHED", details.failure.message
    # Stopped early: part of the output, committed, nothing twice.
    partial, expected = committed_output(out), expected_output(N, 13, 1000)
    assert partial and partial != expected and not partial - expected
    gate.touch()
    resumed = submit(cluster, tmp_path, out, N, config=config, gate=gate,
                     run_args=("-s", path), **HELD)
    finished_exactly_once(cluster, resumed, out, N)


@pytest.mark.extended
def test_moved_canonical_savepoint_restores_into_hashmap_at_another_parallelism(
        cluster_factory: Any, tmp_path: Path) -> None:
    """A canonical savepoint of a RocksDB job at parallelism 2, moved to another
    directory, restores into a hashmap job at parallelism 3."""
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, config=_config(tmp_path), gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    path = _last_line(cluster.weir("stop", job_id, "--savepoint-path", str(tmp_path / "sp")))
    moved = tmp_path / "elsewhere" / "my-savepoint"
    shutil.copytree(Path(path.removeprefix("file://")), moved)
    shutil.rmtree(Path(path.removeprefix("file://")))
    gate.touch()
    resumed = submit(cluster, tmp_path, out, N, config=_config(tmp_path, "hashmap"),
                     gate=gate, run_args=("-s", str(moved)), parallelism=3, **HELD)
    final = finished_exactly_once(cluster, resumed, out, N)
    assert {v.parallelism for v in final.vertices} == {3}


@pytest.mark.extended
def test_savepoint_of_a_running_job_and_dispose(cluster_factory: Any, tmp_path: Path) -> None:
    """`weir savepoint` leaves the job running; the savepoint's paths are relative; it can
    be disposed of, and a checkpoint cannot."""
    from weir.checkpoint.metadata import decode_metadata

    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    # Checkpoints every 300 ms would subsume (and delete) the one the refused dispose
    # names before the CLI reads it: keep them all for this job.
    config = _config(tmp_path, **{"state.checkpoints.num-retained": "1000"})
    job_id = submit(cluster, tmp_path, out, N, config=config, gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    path = _last_line(cluster.weir("savepoint", job_id, str(tmp_path / "sp"), "--type",
                                   "native"))
    directory = Path(path.removeprefix("file://"))
    raw = decode_metadata((directory / "_metadata").read_bytes(), "savepoint")
    assert raw.savepoint and raw.subtasks
    handles = [o.operator_state.uri for s in raw.subtasks for o in s.state.operators
               if o.operator_state.uri]
    assert handles and not [u for u in handles if "://" in u or u.startswith("/")], handles
    assert status_name(job_details(cluster, job_id)) == "RUNNING"
    checkpoint = job_details(cluster, job_id).last_checkpoint_path
    refused = cluster.weir("savepoint", "--dispose", checkpoint)
    assert refused.returncode == 2 and "not a savepoint" in refused.stderr
    assert _last_line(cluster.weir("savepoint", "--dispose", path)).startswith("disposed")
    assert not directory.exists()
    gate.touch()
    finished_exactly_once(cluster, job_id, out, N)


@pytest.mark.extended
def test_state_of_a_missing_operator_is_refused_unless_allowed(
        cluster_factory: Any, tmp_path: Path) -> None:
    from weir.checkpoint.metadata import decode_metadata, encode_metadata

    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, config=_config(tmp_path), gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    path = _last_line(cluster.weir("stop", job_id, "--savepoint-path", str(tmp_path / "sp")))
    # The savepoint of an older program version, where one operator had another uid.
    metadata_file = Path(path.removeprefix("file://")) / "_metadata"
    metadata = decode_metadata(metadata_file.read_bytes(), "savepoint")
    renamed = next(o for s in metadata.subtasks for o in s.state.operators if o.keyed_state)
    old_uid = renamed.operator_uid
    for subtask in metadata.subtasks:
        for operator in subtask.state.operators:
            if operator.operator_uid == old_uid:
                operator.operator_uid = "retired-operator"
    metadata_file.write_bytes(encode_metadata(metadata))
    gate.touch()
    refused = cluster.weir("run", "--detached", "-s", path, "nothing.py")
    assert refused.returncode == 2
    with pytest.raises(AssertionError, match="retired-operator"):
        submit(cluster, tmp_path, out, N, config=_config(tmp_path), run_args=("-s", path))
    allowed = submit(cluster, tmp_path, tmp_path / "out2", N, config=_config(tmp_path),
                     run_args=("-s", path, "--allow-non-restored-state"))
    final = poll(lambda: status_name(d := job_details(cluster, allowed))
                 in ("FINISHED", "FAILED", "CANCELED") and d, 180, interval=0.2,
                 what="the job to end")
    assert status_name(final) == "FINISHED", final.failure.message


def _tree_digest(directory: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _stopped_savepoint(cluster: LocalCluster, tmp_path: Path, out: Path, gate: Path,
                       config: dict[str, str], *, native: bool = True) -> str:
    job_id = submit(cluster, tmp_path, out, N, config=config, gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    return _last_line(cluster.weir("stop", job_id, "--savepoint-path", str(tmp_path / "sp"),
                                   *(["--type", "native"] if native else [])))


@pytest.mark.extended
def test_no_claim_leaves_the_snapshot_untouched_through_checkpoints_and_a_failover(
        cluster_factory: Any, tmp_path: Path) -> None:
    """NO_CLAIM (the default): the resumed job's checkpoints refer to none of the
    savepoint's files, and neither checkpoints, subsumption, a killed TaskExecutor nor the
    job's end change a byte of it; the output is exactly once over both runs."""
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = _config(tmp_path)  # RocksDB, incremental checkpoints
    path = _stopped_savepoint(cluster, tmp_path, out, gate, config)
    directory = Path(path.removeprefix("file://"))
    before = _tree_digest(directory)
    resumed = submit(cluster, tmp_path, out, N, config=config, gate=gate,
                     run_args=("-s", path), **HELD)
    # Until the resumed job completes a checkpoint, its latest is the savepoint itself.
    details = poll(lambda: (d := job_details(cluster, resumed)).last_checkpoint_id > 0
                   and not d.last_checkpoint_path.startswith(path)
                   and status_name(d) == "RUNNING" and d, 60, interval=0.1,
                   what="a checkpoint after the restore")
    from weir.checkpoint.metadata import read_metadata, referenced_files
    from weir.checkpoint.storage import create_storage

    checkpoint = read_metadata(create_storage(str(tmp_path)), details.last_checkpoint_path)
    uris = [h.uri for h in referenced_files(checkpoint)]
    assert uris and not [u for u in uris if u.startswith(path)], uris
    restarts = details.summary.restarts
    kill_busy_taskexecutor(cluster, details)
    poll(lambda: job_details(cluster, resumed).summary.restarts > restarts, 60,
         what="the restart after the kill")
    gate.touch()
    finished_exactly_once(cluster, resumed, out, N)
    assert _tree_digest(directory) == before


@pytest.mark.extended
def test_claim_hands_the_snapshot_to_the_job(cluster_factory: Any, tmp_path: Path) -> None:
    """CLAIM: the snapshot counts as the job's retained checkpoint and is deleted once a
    newer checkpoint subsumes it (state.checkpoints.num-retained 1)."""
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = _config(tmp_path)
    path = _stopped_savepoint(cluster, tmp_path, out, gate, config, native=False)
    metadata = Path(path.removeprefix("file://")) / "_metadata"
    assert metadata.exists()
    gate.touch()
    resumed = submit(cluster, tmp_path, out, N, config=config, gate=gate,
                     run_args=("-s", path, "--claim-mode", "claim"), **HELD)
    poll(lambda: not metadata.exists(), 60, what="the claimed savepoint to be deleted")
    finished_exactly_once(cluster, resumed, out, N)
    leftovers = [p for p in metadata.parent.rglob("*") if p.is_file()]
    assert not leftovers, leftovers


@pytest.mark.slow
def test_native_savepoint_on_s3_moved_to_a_file_system_restores(
        cluster_factory: Any, tmp_path: Path, seaweed_s3: Any, s3_bucket: str) -> None:
    """Checkpoints and an incremental native savepoint on S3 (SeaweedFS); the savepoint,
    downloaded to a local directory, resumes the job exactly once."""
    s3 = {k: v for k, v in seaweed_s3.config(s3_bucket, "checkpoints").to_dict().items()}
    cluster = cluster_factory(2, 2, *(f"{k}={v}" for k, v in s3.items()))
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = {**_config(tmp_path), **s3}
    job_id = submit(cluster, tmp_path, out, N, config=config, gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    path = _last_line(cluster.weir("stop", job_id, "--type", "native", "--savepoint-path",
                                   f"s3://{s3_bucket}/savepoints"))
    assert path.startswith(f"s3://{s3_bucket}/savepoints/savepoint-")
    client = seaweed_s3.client()
    prefix = path.removeprefix(f"s3://{s3_bucket}/") + "/"
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix=prefix)
            .get("Contents", [])]
    assert any("/shared/" in k for k in keys), keys  # RocksDB files, in the savepoint
    local = tmp_path / "downloaded"
    for key in keys:
        target = local / key[len(prefix):]
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(s3_bucket, key, str(target))
    gate.touch()
    resumed = submit(cluster, tmp_path, out, N, config=_config(tmp_path), gate=gate,
                     run_args=("-s", str(local)), **HELD)
    finished_exactly_once(cluster, resumed, out, N)


@pytest.mark.slow
def test_a_failed_stop_leaves_the_job_running(cluster_factory: Any, tmp_path: Path) -> None:
    """The savepoint cannot be written (its directory is a file): `weir stop` says why,
    exits 2, and the job runs on to an exactly-once end."""
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, config=_config(tmp_path), gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("in the way")
    failed = cluster.weir("stop", job_id, "--savepoint-path", str(blocker))
    assert failed.returncode == 2 and "the savepoint failed" in failed.stderr, failed.stderr
    assert "Traceback" not in failed.stderr
    assert status_name(job_details(cluster, job_id)) == "RUNNING"
    # Periodic checkpoints go on after the failed stop.
    before = job_details(cluster, job_id).last_checkpoint_id
    poll(lambda: job_details(cluster, job_id).last_checkpoint_id > before, 30,
         what="a checkpoint after the failed stop")
    gate.touch()
    finished_exactly_once(cluster, job_id, out, N)


@pytest.mark.slow
def test_stop_with_drain_fires_the_open_windows(cluster_factory: Any, tmp_path: Path) -> None:
    """--drain ends event time before the savepoint: the windows still open fire (with
    what they hold), so the output has window results a plain stop leaves in state."""
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, config=_config(tmp_path), gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    _last_line(cluster.weir("stop", "--drain", job_id, "--savepoint-path", str(tmp_path)))
    assert status_name(job_details(cluster, job_id)) == "FINISHED"
    committed, expected = committed_output(out), expected_output(N, 13, 1000)
    early = [r for r in committed - expected if r[0] == "window"]
    assert early, "no window fired at the drain"
    assert not [r for r in committed - expected if r[0] != "window"]


@pytest.mark.slow
def test_a_retained_checkpoint_of_a_cancelled_job_restores_like_a_savepoint(
        cluster_factory: Any, tmp_path: Path) -> None:
    """RETAIN_ON_CANCELLATION keeps the latest checkpoint; `weir run -s <chk-dir>` resumes
    from it exactly once (the records after it are produced again, once)."""
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = _config(tmp_path, **{
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION"})
    job_id = submit(cluster, tmp_path, out, N, config=config, gate=gate, **HELD)
    checkpoint = _running_with_checkpoint(cluster, job_id).last_checkpoint_path
    cancelled = cluster.weir("cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    latest = job_details(cluster, job_id).last_checkpoint_path
    assert latest.startswith(checkpoint.rsplit("/", 1)[0])
    assert (Path(latest.removeprefix("file://")) / "_metadata").exists()
    gate.touch()
    resumed = submit(cluster, tmp_path, out, N, config=config, gate=gate,
                     run_args=("--from-savepoint", latest), **HELD)
    finished_exactly_once(cluster, resumed, out, N)


@pytest.mark.extended
def test_a_jobmaster_killed_before_the_first_checkpoint_restores_the_savepoint_again(
        cluster_factory: Any, tmp_path: Path) -> None:
    """High availability: a job started from a savepoint that completed no checkpoint yet
    is recovered by the next JobMaster from that savepoint again (not empty), exactly
    once."""
    import os
    import signal

    from tests.integration.test_high_availability import answered, jobmaster_info
    from weir.core.processes import process_alive

    cluster = cluster_factory(2, 2, "--ha")
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, config=_config(tmp_path), gate=gate, **HELD)
    _running_with_checkpoint(cluster, job_id)
    path = _last_line(cluster.weir("stop", job_id, "--savepoint-path", str(tmp_path / "sp")))
    from weir.checkpoint.metadata import decode_metadata

    savepoint_id = decode_metadata(
        (Path(path.removeprefix("file://")) / "_metadata").read_bytes(), "sp").checkpoint_id
    # No periodic checkpoint before the kill: the savepoint is all the job has.
    resumed = submit(cluster, tmp_path, out, N, gate=gate, run_args=("-s", path), **HELD,
                     config=_config(tmp_path, **{"execution.checkpointing.interval": "10 min"}))
    poll(lambda: status_name(d := job_details(cluster, resumed)) == "RUNNING" and d, 60,
         what="the resumed job to run")
    old = jobmaster_info(cluster)
    assert old is not None
    os.kill(old.pid, signal.SIGKILL)
    poll(lambda: (i := jobmaster_info(cluster)) and i.pid != old.pid
         and process_alive(i.pid), 60, what="the JobMaster to be started again")
    history = poll(lambda: answered(lambda: cluster.client().checkpoints(resumed)), 60,
                   interval=0.2, what="the job to be recovered")
    assert history.restored_checkpoint_id == savepoint_id
    assert not [c for c in history.checkpoints if c.status == 1]
    gate.touch()
    finished_exactly_once(cluster, resumed, out, N,
                          details=lambda: answered(lambda: job_details(cluster, resumed)))


@pytest.mark.extended
def test_a_savepoint_that_cannot_be_restored_fails_the_job_instead_of_starting_empty(
        cluster_factory: Any, tmp_path: Path) -> None:
    """A state file of the savepoint is damaged: the resumed job fails naming the file, and
    commits nothing — it must not run on without state and repeat the stopped job's output."""
    from tests.support.cluster import wait_job_status

    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = _config(tmp_path)
    path = _stopped_savepoint(cluster, tmp_path, out, gate, config)
    committed = committed_output(out)
    shared = sorted((Path(path.removeprefix("file://")) / "shared").iterdir())
    assert shared
    data = shared[0].read_bytes()
    shared[0].write_bytes(data[: len(data) // 2])     # damaged in transit, say
    gate.touch()
    resumed = submit(cluster, tmp_path, out, N, config=config, gate=gate,
                     run_args=("-s", path))
    final = wait_job_status(cluster, resumed, {"FAILED"}, timeout=120)
    assert "no retained checkpoint can be restored" in final.failure.message
    assert shared[0].name in final.failure.message
    assert committed_output(out) == committed
