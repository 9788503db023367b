"""Lifecycle: what savepoints, rescaling and a hot update cost a job with large RocksDB
state, driven through the ``weir`` command as a user would drive it.

Setup
-----
One local cluster for the whole run: ``weir cluster start --with-s3``, 3 TaskExecutors with
1 slot each (a job needs 2, a rescale to 3 all three), checkpoints and savepoints in the
embedded S3 server (SeaweedFS, bucket ``weir``). Every job is a program file (written to
``build/bench-lifecycle-jobs/``, importing only weir and the standard library) submitted
with ``weir run --detached``, at parallelism 2:

    sequence source (uid numbers) -> map (uid keys: number -> key, pacing)
        -> key_by -> StoreValues (uid store) -> discard

``StoreValues`` writes one random value of 100 bytes per key into RocksDB (as in
``bench_checkpoint.py``) and writes a marker file with the time of its first record (and,
when it is closed, of its last); the name holds the parallelism, the subtask, the attempt
and a random token, because attempt numbers start at 0 again after a rescale or update.
The source first writes every key once as fast as the job goes: ``--state-mb`` of state
(1 GB, 500 MB with ``--quick``) at 132 bytes per key (``bench_recovery.BYTES_PER_KEY``).
Then each source subtask sends "pings" (records that touch no state) at about 20,000 a
second: 1,000 records, then a 0.05 s pause. The phase follows the source's checkpointed
position, so a restored or rescaled job does not write the state again. Incremental
checkpoints every 5 s, task-local recovery on. A scenario starts once a checkpoint
triggered after the last key holds at least 90% of the target state.

Scenarios (each ``--runs`` times, 3 by default, 1 with ``--quick``; medians reported,
ratios taken within one run):

(s) **savepoints**: right after a periodic checkpoint, a trigger file makes each source
    subtask rewrite 1% of the keys once (new random values), followed by end-of-rewrite
    records that every keyed subtask reports in a marker file. Once every keyed subtask
    processed them, ``weir savepoint JOB s3://weir/savepoints/... --type native``
    (incremental: the SST files the latest checkpoint stored are copied server-side, S3
    CopyObject, the rest uploaded), ``--type native --full`` (every file uploaded) and
    ``--type canonical`` are timed, in that order, each disposed of afterwards
    (``weir savepoint --dispose``). Besides, a chain: before the rewrite a native savepoint
    into a directory of its own, and after it (timed with the others, ``chained_native``)
    the next one into the same directory, which refers to the files the first holds and
    stores only what changed; the first is disposed of before the second (it keeps what
    the second needs). Time = wall time of the command, which includes the
    start of a ``weir`` process (``cli_s`` in the details: a ``weir list``). The
    savepoint's own duration and uploaded bytes come from ``weir checkpoints``.
(r) **rescale**: ``weir rescale JOB --parallelism 3``, then ``--parallelism 2``, on a job
    whose RocksDB restores with ``state.backend.rocksdb.restore.rescale-method: clip`` (the
    job of (s)) and on one with ``baseline`` (set per job with ``-D``). Time = from the
    command's start to the first record processed by every keyed subtask of the new
    deployment. The downtime the command prints (the engine's: from the checkpoint it took
    to every task running) is reported too. Speedup = baseline / clip, per direction.
(u) **hot update vs resubmit**: a job with 100 MB of state and two versions of its program
    that differ in the stateless map (how pings are spread over keys). (1) ``weir update
    JOB job_v2.py``; (2) ``weir stop JOB --savepoint-path s3://...`` (the default,
    canonical savepoint) then ``weir run --detached -s PATH`` of the other version. Each
    time = from the first command's start to the first record processed by every keyed
    subtask running the other version. Versions alternate: v1 -> v2 by update, v2 -> v1
    by resubmit.

For every change the details also hold ``keyed_gap_s``: from the first keyed subtask of
the old deployment processing its last record to the last keyed subtask of the new one
processing its first, the time the keyed stage was (partly) down; ``restore``: the bytes
the tasks' restores read from local copies and downloaded (``weir status --json``, per
task); for savepoints and rescales ``cpu_s``: the CPU seconds of each daemon (S3 server,
JobMaster, TaskExecutors) meanwhile; for rescales ``checkpoints``: duration and uploaded
bytes of the checkpoints since the previous change, up to the one the rescale took.

Targets: (s) incremental native savepoint <= 10% of the full native one, and so the
chained one, which uploads <= 2% of the state; (r) clip >= 2x
faster than baseline in both directions; (u) hot update <= 2 s.

Results: a table on stdout and ``benchmarks/results/lifecycle.json``
(``savepoint_incremental_native_s``, ``savepoint_native_s``, ``savepoint_canonical_s``,
``incremental_vs_full_native``, ``savepoint_chained_native_s``, ``chained_vs_full_native``,
``chained_uploaded_share``, ``rescale_2_to_3_s``, ``rescale_3_to_2_s`` (clip; the
``*_baseline_s`` and ``*_downtime_s`` keys beside them), ``rescale_clip_vs_baseline_speedup``
(per direction), ``hot_update_downtime_s``, ``hot_update_engine_downtime_s``,
``resubmit_downtime_s``, ``hot_update_vs_resubmit``, ``targets``, ``jobs`` and the per-run
``details``). The cluster directory ``build/bench-cluster-lifecycle`` keeps its ``log/``;
the S3 data and working directories are removed at the end (``--keep-data`` keeps them).

Usage::

    python benchmarks/bench_lifecycle.py --quick               # 500 MB, 1 run: ~3 min
    python benchmarks/bench_lifecycle.py --quick --state-mb 30 # smoke run: ~1.5 min
    python benchmarks/bench_lifecycle.py                       # 1 GB, 3 runs: 8-9 min
    python benchmarks/bench_lifecycle.py --scenarios u         # hot update vs resubmit only
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_recovery import BYTES_PER_KEY, RecoveryCluster, poll, remove_data
from common import (
    BUILD_DIR,
    REPO_ROOT,
    RESULTS_DIR,
    engine_revision,
    format_table,
    machine_info,
    median,
    print_targets,
    process_cpu_seconds,
    write_json,
)

from weir.core.cluster_directory import ClusterDirectory

CLUSTER_DIR = BUILD_DIR / "bench-cluster-lifecycle"
MARKER_DIR = BUILD_DIR / "bench-lifecycle-markers"
JOB_DIR = BUILD_DIR / "bench-lifecycle-jobs"
PARALLELISM = 2
RESCALED = 3
TASK_EXECUTORS = 3
#: State of the hot-update job: fixed, so that the update's cost does not follow --state-mb.
UPDATE_STATE_MB = 100
#: Long enough that the 1% rewrite and the incremental savepoint usually fit between two
#: checkpoints (the details say when one did not: ``checkpoints_between``).
CHECKPOINT_INTERVAL = "5 s"
#: After the target share of state is checkpointed; as bench_recovery.
STATE_SHARE = 0.9
#: A steady job's checkpoint uploads less than this share of the state (see settle()).
QUIET_SHARE = 0.05
#: No progress of the keyed tasks for this long while writing the state: a stall.
STALL_S = 60.0
CHANGE_TIMEOUT_S = 300.0
#: A canonical savepoint of 1 GB goes through Python row by row.
COMMAND_TIMEOUT_S = 1200.0
TARGET_INCREMENTAL_RATIO = 0.10
#: The chained savepoint uploads at most this share of the state.
TARGET_CHAINED_SHARE = 0.02
TARGET_RESCALE_SPEEDUP = 2.0
TARGET_UPDATE_S = 2.0

RESCALE_METHOD = "state.backend.rocksdb.restore.rescale-method"
BASE_CONFIG = {
    "execution.checkpointing.interval": CHECKPOINT_INTERVAL,
    "state.backend.type": "rocksdb",
    "state.backend.incremental": "true",
    "state.backend.local-recovery": "true",
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.delay": "0 s",
    "restart-strategy.fixed-delay.attempts": "100",
    "pipeline.batch-size": "1000",
}
#: job -> (its configuration, the scenarios run on it, in order)
JOBS: dict[str, tuple[dict[str, str], str]] = {
    "clip": ({RESCALE_METHOD: "clip"}, "sr"),
    "baseline": ({RESCALE_METHOD: "baseline"}, "r"),
    "update": ({}, "u"),
}
SCENARIOS = {"s": "savepoints", "r": "rescale", "u": "hot update vs resubmit"}
#: The two program versions: they differ only in the stateless map's PING_STRIDE.
VERSIONS = {"v1": 1, "v2": 7}
SAVEPOINT_KINDS = {
    "incremental_native": ["--type", "native"],
    # The second savepoint into one directory: refers to what the first there holds.
    "chained_native": ["--type", "native"],
    "full_native": ["--type", "native", "--full"],
    "canonical": ["--type", "canonical"],
}

# -- the job program ------------------------------------------------------------------------

#: ``weir run`` and ``weir update`` take a program file: this one, with VERSION and
#: PING_STRIDE filled in. Arguments: the marker directory and the number of keys.
JOB_PROGRAM = '''"""bench_lifecycle.py's job, program version @VERSION@ (written by the benchmark).

