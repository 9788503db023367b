"""Checkpoints: how long they take under backpressure, what they cost a running job, and
how fast a job recovers.

What is measured
----------------
(a) **Backpressure.** Jobs nobody tuned, each at defaults (no batch size, no buffer
setting changed), parallelism 2 on a local cluster of 2 TaskExecutors with 2 slots each, a
fast sequence source and a keyed stage far slower than the source, so that every network
queue in front of it is full:

* ``slow-map``: records of an int and a 64-character string; the keyed stage takes ~1 ms a
  record (``time.sleep``);
* ``fan-out``: a ``flat_map`` emits 50 records of ~300 bytes for each number; the keyed
  stage takes ~0.2 ms a record;
* ``big-records``: records of 1 MiB; the keyed stage takes ~10 ms a record.

Checkpoints every second, for ``--bp-seconds`` per mode, in three modes — aligned,
unaligned, and aligned with a 1 s aligned-checkpoint timeout; ``slow-map`` also on a cluster
with buffer debloating (a TaskExecutor setting). The first completed checkpoint of a run is
left out (queues may not be full yet); of the others, the duration (trigger to completion)
p50 and p99, the median of the persisted in-flight bytes per checkpoint beside the bound
the subtasks report (``weir checkpoints --tasks``, summed over the job), and the largest
share of its bound any subtask persisted are reported.

(b) **Overhead.** The vectorised and per-record word counts of ``bench_wordcount.py`` (same
input, same cluster, parallelism 2) without checkpointing and with a checkpoint every
second, in ``--pairs`` alternating pairs (off, on; then on, off; and so on, so that a drift
of the machine's load hits both sides alike), per state backend (``--backends``: hashmap,
rocksdb) and checkpoint storage (``--storages``: the cluster's ``file://`` directory, and
``s3`` — the same on a cluster started ``--with-s3``, checkpointing to its embedded S3
server). A pair's overhead is with / without - 1 (0.08 = 8% slower); the median over the
pairs is reported (and, for comparison, median(with) / median(without) - 1). A bounded job
with checkpointing also waits for its final checkpoint before it ends (FLIP-147): that is
part of the cost measured. The CPU time of the cluster's processes in each run is
reported the same way (the CPU overhead is less sensitive to other load on the machine).
For every checkpointed run, the completed and failed checkpoints are counted and the
slowest subtask's synchronous and asynchronous durations noted.
``--profile`` adds one checkpointed run per form, backend and storage under py-spy
(``--gil``: only the thread holding each TaskExecutor's GIL is sampled, so the samples say
which thread the interpreter served) with the CPU time of every thread from ``/proc``.

(c) **Recovery.** A keyed job builds ``--state-mb`` of RocksDB state (``KEYS`` keys with a
value of ``VALUE_BYTES`` each; the keyed function writes it once per key, then the source
slows down), checkpoints it (incremental, to ``file://``), then one TaskExecutor is
SIGKILLed (restart delay 0). Recovery time = from the SIGKILL to the first record processed
by the restarted keyed task (it writes a timestamp on its first record): failure
detection, cancellation, redeployment, state download and RocksDB restore, and the first
record. Spare TaskExecutors provide the slots.

Results: a table on stdout and ``benchmarks/results/checkpoint.json`` (keys
``unaligned_p99_s``, ``aligned_p50_s``, ``unaligned_p50_s``, ``aligned_unaligned_p50_ratio``,
``checkpoint_overhead_vectorized``, ``checkpoint_overhead_per_record`` (hashmap on
``file://``), ``overhead``: one entry per form, backend and storage with the per-run times,
``recovery_s``, the per-mode table). Targets: unaligned p99 <= 1 s for every shape, each
subtask's persisted in-flight data within its bound; aligned/unaligned p50 ratio >= 10 on
``slow-map``; overhead <= 5%.

Usage::

    python benchmarks/bench_checkpoint.py --quick      # under 3 minutes
    python benchmarks/bench_checkpoint.py              # 100 MB of state, longer runs
    python benchmarks/bench_checkpoint.py --skip-backpressure --skip-recovery \
        --backends hashmap --storages file --profile    # the overhead alone, profiled
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_wordcount import PARALLELISM, ensure_dataset, run_form
from common import (
    BUILD_DIR,
    RESULTS_DIR,
    LocalCluster,
    Profiler,
    ThreadCpuSampler,
    categorise_profile,
    engine_revision,
    format_table,
    machine_info,
    median,
    profile_thread_names,
    write_json,
)

from weir import DiscardingSink, KeyedProcessFunction, ValueStateDescriptor

CLUSTER_DIR = BUILD_DIR / "bench-cluster-checkpoint"
MARKER_DIR = BUILD_DIR / "bench-checkpoint-markers"
VALUE_BYTES = 100
MODES = {
    "aligned": {},
    "unaligned": {"execution.checkpointing.unaligned.enabled": "true"},
    "aligned-timeout": {"execution.checkpointing.unaligned.enabled": "true",
                        "execution.checkpointing.aligned-checkpoint-timeout": "1 s"},
}
DEBLOAT = "taskmanager.network.memory.buffer-debloat.enabled=true"
SHAPES = ("slow-map", "fan-out", "big-records")

# -- (a) backpressure -------------------------------------------------------------------------


#: Shape -> (record of number n, seconds a record takes in the keyed stage). Module-level
#: functions, pickled by value with the job.
SLOW_S = {"slow-map": 0.001, "fan-out": 0.0002, "big-records": 0.01}
FAN_OUT = 50
BIG_BYTES = 1 << 20


def slow_map_record(n: int) -> tuple[int, str]:
    return (n % 7, "x" * 64)


def fan_out_records(n: int) -> list[tuple[int, str]]:
    return [((n * FAN_OUT + i) % 7, "y" * 300) for i in range(FAN_OUT)]


def big_record(n: int) -> tuple[int, bytes]:
    return (n % 7, bytes([n % 256]) * BIG_BYTES)


class Slow:
    """The keyed stage: ``seconds`` a record."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, record: Any) -> Any:
        time.sleep(self.seconds)
        return record


