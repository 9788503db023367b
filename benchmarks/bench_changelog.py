"""The changelog state backend on a real cluster: checkpoints of ~1 GB of RocksDB state
under a steady rate of updates, with the changelog off and on, in the same run.

Setup
-----
One local cluster for the whole run: ``weir cluster start --with-s3
--restart-taskexecutors``, 3 TaskExecutors with 1 slot each (the job needs 2, so one is
spare), checkpoints to the embedded S3 server (SeaweedFS). The job is the keyed job of
``bench_recovery.py`` at parallelism 2:

    sequence source -> map_batches (number -> key, pacing) -> key_by -> StoreValues -> discard

``StoreValues`` (``bench_checkpoint.py``) writes one random 100-byte value per key into
RocksDB and notes the first record of each attempt in a marker file. RocksDB,
incremental checkpoints every second (``execution.checkpointing.interval: 1 s``), local
recovery off (a restore reads everything from S3). Two configurations, one after the
other on the same cluster, each with a job of its own:

* ``off``: the plain RocksDB backend;
* ``on``: ``state.changelog.enabled: true``, materialization every ``--materialize``
  seconds (30 s; 20 s with ``--quick``);
* ``on-unaligned``: the same with unaligned checkpoints
  (``execution.checkpointing.unaligned.enabled: true``): the job runs close to what the
  keyed tasks can do on this machine, so while a materialization takes CPU from them their
  input queues grow and an aligned barrier waits behind them; an unaligned one overtakes
  them. Reported beside the targets, which are taken from ``on``.

Per job:

1. **build**: the source writes every key once as fast as the job goes (``KeysThenPace``
   of ``bench_recovery.py``): ``--state-mb`` of checkpointed state (1 GB; 200 MB with
   ``--quick``) at ``BYTES_PER_KEY`` per key. Done once a checkpoint after the last key
   holds at least 90% of it.
2. **steady updates**: from then on, each batch is ``BATCH_SIZE`` keys drawn uniformly
   at random from the whole key space (seeded by the batch's position), at
   ``--update-percent`` of the keys per second in all (1%). Pacing is a per-subtask
   schedule; a subtask that falls behind catches up at most 1 s, so the rate reached is
   reported (from the keyed tasks' ``records_in``) beside the rate asked for.
3. **settle**: with the changelog, until each keyed backend completed a materialization
   that started after the build (the log of the build is then gone from the checkpoints;
   the materialization metrics of the TaskExecutors tell); without, ``SETTLE_S``.
4. **window**: the next ``--checkpoints`` completed checkpoints (60; 20 quick). From
   ``weir checkpoints --json --tasks`` (the same rows, read over RPC every few seconds, as
   the history keeps the newest 100): duration p50/p99/max, bytes uploaded per checkpoint
   (``checkpointed_size_bytes``) median/p99, the latest checkpoint's full state size and,
   with the changelog, its split into materialized and log. Materializations are seen in
   the TaskExecutors' metrics (``numberOfCompletedMaterialization``,
   ``lastDurationOfMaterialization``, scraped every ``SCRAPE_S``): how many completed in
   the window, and the durations of the checkpoints that ran while one did.
5. **recovery** (``--runs``, 2; 1 quick): SIGKILL of a TaskExecutor running a keyed subtask
   (scenario (d) of ``bench_recovery.py``): the spare takes over, every byte comes from S3;
   time from the SIGKILL to the first record processed by the last keyed subtask of the
   new attempt. With the changelog a restore indexes the log and the task applies it as
   it runs (state/changelog_replay.py), so beside it: the time from the SIGKILL until
   every keyed backend applied all of it (``restoredLogRowsPending`` 0 everywhere, read
   every 0.1 s). The supervisor restarts the killed TaskExecutor, which becomes the spare.

Targets, as ratios of the same run: with the changelog, checkpoint p99 <= 1 s and median
upload per checkpoint <= 2% of the state; recovery <= 1.3x and total checkpoint size
<= 1.5x the same without it.

A second, quick section (``--skip-in-process`` leaves it out) measures the backends in
this process, without a cluster: ``--keys`` values, ``--updates`` of them changed between
two checkpoints to a local directory, hashmap and rocksdb, plain and with the changelog.

Results: a table on stdout and ``benchmarks/results/changelog.json``. The cluster
directory ``build/bench-cluster-changelog`` keeps its ``log/``; the S3 data is removed at
the end (``--keep-data`` keeps it).

Usage::

    python benchmarks/bench_changelog.py --quick     # 200 MB, 1 recovery each: ~2 min
    python benchmarks/bench_changelog.py             # 1 GB, 2 recoveries each: 12-15 min
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_recovery as recovery
from bench_checkpoint import StoreValues, percentile
from bench_recovery import (
    BASE_CONFIG,
    BYTES_PER_KEY,
    PARALLELISM,
    SPLIT,
    SPLITS,
    KeysThenPace,
    RecoveryCluster,
    RunningJob,
    end_job,
    identity,
    poll,
    recover,
    remove_data,
    wait_settled,
    wait_state_built,
)
from common import (
    BUILD_DIR,
    RESULTS_DIR,
    Profiler,
    categorise_profile,
    engine_revision,
    format_table,
    machine_info,
    median,
    print_targets,
    scrape_metrics,
    summarise_profile,
    write_json,
)

from weir import DiscardingSink
from weir.checkpoint.changelog_storage import ChangelogStorage, ChangelogStorageOptions
from weir.checkpoint.storage import create_storage
from weir.core.cluster_directory import ClusterDirectory
from weir.core.ids import CheckpointId
from weir.state.backend import KeyedStateBackend
from weir.state.changelog import ChangelogKeyedStateBackend
from weir.state.descriptors import ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange
from weir.state.restore import restore
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.snapshot import SnapshotLocation

CLUSTER_DIR = BUILD_DIR / "bench-cluster-changelog"
PROFILE_DIR = BUILD_DIR / "bench-profiles"
PROFILE_HZ = 100
#: Where the TaskExecutors' busy time goes (first match from the innermost frame).
PROFILE_CATEGORIES = [
    ("log replay (restore)", ["apply_change", "read_changes", "decode_change"]),
    ("download from S3", ["S3CheckpointStorageAccess.download", "fetch_files.<locals>.download",
                          "S3CheckpointStorageAccess.read"]),
    ("materialized restore (RocksDB)", ["restore_native", "open_keyed", "restore_into"]),
    ("log upload", ["ChangelogStorage._upload", "S3CheckpointStorageAccess.write"]),
    ("materialization / checkpoint upload", ["_upload_files", "upload_file", "RocksDBSnapshot",
                                             "materialize"]),
    ("state writes (log append)", ["ChangelogKeyedStateBackend._log", "encode_change"]),
    ("state writes (RocksDB)", ["RocksDBKeyedStateBackend._put", "ValueState"]),
    ("processing records", ["Task._process_input"]),
]
PROFILE_THREADS = [("keyed tasks", ["task Keyed"]), ("source tasks", ["task Source"]),
                   ("log upload", ["changelog"]), ("materialization", ["materialization"]),
                   ("checkpoint upload", ["checkpoint-upload"]),
                   ("state transfer", ["state-transfer"])]
MARKER_DIR = BUILD_DIR / "bench-changelog-markers"
# The recovery helpers of bench_recovery (recover, wait_settled, te_info) find the cluster
# directory and the marker files through these module globals: point them at this run's.
recovery.CLUSTER_DIR = CLUSTER_DIR
recovery.MARKER_DIR = MARKER_DIR
TASK_EXECUTORS = recovery.TASK_EXECUTORS
CHECKPOINT_INTERVAL = "1 s"
#: Without the changelog, the window starts this long after the build's checkpoint.
SETTLE_S = 10.0
#: How often the TaskExecutors' materialization metrics are read during a window.
SCRAPE_S = 0.5
#: How often the checkpoint history is read during a window (it keeps the newest 100).
HISTORY_S = 5.0
MATERIALIZED_METRIC = "weir_changelog_numberOfCompletedMaterialization"
MATERIALIZE_MS_METRIC = "weir_changelog_lastDurationOfMaterialization"
PENDING_METRIC = "weir_changelog_restoredLogRowsPending"
TARGET_P99_S = 1.0
TARGET_UPLOAD_SHARE = 0.02
TARGET_RECOVERY_RATIO = 1.3
TARGET_SIZE_RATIO = 1.5
CONFIGS = ("off", "on", "on-unaligned")
#: The log's upload timeout per attempt: 0 keeps the engine's default (1 s, as Flink's).
#: (Before attempts raced their retries, that default failed the job while the state was
#: written on this loaded machine; the first published run used 10 s.)
UPLOAD_TIMEOUT_S = 0.0

# -- the job ------------------------------------------------------------------------------


class BuildThenUpdate(KeysThenPace):
    """``map_batches``: sequence number -> key. While the source is in the build phase
    (``KeysThenPace``: the first ``fast`` numbers of each split) every key once; after it,
    keys drawn uniformly at random from all ``keys`` at ``rate`` records/s (this subtask's
    share of the rate asked for).

    The random keys are seeded by the batch's first number (the source's position), so a
    restored job draws the same keys again. The pace is a schedule that starts with the
    attempt's first paced batch (no wait before it: that would count as recovery time);
    a subtask that falls behind it catches up at most one second.
    """

    def __init__(self, keys: int, fast: int, rate: float) -> None:
        super().__init__(keys, fast)
        self.rate = rate
        self.due: float | None = None

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        numbers = batch.column(0).to_numpy()
        if not len(numbers) or numbers[0] % SPLIT < self.fast:
            return super().__call__(batch)
        now = time.monotonic()
        if self.due is None:
            self.due = now
        elif self.due > now:
            time.sleep(self.due - now)
        self.due = max(self.due, now - 1.0) + len(numbers) / self.rate
        keys = np.random.default_rng(int(numbers[0])).integers(0, self.keys, len(numbers))
        return pa.RecordBatch.from_arrays([pa.array(keys, pa.int64())], schema=batch.schema)


if __name__ != "__main__":
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def job_config(changelog: bool, args: argparse.Namespace, unaligned: bool = False
               ) -> dict[str, Any]:
    config: dict[str, Any] = {**BASE_CONFIG,
                              "execution.checkpointing.interval": CHECKPOINT_INTERVAL,
                              "state.backend.local-recovery": "false"}
    if unaligned:
        config["execution.checkpointing.unaligned.enabled"] = "true"
    config.update(args.extra)
    if changelog:
        config["state.changelog.enabled"] = "true"
        config["state.changelog.periodic-materialize.interval"] = f"{args.materialize:g} s"
        if args.upload_timeout:
            config["state.changelog.dstl.dfs.upload.timeout"] = f"{args.upload_timeout:g} s"
    return config


def submit(cluster: RecoveryCluster, name: str, config: dict[str, Any], state_mb: int,
           update_percent: float) -> RunningJob:
    keys = state_mb * 1024 * 1024 // BYTES_PER_KEY
    fast = -(-keys // PARALLELISM)
    rate = keys * update_percent / 100 / PARALLELISM
    shutil.rmtree(MARKER_DIR, ignore_errors=True)
    MARKER_DIR.mkdir(parents=True)
    env = cluster.environment(config)
    env.set_parallelism(PARALLELISM)
    (env.from_sequence(0, SPLITS * SPLIT - 1).map_batches(BuildThenUpdate(keys, fast, rate))
        .key_by(identity).process(StoreValues(str(MARKER_DIR)))
        .sink_to(DiscardingSink()))
    handle = env.execute_async(f"bench changelog {name}")
    started = time.time()
    return RunningJob(cluster, handle, keys,
                      {te["resource_id"]: started for te in cluster.status()["taskexecutors"]})


# -- materializations, from the TaskExecutors' metrics ---------------------------------------


def wait_log_applied(job_id: str, killed_at: float, timeout: float = 300.0) -> float | None:
    """Seconds from the SIGKILL until every keyed backend of the job applied the log its
    restore replayed (``restoredLogRowsPending`` 0 on every TaskExecutor); None without
    the changelog (no such metric)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pending: list[float] = []
        for info in ClusterDirectory(CLUSTER_DIR).taskexecutors().values():
            with contextlib.suppress(OSError):
                pending += [s.value for s in scrape_metrics(info.metrics_url, PENDING_METRIC,
                                                            timeout=2)
                            if s.name == PENDING_METRIC and s.labels.get("job_id") == job_id]
        if not pending:
            return None
        if not any(pending):
            return round(time.time() - killed_at, 3)
        time.sleep(0.1)
    msg = f"the restored log was not applied within {timeout:.0f} s"
    raise RuntimeError(msg)