numbers (uid numbers) -> Keys (uid keys) -> key_by -> StoreValues (uid store) -> discard.
Usage: weir run job.py MARKER_DIR KEYS
"""

import os
import sys
import time
from pathlib import Path

from weir import (
    DiscardingSink,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)

VERSION = "@VERSION@"
#: What distinguishes the versions: how pings spread over their keys.
PING_STRIDE = @PING_STRIDE@
MARKER_DIR, KEYS = sys.argv[1], int(sys.argv[2])
PARALLELISM = 2
#: SequenceSource cuts its range into 4 splits per reader: split i starts at i * SPLIT, so
#: a number's split and its position in it are plain arithmetic. The first PARALLELISM
#: splits (one per reader at the start; none ever ends) write the state.
SPLIT = 10**11
SPLITS = 4 * PARALLELISM
FAST = -(-KEYS // PARALLELISM)
#: Keys each writing split rewrites when triggered: 1% of all keys in all.
REWRITE = KEYS // 100 // PARALLELISM
BATCH = 1000
SLOW_BATCH_S = 0.05
VALUE_BYTES = 100
#: Pings are keys -1..-PINGS: they reach every keyed subtask and touch no state.
PINGS = 4096
#: End-of-rewrite records: -(END_BASE + (generation * SPLITS + split) * END_KEYS + j).
#: END_KEYS keys reach every keyed subtask.
END_BASE = 10**12
END_KEYS = 64


def mark(directory, name, value):
    """Write a marker file at once (a reader never sees it half-written)."""
    hidden = Path(directory, "." + name)
    hidden.write_text(repr(value))
    os.replace(hidden, Path(directory, name))


class Keys(MapFunction):
    """number -> key. The first FAST numbers of a writing split write FAST distinct keys
    as fast as the job goes; later numbers become pings, BATCH of them per SLOW_BATCH_S.
    The phase follows the number (the source's checkpointed position), not a counter: a
    counter would start over after a restore and write the whole state again."""

    def __init__(self):
        self.seen = 0
        self.generation = 0
        self.pending = []

    # A map method, not __call__: weir update tells changed operators by a fingerprint of
    # their code, which leaves out dunder methods.
    def map(self, n):
        split, pos = divmod(n, SPLIT)
        if split < PARALLELISM and pos < FAST:
            return (split * FAST + pos) % KEYS
        self.seen += 1
        if self.pending:
            return self.pending.pop()
        # Not before an attempt's first batch: that pause would count as downtime.
        if pos % BATCH == 0 and self.seen > BATCH:
            self.check_trigger(split)
            if not self.pending:
                time.sleep(SLOW_BATCH_S)
        return -1 - pos * PING_STRIDE % PINGS

    def check_trigger(self, split):
        """A new generation in the trigger file: rewrite this split's first REWRITE keys,
        then send the end-of-rewrite records."""
        try:
            generation = int(Path(MARKER_DIR, "rewrite").read_text())
        except (OSError, ValueError):
            return
        if generation <= self.generation:
            return
        self.generation = generation
        if split >= PARALLELISM:
            return
        first = (generation * SPLITS + split) * END_KEYS
        order = [(split * FAST + j) % KEYS for j in range(REWRITE)]
        order += [-(END_BASE + first + j) for j in range(END_KEYS)]
        self.pending = order[::-1]


class StoreValues(KeyedProcessFunction):
    """Writes a random value per key; marks its first and last record and the
    end-of-rewrite records it saw."""

    def __init__(self, marker_dir):
        self.marker_dir = marker_dir

    def open(self, runtime_context):
        self.value = runtime_context.get_state(ValueStateDescriptor("value"))
        self.index = runtime_context.get_index_of_this_subtask()
        # Attempt numbers start at 0 again after a rescale or an update: the token tells
        # deployments apart.
        self.name = "-".join(str(part) for part in (
            runtime_context.get_number_of_parallel_subtasks(), self.index,
            runtime_context.get_attempt_number(), os.urandom(4).hex()))
        self.last = 0.0
        self.rewritten = set()

    def process_element(self, value, ctx):
        now = time.time()
        if not self.last:
            mark(self.marker_dir, "first-" + self.name, now)
        self.last = now
        if value >= 0:
            # random bytes: RocksDB compresses its files
            self.value.update(os.urandom(VALUE_BYTES))
        elif value <= -END_BASE:
            generation, split = divmod((-value - END_BASE) // END_KEYS, SPLITS)
            if (generation, split) not in self.rewritten:
                self.rewritten.add((generation, split))
                mark(self.marker_dir, f"rewritten-{generation}-{split}-{self.index}", now)
        return []

    def close(self):
        if self.last:
            mark(self.marker_dir, "last-" + self.name, self.last)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(PARALLELISM)
(env.from_sequence(0, SPLITS * SPLIT - 1).uid("numbers")
    .map(Keys()).uid("keys")
    .key_by(lambda key: key)
    .process(StoreValues(MARKER_DIR)).uid("store").name("Keyed store")
    .sink_to(DiscardingSink()).uid("discard"))
env.execute(f"bench lifecycle {VERSION}")
'''


def write_programs() -> dict[str, Path]:
    """The job program of each version, as files for ``weir run`` / ``weir update``."""
    JOB_DIR.mkdir(parents=True, exist_ok=True)
    paths = {}
    for version, stride in VERSIONS.items():
        path = JOB_DIR / f"lifecycle_job_{version}.py"
        path.write_text(JOB_PROGRAM.replace("@VERSION@", version)
                        .replace("@PING_STRIDE@", str(stride)))
        paths[version] = path
    return paths


def other(version: str) -> str:
    return "v2" if version == "v1" else "v1"


# -- the command line and the job -------------------------------------------------------------


def weir_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``weir COMMAND --dir CLUSTER_DIR ARGS...``; raises with its output if it fails."""
    result = subprocess.run([sys.executable, "-m", "weir", args[0], "--dir", str(CLUSTER_DIR),
                             *args[1:]], capture_output=True, text=True, cwd=REPO_ROOT,
                            timeout=COMMAND_TIMEOUT_S, check=False)
    if result.returncode != 0:
        msg = f"weir {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}"
        raise RuntimeError(msg)
    return result


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.strip().splitlines()[-1]


def printed_downtime_s(result: subprocess.CompletedProcess[str]) -> float:
    """``downtime <ms> ms``, the last line of ``weir rescale`` and ``weir update``."""
    return int(last_line(result).split()[1]) / 1000


def config_pairs(config: dict[str, str]) -> list[str]:
    return [f"-D{key}={value}" for key, value in {**BASE_CONFIG, **config}.items()]


def daemon_pids() -> dict[str, int]:
    """The cluster's processes by role: the S3 server, the JobMaster, the TaskExecutors."""
    files = ClusterDirectory(CLUSTER_DIR)
    s3, jobmaster = files.s3(), files.jobmaster()
    assert s3 is not None and jobmaster is not None, f"no cluster with S3 in {CLUSTER_DIR}"
    pids = {"s3": s3.pid, "jobmaster": jobmaster.pid}
    pids.update({name: info.pid for name, info in files.taskexecutors().items()})
    return pids


class CpuMeter:
    """CPU seconds each daemon used during a ``with`` block: where a command's time went
    (the S3 server copying objects, the TaskExecutors uploading or restoring)."""

    def __enter__(self) -> CpuMeter:
        self.pids = daemon_pids()
        self.before = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}
        self.result: dict[str, float] = {}
        return self

    def __exit__(self, *exc: object) -> None:
        self.result = {name: round(process_cpu_seconds(pid) - self.before[name], 2)
                       for name, pid in self.pids.items()}


