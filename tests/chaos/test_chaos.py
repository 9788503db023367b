"""The chaos suite: a keyed event-time window job writing through the transactional FileSink
runs on a real local cluster (supervised TaskExecutors, high availability, checkpoints and
the high-availability store on the embedded SeaweedFS S3) while faults keep coming; at the
end the bounded input is exhausted, the job must be FINISHED and its committed output must
be exactly what the input implies — nothing lost, nothing twice.

Two runs of the same driver (:mod:`tests.chaos.harness`):

* ``test_chaos_short`` (45 s of faults, part of ``make test``): TaskExecutor SIGKILLs
  throughout, one SIGSTOP past the heartbeat timeout, one full local-state disk, one
  JobMaster SIGKILL;
* ``test_chaos_long`` (``@pytest.mark.chaos``, ten minutes, ``make chaos``): the same plus
  two 30 s SeaweedFS outages, each planned fault twice.

``WEIR_CHAOS_SECONDS`` sets the duration of either (default 60 and 600 s),
``WEIR_CHAOS_SEED`` the seed of the fault stream (printed). The summary — faults, restarts,
checkpoints, longest downtime, the timeline — is printed (``pytest -s``) and written to
``chaos-summary.json`` in the test's tmp directory; the cluster's logs are under
``cluster/log/`` beside it.

The job is held back until the chaos is over (the gate of
:mod:`tests.support.exactly_once`): the second half of its input is read at most
``HELD_RATE`` records/s, a bound set by sleeps, so however fast the machine the job cannot
finish before the faults end; once the gate opens it reads the rest at full speed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.harness import (
    DISK_FULL,
    FAULTS_ENV,
    JOBMASTER,
    LONG_PLAN,
    S3_OUTAGE,
    SEED_ENV,
    SHORT_PLAN,
    SIGSTOP,
    TE_KILL,
    Chaos,
    JobMonitor,
    LocalStateDisks,
    Timeline,
    chaos_faults,
    chaos_seconds,
    chaos_seed,
)
from tests.support.cluster import LocalCluster, job_details, poll
from tests.support.exactly_once import (
    committed_output,
    diff,
    expected_output,
    running_with_checkpoint_after,
    status_name,
    submit,
)

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

TASKEXECUTORS, SLOTS = 3, 2
#: A short heartbeat timeout, so a SIGSTOPped TaskExecutor is declared lost within seconds.
CLUSTER_OPTIONS = ("--restart-taskexecutors", "--ha", "--with-s3",
                   "heartbeat.interval=500 ms", "heartbeat.timeout=3 s")
KEYS, WINDOW_MS = 13, 1000
#: The source sleeps PAUSE_S every PAUSE_EVERY records, HELD_SLOWDOWN times longer while
#: the gate is closed: at most 25 / 0.1 = 250 records/s per subtask, 500 for the job, in
#: batches of 125 records (0.5 s each), so barriers never wait long behind a batch.
PAUSE_EVERY, PAUSE_S, HELD_SLOWDOWN = 25, 0.0005, 200
HELD_RATE = 500
JOB_CONFIG = {
    "execution.checkpointing.interval": "1 s",
    "execution.checkpointing.timeout": "20 s",
    # Checkpoints fail while S3 is down: that must not fail the job.
    "execution.checkpointing.tolerable-failed-checkpoints": "100000",
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": "100000",
    "restart-strategy.fixed-delay.delay": "500 ms",
    # Local copies of every checkpoint go to the tmpfs the disk-full phase fills.
    "state.backend.local-recovery": "true",
    "pipeline.batch-size": "125",
}
SHORT_S, LONG_S = 45.0, 600.0


def records_for(seconds: float) -> int:
    """Enough input that the held half outlasts the chaos (1.5 times its duration plus
    90 s for faults that run late) even at the held rate's upper bound."""
    return 2 * int(HELD_RATE * (1.5 * seconds + 90))