class MaterializationWatch:
    """Reads every TaskExecutor's materialization metrics of one job every ``SCRAPE_S`` in
    a background thread. ``completed`` maps a keyed backend to (seen at, its count of
    completed materializations, the last one's duration in s) whenever the count grew;
    a materialization ran from about ``seen - duration`` to ``seen`` (within SCRAPE_S)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.completed: dict[str, list[tuple[float, int, float]]] = {}
        self._counts: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="materialization-watch",
                                        daemon=True)

    def _scrape(self) -> None:
        now = time.time()
        for info in ClusterDirectory(CLUSTER_DIR).taskexecutors().values():
            try:
                samples = scrape_metrics(info.metrics_url, "weir_changelog_", timeout=2)
            except OSError:
                continue  # a TaskExecutor that is gone or not up yet
            durations = {s.labels.get("backend", ""): s.value / 1000 for s in samples
                         if s.name == MATERIALIZE_MS_METRIC
                         and s.labels.get("job_id") == self.job_id}
            for s in samples:
                if s.name != MATERIALIZED_METRIC or s.labels.get("job_id") != self.job_id:
                    continue
                backend, count = s.labels.get("backend", ""), int(s.value)
                if count > self._counts.get(backend, 0):
                    self._counts[backend] = count
                    self.completed.setdefault(backend, []).append(
                        (now, count, durations.get(backend, 0.0)))

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_S):
            self._scrape()

    def __enter__(self) -> MaterializationWatch:
        self._scrape()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def intervals(self, since: float) -> list[tuple[float, float]]:
        """(start, end) of the materializations that completed after ``since``."""
        return sorted((seen - duration, seen) for events in self.completed.values()
                      for seen, _, duration in events if seen > since)

    def started_after(self, since: float) -> dict[str, bool]:
        """Per keyed backend seen: whether a materialization that started after ``since``
        completed."""
        return {backend: any(seen - duration > since for seen, _, duration in events)
                for backend, events in self.completed.items()}


# -- one configuration ---------------------------------------------------------------------


def profiled(label: str, enabled: bool) -> Profiler | None:
    """py-spy on every TaskExecutor of the cluster, or None when not ``enabled``."""
    if not enabled:
        return None
    pids = [i.pid for i in ClusterDirectory(CLUSTER_DIR).taskexecutors().values()]
    return Profiler(pids, PROFILE_DIR, f"changelog-{label}", rate_hz=PROFILE_HZ)


def profile_summary(profiler: Profiler) -> dict[str, Any]:
    return {"top": summarise_profile(profiler.outputs, rate_hz=PROFILE_HZ),
            "categories": categorise_profile(profiler.outputs, PROFILE_CATEGORIES,
                                             PROFILE_THREADS)}


def history(job: RunningJob) -> list[dict[str, Any]]:
    """``weir checkpoints JOB --json --tasks``, read over RPC."""
    from weir.cli.show import checkpoints_json

    return checkpoints_json(job.handle.client.checkpoints(job.job_id), tasks=True)


def phases(row: dict[str, Any]) -> dict[str, int]:
    """Where a checkpoint's time went: the largest of each phase over its keyed subtasks
    (from ``weir checkpoints --tasks``): the barrier's wait to reach the task, alignment,
    the synchronous and the asynchronous part (for the changelog: the log's tail upload)."""
    subtasks = [s for s in row.get("subtasks", []) if s["task"].startswith("Keyed")]
    return {f"keyed_{key}": max((s[key] for s in subtasks), default=0)
            for key in ("start_delay_ms", "alignment_ms", "sync_ms", "async_ms")}


def measure_window(job: RunningJob, changelog: bool, args: argparse.Namespace,
                   built: dict[str, Any]) -> dict[str, Any]:
    """Settle, then collect ``args.checkpoints`` completed checkpoints; the window's
    measurements and its rows."""
    built_at = time.time()
    keyed_in = sum(t["records_in"] for t in job.keyed_tasks(job.status()))
    with MaterializationWatch(job.job_id) as watch:
        if changelog:
            waited = time.monotonic()
            poll("a materialization of every keyed backend after the build",
                 lambda: (done := watch.started_after(built_at)) and len(done) >= PARALLELISM
                 and all(done.values()), args.materialize * 3 + 600, interval=1.0)
            print(f"  materialized after the build ({time.monotonic() - waited:.0f} s)",
                  flush=True)
        else:
            time.sleep(SETTLE_S)  # nothing to wait for: a fixed settling time
        start_ms = time.time() * 1000
        start_in = sum(t["records_in"] for t in job.keyed_tasks(job.status()))
        started = time.time()
        rows: dict[int, dict[str, Any]] = {}

        def window() -> list[dict[str, Any]] | None:
            for row in history(job):
                if row["trigger_timestamp_ms"] >= start_ms and row["status"] != "IN_PROGRESS":
                    rows[row["id"]] = row
            done = sorted((r for r in rows.values() if r["status"] == "COMPLETED"),
                          key=lambda r: r["id"])
            status = job.status()
            if status["restarts"]:
                msg = f"the job restarted during the window: {status['failure']}"
                raise RuntimeError(msg)
            return done[:args.checkpoints] if len(done) >= args.checkpoints else None

        profiler = profiled(f"window-{'on' if changelog else 'off'}", args.profile)
        with profiler or contextlib.nullcontext():
            completed = poll(f"{args.checkpoints} checkpoints", window,
                             args.checkpoints * 20 + 300, interval=HISTORY_S)
        ended = time.time()
        end_in = sum(t["records_in"] for t in job.keyed_tasks(job.status()))
    last_ms = completed[-1]["trigger_timestamp_ms"] + completed[-1]["duration_ms"]
    failed = [r for r in rows.values() if r["status"] == "FAILED"
              and r["trigger_timestamp_ms"] <= last_ms]
    materializations = [m for m in watch.intervals(started) if m[1] <= last_ms / 1000 + SCRAPE_S]
    during = [r for r in completed if any(
        start <= (r["trigger_timestamp_ms"] + r["duration_ms"]) / 1000 and
        r["trigger_timestamp_ms"] / 1000 <= end for start, end in materializations)]
    durations = [r["duration_ms"] / 1000 for r in completed]
    uploads = [r["checkpointed_size_bytes"] for r in completed]
    latest = completed[-1]
    return {
        "profile": profile_summary(profiler) if profiler is not None else None,
        "checkpoints": len(completed), "failed_checkpoints": len(failed),
        "window_s": round(ended - started, 1),
        "update_rate_asked": round(job.keys * args.update_percent / 100),
        "update_rate": round((end_in - start_in) / (ended - started)),
        "build_update_rate": round(keyed_in / job.build_s) if job.build_s else None,
        "p50_s": round(percentile(durations, 0.5), 3),
        "p99_s": round(percentile(durations, 0.99), 3),
        "max_s": round(max(durations), 3),
        "upload_median_bytes": int(statistics.median(uploads)),
        "upload_p99_bytes": int(percentile([float(u) for u in uploads], 0.99)),
        "upload_max_bytes": max(uploads),
        "state_bytes": latest["state_size_bytes"],
        "materialized_bytes": latest["materialized_size_bytes"],
        "log_bytes": latest["changelog_size_bytes"],
        "log_median_bytes": int(statistics.median(r["changelog_size_bytes"]
                                                  for r in completed)),
        "materializations": len(materializations),
        "materialization_s": [round(end - start, 2) for start, end in materializations],
        "checkpoints_during_materialization": len(during),
        "during_materialization_s": [round(r["duration_ms"] / 1000, 3) for r in during],
        "built_checkpoint": {"id": built["id"], "state_bytes": built["state_size_bytes"],
                             "duration_s": round(built["duration_ms"] / 1000, 2)},
        "slowest_subtask_phases_ms": phases(max(completed, key=lambda r: r["duration_ms"])),
        "rows": [{**{k: r[k] for k in ("id", "trigger_timestamp_ms", "duration_ms",
                                       "state_size_bytes", "checkpointed_size_bytes",
                                       "changelog_size_bytes")}, **phases(r)}
                 for r in completed],
    }


def run_config(cluster: RecoveryCluster, name: str, args: argparse.Namespace
               ) -> dict[str, Any]:
    changelog = name.startswith("on")
    config = job_config(changelog, args, unaligned=name.endswith("unaligned"))
    print(f"changelog {name}: writing {args.state_mb} MB of state, then "
          f"{args.update_percent:g}% of the keys per second", flush=True)
    job = submit(cluster, name, config, args.state_mb, args.update_percent)
    try:
        built = wait_state_built(job, args.state_mb)
        result = measure_window(job, changelog, args, built)
        result["build_s"] = job.build_s
        print(f"  window: {result['checkpoints']} checkpoints in {result['window_s']} s, "
              f"p50 {result['p50_s']} s, p99 {result['p99_s']} s; upload median "
              f"{result['upload_median_bytes'] / 2**20:.1f} MiB; state "
              f"{result['state_bytes'] / 2**20:.0f} MiB; {result['update_rate']:,} "
              f"updates/s", flush=True)
        runs = []
        latest = result["rows"][-1]["id"]
        for run in range(args.runs):
            latest = wait_settled(job, latest)["id"]
            profiler = profiled(f"recovery-{name}-{run + 1}", args.profile)
            with profiler or contextlib.nullcontext():
                outcome = recover(job, "d", run)
            outcome["log_applied_s"] = wait_log_applied(job.job_id, outcome["killed_at"])
            if profiler is not None:
                outcome["profile"] = profile_summary(profiler)
            rows = {r["id"]: r for r in history(job)}
            restored = rows.get(outcome["restored_checkpoint"], {})
            outcome["restored_state_bytes"] = restored.get("state_size_bytes")
            outcome["restored_log_bytes"] = restored.get("changelog_size_bytes")
            latest = outcome["restored_checkpoint"]
            runs.append(outcome)
            applied = outcome["log_applied_s"]
            print(f"  recovery {run + 1}/{args.runs}: {outcome['recovery_s']} s "
                  f"(first subtask {outcome['first_subtask_s']} s"
                  f"{f'; restored log applied after {applied} s' if applied else ''}); "
                  f"downloaded {outcome['remote_bytes'] / 2**20:.0f} MiB", flush=True)
        result["recovery_s"] = round(median([r["recovery_s"] for r in runs]), 3)
        applied = [r["log_applied_s"] for r in runs if r["log_applied_s"] is not None]
        result["log_applied_s"] = round(median(applied), 3) if applied else None
        result["recovery_remote_bytes"] = int(median([r["remote_bytes"] for r in runs]))
        result["recoveries"] = runs
        result["config"] = config
        return result
    finally:
        end_job(job)


# -- in process, without a cluster -----------------------------------------------------------

ALL = KeyGroupRange(0, 127)


def _plain(kind: str, root: Path) -> KeyedStateBackend:
    if kind == "hashmap":
        return HeapKeyedStateBackend(128, ALL)
    return RocksDBKeyedStateBackend(128, ALL, tempfile.mkdtemp(dir=root))


def in_process(kind: str, changelog: bool, keys: int, updates: int, checkpoints: int,
               root: Path) -> dict[str, Any]:
    """One backend in this process: ``keys`` values, ``updates`` random ones changed
    between checkpoints to a local directory; the changelog materializes once halfway."""
    storage = create_storage(str(root / "checkpoints"))
    log = ChangelogStorage(storage, "job/changelog", ChangelogStorageOptions())
    made: list[KeyedStateBackend] = []

    def backend() -> KeyedStateBackend:
        plain = _plain(kind, root)
        made.append(plain)
        if not changelog:
            return plain
        return ChangelogKeyedStateBackend(plain, log.create_writer("op"), storage, "job", "op",
                                          materialize_interval=0)
    state = backend()
    value = state.get_state(ValueStateDescriptor("v"))
    payload = "x" * 90
    for k in range(keys):
        state.set_current_key(k)
        value.update((k, payload))
    rng = random.Random(7)
    uploads, sync_ms, async_ms = [], [], []
    handle = None
    for n in range(1, checkpoints + 1):
        for k in rng.sample(range(keys), updates):
            state.set_current_key(k)
            value.update((k + n, payload))
        if changelog and n == checkpoints // 2:
            assert isinstance(state, ChangelogKeyedStateBackend)
            state.materialize().result()
        began = time.perf_counter()
        running = state.snapshot_to(CheckpointId(n), SnapshotLocation.for_checkpoint(
            storage, "job", CheckpointId(n), "op"))
        middle = time.perf_counter()
        handle = running.run()
        done = time.perf_counter()
        state.notify_checkpoint_complete(CheckpointId(n))
        sync_ms.append((middle - began) * 1000)
        async_ms.append((done - middle) * 1000)
        if n > 1:  # the first checkpoint uploads everything in every configuration
            uploads.append(handle.checkpointed_size)
    assert handle is not None
    fresh = backend()
    began = time.perf_counter()
    restore(fresh, [handle], storage)
    restore_s = time.perf_counter() - began
    for b in made:
        b.dispose()
    log.close()
    return {"backend": kind, "changelog": changelog,
            "checkpointed_median_bytes": int(statistics.median(uploads)),
            "checkpointed_max_bytes": max(uploads), "state_size_bytes": handle.state_size,
            "sync_median_ms": round(statistics.median(sync_ms), 1),
            "async_median_ms": round(statistics.median(async_ms), 1),
            "restore_s": round(restore_s, 2)}


def in_process_section(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="weir-bench-changelog-") as scratch:
        for kind in ("hashmap", "rocksdb"):
            for changelog in (False, True):
                root = Path(scratch) / f"{kind}-{changelog}"
                root.mkdir()
                rows.append(in_process(kind, changelog, args.keys, args.updates,
                                       args.in_process_checkpoints, root))
    return rows


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="200 MB of state, 20 checkpoints, 1 recovery per configuration")
    parser.add_argument("--state-mb", type=int,
                        help="RocksDB state to build (default 1024; quick 200)")
    parser.add_argument("--update-percent", type=float, default=1.0,
                        help="keys updated per second, in %% of all keys (default 1)")
    parser.add_argument("--checkpoints", type=int,
                        help="completed checkpoints in the window (default 60; quick 20)")
    parser.add_argument("--materialize", type=float,
                        help="state.changelog.periodic-materialize.interval in s "
                             "(default 30; quick 20)")
    parser.add_argument("--upload-timeout", type=float, default=UPLOAD_TIMEOUT_S,
                        help="state.changelog.dstl.dfs.upload.timeout in s (default 0: the "
                             "engine's default, 1 s)")
    parser.add_argument("--runs", type=int,
                        help="recoveries per configuration (default 2; quick 1)")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="which of off,on,on-unaligned to run (default all)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="one more option for every job (repeatable), e.g. "
                             "taskmanager.network.memory.buffer-debloat.enabled=true")
    parser.add_argument("--skip-in-process", action="store_true",
                        help="leave out the in-process section")
    parser.add_argument("--keys", type=int, default=200_000,
                        help="in-process section: keys (default 200 000; quick 20 000)")
    parser.add_argument("--updates", type=int, default=2_000,
                        help="in-process section: keys changed per checkpoint "
                             "(default 2 000; quick 200)")
    parser.add_argument("--in-process-checkpoints", type=int, default=10,
                        help="in-process section: checkpoints per backend (default 10)")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy the TaskExecutors during the windows and recoveries; "
                             f"raw output in {PROFILE_DIR.relative_to(BUILD_DIR.parent)}")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the cluster directory's S3 data and working directories")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "changelog.json",
                        help="where the JSON results go")
    args = parser.parse_args(argv)
    args.state_mb = args.state_mb or (200 if args.quick else 1024)
    args.checkpoints = args.checkpoints or (20 if args.quick else 60)
    args.materialize = args.materialize or (20.0 if args.quick else 30.0)
    args.runs = args.runs or (1 if args.quick else 2)
    if args.quick:
        args.keys, args.updates = 20_000, 200
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = set(args.configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configuration(s) {', '.join(sorted(unknown))}: "
                     "choose from off,on,on-unaligned")
    if args.update_percent <= 0:
        parser.error("--update-percent must be above 0, e.g. 1")
    args.extra = {}
    for pair in args.set:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            parser.error(f"--set {pair!r}: expected KEY=VALUE, e.g. "
                         "execution.checkpointing.unaligned.enabled=true")
        args.extra[key.strip()] = value.strip()
    return args