def s3_root() -> str:
    s3 = ClusterDirectory(CLUSTER_DIR).s3()
    assert s3 is not None, f"no S3 server in {CLUSTER_DIR}"
    return f"s3://{s3.bucket}/savepoints"


def stored_bytes(path: str) -> tuple[int, int]:
    """Bytes a savepoint stored in its own directory (uploaded or copied there) and bytes
    it refers to elsewhere (an earlier savepoint in the same directory), from its
    ``_metadata`` on the cluster's S3 server."""
    from weir.checkpoint.metadata import read_metadata, referenced_files
    from weir.checkpoint.seaweedfs import S3Credentials
    from weir.checkpoint.storage import create_storage
    from weir.core.config import Configuration

    s3 = ClusterDirectory(CLUSTER_DIR).s3()
    assert s3 is not None, f"no S3 server in {CLUSTER_DIR}"
    credentials = S3Credentials.load(Path(s3.credentials_file))
    config = Configuration.from_pairs({
        "s3.endpoint": s3.endpoint, "s3.access-key": credentials.access_key,
        "s3.secret-key": credentials.secret_key, "s3.path.style.access": "true"})
    metadata = read_metadata(create_storage(path, config), path)
    own = path.rstrip("/") + "/"
    files = {h.uri: h.size for h in referenced_files(metadata)}
    inside = sum(size for uri, size in files.items() if uri.startswith(own))
    return inside, sum(files.values()) - inside


