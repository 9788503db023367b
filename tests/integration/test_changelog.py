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
