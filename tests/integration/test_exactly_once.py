"""Exactly once under failures: a keyed job (ValueState and event-time windows) writes
through the transactional FileSink while TaskExecutors are SIGKILLed mid-job; the
committed output must equal, record for record, the output computed independently.

Every mode (aligned, unaligned, aligned with timeout) runs on both state backends; the
representative half is in ``make test``, the rest in ``make chaos``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.exactly_once import (
    committed_output,
    diff,
    expected_output,
    run_with_kills,
    status_name,
    submit,
)

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

N = 160_000
KILLS = 3

MODES = {
    "aligned": {},
    "unaligned": {"execution.checkpointing.unaligned.enabled": "true"},
    "aligned-timeout": {"execution.checkpointing.unaligned.enabled": "true",
                        "execution.checkpointing.aligned-checkpoint-timeout": "100 ms"},
}

RESTARTS = {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
            "restart-strategy.fixed-delay.delay": "200 ms"}


def run_exactly_once(cluster_factory, tmp_path: Path, mode: str, backend: str,
                     extra: dict[str, str] | None = None, kills: int = KILLS,
                     cluster_args: tuple[str, ...] = ()) -> None:
    # Four TaskExecutors of two slots: the job needs two slots, so the survivors of
    # every kill still have enough.
    cluster = cluster_factory(4, 2, *cluster_args)
    out = tmp_path / "out"
    config = {"execution.checkpointing.interval": "500 ms", "state.backend.type": backend,
              **RESTARTS, **MODES[mode], **(extra or {})}
    gate = tmp_path / "gate"
    # Held back harder than by default: a slow restore on a loaded machine must not let
    # the job finish before every kill (the gate opens right after the last one).
    job_id = submit(cluster, tmp_path, out, N, config=config, gate=gate, held_slowdown=20)
    details = run_with_kills(cluster, job_id, kills, gate=gate)
    assert status_name(details) == "FINISHED", details.failure.message
    assert details.summary.restarts == kills, "the job ended before every kill"
    expected, got = expected_output(N, 13, 1000), committed_output(out)
    assert got == expected, diff(expected, got)
    assert not [p for p in out.iterdir() if p.name.startswith(".")], \
        "uncommitted part files were left behind"


@pytest.mark.parametrize(("mode", "backend", "kills"), [
    # Plain aligned checkpoints also run in the chaos subset and most recovery tests of
    # `make test`; this heavy variant (about a minute) runs with `make chaos`.
    pytest.param("aligned", "hashmap", KILLS, marks=pytest.mark.chaos),
    # Two kills in `make test` (each costs a restart and a checkpoint); three in the
    # `make chaos` variants below.
    ("unaligned", "rocksdb", 2), ("aligned-timeout", "hashmap", 2)])
def test_exactly_once_with_killed_taskexecutors(cluster_factory, tmp_path, mode, backend,
                                                kills):
    run_exactly_once(cluster_factory, tmp_path, mode, backend, kills=kills)


@pytest.mark.chaos
@pytest.mark.parametrize(("mode", "backend"), [
    ("aligned", "rocksdb"), ("unaligned", "hashmap"), ("aligned-timeout", "rocksdb")])
def test_exactly_once_with_killed_taskexecutors_other_backend(cluster_factory, tmp_path, mode,
                                                              backend):
    run_exactly_once(cluster_factory, tmp_path, mode, backend)