@dataclass
class RunningJob:
    client: Any
    job_id: str
    name: str
    config: dict[str, str]
    keys: int
    version: str
    programs: dict[str, Path]
    #: seconds from submission until every key was written once
    build_s: float = 0.0

    def status(self) -> dict[str, Any]:
        from weir.cli.show import status_json

        return status_json(self.client.job_details(self.job_id))

    def completed_checkpoints(self) -> list[dict[str, Any]]:
        """Completed periodic checkpoints and changes' checkpoints (not savepoints)."""
        from weir.cli.show import checkpoints_json

        return [r for r in checkpoints_json(self.client.checkpoints(self.job_id))
                if r["status"] == "COMPLETED" and not r["savepoint"]]

    def savepoints(self) -> list[dict[str, Any]]:
        from weir.cli.show import checkpoints_json

        return [r for r in checkpoints_json(self.client.checkpoints(self.job_id))
                if r["savepoint"]]

    @staticmethod
    def keyed_tasks(status: dict[str, Any]) -> list[dict[str, Any]]:
        return [t for t in status["tasks"] if t["name"].startswith("Keyed")]

    def program(self, version: str) -> list[str]:
        """The program file of ``version`` and its arguments."""
        return [str(self.programs[version]), str(MARKER_DIR), str(self.keys)]


def submit(client: Any, name: str, config: dict[str, str], keys: int, version: str,
           programs: dict[str, Path], savepoint: str | None = None) -> RunningJob:
    job = RunningJob(client, "", name, config, keys, version, programs)
    restore = ["-s", savepoint] if savepoint else []
    job.job_id = last_line(weir_cli("run", "--detached", *restore, *config_pairs(config),
                                    *job.program(version)))
    return job


def end_job(job: RunningJob) -> None:
    """Cancel the job and wait until it ended, so the next job finds the slots free."""
    with contextlib.suppress(Exception):
        job.client.cancel_job(job.job_id)
    with contextlib.suppress(Exception):
        poll("the job to end", lambda: job.status()["status"] in ("CANCELED", "FAILED",
                                                                   "FINISHED"), 60)


def wait_state_built(job: RunningJob, state_mb: int) -> dict[str, Any]:
    """Wait until every key was written and a checkpoint triggered after that completed;
    returns that checkpoint. Raises RuntimeError when the job fails, stalls for STALL_S or
    the checkpoint holds less than STATE_SHARE of the target."""
    began = time.monotonic()
    progress = {"records": -1, "since": time.monotonic()}

    def written() -> bool:
        status = job.status()
        if status["status"] != "RUNNING" or status["restarts"]:
            msg = (f"the job failed while writing its state ({status['status']}, "
                   f"{status['restarts']} restarts): {status['failure']}")
            raise RuntimeError(msg)
        records = sum(t["records_in"] for t in job.keyed_tasks(status))
        if records > progress["records"]:
            progress.update(records=records, since=time.monotonic())
        elif time.monotonic() - progress["since"] > STALL_S:
            msg = (f"the keyed tasks processed nothing for {STALL_S:.0f} s at {records:,} of "
                   f"{job.keys:,} records (logs in {CLUSTER_DIR / 'log'})")
            raise RuntimeError(msg)
        return records >= job.keys

    poll("every key to be written", written, 1800, interval=1.0)
    job.build_s = round(time.monotonic() - began, 1)
    checkpoint = wait_checkpoint_after(job, time.time() * 1000, 600)
    target = int(state_mb * 1024 * 1024 * STATE_SHARE)
    if checkpoint["state_size_bytes"] < target:
        msg = (f"checkpoint {checkpoint['id']} holds {checkpoint['state_size_bytes']:,} "
               f"bytes, less than {STATE_SHARE:.0%} of {state_mb} MB")
        raise RuntimeError(msg)
    print(f"  state written in {job.build_s:.0f} s; checkpoint {checkpoint['id']}: "
          f"{checkpoint['state_size_bytes'] / 2**20:.0f} MiB "
          f"({checkpoint['duration_ms'] / 1000:.1f} s)", flush=True)
    return checkpoint


def wait_checkpoint_after(job: RunningJob, since_ms: float,
                          timeout: float = 300.0) -> dict[str, Any]:
    """The first checkpoint triggered after ``since_ms`` (epoch ms), once it completed."""
    return poll(f"a checkpoint of job {job.job_id}",  # type: ignore[no-any-return]
                lambda: next((r for r in job.completed_checkpoints()
                              if r["trigger_timestamp_ms"] > since_ms), None),
                timeout, interval=0.25)


def task_restores(status: dict[str, Any]) -> dict[str, Any]:
    """What the tasks' restores read: ``weir status --json`` has the job's ``last_restore``
    only after a failover, each task's after a rescale, update or start from a snapshot."""
    restores = [t["last_restore"] for t in status["tasks"] if t["last_restore"]]
    return {"tasks": len(restores),
            "local_bytes": sum(r["local_bytes"] for r in restores),
            "remote_bytes": sum(r["remote_bytes"] for r in restores),
            "max_duration_ms": max((r["duration_ms"] for r in restores), default=None)}


def settle(job: RunningJob) -> dict[str, Any]:
    """Every task running and then a checkpoint that uploaded under QUIET_SHARE of the
    state: the next change starts from a steady job, with fresh local copies. After a
    restore the checkpoints upload much more for a while (a full one after baseline, the
    compactions of clipped ranges and inserted rows after clip), and the checkpoint a
    change takes first would measure that instead of the change."""
    poll("every task to run", lambda: all(t["state"] == "RUNNING"
                                          for t in job.status()["tasks"]), 120)
    since = time.time() * 1000

    def quiet() -> dict[str, Any] | None:
        return next((r for r in job.completed_checkpoints()
                     if r["trigger_timestamp_ms"] > since and r["checkpointed_size_bytes"]
                     < QUIET_SHARE * r["state_size_bytes"]), None)

    return poll("a checkpoint that uploads little (a steady job)",  # type: ignore[no-any-return]
                quiet, 300, interval=0.5)


# -- markers --------------------------------------------------------------------------------


def marker_names() -> set[str]:
    return {p.name for p in MARKER_DIR.iterdir()}