def targets(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    on, off = results.get("on"), results.get("off")
    found: dict[str, dict[str, Any]] = {}
    if on is not None:
        share = on["upload_median_bytes"] / on["state_bytes"]
        found["changelog_p99_s"] = {"value": on["p99_s"], "target": f"<= {TARGET_P99_S}",
                                    "pass": on["p99_s"] <= TARGET_P99_S}
        found["changelog_upload_share"] = {"value": round(share, 4),
                                           "target": f"<= {TARGET_UPLOAD_SHARE}",
                                           "pass": share <= TARGET_UPLOAD_SHARE}
    unaligned = results.get("on-unaligned")
    if unaligned is not None:
        found["changelog_unaligned_p99_s"] = {"value": unaligned["p99_s"],
                                              "target": f"<= {TARGET_P99_S}",
                                              "pass": unaligned["p99_s"] <= TARGET_P99_S}
    if on is not None and off is not None:
        recovery_ratio = on["recovery_s"] / off["recovery_s"]
        size_ratio = on["state_bytes"] / off["state_bytes"]
        found["recovery_ratio"] = {"value": round(recovery_ratio, 2),
                                   "target": f"<= {TARGET_RECOVERY_RATIO}",
                                   "pass": recovery_ratio <= TARGET_RECOVERY_RATIO}
        found["size_ratio"] = {"value": round(size_ratio, 2),
                               "target": f"<= {TARGET_SIZE_RATIO}",
                               "pass": size_ratio <= TARGET_SIZE_RATIO}
    return found


def print_report(result: dict[str, Any]) -> None:
    def mib(value: float | None) -> str:
        return "-" if value is None else f"{value / 2**20:,.1f}"

    rows = []
    for name in CONFIGS:
        r = result["configs"].get(name)
        if r is None:
            continue
        rows.append([name, f"{r['update_rate']:,}", r["checkpoints"], r["p50_s"], r["p99_s"],
                     r["max_s"], mib(r["upload_median_bytes"]), mib(r["upload_p99_bytes"]),
                     mib(r["state_bytes"]),
                     f"{mib(r['materialized_bytes'])} + {mib(r['log_bytes'])}"
                     if name != "off" else "-",
                     r["materializations"], r["recovery_s"],
                     mib(median([x["restored_log_bytes"] or 0 for x in r["recoveries"]]))
                     if name != "off" else "-", r.get("log_applied_s") or "-"])
    print(format_table(["changelog", "updates/s", "checkpoints", "p50 s", "p99 s", "max s",
                        "upload med MiB", "upload p99 MiB", "state MiB",
                        "materialized + log MiB", "materializations", "recovery s",
                        "log replayed MiB", "log applied s"], rows))
    on = result["configs"].get("on")
    if on is not None and on["checkpoints_during_materialization"]:
        print(f"checkpoints during a materialization: "
              f"{on['checkpoints_during_materialization']}, durations "
              f"{on['during_materialization_s']} s; materializations took "
              f"{on['materialization_s']} s")
    print_targets(result["targets"])
    if result.get("in_process"):
        print("\nin process (local directory, no cluster):")
        print(format_table(
            ["backend", "changelog", "upload median", "upload max", "state", "sync ms",
             "async ms", "restore s"],
            [[r["backend"], r["changelog"], f"{r['checkpointed_median_bytes']:,}",
              f"{r['checkpointed_max_bytes']:,}", f"{r['state_size_bytes']:,}",
              r["sync_median_ms"], r["async_median_ms"], r["restore_s"]]
             for r in result["in_process"]]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    begun = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "changelog", "quick": args.quick, "machine": machine_info(),
        "engine": engine_revision(),
        "storage": "s3 (embedded SeaweedFS, weir cluster start --with-s3)",
        "state_mb_target": args.state_mb, "update_percent": args.update_percent,
        "checkpoint_interval": CHECKPOINT_INTERVAL, "materialize_s": args.materialize,
        "configs": {}}
    cluster = RecoveryCluster(CLUSTER_DIR, TASK_EXECUTORS, 1,
                              flags=["--with-s3", "--restart-taskexecutors"])
    try:
        with cluster:
            for name in args.configs:
                result["configs"][name] = run_config(cluster, name, args)
    finally:
        shutil.rmtree(MARKER_DIR, ignore_errors=True)
        if not args.keep_data:
            remove_data(CLUSTER_DIR)
    result["targets"] = targets(result["configs"])
    if not args.skip_in_process:
        result["in_process"] = in_process_section(args)
    result["seconds"] = round(time.perf_counter() - begun, 1)
    write_json(args.output, result)
    print()
    print_report(result)
    print(f"{result['seconds']} s in all; results in {args.output}; "
          f"logs in {CLUSTER_DIR / 'log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