def key_of(record: tuple[int, Any]) -> int:
    return record[0]


def weir_cli(cluster: LocalCluster, *args: str) -> str:
    """The output of ``weir COMMAND --dir DIR ARGS``; raises ClusterError if it fails."""
    return cluster.weir(*args, timeout=60, check=True).stdout


def checkpoints(cluster: LocalCluster, job_id: str, tasks: bool = False) -> list[dict[str, Any]]:
    """``weir checkpoints JOB --json`` (with ``tasks``: each subtask's measurements too)."""
    args = ["checkpoints", job_id, "--json", *(["--tasks"] if tasks else [])]
    return json.loads(weir_cli(cluster, *args))  # type: ignore[no-any-return]


def backpressured_run(cluster: LocalCluster, shape: str, mode: str,
                      seconds: float) -> list[dict[str, Any]]:
    env = cluster.environment({"execution.checkpointing.interval": "1 s", **MODES[mode]})
    env.set_parallelism(PARALLELISM)
    numbers = env.from_sequence(0, 10**12)
    if shape == "slow-map":
        records = numbers.map(slow_map_record)
    elif shape == "fan-out":
        records = numbers.flat_map(fan_out_records)
    else:
        records = numbers.map(big_record)
    records.key_by(key_of).map(Slow(SLOW_S[shape])).sink_to(DiscardingSink())
    job = env.execute_async(f"bench checkpoint backpressure {shape} {mode}")
    try:
        time.sleep(seconds)
        rows = checkpoints(cluster, job.job_id, tasks=True)
    finally:
        job.close()
    completed = [r for r in rows if r["status"] == "COMPLETED"]
    return completed[1:] if len(completed) > 1 else completed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    durations = [r["duration_ms"] / 1000 for r in rows]
    shares = [s["persisted_bytes"] / s["in_flight_bound_bytes"]
              for r in rows for s in r.get("subtasks", []) if s["in_flight_bound_bytes"]]
    return {"checkpoints": len(rows), "p50_s": round(percentile(durations, 0.5), 3),
            "p99_s": round(percentile(durations, 0.99), 3),
            "persisted_bytes": int(statistics.median(r["persisted_bytes"] for r in rows))
            if rows else 0,
            "bound_bytes": int(statistics.median(r["in_flight_bound_bytes"] for r in rows))
            if rows else 0,
            "max_subtask_share_of_bound": round(max(shares), 3) if shares else None,
            "unaligned": sum(r["unaligned"] for r in rows)}