class ChaosRun:
    """Everything one chaos test starts, stopped in :meth:`close` in the right order."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.cluster = LocalCluster(tmp_path / "cluster")
        self.disks = LocalStateDisks(self.cluster.dir, TASKEXECUTORS)
        self.monitor: JobMonitor | None = None
        self.chaos: Chaos | None = None

    def close(self) -> None:
        """Resume SIGSTOPped processes and stop the driver's threads first (a stopped
        process would not stop), then the cluster (supervisor, daemons, S3 server), then
        unmount the disks its TaskExecutors wrote to, and reap restarted S3 servers."""
        if self.chaos is not None:
            self.chaos.close()
        if self.monitor is not None:
            self.monitor.stop()
        self.cluster.stop()
        self.disks.unmount()
        for server in self.chaos.restarted_s3 if self.chaos is not None else []:
            server.stop()


@pytest.fixture
def chaos_run(tmp_path: Path) -> Iterator[ChaosRun]:
    run = ChaosRun(tmp_path)
    try:
        yield run
    finally:
        run.close()


def log_lines(cluster: LocalCluster, needle: str) -> int:
    """Lines containing ``needle`` in the TaskExecutors' logs (every incarnation appends to
    the same ``.log``; the ``.out`` beside it repeats the lines)."""
    return sum(path.read_text(errors="replace").count(needle)
               for path in (cluster.dir / "log").glob("taskexecutor-*.log"))


def collect_summary(run: ChaosRun, job_id: str, seconds: float, seed: int, n: int,
                    chaos_end: float, wall_start: float, skipped: dict[str, str],
                    output: dict[str, int]) -> dict[str, Any]:
    """The run in numbers. Each source is asked separately: a summary is most wanted when
    something broke, so a part that cannot be had says why instead of failing the rest."""
    assert run.chaos is not None and run.monitor is not None
    monitor, chaos = run.monitor, run.chaos
    counts = chaos.counts
    downtimes = sorted(monitor.downtimes(0.0, chaos_end), key=lambda d: -d[1])
    summary: dict[str, Any] = {
        "seconds": seconds, "seed": seed, "job_id": job_id, "records": n,
        "status": monitor.status, "last_failure": monitor.failure,
        "wall_time_s": round(time.monotonic() - wall_start, 1),
        "chaos_time_s": round(chaos_end, 1),
        "chaos_started_at": chaos.timeline.started_at,
        "faults": {
            "taskexecutor_kills": counts["taskexecutor_kills"],
            "taskexecutor_kills_skipped": counts["taskexecutor_kills_skipped"],
            "jobmaster_kills": counts["jobmaster_kills"],
            "s3_stops": counts["s3_stops"],
            "disk_fills": counts["disk_fills"],
            "sigstops": counts["sigstops"]},
        "skipped": skipped,
        "job_restarts": monitor.job_restarts(),
        "checkpoints": monitor.checkpoint_summary(),
        "max_downtime_s": round(downtimes[0][1], 1) if downtimes else 0.0,
        "longest_downtimes": [{"at_s": round(at, 1), "seconds": round(length, 1)}
                              for at, length in downtimes[:5]],
        "local_copy_write_failures": log_lines(run.cluster, "no local copy of"),
        "output": output,
    }
    try:
        status = run.cluster.status()
        summary["supervisor_restarts"] = {
            "jobmaster": status["jobmaster"].get("restarts", 0),
            "taskexecutors": {te["resource_id"]: te.get("restarts", 0)
                              for te in status["taskexecutors"]}}
    except Exception as err:
        summary["supervisor_restarts"] = f"unavailable: {err}"
    result = run.cluster.weir("status", job_id, "--json")
    if result.returncode == 0:
        reported = json.loads(result.stdout)
        summary["weir_status"] = {"restarts": reported.get("restarts"),
                                  "last_checkpoint": reported.get("last_checkpoint")}
    else:
        summary["weir_status"] = f"unavailable: {result.stderr.strip()[:300]}"
    summary["timeline"] = run.chaos.timeline.events
    return summary


def print_summary(summary: dict[str, Any], path: Path) -> None:
    faults = summary["faults"]
    checkpoints = summary["checkpoints"]
    output = summary["output"]
    lines = [
        f"chaos summary ({path})",
        f"  duration {summary['chaos_time_s']} s of chaos (from {summary['chaos_started_at']}),"
        f" {summary['wall_time_s']} s in all;"
        f" seed {summary['seed']}; job {summary['job_id']} ({summary['records']} records)"
        f" ended {summary['status']}",
        f"  faults: {faults['taskexecutor_kills']} TaskExecutor kills"
        f" ({faults['taskexecutor_kills_skipped']} skipped), {faults['jobmaster_kills']}"
        f" JobMaster kills, {faults['s3_stops']} SeaweedFS stops, {faults['disk_fills']}"
        f" disk fills, {faults['sigstops']} SIGSTOPs",
        f"  skipped: {summary['skipped'] or 'nothing'}",
        f"  restarts: job {summary['job_restarts']} (weir status of the last JobMaster:"
        f" {summary['weir_status']}), supervisor {summary['supervisor_restarts']}",
        f"  checkpoints: {checkpoints['completed']} completed, {checkpoints['failed']} failed"
        f" {checkpoints['failure_reasons']}, {checkpoints['unresolved']} unresolved, over"
        f" {checkpoints['jobmasters_seen']} JobMaster(s)",
        f"  max downtime {summary['max_downtime_s']} s (longest: "
        f"{summary['longest_downtimes']})",
        f"  local checkpoint copies not written (disk full): "
        f"{summary['local_copy_write_failures']}",
        f"  output: {output}",
    ]
    print("\n".join(lines), flush=True)


def run_chaos(run: ChaosRun, seconds: float, plan: tuple[tuple[str, float], ...]) -> None:
    """Start the cluster and the job, inject ``plan`` (and TaskExecutor kills) for
    ``seconds``, open the gate, and check the end: FINISHED, exactly the expected output, no
    part file left uncommitted, and every planned fault really injected. The summary is
    written whatever happens, before the checks."""
    wall_start = time.monotonic()
    seed = chaos_seed()
    n = records_for(seconds)
    enabled = chaos_faults()
    skipped = {kind: f"left out by {FAULTS_ENV}" for kind in
               sorted({TE_KILL, *(k for k, _ in plan)} - enabled)}
    plan = tuple((kind, at) for kind, at in plan if kind in enabled)
    print(f"\nchaos: {seconds:.0f} s, seed {seed} (set {SEED_ENV} to change), {n} records, "
          f"TaskExecutor kills {'on' if TE_KILL in enabled else 'off'}, plan {list(plan)}",
          flush=True)
    if DISK_FULL in enabled:
        problem = run.disks.mount()
        if problem is not None:
            skipped[DISK_FULL] = problem
            print(f"chaos: the disk-full phase is skipped: {problem}", flush=True)
    cluster = run.cluster.start(TASKEXECUTORS, SLOTS, *CLUSTER_OPTIONS)
    tmp = run.tmp_path
    out, gate = tmp / "out", tmp / "gate"
    job_id = submit(cluster, tmp, out, n, KEYS, WINDOW_MS, PAUSE_EVERY, PAUSE_S,
                    config=JOB_CONFIG, gate=gate, held_slowdown=HELD_SLOWDOWN)
    details = running_with_checkpoint_after(cluster, job_id, 0, 120)
    assert status_name(details) == "RUNNING", details.failure.message

    timeline = Timeline()
    run.monitor = JobMonitor(cluster, job_id, timeline).start()
    run.chaos = Chaos(cluster, run.monitor, timeline, seed, run.disks,
                      kill_taskexecutors=TE_KILL in enabled)
    chaos_end = 0.0
    output: dict[str, int] = {}
    summary_path = tmp / "chaos-summary.json"
    try:
        run.chaos.run(plan, seconds)
        chaos_end = timeline.now()
        run.chaos.close()
        gate.touch()
        timeline.record("gate-opened", job=run.monitor.status)
        poll(run.monitor.ended.is_set, 240 + n / 5000, interval=0.5,
             what=f"job {job_id} to end after the chaos")
        final = job_details(cluster, job_id)
        timeline.record("job-ended", status=status_name(final))
        expected, got = expected_output(n, KEYS, WINDOW_MS), committed_output(out)
        output = {"expected": sum(expected.values()), "committed": sum(got.values()),
                  "lost": sum((expected - got).values()),
                  "duplicated": sum((got - expected).values())}
    finally:
        run.monitor.stop()
        summary = collect_summary(run, job_id, seconds, seed, n, chaos_end or timeline.now(),
                                  wall_start, skipped, output)
        summary_path.write_text(json.dumps(summary, indent=2))
        print_summary(summary, summary_path)

    where = f"(job {job_id}; logs in {cluster.dir / 'log'}; summary {summary_path})"
    assert status_name(final) == "FINISHED", f"{final.failure.message} {where}"
    assert got == expected, f"{diff(expected, got)} {where}"
    assert not [p for p in out.iterdir() if p.name.startswith(".")], \
        f"uncommitted part files were left behind {where}"
    # The run means something only if the faults really happened before the job could end.
    planned = {kind: sum(k == kind for k, _ in plan) for kind in (SIGSTOP, JOBMASTER, S3_OUTAGE)}
    counts = run.chaos.counts
    if TE_KILL in enabled:
        assert counts["taskexecutor_kills"] >= 1, where
    assert counts["sigstops"] == planned[SIGSTOP], where
    assert counts["jobmaster_kills"] == planned[JOBMASTER], where
    assert counts["s3_stops"] == planned[S3_OUTAGE], where
    if DISK_FULL not in skipped:
        assert counts["disk_fills"] == sum(k == DISK_FULL for k, _ in plan), where


@pytest.mark.timeout(int(chaos_seconds(SHORT_S) * 2 + 240))
def test_chaos_short(chaos_run: ChaosRun) -> None:
    """45 s of TaskExecutor kills, a SIGSTOP, a full disk and a JobMaster kill."""
    run_chaos(chaos_run, chaos_seconds(SHORT_S), SHORT_PLAN)


@pytest.mark.chaos
@pytest.mark.timeout(int(chaos_seconds(LONG_S) * 2 + 600))
def test_chaos_long(chaos_run: ChaosRun) -> None:
    """Ten minutes of every fault, SeaweedFS outages included."""
    run_chaos(chaos_run, chaos_seconds(LONG_S), LONG_PLAN)