def marker_times(before: set[str], kind: str, parallelism: int) -> dict[int, float]:
    """Keyed subtask -> time in its ``kind`` (first/last) marker, of the deployments at
    ``parallelism`` that started since ``before`` (the earliest first, the latest last)."""
    times: dict[int, float] = {}
    for path in MARKER_DIR.glob(f"{kind}-*"):
        if path.name in before:
            continue
        _, p, index, _, _ = path.name.split("-")
        if int(p) != parallelism:
            continue
        value = float(path.read_text())
        pick = min if kind == "first" else max
        times[int(index)] = pick(times.get(int(index), value), value)
    return times


def wait_new_deployment(before: set[str], parallelism: int, what: str) -> dict[int, float]:
    """Keyed subtask -> its first record in the new deployment, once every one has one.
    Only files are read meanwhile: an RPC or a ``weir`` process per poll would take CPU
    from the restore on this 2-core machine."""
    return poll(what, lambda: (t := marker_times(before, "first", parallelism))  # type: ignore[no-any-return]
                and len(t) == parallelism and t, CHANGE_TIMEOUT_S, interval=0.01)


def change_times(before: set[str], started: float, old: int, new: int,
                 what: str) -> dict[str, Any]:
    """End to end (``started`` -> every keyed subtask of the new deployment processed a
    record) and the keyed stage's gap (first old subtask's last record -> that)."""
    firsts = wait_new_deployment(before, new, what)
    # The old tasks wrote theirs when they were closed, before the new ones started.
    lasts = marker_times(before, "last", old)
    done = max(firsts.values())
    return {"end_to_end_s": round(done - started, 3),
            "first_subtask_s": round(min(firsts.values()) - started, 3),
            "per_subtask_s": {str(k): round(v - started, 3) for k, v in sorted(firsts.items())},
            "keyed_gap_s": round(done - min(lasts.values()), 3) if lasts else None}


# -- (s) savepoints ---------------------------------------------------------------------------


def rewrite(job: RunningJob, generation: int) -> dict[str, Any]:
    """Right after a checkpoint, have 1% of the keys rewritten; returns once every keyed
    subtask processed the rewrite."""
    latest = job.completed_checkpoints()[-1]
    checkpoint = wait_checkpoint_after(job, latest["trigger_timestamp_ms"])
    trigger = MARKER_DIR / "rewrite"
    started = time.time()
    trigger.write_text(str(generation))
    expected = {f"rewritten-{generation}-{split}-{index}" for split in range(PARALLELISM)
                for index in range(PARALLELISM)}
    poll("every keyed subtask to process the rewrite",
         lambda: expected <= marker_names(), 120, interval=0.01)
    # A source subtask that restarted later would rewrite again.
    trigger.unlink()
    return {"after_checkpoint": checkpoint["id"], "keys": job.keys // 100 // PARALLELISM
            * PARALLELISM, "processed_s": round(time.time() - started, 3),
            "started_ms": started * 1000}


def savepoint_run(job: RunningJob, run: int) -> dict[str, Any]:
    root = s3_root()
    cli_started = time.perf_counter()
    weir_cli("list")
    cli_s = time.perf_counter() - cli_started
    # The chain's first savepoint, before the change: the next one in its directory
    # refers to the files it holds.
    chain_dir = f"{root}/{job.job_id[:8]}-run{run + 1}-chain"
    began = time.perf_counter()
    chain_first = last_line(weir_cli("savepoint", job.job_id, chain_dir, "--type", "native"))
    chain_first_s = time.perf_counter() - began
    changed = rewrite(job, run + 1)
    result: dict[str, Any] = {"scenario": "s", "run": run + 1, "cli_s": round(cli_s, 3),
                              "rewrite": changed, "chain_first_s": round(chain_first_s, 3)}
    savepoints: dict[str, dict[str, Any]] = {}
    for kind, flags in SAVEPOINT_KINDS.items():
        started_ms = time.time() * 1000
        began = time.perf_counter()
        target = chain_dir if kind == "chained_native" else \
            f"{root}/{job.job_id[:8]}-run{run + 1}-{kind}"
        with CpuMeter() as cpu:
            path = last_line(weir_cli("savepoint", job.job_id, target, *flags))
        wall = time.perf_counter() - began
        stored, referred = stored_bytes(path)
        if kind == "chained_native":
            # The first goes first: it keeps what the second refers to.
            began = time.perf_counter()
            weir_cli("savepoint", "--dispose", chain_first)
            result["chain_first_dispose_s"] = round(time.perf_counter() - began, 3)
        began = time.perf_counter()
        weir_cli("savepoint", "--dispose", path)
        rows = [r for r in job.savepoints() if r["trigger_timestamp_ms"] >= started_ms]
        row = next((r for r in rows if r["path"] and path.startswith(r["path"].rstrip("/"))),
                   rows[-1] if rows else {})
        savepoints[kind] = {"wall_s": round(wall, 3), "path": path,
                            "dispose_s": round(time.perf_counter() - began, 3),
                            "duration_s": round(row.get("duration_ms", 0) / 1000, 3),
                            "uploaded_bytes": row.get("checkpointed_size_bytes"),
                            "state_bytes": row.get("state_size_bytes"),
                            "stored_bytes": stored, "referred_bytes": referred,
                            "cpu_s": cpu.result}
        if kind == "incremental_native":
            # Periodic checkpoints between the rewrite and this savepoint stored the
            # rewritten keys already: then the savepoint only copies.
            result["checkpoints_between"] = [
                r["id"] for r in job.completed_checkpoints()
                if changed["started_ms"] < r["trigger_timestamp_ms"] < started_ms]
        print(f"    {kind.replace('_', ' ')} savepoint: {wall:.2f} s "
              f"({savepoints[kind]['duration_s']:.2f} s in the engine, "
              f"{(row.get('checkpointed_size_bytes') or 0) / 2**20:.1f} MiB uploaded, "
              f"{stored / 2**20:.1f} MiB stored, {referred / 2**20:.1f} MiB referred to)",
              flush=True)
    result["savepoints"] = savepoints
    for kind, info in savepoints.items():
        result[f"{kind}_s"] = info["wall_s"]
    result["incremental_vs_full_native"] = round(
        savepoints["incremental_native"]["wall_s"] / savepoints["full_native"]["wall_s"], 3)
    result["chained_vs_full_native"] = round(
        savepoints["chained_native"]["wall_s"] / savepoints["full_native"]["wall_s"], 3)
    state = savepoints["chained_native"]["state_bytes"]
    result["chained_uploaded_share"] = round(
        (savepoints["chained_native"]["uploaded_bytes"] or 0) / state, 4) if state else None
    # Uploaded or copied from the latest checkpoint: what the savepoint wrote.
    result["chained_stored_share"] = round(
        savepoints["chained_native"]["stored_bytes"] / state, 4) if state else None
    return result