# -- (b) overhead -------------------------------------------------------------------------------

OVERHEAD_FORMS = ("vectorized", "per_record")
BACKENDS = ("hashmap", "rocksdb")
STORAGES = ("file", "s3")
PROFILE_DIR = BUILD_DIR / "bench-profiles"

#: Threads of a TaskExecutor, by name (task threads are ``task <vertex> (i/n)``).
THREAD_GROUPS = [
    ("keyed task (count / reduce)", ("task Keyed",)),
    ("source task (read, split, hash)", ("task Source",)),
    # With the threads they start: RocksDB's file transfers, boto3's (unnamed) S3 transfers.
    ("checkpoint upload threads", ("checkpoint-upload", "state-transfer",
                                   "ThreadPoolExecutor")),
    ("network (data server, data client)", ("data-server", "data-client", "channel-")),
    ("gRPC, heartbeats, metrics", ("grpc", "heartbeat", "metrics", "process_request_thread")),
]

#: Kinds of work (the innermost frame that matches decides; see categorise_profile).
CATEGORIES = [
    ("checkpoint: synchronous part", ("take_snapshot (", "snapshot_state (", "snapshot_to (",
                                      "Strategy.snapshot (", "Backend.snapshot (",
                                      "Backend.flush (", "Backend.checkpoint (",
                                      "sst_key_groups (")),
    ("checkpoint: write / upload (files, S3, checksums)",
     ("atomic_local_write", "write_file (", "StorageAccess.", "upload", "put_object", "boto",
      "s3transfer", "Checksum.", "checksum_of", "crc32", "fsync", "run_all (")),
    ("checkpoint: local copies", ("keep_local", "record_local_copy", "move_into",
                                  "local_recovery")),
    ("checkpoint: encode keyed state (layout, pickle, segments)",
     ("_Layout.", "_rows (state/heap", "HeapSnapshot.", "encode_segment", "write_segments",
      "_checking (", "RocksDBSnapshot.")),
    ("checkpoint: other (handles, acknowledge)", ("_finish (", "acknowledge", "AsyncSnapshot.")),
    ("keyed state reads and writes", ("KeyedStateBackend.", "_Handle.", "ValueState.",
                                      "ReducingState.", "state/backend.py")),
    ("aggregation (numpy, pyarrow compute)", ("running_aggregate", "VectorizedAggregate",
                                              "numpy", "pyarrow/compute")),
    ("user functions (split, key, reduce)", ("split_line", "first (", "add_counts",
                                             "ReduceOperator", "FlatMap")),
    ("key groups (murmur hash)", ("key_group", "murmur", "operators/keys.py")),
    ("records, network, task loop", ("shuffle/", "record_writer", "records.py",
                                     "operator_chain", "taskexecutor/task.py", "file_system")),
]


