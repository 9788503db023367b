"""The chaos driver: faults injected into a real local cluster while a job runs, and what the
suite measures meanwhile.

Why a driver of its own: the integration tests each inject one kind of fault at one
well-chosen moment. Production fails differently — faults pile up, overlap and land at
arbitrary points of a checkpoint, a restart or a recovery — so the chaos suite keeps a job
under a stream of faults for minutes and only then checks that its committed output is
exactly what a run without faults would have produced.

The pieces:

* :class:`Timeline` — seconds since the chaos started, and a log of every fault (printed as
  it happens, kept for the JSON summary), so a failure can be traced to what preceded it.
* :class:`JobMonitor` — a thread polling the JobMaster: whether the job is up (RUNNING with
  every task running), which TaskExecutors run its tasks, its restarts and its checkpoint
  history. Checkpoint ids start again after a JobMaster recovery, so statistics are kept per
  JobMaster process.
* :class:`LocalStateDisks` — one small tmpfs per TaskExecutor, mounted on the directory
  where task-local recovery writes its copy of every checkpoint, filled with a ballast file
  to make that disk full and freed again.
* :class:`Chaos` — the faults: a thread SIGKILLing a random busy TaskExecutor every 5-20 s
  (seeded), and, at set moments, a SIGSTOP past the heartbeat timeout, a SIGKILLed
  JobMaster, a 30 s SeaweedFS outage and a full local-state disk.

Waiting for the cluster to react is always a poll with a deadline; only the pacing between
faults waits on the stop event with a timeout.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cluster import LocalCluster, poll
from weir.checkpoint.seaweedfs import SeaweedServer
from weir.core.cluster_directory import ClusterDirectory
from weir.core.processes import process_alive
from weir.testing.faults import restart_cluster_s3, stop_cluster_s3

#: Environment variables: the chaos duration in seconds, the seed of the fault stream, and
#: (to bisect a failure) the fault kinds to inject, comma-separated (default: all).
SECONDS_ENV = "WEIR_CHAOS_SECONDS"
SEED_ENV = "WEIR_CHAOS_SEED"
FAULTS_ENV = "WEIR_CHAOS_FAULTS"
DEFAULT_SEED = 20251125

#: Fault kinds: the TaskExecutor killer, and those of a plan (see :meth:`Chaos.run`).
TE_KILL = "te-kill"
SIGSTOP, JOBMASTER, S3_OUTAGE, DISK_FULL = "sigstop", "jobmaster-kill", "s3-outage", "disk-full"
ALL_FAULTS = (TE_KILL, SIGSTOP, JOBMASTER, S3_OUTAGE, DISK_FULL)

#: The subset the short (45 s) run of `make test` does (TaskExecutor kills run throughout):
#: (fault, moment as a fraction of the chaos duration).
SHORT_PLAN: tuple[tuple[str, float], ...] = (
    (SIGSTOP, 0.15), (DISK_FULL, 0.35), (JOBMASTER, 0.6))
#: Everything, twice, for `make chaos`.
LONG_PLAN: tuple[tuple[str, float], ...] = (
    (SIGSTOP, 0.08), (JOBMASTER, 0.18), (S3_OUTAGE, 0.28), (DISK_FULL, 0.45),
    (SIGSTOP, 0.56), (JOBMASTER, 0.66), (S3_OUTAGE, 0.75), (DISK_FULL, 0.9))

TE_KILL_INTERVAL_S = (5.0, 20.0)
S3_OUTAGE_S = 30.0


def chaos_seconds(default: float) -> float:
    """The chaos duration: ``WEIR_CHAOS_SECONDS`` if set, else ``default``."""
    value = os.environ.get(SECONDS_ENV)
    return float(value) if value else default


def chaos_seed() -> int:
    """The seed of the fault stream: ``WEIR_CHAOS_SEED`` if set, else a fixed one, so two
    runs on the same machine make the same choices as long as the cluster behaves alike."""
    value = os.environ.get(SEED_ENV)
    return int(value) if value else DEFAULT_SEED


def chaos_faults() -> set[str]:
    """The fault kinds to inject: ``WEIR_CHAOS_FAULTS`` (e.g. ``te-kill,sigstop``) if set,
    else all of them. Narrowing it down tells which fault (or pair) breaks a run."""
    value = os.environ.get(FAULTS_ENV)
    if not value:
        return set(ALL_FAULTS)
    chosen = {name.strip() for name in value.split(",") if name.strip()}
    unknown = chosen - set(ALL_FAULTS)
    assert not unknown, f"{FAULTS_ENV}: unknown fault kinds {sorted(unknown)} ({ALL_FAULTS})"
    return chosen


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until it is truthy or ``timeout`` passed; its last value. For
    waits whose expiry is an observation (reported in the summary), not a failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def live_taskexecutors(cluster_dir: Path) -> dict[str, int]:
    """Resource id -> pid of every TaskExecutor whose info file names a live process (the
    supervisor removes the file of a dead one before it starts it again)."""
    return {rid: info.pid
            for rid, info in ClusterDirectory(cluster_dir).live_taskexecutors().items()}


def jobmaster_pid(cluster_dir: Path) -> int | None:
    """The JobMaster's pid, or None while its info file is missing (a restart)."""
    return ClusterDirectory(cluster_dir).daemon_pid("jobmaster")