# -- (r) rescale ------------------------------------------------------------------------------


def rescale_run(job: RunningJob, method: str, parallelism: int, run: int) -> dict[str, Any]:
    status = job.status()
    old = len(job.keyed_tasks(status))
    placement = {t["subtask"]: t["taskexecutor"] for t in job.keyed_tasks(status)}
    since_ms = (status["last_change"] or {}).get("timestamp_ms", 0)
    before = marker_names()
    started = time.time()
    with CpuMeter() as cpu:
        result = weir_cli("rescale", job.job_id, "--parallelism", str(parallelism))
        command_s = time.time() - started
        times = change_times(before, started, old, parallelism,
                             f"every keyed subtask to process at parallelism {parallelism}")
    status = job.status()
    # What the checkpoints since the previous change uploaded, up to the one this change
    # took (its time is in end_to_end_s but not in the printed downtime).
    taken = status["last_change"]["checkpoint_id"]
    checkpoints = [{key: r[key] for key in ("id", "duration_ms", "checkpointed_size_bytes",
                                            "state_size_bytes")}
                   for r in job.completed_checkpoints()
                   if r["trigger_timestamp_ms"] >= since_ms and r["id"] <= taken]
    return {"scenario": "r", "method": method, "direction": f"{old}_to_{parallelism}",
            "run": run + 1, **times, "command_s": round(command_s, 3),
            "downtime_s": printed_downtime_s(result),
            "last_change": status["last_change"], "restore": task_restores(status),
            "cpu_s": cpu.result, "checkpoints": checkpoints,
            "keyed_tasks": [{"subtask": t["subtask"], "taskexecutor": t["taskexecutor"],
                             "taskexecutor_before": placement.get(t["subtask"]),
                             "restore": t["last_restore"]}
                            for t in job.keyed_tasks(status)]}


# -- (u) hot update vs resubmit ---------------------------------------------------------------


def hot_update(job: RunningJob, run: int) -> dict[str, Any]:
    version = other(job.version)
    before = marker_names()
    started = time.time()
    result = weir_cli("update", *config_pairs(job.config), job.job_id, *job.program(version))
    command_s = time.time() - started
    times = change_times(before, started, PARALLELISM, PARALLELISM,
                         f"every keyed subtask to run {version}")
    status = job.status()
    change = status["last_change"]
    if not change or change["kind"] != "update" or "keys" not in change["restarted_operators"]:
        msg = f"the update to {version} did not change the map: {change}"
        raise RuntimeError(msg)
    entry = {"scenario": "u", "kind": "update", "run": run + 1, "from": job.version,
             "to": version, **times, "command_s": round(command_s, 3),
             "engine_downtime_s": printed_downtime_s(result), "last_change": change,
             "restore": task_restores(status)}
    job.version = version
    return entry


def resubmit(job: RunningJob, run: int) -> tuple[dict[str, Any], RunningJob]:
    """``weir stop`` with a savepoint, ``weir run -s`` of the other version; returns the
    measurements and the new job."""
    version = other(job.version)
    target = f"{s3_root()}/{job.job_id[:8]}-resubmit-{run + 1}"
    before = marker_names()
    started = time.time()
    path = last_line(weir_cli("stop", job.job_id, "--savepoint-path", target))
    stopped = time.time()
    new = submit(job.client, job.name, job.config, job.keys, version, job.programs, path)
    submitted = time.time()
    times = change_times(before, started, PARALLELISM, PARALLELISM,
                         f"every keyed subtask of the resubmitted job to run {version}")
    ended = job.status()["status"]
    status = new.status()
    new.build_s = job.build_s
    entry = {"scenario": "u", "kind": "resubmit", "run": run + 1, "from": job.version,
             "to": version, **times, "stop_s": round(stopped - started, 3),
             "run_s": round(submitted - stopped, 3), "savepoint": path,
             "old_job": job.job_id, "old_job_status": ended, "new_job": new.job_id,
             "restore": task_restores(status)}
    return entry, new


# -- one job, its scenarios -------------------------------------------------------------------


