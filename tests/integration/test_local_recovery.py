"""Task-local recovery across TaskExecutor restarts: a SIGKILLed TaskExecutor that its
supervisor starts again (same resource id, same working directory) offers its local state,
the restarted job is scheduled onto it and restores without downloading; damaged local
copies fall back to checkpoint storage for exactly what is damaged. Every run's committed
output is compared with the independently computed expected output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import poll
from tests.support.exactly_once import (
    finished_exactly_once,
    kill_busy_taskexecutor,
    running_with_checkpoint_after,
    status_name,
    submit,
)

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

LOCAL_RECOVERY = {"execution.checkpointing.interval": "500 ms",
                  "state.backend.type": "rocksdb",
                  "state.backend.local-recovery": "true",
                  "restart-strategy.type": "fixed-delay",
                  "restart-strategy.fixed-delay.attempts": "10",
                  "restart-strategy.fixed-delay.delay": "200 ms"}


def status_json(cluster: Any, job_id: str) -> dict[str, Any]:
    result = cluster.weir("status", job_id, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def kill_and_wait_restored(cluster: Any, job_id: str, after: int,
                           damage: bool = False) -> tuple[dict[str, Any], str]:
    """Kill a busy TaskExecutor once a checkpoint after ``after`` completed (``damage``:
    then flip a byte of every local copy file it left); wait until the job restored.
    Returns ``weir status --json`` and the victim's resource id."""
    details = running_with_checkpoint_after(cluster, job_id, after, 120)
    assert status_name(details) == "RUNNING", details.failure.message
    restarts = details.summary.restarts
    victim = kill_busy_taskexecutor(cluster, details)
    if damage:
        # The supervisor waits a second before starting it again: time enough.
        damaged = 0
        for path in local_files(cluster, victim):
            data = bytearray(path.read_bytes())
            if data:
                data[-1] ^= 0xFF
                path.write_bytes(bytes(data))
                damaged += 1
        assert damaged, "the killed TaskExecutor kept no local copies"

    def restored() -> dict[str, Any] | None:
        status = status_json(cluster, job_id)
        last = status["last_restore"]
        return status if status["restarts"] > restarts and last and \
            all(t["state"] in ("RUNNING", "FINISHED") for t in status["tasks"]) and \
            last["checkpoint_id"] > after else None

    return poll(restored, 120, interval=0.2, what="the job to restore"), victim


def local_files(cluster: Any, resource_id: str) -> list[Path]:
    index = resource_id.rsplit("-", 1)[-1]
    root = cluster.dir / f"taskexecutor-{index}" / "localState"
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_a_restarted_taskexecutor_restores_from_local_state_exactly_once(
        cluster_factory, tmp_path):
    # Two TaskExecutors of one slot for a job of two slots: after a kill the job can only
    # run on the restarted TaskExecutor, which must restore from what it kept.
    cluster = cluster_factory(2, 1, "--restart-taskexecutors")
    out, gate, n = tmp_path / "out", tmp_path / "gate", 150_000
    job_id = submit(cluster, tmp_path, out, n, gate=gate, config=LOCAL_RECOVERY)

    status, victim = kill_and_wait_restored(cluster, job_id, 0)
    last = status["last_restore"]
    assert last["local_bytes"] > 0 and last["duration_ms"] > 0, status
    restores = {(t["name"], t["subtask"]): t["last_restore"] for t in status["tasks"]}
    assert sum(r["local_bytes"] for r in restores.values() if r) == last["local_bytes"]
    assert sum(r["remote_bytes"] for r in restores.values() if r) == last["remote_bytes"]
    # Only the FileSink's union state (its part counter) is read from the other subtask,
    # whose copy is on the other TaskExecutor; everything else comes from local copies.
    downloaded = {task for task, r in restores.items() if r and r["remote_bytes"]}
    assert all(name.startswith("Sink: File") for name, _ in downloaded), restores
    assert last["remote_bytes"] < 1024, restores
    victim_tasks = [t for t in status["tasks"] if t["taskexecutor"] == victim]
    assert victim_tasks, f"no task was scheduled back onto {victim}: {status['tasks']}"

    # Damaged copies: the victim's tasks download what they need, the others stay local.
    status, victim = kill_and_wait_restored(cluster, job_id, last["checkpoint_id"],
                                            damage=True)
    last = status["last_restore"]
    assert last["remote_bytes"] > 1024 and last["local_bytes"] > 0, status
    others = [t for t in status["tasks"] if t["taskexecutor"] != victim and t["last_restore"]
              and not t["name"].startswith("Sink: File")]
    assert others and all(t["last_restore"]["remote_bytes"] == 0 for t in others), status
    assert any(t["last_restore"]["local_bytes"] for t in others), status

    gate.touch()
    finished_exactly_once(cluster, job_id, out, n, timeout=240, no_uncommitted=False)
    # The job ended: its local state leaves every working directory.
    poll(lambda: not list(cluster.dir.glob(f"taskexecutor-*/localState/{job_id}")), 30,
         what="the finished job's local state to be removed")


def test_without_local_recovery_a_restore_downloads_everything(cluster_factory, tmp_path):
    cluster = cluster_factory(2, 1, "--restart-taskexecutors")
    out, gate, n = tmp_path / "out", tmp_path / "gate", 80_000
    config = {**LOCAL_RECOVERY, "state.backend.local-recovery": "false"}
    job_id = submit(cluster, tmp_path, out, n, gate=gate, config=config)
    status, _ = kill_and_wait_restored(cluster, job_id, 0)
    assert status["last_restore"]["local_bytes"] == 0, status
    assert status["last_restore"]["remote_bytes"] > 0, status
    assert not list(cluster.dir.glob("taskexecutor-*/localState/*"))