class Timeline:
    """Seconds since the chaos started, and the log of what the driver did."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        #: Wall-clock start, to find the moments of the timeline in the daemons' logs.
        self.started_at = time.strftime("%Y-%m-%d %H:%M:%S")
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.start

    def record(self, event: str, **details: Any) -> None:
        entry = {"t": round(self.now(), 1), "event": event, **details}
        with self._lock:
            self.events.append(entry)
        text = " ".join(f"{k}={v}" for k, v in details.items())
        print(f"[chaos {entry['t']:7.1f}s] {event} {text}", flush=True)


@dataclass
class Sample:
    """One look at the job: ``state`` is up (RUNNING, every task running), down (anything
    else, the JobMaster unreachable included), finishing (a task finished: the bounded input
    ended) or ended (FINISHED, FAILED, CANCELED)."""

    t: float
    state: str
    status: str


class JobMonitor:
    """Polls the JobMaster every ``interval`` seconds from a thread of its own."""

    def __init__(self, cluster: LocalCluster, job_id: str, timeline: Timeline,
                 interval: float = 0.25, history_every: float = 1.0) -> None:
        self.cluster = cluster
        self.job_id = job_id
        self.timeline = timeline
        self.interval = interval
        self.history_every = history_every
        self.address = cluster.address        # fixed with high availability
        self.samples: list[Sample] = []
        self.busy: set[str] = set()           # resource ids running the job's tasks
        self.status = "UNKNOWN"
        self.failure = ""
        self.ended = threading.Event()
        # Per JobMaster process (pid): checkpoint id -> (status, failure reason, trigger
        # time in epoch ms), and restarts.
        self.checkpoints: dict[tuple[int, int], tuple[str, str, int]] = {}
        self.restarts: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-monitor", daemon=True)
        self._client: Any = None
        self._last_history = 0.0

    def start(self) -> JobMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, then take one last look (the final checkpoint history); a
        second call does nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.sample()
        if self._client is not None:
            self._client.close()
            self._client = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def _call(self, method: str) -> Any:
        from weir.client.cluster_client import JobMasterClient

        if self._client is None:
            self._client = JobMasterClient(self.address, timeout=5)
        try:
            return getattr(self._client, method)(self.job_id)
        except Exception:  # the JobMaster is down or restarting: the answer is "no answer"
            self._client.close()
            self._client = None
            return None

    def sample(self) -> None:
        """One look at the job (and, every ``history_every`` s, its checkpoint history).
        A reply is attributed to a JobMaster only if its pid is the same before and after
        the call: ids of different JobMasters must not be mixed up."""
        from weir.client.cluster_client import job_status_name
        from weir.proto import common_pb2

        pid = jobmaster_pid(self.cluster.dir)
        details = self._call("job_details")
        same = pid is not None and jobmaster_pid(self.cluster.dir) == pid
        t = self.timeline.now()
        if details is None:
            self._add(Sample(t, "down", "UNREACHABLE"))
            return
        status = job_status_name(details.summary.status)
        states = [s.state for v in details.vertices for s in v.subtasks]
        if status in ("FINISHED", "FAILED", "CANCELED"):
            state = "ended"
        elif status == "RUNNING" and common_pb2.FINISHED in states:
            state = "finishing"
        elif status == "RUNNING" and states and all(s == common_pb2.RUNNING for s in states):
            state = "up"
        else:
            state = "down"
        with self._lock:
            self.status = status
            self.failure = details.failure.message
            self.busy = {s.resource_id for v in details.vertices for s in v.subtasks
                         if s.resource_id and s.state == common_pb2.RUNNING}
            if same:
                assert pid is not None
                self.restarts[pid] = max(self.restarts.get(pid, 0), details.summary.restarts)
        self._add(Sample(t, state, status))
        if same and (state == "ended" or time.monotonic() - self._last_history >=
                     self.history_every):
            self._last_history = time.monotonic()
            self._merge_history(pid)
        if state == "ended":
            self.ended.set()

    def _merge_history(self, pid: int | None) -> None:
        from weir.proto import checkpoint_pb2

        history = self._call("checkpoints")
        if history is None or pid is None or jobmaster_pid(self.cluster.dir) != pid:
            return
        with self._lock:
            for stats in history.checkpoints:
                reason = (checkpoint_pb2.CheckpointFailureReason.Name(stats.failure_reason)
                          if stats.status == checkpoint_pb2.CheckpointStats.FAILED else "")
                self.checkpoints[(pid, stats.checkpoint_id)] = (
                    checkpoint_pb2.CheckpointStats.Status.Name(stats.status), reason,
                    stats.trigger_timestamp_ms)

    def _add(self, sample: Sample) -> None:
        with self._lock:
            self.samples.append(sample)

    # -- what the driver and the summary ask ------------------------------------------------

    def busy_taskexecutors(self) -> set[str]:
        with self._lock:
            return set(self.busy)

    def completed_since(self, epoch_ms: int) -> int:
        """Checkpoints triggered at or after ``epoch_ms`` that completed."""
        with self._lock:
            return sum(s == "COMPLETED" and t >= epoch_ms
                       for s, _, t in self.checkpoints.values())

    def is_up(self) -> bool:
        with self._lock:
            return bool(self.samples) and self.samples[-1].state == "up"

    def checkpoint_summary(self) -> dict[str, Any]:
        with self._lock:
            statuses = Counter(s for s, _, _ in self.checkpoints.values())
            reasons = Counter(r for s, r, _ in self.checkpoints.values() if s == "FAILED")
            jobmasters = len({pid for pid, _ in self.checkpoints})
        return {"completed": statuses["COMPLETED"], "failed": statuses["FAILED"],
                # Still in progress when its JobMaster was killed (or at the last look).
                "unresolved": statuses["IN_PROGRESS"],
                "failure_reasons": dict(sorted(reasons.items())),
                "jobmasters_seen": jobmasters}

    def job_restarts(self) -> int:
        """Restarts over every JobMaster that ran the job (each counts from 0)."""
        with self._lock:
            return sum(self.restarts.values())

    def downtimes(self, begin: float, end: float) -> list[tuple[float, float]]:
        """(start, length) of every interval in which the job was down, starting within
        [begin, end]; an interval lasts until the first sample that is not down (or the
        last sample)."""
        with self._lock:
            samples = list(self.samples)
        intervals: list[tuple[float, float]] = []
        down_since: float | None = None
        for sample in samples:
            if sample.state == "down":
                if down_since is None:
                    down_since = sample.t
            elif down_since is not None:
                intervals.append((down_since, sample.t - down_since))
                down_since = None
        if down_since is not None and samples:
            intervals.append((down_since, samples[-1].t - down_since))
        return [(s, d) for s, d in intervals if begin <= s <= end]


class LocalStateDisks:
    """A tmpfs of ``size`` on each TaskExecutor's local-state directory
    (``DIR/taskexecutor-N/localState``: where task-local recovery writes its copy of each
    checkpoint), mounted before the cluster starts so every TaskExecutor process, restarted
    ones included, writes there. Mounting needs root (CAP_SYS_ADMIN): :meth:`mount` returns
    why it could not, and the disk-full phase is then skipped."""

    def __init__(self, cluster_dir: Path, count: int, size: str = "8m") -> None:
        self.paths = [cluster_dir / f"taskexecutor-{i}" / "localState" for i in range(count)]
        self.size = size
        self.mounted: list[Path] = []

    def mount(self) -> str | None:
        """Mount every tmpfs; None on success, else the reason (nothing stays mounted)."""
        if shutil.which("mount") is None:
            return "no mount command"
        for path in self.paths:
            path.mkdir(parents=True, exist_ok=True)
            result = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0700", "tmpfs",
                 str(path)], capture_output=True, text=True, timeout=30)
            if result.returncode != 0:
                self.unmount()
                return f"mount -t tmpfs not permitted: {result.stderr.strip() or result.returncode}"
            self.mounted.append(path)
        return None

    def fill(self) -> int:
        """Fill every mounted tmpfs with a ballast file until the kernel says ENOSPC;
        returns the bytes written."""
        total = 0
        for path in self.mounted:
            fd = os.open(path / "ballast", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                chunk = 1 << 20
                while chunk >= 4096:
                    try:
                        total += os.write(fd, bytes(chunk))
                    except OSError as err:
                        if err.errno != errno.ENOSPC:
                            raise
                        chunk //= 4
            finally:
                os.close(fd)
        return total

    def free(self) -> None:
        for path in self.mounted:
            (path / "ballast").unlink(missing_ok=True)

    def unmount(self) -> None:
        """Unmount (lazily if something still holds a file there)."""
        for path in reversed(self.mounted):
            if subprocess.run(["umount", str(path)], capture_output=True,
                              timeout=30).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
        self.mounted = []


class Chaos:
    """The faults, injected into ``cluster`` while ``monitor`` watches the job.

    :meth:`run` starts the TaskExecutor killer and works through a plan of the other faults
    at their moments; :meth:`close` (teardown) stops the killer and resumes any process left
    SIGSTOPped. Counts of what was done are in :attr:`counts`.
    """

    def __init__(self, cluster: LocalCluster, monitor: JobMonitor, timeline: Timeline,
                 seed: int, disks: LocalStateDisks | None,
                 kill_taskexecutors: bool = True) -> None:
        self.cluster = cluster
        self.kill_taskexecutors = kill_taskexecutors
        self.monitor = monitor
        self.timeline = timeline
        # One stream for the killer (its intervals and victims), one for the planned
        # faults' victims: the two threads must not interleave draws from one generator.
        self.rng = random.Random(seed)
        self.planned_rng = random.Random(seed + 1)
        self.disks = disks
        self.counts: Counter[str] = Counter()
        self.restarted_s3: list[SeaweedServer] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()       # victims are chosen under it
        self._stopped: dict[int, str] = {}  # pid -> resource id of SIGSTOPped TaskExecutors
        self._killer = threading.Thread(target=self._kill_taskexecutors,
                                        name="chaos-te-killer", daemon=True)

    # -- the driver --------------------------------------------------------------------------

    def run(self, plan: tuple[tuple[str, float], ...], seconds: float) -> None:
        """Kill TaskExecutors throughout (unless told not to); inject each fault of
        ``plan`` at its moment (a fraction of ``seconds``; a fault whose moment passed while
        the previous one was still going on comes right after it). Returns at ``seconds``
        (or once every fault is done, if later), or early when the job ended: a job that
        fails under chaos is reported at once rather than after the full duration."""
        faults = {SIGSTOP: self.sigstop_taskexecutor, JOBMASTER: self.kill_jobmaster,
                  S3_OUTAGE: self.s3_outage, DISK_FULL: self.fill_disk}
        watcher = threading.Thread(target=self._stop_when_job_ends, name="chaos-watch",
                                   daemon=True)
        watcher.start()
        if self.kill_taskexecutors:
            self._killer.start()
        try:
            for kind, fraction in plan:
                if self._pause_until(fraction * seconds):
                    break
                faults[kind]()
            self._pause_until(seconds)
        finally:
            self.stop.set()
            if self._killer.is_alive():
                self._killer.join(timeout=30)
            watcher.join(timeout=30)

    def _stop_when_job_ends(self) -> None:
        while not self.stop.is_set():
            if self.monitor.ended.wait(0.5):
                self.timeline.record("job-ended-during-chaos", status=self.monitor.status,
                                     failure=self.monitor.failure[:300])
                self.stop.set()

    def _pause_until(self, moment: float) -> bool:
        """Pacing: wait until ``moment`` (seconds since the start); True if stopped."""
        return self.stop.wait(max(0.0, moment - self.timeline.now()))

    def close(self) -> None:
        """Stop the killer and resume every process still SIGSTOPped (teardown)."""
        self.stop.set()
        if self._killer.is_alive():
            self._killer.join(timeout=30)
        with self._lock:
            for pid in list(self._stopped):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self._stopped.clear()

    # -- TaskExecutor kills (a thread of their own) -----------------------------------------

    def _kill_taskexecutors(self) -> None:
        while not self.stop.wait(self.rng.uniform(*TE_KILL_INTERVAL_S)):
            self.kill_taskexecutor()

    def _candidates(self) -> tuple[dict[str, int], list[str]]:
        """Live TaskExecutors that are not SIGSTOPped, and the job's among them (sorted, so
        that a seeded choice is reproducible)."""
        alive = {rid: pid for rid, pid in live_taskexecutors(self.cluster.dir).items()
                 if pid not in self._stopped}
        busy = sorted(set(alive) & self.monitor.busy_taskexecutors())
        return alive, busy

    def kill_taskexecutor(self) -> None:
        """SIGKILL a random TaskExecutor running the job's tasks (any live one if none is
        known), unless that would leave no TaskExecutor running: the supervisor needs a
        moment to bring one back, and the job must keep a place to run."""
        with self._lock:
            alive, busy = self._candidates()
            if len(alive) < 2:
                self.counts["taskexecutor_kills_skipped"] += 1
                self.timeline.record("te-kill-skipped", alive=sorted(alive))
                return
            victim = self.rng.choice(busy or sorted(alive))
            with contextlib.suppress(ProcessLookupError):
                os.kill(alive[victim], signal.SIGKILL)
            self.counts["taskexecutor_kills"] += 1
        self.timeline.record("te-kill", victim=victim, pid=alive[victim],
                             busy=victim in busy)

    # -- the planned faults -------------------------------------------------------------------

    def sigstop_taskexecutor(self) -> None:
        """SIGSTOP a TaskExecutor of the job, wait until the JobMaster declared it lost
        (heartbeat.timeout), then SIGCONT it: it must notice it was cut off, and its stale
        tasks must not touch the restarted job."""
        with self._lock:
            alive, busy = self._candidates()
            if len(alive) < 2:
                self.timeline.record("sigstop-skipped", alive=sorted(alive))
                return
            victim = self.planned_rng.choice(busy or sorted(alive))
            pid = alive[victim]
            os.kill(pid, signal.SIGSTOP)
            self._stopped[pid] = victim
            self.counts["sigstops"] += 1
        self.timeline.record("sigstop", victim=victim, pid=pid)
        started = time.monotonic()
        try:
            poll(lambda: victim not in self._registered(), 90, interval=0.2,
                 what=f"the JobMaster to declare the SIGSTOPped TaskExecutor {victim} lost")
        finally:
            with self._lock:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                self._stopped.pop(pid, None)
        self.timeline.record("sigcont", victim=victim,
                             stopped_s=round(time.monotonic() - started, 1))

    def _registered(self) -> set[str]:
        """Resource ids the JobMaster lists (everything, while it does not answer: a
        TaskExecutor is only taken as lost on the JobMaster's word)."""
        from weir.client.cluster_client import JobMasterClient

        client = JobMasterClient(self.monitor.address, timeout=5)
        try:
            return {te.resource_id for te in client.cluster_overview().task_executors}
        except Exception:
            return set(live_taskexecutors(self.cluster.dir)) | {"?"}
        finally:
            client.close()

    def kill_jobmaster(self) -> None:
        """SIGKILL the JobMaster; the supervisor starts it again on the same port and it
        recovers the job from the high-availability store. Waits (deadline) until the new
        JobMaster answers for the job."""
        old = jobmaster_pid(self.cluster.dir)
        assert old is not None, "no JobMaster info file"
        os.kill(old, signal.SIGKILL)
        self.counts["jobmaster_kills"] += 1
        self.timeline.record("jm-kill", pid=old)
        started = time.monotonic()

        def recovered() -> bool:
            pid = jobmaster_pid(self.cluster.dir)
            return pid is not None and pid != old and process_alive(pid) and \
                self._job_known()

        poll(recovered, 120, interval=0.2, what="the JobMaster to come back with the job")
        self.timeline.record("jm-recovered", pid=jobmaster_pid(self.cluster.dir),
                             after_s=round(time.monotonic() - started, 1))

    def _job_known(self) -> bool:
        from weir.client.cluster_client import JobMasterClient

        client = JobMasterClient(self.monitor.address, timeout=5)
        try:
            client.job_details(self.monitor.job_id)
            return True
        except Exception:
            return False
        finally:
            client.close()

    def s3_outage(self) -> None:
        """Stop SeaweedFS (checkpoint storage and the high-availability store) for 30 s,
        then start it again on the same ports and data directory."""
        self.timeline.record("s3-stopping")     # weed takes seconds to stop (SIGTERM)
        info = stop_cluster_s3(self.cluster.dir)
        self.counts["s3_stops"] += 1
        self.timeline.record("s3-stopped", pid=info.pid)
        if self.stop.wait(S3_OUTAGE_S):
            return      # the job ended: `weir cluster stop` copes with a stopped server
        self.restarted_s3.append(restart_cluster_s3(self.cluster.dir, info))
        self.timeline.record("s3-start", pid=self.restarted_s3[-1].pid)

    def fill_disk(self, hold: float = 10.0, wait: float = 20.0) -> None:
        """Fill the TaskExecutors' local-state disks for ``hold`` seconds and until a
        checkpoint completed with them full (``wait`` more seconds at most: whether one did
        is reported), then free them."""
        if self.disks is None or not self.disks.mounted:
            self.counts["disk_fills_skipped"] += 1
            self.timeline.record("disk-full-skipped")
            return
        written = self.disks.fill()
        full_since_ms = int(time.time() * 1000)
        self.counts["disk_fills"] += 1
        self.timeline.record("disk-full", ballast_mib=round(written / 2**20, 1))
        try:
            if self.stop.wait(hold):
                return
            during = wait_until(lambda: self.monitor.completed_since(full_since_ms), wait)
        finally:
            self.disks.free()
        self.timeline.record("disk-freed", checkpoints_completed_while_full=during)