def run_job(client: Any, name: str, programs: dict[str, Path], scenarios: str,
            args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    config, _ = JOBS[name]
    state_mb = UPDATE_STATE_MB if name == "update" else args.state_mb
    keys = state_mb * 1024 * 1024 // BYTES_PER_KEY
    print(f"job '{name}' ({', '.join(f'{k}: {v}' for k, v in config.items()) or 'defaults'}):"
          f" writing {state_mb} MB of state", flush=True)
    shutil.rmtree(MARKER_DIR, ignore_errors=True)
    MARKER_DIR.mkdir(parents=True)
    job = submit(client, name, config, keys, "v1", programs)
    runs: list[dict[str, Any]] = []
    try:
        checkpoint = wait_state_built(job, state_mb)
        info = {"config": {**BASE_CONFIG, **config}, "state_mb_target": state_mb,
                "state_bytes": checkpoint["state_size_bytes"], "keys": keys,
                "build_s": job.build_s, "built_checkpoint": checkpoint["id"],
                "built_checkpoint_s": round(checkpoint["duration_ms"] / 1000, 2)}
        settle(job)
        if "s" in scenarios:
            for run in range(args.runs):
                result = savepoint_run(job, run)
                runs.append(result)
                print(f"  (s) run {run + 1}/{args.runs}: incremental native "
                      f"{result['incremental_native_s']} s, full native "
                      f"{result['full_native_s']} s, canonical {result['canonical_s']} s "
                      f"(ratio {result['incremental_vs_full_native']}), chained native "
                      f"{result['chained_native_s']} s (ratio "
                      f"{result['chained_vs_full_native']})", flush=True)
        if "r" in scenarios:
            method = config[RESCALE_METHOD]
            for run in range(args.runs):
                for parallelism in (RESCALED, PARALLELISM):
                    settle(job)
                    result = rescale_run(job, method, parallelism, run)
                    runs.append(result)
                    print(f"  (r) {method} {result['direction'].replace('_', ' ')} run "
                          f"{run + 1}/{args.runs}: {result['end_to_end_s']} s (command "
                          f"{result['command_s']} s, downtime {result['downtime_s']} s, "
                          f"keyed gap {result['keyed_gap_s']} s)", flush=True)
            settle(job)
        if "u" in scenarios:
            for run in range(args.runs):
                settle(job)
                result = hot_update(job, run)
                runs.append(result)
                print(f"  (u) run {run + 1}/{args.runs}: update {result['from']} -> "
                      f"{result['to']} {result['end_to_end_s']} s (engine downtime "
                      f"{result['engine_downtime_s']} s, keyed gap {result['keyed_gap_s']} s)",
                      flush=True)
                settle(job)
                result, job = resubmit(job, run)
                runs.append(result)
                settle(job)
                # The new job restored from it and checkpointed since: it is no longer needed.
                weir_cli("savepoint", "--dispose", result["savepoint"])
                print(f"  (u) run {run + 1}/{args.runs}: resubmit {result['from']} -> "
                      f"{result['to']} {result['end_to_end_s']} s (stop {result['stop_s']} s, "
                      f"run {result['run_s']} s, keyed gap {result['keyed_gap_s']} s)",
                      flush=True)
    finally:
        end_job(job)
    return runs, info


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="500 MB of state and 1 run per scenario (about 3 min)")
    parser.add_argument("--runs", type=int, help="runs per scenario (default 3; quick 1)")
    parser.add_argument("--state-mb", type=int,
                        help="RocksDB state of the savepoint and rescale jobs (default 1024; "
                             f"quick 500); the hot-update job has {UPDATE_STATE_MB} MB")
    parser.add_argument("--scenarios", default="sru",
                        help="which of s (savepoints), r (rescale), u (hot update vs "
                             "resubmit) to run (default all: sru)")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the cluster directory's S3 data and working directories")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "lifecycle.json",
                        help="where the JSON results go")
    args = parser.parse_args(argv)
    args.runs = args.runs or (1 if args.quick else 3)
    args.state_mb = args.state_mb or (500 if args.quick else 1024)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {''.join(sorted(unknown))}: choose from sru")
    return args


def ratio(numerator: float | None, denominator: float | None, digits: int = 2) -> float | None:
    return round(numerator / denominator, digits) if numerator and denominator else None