def overhead_cell(cluster: LocalCluster, form: str, root: Path, backend: str, pairs: int,
                  label: str) -> dict[str, Any]:
    """``pairs`` alternating runs of ``form`` without and with 1 s checkpoints.

    Besides the wall time, the CPU time the cluster's processes used in each run: on a
    shared machine it separates "checkpoints cost work" from "the run waited"."""
    off_config = {"state.backend.type": backend}
    on_config = {**off_config, "execution.checkpointing.interval": "1 s"}
    run_form(cluster, form, root, on_config)  # warm-up (and the backend's first use)
    wall: dict[str, list[float]] = {"off": [], "1s": []}
    cpu: dict[str, list[float]] = {"off": [], "1s": []}
    jobmaster_cpu: dict[str, list[float]] = {"off": [], "1s": []}
    jobmaster = cluster.jobmaster_pid()
    stats: list[dict[str, Any]] = []
    for pair in range(pairs):
        order = [("off", off_config), ("1s", on_config)]
        if pair % 2:
            order.reverse()
        for side, config in order:
            timing = run_form(cluster, form, root, config)
            wall[side].append(round(timing.wall_s, 3))
            cpu[side].append(round(sum(timing.cpu_s.values()), 2))
            jobmaster_cpu[side].append(round(timing.cpu_s.get(jobmaster, 0.0), 2))
            note = ""
            if side == "1s":
                stats.append(checkpoint_stats(checkpoints(cluster, timing.job_id, tasks=True)))
                note = (f"  ({stats[-1]['completed']} checkpoints, {stats[-1]['failed']} failed; "
                        f"sync p50 {stats[-1]['sync_ms_p50']} ms, async p50 "
                        f"{stats[-1]['async_ms_p50']} ms)")
            print(f"  {label} pair {pair + 1}/{pairs}: {form:10} checkpoints {side:3} "
                  f"{timing.wall_s:6.2f} s, {cpu[side][-1]:5.1f} CPU-s{note}", flush=True)
    ratios = [round(b / a - 1, 4) for a, b in zip(wall["off"], wall["1s"], strict=True)]
    cpu_ratios = [round(b / a - 1, 4) for a, b in zip(cpu["off"], cpu["1s"], strict=True)]
    return {"form": form, "backend": backend, "storage": label.split("/")[0],
            "off_s": wall["off"], "on_s": wall["1s"], "pair_overhead": ratios,
            "overhead": round(median(ratios), 4),
            "overhead_of_medians": round(median(wall["1s"]) / median(wall["off"]) - 1, 4),
            "off_cpu_s": cpu["off"], "on_cpu_s": cpu["1s"],
            "cpu_overhead": round(median(cpu_ratios), 4),
            "off_jobmaster_cpu_s": jobmaster_cpu["off"], "on_jobmaster_cpu_s": jobmaster_cpu["1s"],
            "checkpoints": [s["completed"] for s in stats],
            "failed": [s["failed"] for s in stats],
            "failure_reasons": sorted({r for s in stats for r in s["failure_reasons"]}),
            "sync_ms_p50": median([s["sync_ms_p50"] for s in stats]),
            "async_ms_p50": median([s["async_ms_p50"] for s in stats]),
            "state_bytes": max((s["state_bytes"] for s in stats), default=0)}


def checkpoint_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Completed and failed checkpoints of a run, and the median over the completed ones
    of their slowest subtask's synchronous and asynchronous durations."""
    done = [r for r in rows if r["status"] == "COMPLETED"]
    failed = [r for r in rows if r["status"] == "FAILED"]
    sync = [max((s["sync_ms"] for s in r["subtasks"]), default=0) for r in done]
    asynchronous = [max((s["async_ms"] for s in r["subtasks"]), default=0) for r in done]
    return {"completed": len(done), "failed": len(failed),
            "failure_reasons": sorted({r["failure_reason"] or "?" for r in failed}),
            "sync_ms_p50": median(sync) if sync else 0,
            "async_ms_p50": median(asynchronous) if asynchronous else 0,
            "state_bytes": max((r["state_size_bytes"] for r in done), default=0)}


def profile_cell(cluster: LocalCluster, form: str, root: Path, backend: str,
                 label: str) -> dict[str, Any]:
    """A run without and one with 1 s checkpoints, each under py-spy (GIL holder only) and
    a per-thread CPU sampler."""
    pids = cluster.taskexecutor_pids()
    base = {"state.backend.type": backend}
    summary: dict[str, Any] = {"form": form, "backend": backend,
                               "storage": label.split("/")[0]}
    for side, config in (("off", base), ("1s", {**base,
                                                "execution.checkpointing.interval": "1 s"})):
        name = f"checkpoint-overhead-{form}-{backend}-{summary['storage']}-{side}-gil"
        with Profiler(pids, PROFILE_DIR, name, gil_only=True) as profiler, \
                ThreadCpuSampler(pids) as threads:
            timing = run_form(cluster, form, root, config)
        names: dict[tuple[int, int], str] = {}
        for pid, path in zip(pids, profiler.outputs, strict=True):
            names.update({(pid, tid): n for tid, n in profile_thread_names(path).items()})
        cpu: dict[str, float] = {}
        for key, (user, system) in threads.result.items():
            thread = names.get(key, "(not seen by py-spy)")
            group = next((g for g, needles in THREAD_GROUPS
                          if any(n in thread for n in needles)), "other threads")
            cpu[group] = round(cpu.get(group, 0.0) + user + system, 2)
        summary[side] = {"wall_s": round(timing.wall_s, 3), "thread_cpu_s": cpu,
                         "gil": categorise_profile(profiler.outputs, CATEGORIES, THREAD_GROUPS),
                         "raw_files": [str(p) for p in profiler.outputs]}
    return summary


