"""The changelog state backend with real processes: exactly once while TaskExecutors are
SIGKILLed (both delegates, aligned and unaligned), with materializations every second so
that restores start from one or several of them; the checkpoint history shows how much of
the state was log and how much materialized."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.exactly_once import (
    checkpoints,
    committed_output,
    diff,
    expected_output,
    run_with_kills,
    status_name,
    submit,
)

N = 120_000

CHANGELOG = {"state.changelog.enabled": "true",
             # Short: the kills land after one and after several materializations.
             "state.changelog.periodic-materialize.interval": "1 s"}

MODES = {"aligned": {}, "unaligned": {"execution.checkpointing.unaligned.enabled": "true"}}

RESTARTS = {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
            "restart-strategy.fixed-delay.delay": "200 ms"}


@pytest.mark.parametrize(("mode", "backend"), [
    ("aligned", "hashmap"),
    pytest.param("unaligned", "hashmap", marks=pytest.mark.extended),
    pytest.param("aligned", "rocksdb", marks=pytest.mark.extended),
    pytest.param("unaligned", "rocksdb", marks=pytest.mark.extended)])
def test_exactly_once_with_the_changelog(cluster_factory, tmp_path: Path, mode: str,
                                         backend: str) -> None:
    cluster = cluster_factory(4, 2)
    out = tmp_path / "out"
    gate = tmp_path / "gate"
    config = {"execution.checkpointing.interval": "500 ms", "state.backend.type": backend,
              # Local copies of the log too (a restart on a surviving TaskExecutor uses them).
              "state.backend.local-recovery": "true",
              **RESTARTS, **MODES[mode], **CHANGELOG}
    job_id = submit(cluster, tmp_path, out, N, config=config, gate=gate, held_slowdown=20)
    details = run_with_kills(cluster, job_id, 2, gate=gate)
    assert status_name(details) == "FINISHED", details.failure.message
    assert details.summary.restarts == 2, "the job ended before every kill"
    expected, got = expected_output(N, 13, 1000), committed_output(out)
    assert got == expected, diff(expected, got)

    history = [c for c in checkpoints(cluster, job_id, tasks=True) if c["status"] == "COMPLETED"]
    assert history, "no checkpoint completed"
    # Changelog checkpoints: part of the state is log; once materialized, part is not.
    assert any(c["changelog_size_bytes"] > 0 for c in history)
    assert any(c["materialized_size_bytes"] > 0 and c["changelog_size_bytes"] > 0
               for c in history), history[-3:]
    split = [s for c in history for s in c["subtasks"] if s["changelog_size_bytes"]]
    assert split and all(s["materialized_size_bytes"] + s["changelog_size_bytes"]
                         == s["state_size_bytes"] for s in split)
    # The log lives under the job's checkpoint directory.
    result = cluster.weir("checkpoints", job_id)
    assert "log (changelog)" in result.stdout


def _tree_digest(directory: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


HELD = {"pause_every": 100, "held_slowdown": 50.0}
RESCALE_N = 6000


def _retained_config(tmp_path: Path, backend: str) -> dict[str, str]:
    return {"execution.checkpointing.interval": "300 ms",
            "state.checkpoints.dir": (tmp_path / "checkpoints").as_uri(),
            "execution.checkpointing.externalized-checkpoint-retention":
                "RETAIN_ON_CANCELLATION",
            "state.backend.type": backend, "pipeline.batch-size": "50",
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "5",
            "restart-strategy.fixed-delay.delay": "200 ms", **CHANGELOG}


def _cancel_after_a_changelog_checkpoint(cluster, job_id: str, after: int = 0) -> str:
    """Wait for a completed checkpoint that names a materialization and a log, cancel the
    job (its latest checkpoint is retained) and return that checkpoint's path."""
    from tests.support.cluster import job_details, poll

    def ready() -> bool:
        done = [c for c in checkpoints(cluster, job_id) if c["status"] == "COMPLETED"
                and c["id"] > after]
        return bool(done) and done[-1]["materialized_size_bytes"] > 0 \
            and done[-1]["changelog_size_bytes"] > 0
    poll(ready, 90, interval=0.2, what="a checkpoint with a materialization and a log")
    cancelled = cluster.weir("cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    latest = job_details(cluster, job_id).last_checkpoint_path
    assert (Path(latest.removeprefix("file://")) / "_metadata").exists()
    return str(latest)


@pytest.mark.extended
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_rescale_2_3_2_with_no_claim_restores_and_a_failure(cluster_factory, tmp_path: Path,
                                                             backend: str) -> None:
    """Retained changelog checkpoints restored NO_CLAIM at parallelism 3, then 2: a killed
    TaskExecutor in between; the first job's files are never touched, the later jobs'
    checkpoints name none of them, and the output is exactly once over the three runs."""
    from tests.support.cluster import job_details, poll
    from tests.support.exactly_once import finished_exactly_once, kill_busy_taskexecutor
    from weir.checkpoint.metadata import read_metadata, referenced_files
    from weir.checkpoint.storage import create_storage

    cluster = cluster_factory(3, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = _retained_config(tmp_path, backend)
    first = submit(cluster, tmp_path, out, RESCALE_N, config=config, gate=gate, **HELD)
    path = _cancel_after_a_changelog_checkpoint(cluster, first)
    first_dir = tmp_path / "checkpoints" / first
    before = _tree_digest(first_dir)

    second = submit(cluster, tmp_path, out, RESCALE_N, config=config, gate=gate,
                    run_args=("-s", path), parallelism=3, **HELD)
    details = poll(lambda: (d := job_details(cluster, second)).last_checkpoint_id > 0
                   and not d.last_checkpoint_path.startswith(path)
                   and status_name(d) == "RUNNING" and d, 90, interval=0.1,
                   what="a checkpoint after the NO_CLAIM restore")
    metadata = read_metadata(create_storage(str(tmp_path)), details.last_checkpoint_path)
    uris = [h.uri for h in referenced_files(metadata)]
    assert uris and not [u for u in uris if f"/{first}/" in u], uris
    restarts = details.summary.restarts
    kill_busy_taskexecutor(cluster, details)
    poll(lambda: job_details(cluster, second).summary.restarts > restarts, 60,
         what="the restart after the kill")
    path = _cancel_after_a_changelog_checkpoint(cluster, second,
                                                after=details.last_checkpoint_id)

    gate.touch()
    third = submit(cluster, tmp_path, out, RESCALE_N, config=config, gate=gate,
                   run_args=("-s", path), parallelism=2)
    finished_exactly_once(cluster, third, out, RESCALE_N, no_uncommitted=False)
    assert _tree_digest(first_dir) == before


@pytest.mark.extended
def test_an_s3_outage_during_log_uploads_fails_checkpoints_and_loses_nothing(
        cluster_factory, tmp_path: Path) -> None:
    from tests.support.cluster import poll
    from tests.support.exactly_once import finished_exactly_once
    from weir.testing.faults import restart_cluster_s3, stop_cluster_s3

    cluster = cluster_factory(2, 2, "--with-s3")
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, 40_000, gate=gate, config={
        "execution.checkpointing.interval": "300 ms",
        "execution.checkpointing.tolerable-failed-checkpoints": "1000",
        "state.changelog.max-failures-allowed": "1000", **RESTARTS, **CHANGELOG,
        "restart-strategy.fixed-delay.attempts": "1000"})

    def completed() -> list[dict]:
        return [c for c in checkpoints(cluster, job_id) if c["status"] == "COMPLETED"]
    poll(lambda: any(c["changelog_size_bytes"] for c in completed()), 120, interval=0.2,
         what="a changelog checkpoint on S3")
    info = stop_cluster_s3(cluster.dir)
    server = None
    try:
        last = completed()[-1]["id"]
        poll(lambda: any(c["status"] == "FAILED" and c["id"] > last
                         for c in checkpoints(cluster, job_id)), 120, interval=0.2,
             what="a checkpoint to fail while S3 is down")
    finally:
        server = restart_cluster_s3(cluster.dir, info)
    try:
        failed = max(c["id"] for c in checkpoints(cluster, job_id) if c["status"] == "FAILED")
        poll(lambda: any(c["id"] > failed and c["changelog_size_bytes"] for c in completed()),
             120, interval=0.2, what="a changelog checkpoint after the outage")
        gate.touch()
        finished_exactly_once(cluster, job_id, out, 40_000, no_uncommitted=False)
    finally:
        cluster.stop()
        server.stop()


@pytest.mark.extended
def test_a_corrupted_log_segment_names_the_checkpoint_and_the_file(cluster_factory,
                                                                   tmp_path: Path) -> None:
    import json

    from tests.support.cluster import wait_job_status
    from weir.checkpoint.metadata import read_metadata
    from weir.checkpoint.storage import create_storage

    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = _retained_config(tmp_path, "hashmap")
    first = submit(cluster, tmp_path, out, RESCALE_N, config=config, gate=gate, **HELD)
    path = _cancel_after_a_changelog_checkpoint(cluster, first)
    metadata = read_metadata(create_storage(str(tmp_path)), path)
    handles = [h for s in metadata.subtasks for op in s.state.operators if op.keyed_state
               for h in json.loads(op.keyed_state) if h["kind"] == "changelog" and h["log"]]
    uri = handles[0]["log"][0]["file"]["uri"]
    log_file = Path(uri.removeprefix("file://"))
    data = bytearray(log_file.read_bytes())
    data[len(data) // 2] ^= 0xFF          # same length: only the checksums can tell
    log_file.write_bytes(bytes(data))
    gate.touch()
    resumed = submit(cluster, tmp_path, out, RESCALE_N, config=config, gate=gate,
                     run_args=("-s", path))
    final = wait_job_status(cluster, resumed, {"FAILED"}, timeout=120)
    assert log_file.name in final.failure.message, final.failure.message
    assert f"checkpoint {metadata.checkpoint_id}" in final.failure.message, \
        final.failure.message


@pytest.mark.extended
@pytest.mark.parametrize(("before", "after", "native"), [
    (True, False, False), (False, True, False), (True, True, True)])
def test_switching_the_changelog_between_a_savepoint_and_its_restore(
        cluster_factory, tmp_path: Path, before: bool, after: bool, native: bool) -> None:
    """Stop with a savepoint (canonical, or the wrapped RocksDB backend's native format),
    resume with the changelog switched on or off: exactly once over both runs."""
    from tests.support.exactly_once import finished_exactly_once

    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"

    def config(changelog: bool) -> dict[str, str]:
        base = _retained_config(tmp_path, "rocksdb")
        base["state.changelog.enabled"] = str(changelog).lower()
        return base

    first = submit(cluster, tmp_path, out, RESCALE_N, config=config(before), gate=gate,
                   **HELD)
    from tests.support.cluster import job_details, poll

    poll(lambda: job_details(cluster, first).last_checkpoint_id > 0, 60, interval=0.1,
         what="a completed checkpoint")
    stopped = cluster.weir("stop", first, "--savepoint-path", str(tmp_path / "sp"),
                           *(["--type", "native"] if native else []))
    assert stopped.returncode == 0, stopped.stderr + stopped.stdout
    path = stopped.stdout.strip().splitlines()[-1]
    gate.touch()
    resumed = submit(cluster, tmp_path, out, RESCALE_N, config=config(after), gate=gate,
                     run_args=("-s", path))
    finished_exactly_once(cluster, resumed, out, RESCALE_N)


def _log_files_of(storage_root: Path, checkpoint_path: str) -> set[str]:
    """The log file URIs the checkpoint at ``checkpoint_path`` refers to."""
    import json

    from weir.checkpoint.metadata import read_metadata
    from weir.checkpoint.storage import create_storage

    metadata = read_metadata(create_storage(str(storage_root)), checkpoint_path)
    return {segment["file"]["uri"] for s in metadata.subtasks for op in s.state.operators
            if op.keyed_state for h in json.loads(op.keyed_state) if h["kind"] == "changelog"
            for segment in h["log"]}


@pytest.mark.extended
def test_log_files_under_a_custom_base_path_go_once_no_retained_checkpoint_needs_them(
        cluster_factory, tmp_path: Path) -> None:
    """With state.changelog.dstl.dfs.base-path outside the checkpoint directory, a log file
    is deleted once the checkpoints that referred to it are subsumed, and kept while a
    retained checkpoint refers to it: the job resumes from that checkpoint."""
    from tests.support.cluster import job_details, poll
    from tests.support.exactly_once import finished_exactly_once
    from weir.core.errors import WeirError

    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    base = tmp_path / "dstl"
    config = {**_retained_config(tmp_path, "hashmap"),
              "state.changelog.dstl.dfs.base-path": base.as_uri()}
    job_id = submit(cluster, tmp_path, out, RESCALE_N, config=config, gate=gate, **HELD)
    seen: set[str] = set()

    def some_deleted() -> bool:
        path = job_details(cluster, job_id).last_checkpoint_path
        if not path:
            return False
        try:
            current = _log_files_of(tmp_path, path)
        except (WeirError, OSError):
            return False  # subsumed while being read: look again
        seen.update(current)
        gone = {uri for uri in seen - current if not Path(uri.removeprefix("file://")).exists()}
        return bool(gone)

    poll(some_deleted, 120, interval=0.2,
         what="a log file of a subsumed checkpoint to be deleted from the base path")
    assert seen and all(uri.startswith((base / job_id).as_uri() + "/") for uri in seen), seen
    assert not (tmp_path / "checkpoints" / job_id / "changelog").exists()

    path = _cancel_after_a_changelog_checkpoint(cluster, job_id)
    retained = _log_files_of(tmp_path, path)
    assert retained and all(Path(u.removeprefix("file://")).exists() for u in retained)

    gate.touch()
    resumed = submit(cluster, tmp_path, out, RESCALE_N, config=config, gate=gate,
                     run_args=("-s", path))
    finished_exactly_once(cluster, resumed, out, RESCALE_N, no_uncommitted=False)
    # The resumed job finished: its own log goes with its checkpoints.
    poll(lambda: not (base / resumed).exists() or not any((base / resumed).rglob("*.log")),
         30, what="the finished job's log to be deleted")


@pytest.mark.extended
def test_a_log_storage_that_cannot_be_written_fails_the_task_over_instead_of_hanging(
        cluster_factory, tmp_path: Path) -> None:
    """Log uploads fail (the base path lies under a regular file): the tasks that write
    state fill max-in-flight, give up after the bound the upload options give, and fail
    with one line naming the cause; the job restarts, and finishes exactly once once the
    storage works again."""
    import json

    from tests.support.cluster import poll
    from tests.support.exactly_once import finished_exactly_once

    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the log's directory should be")
    n = 20_000
    job_id = submit(cluster, tmp_path, out, n, gate=gate, config={
        "execution.checkpointing.interval": "300 ms",
        "execution.checkpointing.tolerable-failed-checkpoints": "1000",
        **RESTARTS, "restart-strategy.fixed-delay.attempts": "1000", **CHANGELOG,
        "state.changelog.dstl.dfs.base-path": (blocker / "dstl").as_uri(),
        "state.changelog.dstl.dfs.upload.max-in-flight": "32kb",
        "state.changelog.dstl.dfs.preemptive-persist-threshold": "4kb",
        "state.changelog.dstl.dfs.upload.timeout": "200 ms",
        "state.changelog.dstl.dfs.upload.max-attempts": "2"})

    def cause() -> str | None:
        result = cluster.weir("status", job_id, "--json")
        assert result.returncode == 0, result.stderr
        causes = [r["cause"] for r in json.loads(result.stdout)["recoveries"]]
        return next((c for c in causes if "cannot keep up or is unreachable" in c), None)

    message = poll(cause, 120, interval=0.3, what="a task to fail on the log storage")
    assert "\n" not in message and "max-in-flight" in message, message
    assert (blocker / "dstl").as_uri() in message, message

    blocker.unlink()
    gate.touch()
    finished_exactly_once(cluster, job_id, out, n, no_uncommitted=False)


def test_a_restore_on_the_same_taskexecutor_reads_the_materialization_locally(
        cluster_factory, tmp_path: Path) -> None:
    """Task-local recovery with the changelog: a TaskExecutor killed and started again
    restores its tasks from what it kept, the materialized part as well as the log, and
    downloads nothing but the FileSink's union state (see test_local_recovery)."""
    from tests.integration.test_local_recovery import kill_and_wait_restored
    from tests.support.cluster import poll
    from tests.support.exactly_once import finished_exactly_once

    cluster = cluster_factory(2, 1, "--restart-taskexecutors")
    out, gate, n = tmp_path / "out", tmp_path / "gate", 150_000
    config = {"execution.checkpointing.interval": "500 ms", "state.backend.type": "hashmap",
              "state.backend.local-recovery": "true", **RESTARTS, **CHANGELOG}
    job_id = submit(cluster, tmp_path, out, n, gate=gate, config=config)

    def materialized() -> int | None:
        done = [c for c in checkpoints(cluster, job_id) if c["status"] == "COMPLETED"
                and c["materialized_size_bytes"] > 0 and c["changelog_size_bytes"] > 0]
        return done[-1]["id"] if done else None

    after = poll(materialized, 120, interval=0.2, what="a checkpoint with a materialization")
    status, _ = kill_and_wait_restored(cluster, job_id, after)
    last = status["last_restore"]
    restores = {(t["name"], t["subtask"]): t["last_restore"] for t in status["tasks"]}
    downloaded = {task for task, r in restores.items() if r and r["remote_bytes"]}
    assert all(name.startswith("Sink: File") for name, _ in downloaded), restores
    assert last["local_bytes"] > 0 and last["remote_bytes"] < 1024, last
    # Checkpoints after ``after`` build on a materialization (a failover keeps the base):
    # with nothing downloaded, the materialized part was read from the local copies.
    assert last["checkpoint_id"] > after
    gate.touch()
    finished_exactly_once(cluster, job_id, out, n, timeout=240, no_uncommitted=False)