def summarise(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    def med(key: str, **match: Any) -> float | None:
        values = [r[key] for r in runs if all(r.get(k) == v for k, v in match.items())
                  and r.get(key) is not None]
        return round(median(values), 3) if values else None

    summary: dict[str, Any] = {
        "savepoint_incremental_native_s": med("incremental_native_s", scenario="s"),
        "savepoint_native_s": med("full_native_s", scenario="s"),
        "savepoint_canonical_s": med("canonical_s", scenario="s"),
        "incremental_vs_full_native": med("incremental_vs_full_native", scenario="s"),
        "savepoint_chained_native_s": med("chained_native_s", scenario="s"),
        "chained_vs_full_native": med("chained_vs_full_native", scenario="s"),
        "chained_uploaded_share": med("chained_uploaded_share", scenario="s"),
        "chained_stored_share": med("chained_stored_share", scenario="s"),
    }
    for kind in SAVEPOINT_KINDS:
        mine = [r["savepoints"][kind] for r in runs if r["scenario"] == "s"]
        summary[f"savepoint_{kind}_engine_s"] = (
            round(median([m["duration_s"] for m in mine]), 3) if mine else None)
        summary[f"savepoint_{kind}_uploaded_bytes"] = (
            int(median([m["uploaded_bytes"] or 0 for m in mine])) if mine else None)
    speedups: dict[str, float | None] = {}
    downtime_speedups: dict[str, float | None] = {}
    for direction in (f"{PARALLELISM}_to_{RESCALED}", f"{RESCALED}_to_{PARALLELISM}"):
        for method, suffix in (("clip", ""), ("baseline", "_baseline")):
            summary[f"rescale_{direction}{suffix}_s"] = med(
                "end_to_end_s", scenario="r", method=method, direction=direction)
            summary[f"rescale_{direction}{suffix}_downtime_s"] = med(
                "downtime_s", scenario="r", method=method, direction=direction)
            summary[f"rescale_{direction}{suffix}_keyed_gap_s"] = med(
                "keyed_gap_s", scenario="r", method=method, direction=direction)
        # Within one run: run i of clip against run i of baseline.
        pairs = [(c, b) for c in runs for b in runs
                 if c["scenario"] == b["scenario"] == "r" and c["direction"] == b["direction"]
                 == direction and c["run"] == b["run"] and c["method"] == "clip"
                 and b["method"] == "baseline"]
        speedups[direction] = round(median([b["end_to_end_s"] / c["end_to_end_s"]
                                            for c, b in pairs]), 2) if pairs else None
        downtime_speedups[direction] = round(median([b["downtime_s"] / c["downtime_s"]
                                                     for c, b in pairs]), 2) if pairs else None
    summary["rescale_clip_vs_baseline_speedup"] = speedups
    summary["rescale_clip_vs_baseline_downtime_speedup"] = downtime_speedups
    summary["hot_update_downtime_s"] = med("end_to_end_s", scenario="u", kind="update")
    summary["hot_update_engine_downtime_s"] = med("engine_downtime_s", scenario="u",
                                                  kind="update")
    summary["hot_update_keyed_gap_s"] = med("keyed_gap_s", scenario="u", kind="update")
    summary["resubmit_downtime_s"] = med("end_to_end_s", scenario="u", kind="resubmit")
    summary["resubmit_keyed_gap_s"] = med("keyed_gap_s", scenario="u", kind="resubmit")
    updates = {r["run"]: r for r in runs if r["scenario"] == "u" and r["kind"] == "update"}
    ratios = [updates[r["run"]]["end_to_end_s"] / r["end_to_end_s"] for r in runs
              if r["scenario"] == "u" and r["kind"] == "resubmit" and r["run"] in updates]
    summary["hot_update_vs_resubmit"] = round(median(ratios), 3) if ratios else None
    summary["state_mb_target"] = args.state_mb
    summary["update_state_mb_target"] = UPDATE_STATE_MB
    summary["runs"] = args.runs

    targets: dict[str, Any] = {}
    incremental = summary["incremental_vs_full_native"]
    if incremental is not None:
        targets["incremental_vs_full_native"] = {
            "value": incremental, "target": TARGET_INCREMENTAL_RATIO,
            "pass": incremental <= TARGET_INCREMENTAL_RATIO}
    for direction, speedup in speedups.items():
        if speedup is not None:
            targets[f"rescale_clip_vs_baseline_speedup_{direction}"] = {
                "value": speedup, "target": TARGET_RESCALE_SPEEDUP,
                "pass": speedup >= TARGET_RESCALE_SPEEDUP}
    update = summary["hot_update_downtime_s"]
    if update is not None:
        targets["hot_update_downtime_s"] = {"value": update, "target": TARGET_UPDATE_S,
                                            "pass": update <= TARGET_UPDATE_S}
    chained = summary["chained_vs_full_native"]
    if chained is not None:
        targets["chained_vs_full_native"] = {
            "value": chained, "target": TARGET_INCREMENTAL_RATIO,
            "pass": chained <= TARGET_INCREMENTAL_RATIO}
    share = summary["chained_stored_share"]
    if share is not None:
        targets["chained_stored_share"] = {"value": share, "target": TARGET_CHAINED_SHARE,
                                           "pass": share <= TARGET_CHAINED_SHARE}
    summary["targets"] = targets
    return summary


def print_report(runs: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    def cell(values: list[Any], digits: int = 2) -> str:
        values = [v for v in values if v is not None]
        return f"{median(values):.{digits}f}" if values else "-"

    rows = []
    saves = [r for r in runs if r["scenario"] == "s"]
    for kind in SAVEPOINT_KINDS:
        mine = [r["savepoints"][kind] for r in saves]
        if mine:
            rows.append([f"(s) savepoint, {kind.replace('_', ' ')}", len(mine),
                         cell([m["wall_s"] for m in mine]),
                         cell([m["duration_s"] for m in mine]), "-",
                         cell([(m["uploaded_bytes"] or 0) / 2**20 for m in mine], 1)])
    for direction in (f"{PARALLELISM}_to_{RESCALED}", f"{RESCALED}_to_{PARALLELISM}"):
        for method in ("clip", "baseline"):
            mine = [r for r in runs if r["scenario"] == "r" and r["method"] == method
                    and r["direction"] == direction]
            if mine:
                rows.append([f"(r) rescale {direction.replace('_', ' ')}, {method}", len(mine),
                             cell([r["end_to_end_s"] for r in mine]),
                             cell([r["downtime_s"] for r in mine]),
                             cell([r["keyed_gap_s"] for r in mine]),
                             cell([r["restore"]["remote_bytes"] / 2**20
                                   for r in mine], 1)])
    for kind, label in (("update", "hot update (weir update)"),
                        ("resubmit", "resubmit (weir stop + run -s)")):
        mine = [r for r in runs if r["scenario"] == "u" and r["kind"] == kind]
        if mine:
            rows.append([f"(u) {label}", len(mine), cell([r["end_to_end_s"] for r in mine]),
                         cell([r.get("engine_downtime_s") for r in mine]),
                         cell([r["keyed_gap_s"] for r in mine]),
                         cell([r["restore"]["remote_bytes"] / 2**20
                               for r in mine], 1)])
    print(format_table(["measurement", "runs", "median s", "engine s", "keyed gap s", "MiB"],
                       rows))
    print("median s: savepoints: wall time of the command; changes: command start -> every "
          "keyed subtask processed a record.\nengine s: the savepoint's duration, or the "
          "downtime the command printed. MiB: uploaded by the savepoint, or downloaded by "
          "the restore.")
    speedups = summary["rescale_clip_vs_baseline_speedup"]
    if any(v is not None for v in speedups.values()):
        print("rescale speedup clip vs baseline: " + ", ".join(
            f"{d.replace('_', ' ')} {v}x" for d, v in speedups.items() if v is not None))
    if summary["chained_stored_share"] is not None:
        print(f"chained native savepoint: {summary['chained_vs_full_native']} of the full "
              f"native one's time; stored {summary['chained_stored_share']:.2%} of the state "
              f"(uploaded {summary['chained_uploaded_share']:.2%}), referred to the rest")
    if summary["hot_update_vs_resubmit"] is not None:
        print(f"hot update / resubmit: {summary['hot_update_vs_resubmit']}")
    print_targets(summary["targets"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    begun = time.perf_counter()
    result: dict[str, Any] = {"benchmark": "lifecycle", "quick": args.quick,
                              "machine": machine_info(), "engine": engine_revision(),
                              "storage": "s3 (embedded SeaweedFS, weir cluster start "
                                         "--with-s3)"}
    runs: list[dict[str, Any]] = []
    infos: dict[str, dict[str, Any]] = {}
    cluster = RecoveryCluster(CLUSTER_DIR, TASK_EXECUTORS, 1, flags=["--with-s3"])
    try:
        with cluster:
            from weir.client.cluster_client import JobMasterClient

            client = JobMasterClient(cluster.address)
            programs = write_programs()
            try:
                for name, (_, scenarios) in JOBS.items():
                    chosen = "".join(s for s in scenarios if s in args.scenarios)
                    if chosen:
                        job_runs, infos[name] = run_job(client, name, programs, chosen, args)
                        runs.extend(job_runs)
            finally:
                client.close()
    finally:
        shutil.rmtree(MARKER_DIR, ignore_errors=True)
        if not args.keep_data:
            remove_data(CLUSTER_DIR)
    result.update(summarise(runs, args))
    result["jobs"] = infos
    result["details"] = runs
    result["seconds"] = round(time.perf_counter() - begun, 1)
    write_json(args.output, result)
    print()
    print_report(runs, result)
    print(f"{result['seconds']} s in all; results in {args.output}; "
          f"logs in {CLUSTER_DIR / 'log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