def print_profile(summary: dict[str, Any]) -> None:
    print(f"\nprofile: {summary['form']}, {summary['backend']}, {summary['storage']}")
    for side in ("off", "1s"):
        run = summary[side]
        print(f"  checkpoints {side}: {run['wall_s']:.2f} s under py-spy; CPU seconds by "
              "thread group (/proc): " + ", ".join(
                  f"{g} {s:.2f}" for g, s in sorted(run["thread_cpu_s"].items(),
                                                    key=lambda kv: -kv[1])))
        print(f"    GIL held, by thread group and kind of work ({run['gil']['samples']:,} "
              "samples at 100 Hz, % of all):")
        for group in run["gil"]["groups"]:
            print(f"      {group['percent']:5.1f}%  {group['group']}")
            for cat in group["categories"][:7]:
                if cat["percent"] >= 0.3:
                    print(f"          {cat['percent']:5.1f}%  {cat['category']}")


def run_overhead(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every (storage, backend, form) cell, and the profiles if asked for."""
    root = ensure_dataset(args.words)
    cells: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    for storage in args.storages:
        flags = ["--with-s3"] if storage == "s3" else []
        with LocalCluster(CLUSTER_DIR, 2, 2, args.cluster_options, flags=flags) as cluster:
            for backend in args.backends:
                for form in args.forms:
                    label = f"{storage}/{backend}"
                    cells.append(overhead_cell(cluster, form, root, backend, args.pairs, label))
                    if args.profile:
                        profiles.append(profile_cell(cluster, form, root, backend, label))
                        print_profile(profiles[-1])
    return cells, profiles


def overhead_table(cells: list[dict[str, Any]]) -> str:
    return format_table(
        ["form", "backend", "storage", "without s", "with 1 s", "overhead", "CPU overhead",
         "checkpoints", "failed", "sync ms", "async ms", "state"],
        [[c["form"], c["backend"], c["storage"], f"{median(c['off_s']):.2f}",
          f"{median(c['on_s']):.2f}", f"{c['overhead']:+.1%}", f"{c['cpu_overhead']:+.1%}",
          f"{median(c['checkpoints']):.0f}", sum(c["failed"]), c["sync_ms_p50"],
          c["async_ms_p50"], f"{c['state_bytes'] / 2**20:.1f} MiB"] for c in cells])


# -- (c) recovery -------------------------------------------------------------------------------


class StoreValues(KeyedProcessFunction):
    """Writes a value per key; notes when its attempt processed its first record."""

    def __init__(self, marker_dir: str) -> None:
        self.marker_dir = marker_dir

    def open(self, runtime_context: Any) -> None:
        self.value = runtime_context.get_state(ValueStateDescriptor("value"))
        self.name = (f"{runtime_context.get_index_of_this_subtask()}-"
                     f"{runtime_context.get_attempt_number()}")
        self.first = True

    def process_element(self, value: int, ctx: Any) -> list[Any]:
        if self.first:
            self.first = False
            Path(self.marker_dir, self.name).write_text(repr(time.time()))
        # random bytes: RocksDB compresses its files, and repeated bytes would shrink
        # the 100 MB of state to a few
        self.value.update(os.urandom(VALUE_BYTES))
        return []


class Paced:
    """Fast for the first ``fast`` records of a subtask (filling the state), then slow."""

    def __init__(self, fast: int) -> None:
        self.fast = fast
        self.seen = 0

    def __call__(self, n: int) -> int:
        self.seen += 1
        if self.seen > self.fast:
            time.sleep(0.0005)
        return n


def recovery_run(cluster: LocalCluster, state_mb: int) -> dict[str, Any]:
    keys = state_mb * 1024 * 1024 // VALUE_BYTES
    for old in MARKER_DIR.glob("*"):
        old.unlink()
    MARKER_DIR.mkdir(parents=True, exist_ok=True)
    env = cluster.environment({
        "execution.checkpointing.interval": "2 s", "state.backend.type": "rocksdb",
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s",
        "restart-strategy.fixed-delay.attempts": "3", "pipeline.batch-size": 1000})
    env.set_parallelism(PARALLELISM)
    (env.from_sequence(0, 10**12).map(Paced(keys // PARALLELISM + 20_000))
        .key_by(lambda n: n % keys).process(StoreValues(str(MARKER_DIR)))
        .sink_to(DiscardingSink()))
    job = env.execute_async("bench checkpoint recovery")
    try:
        target = int(state_mb * 1024 * 1024 * 0.9)
        deadline = time.monotonic() + 600
        while True:
            rows = [r for r in checkpoints(cluster, job.job_id) if r["status"] == "COMPLETED"]
            if rows and rows[-1]["state_size_bytes"] >= target:
                break
            if time.monotonic() > deadline:
                msg = f"no checkpoint reached {target:,} bytes of state"
                raise RuntimeError(msg)
            time.sleep(0.5)
        state_bytes = rows[-1]["state_size_bytes"]
        status = json.loads(weir_cli(cluster, "status", job.job_id, "--json"))
        busy = sorted({t["taskexecutor"] for t in status["tasks"]
                       if t["taskexecutor"] and t["name"].startswith("Keyed")})
        pid = cluster.taskexecutor_pid(busy[0])
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 300
        while True:
            restarted = [float(p.read_text()) for p in MARKER_DIR.glob("*-1")
                         if p.read_text()]
            if restarted:
                break
            if time.monotonic() > deadline:
                msg = "the restarted job processed no record within 300 s"
                raise RuntimeError(msg)
            time.sleep(0.02)
    finally:
        job.close()
    return {"recovery_s": round(min(restarted) - killed_at, 3), "state_bytes": state_bytes,
            "keys": keys}


if __name__ != "__main__":
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="short runs, 20 MB of state, the overhead on hashmap and file:// only "
                        "(under 3 minutes)")
    parser.add_argument("--pairs", "--runs", dest="pairs", type=int,
                        help="alternating pairs (without, with checkpoints) per word-count "
                        "form, backend and storage (default 5; quick 2)")
    parser.add_argument("--backends", help="state backends of the overhead runs, comma-"
                        "separated (default hashmap,rocksdb; quick hashmap)")
    parser.add_argument("--storages", help="checkpoint storages of the overhead runs: file, "
                        "s3 (default file,s3; quick file)")
    parser.add_argument("--forms", help="word-count forms of the overhead runs, comma-"
                        "separated (default vectorized,per_record)")
    parser.add_argument("--profile", action="store_true", help="one more checkpointed run "
                        "per form, backend and storage under py-spy")
    parser.add_argument("--bp-seconds", type=float,
                        help="seconds per backpressure mode (default 25; quick 7)")
    parser.add_argument("--state-mb", type=int, help="RocksDB state for the recovery "
                        "measurement (default 100; quick 20)")
    parser.add_argument("--words", type=int, help="word-count input (default 10,000,000; "
                        "quick 2,000,000)")
    parser.add_argument("--skip-backpressure", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("-D", dest="cluster_options", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="configuration of every cluster's daemons (repeatable), e.g. "
                             "-D taskmanager.memory.segment-size=128kb")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "checkpoint.json",
                        help="where the JSON results go")
    args = parser.parse_args(argv)
    args.pairs = args.pairs or (2 if args.quick else 5)
    args.backends = (args.backends or ("hashmap" if args.quick else ",".join(BACKENDS))
                     ).split(",")
    args.storages = (args.storages or ("file" if args.quick else ",".join(STORAGES))
                     ).split(",")
    args.forms = (args.forms or ",".join(OVERHEAD_FORMS)).split(",")
    if not set(args.backends) <= set(BACKENDS) or not set(args.storages) <= set(STORAGES) or \
            not set(args.forms) <= set(OVERHEAD_FORMS) or args.pairs < 1:
        parser.error(f"--backends from {BACKENDS}, --storages from {STORAGES}, --forms from "
                     f"{OVERHEAD_FORMS}, --pairs >= 1")
    args.bp_seconds = args.bp_seconds or (7.0 if args.quick else 25.0)
    args.state_mb = args.state_mb or (20 if args.quick else 100)
    args.words = args.words or (2_000_000 if args.quick else 10_000_000)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    begun = time.perf_counter()
    result: dict[str, Any] = {"benchmark": "checkpoint", "quick": args.quick,
                              "machine": machine_info(), "engine": engine_revision()}
    table: dict[str, dict[str, Any]] = {}
    if not args.skip_backpressure:
        for debloat in (False, True):
            options = [*args.cluster_options, *([DEBLOAT] if debloat else [])]
            with LocalCluster(CLUSTER_DIR, 2, 2, options) as cluster:
                for shape in SHAPES if not debloat else ("slow-map",):
                    for mode in MODES:
                        name = f"{shape} {mode}{' + debloat' if debloat else ''}"
                        summary = summarize(backpressured_run(cluster, shape, mode,
                                                              args.bp_seconds))
                        table[name] = summary
                        print(f"  {name:36} {summary}", flush=True)
        result["backpressure"] = table
        result["aligned_p50_s"] = table["slow-map aligned"]["p50_s"]
        result["unaligned_p50_s"] = table["slow-map unaligned"]["p50_s"]
        result["unaligned_p99_s"] = max(table[f"{shape} unaligned"]["p99_s"]
                                        for shape in SHAPES)
        result["aligned_unaligned_p50_ratio"] = round(
            table["slow-map aligned"]["p50_s"] / max(table["slow-map unaligned"]["p50_s"],
                                                     1e-3), 1)
    cells: list[dict[str, Any]] = []
    if not args.skip_overhead:
        cells, profiles = run_overhead(args)
        result["overhead"] = cells
        if profiles:
            result["overhead_profiles"] = profiles
        for cell in cells:
            if (cell["backend"], cell["storage"]) == (args.backends[0], args.storages[0]):
                result[f"checkpoint_overhead_{cell['form']}"] = cell["overhead"]
    if not args.skip_recovery:
        with LocalCluster(CLUSTER_DIR, 4, 2, args.cluster_options) as cluster:
            recovery = recovery_run(cluster, args.state_mb)
        print(f"  recovery {recovery}", flush=True)
        result.update(recovery)
    result["seconds"] = round(time.perf_counter() - begun, 1)
    write_json(args.output, result)
    print()
    if table:
        print(format_table(["shape, mode", "checkpoints", "p50 s", "p99 s",
                            "persisted in-flight", "bound", "max subtask / its bound",
                            "unaligned"],
                           [[name, s["checkpoints"], s["p50_s"], s["p99_s"],
                             f"{s['persisted_bytes']:,} B", f"{s['bound_bytes']:,} B",
                             s["max_subtask_share_of_bound"], s["unaligned"]]
                            for name, s in table.items()]))
        print(f"slow-map aligned/unaligned p50 {result['aligned_unaligned_p50_ratio']}x "
              f"(target >= 10); unaligned p99 of every shape <= {result['unaligned_p99_s']} s "
              "(target <= 1); every subtask persists at most its bound (share <= 1)")
    if cells:
        print(f"\ncost of 1 s checkpoints ({args.words:,} words; without / with: medians "
              f"of the wall times; overhead: median over {args.pairs} alternating pairs of "
              "with / without - 1, of the wall time (target <= 5%) and of the cluster's CPU "
              "time; checkpoints: completed per run (median), failed: in all runs; sync, "
              "async: median over the checkpoints of the slowest subtask):")
        print(overhead_table(cells))
    if "recovery_s" in result:
        print(f"recovery with {result['state_bytes'] / 2**20:.0f} MiB of RocksDB state: "
              f"{result['recovery_s']} s from SIGKILL to the first record processed")
    print(f"{result['seconds']} s in all; results in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
