"""Checkpoints: how long they take under backpressure, what they cost a running job, and
how fast a job recovers.

What is measured
----------------
(a) **Backpressure.** A fast source (records of ~210 bytes, ``pipeline.batch-size`` 200)
feeds a keyed stage that takes ~1 ms per record (``time.sleep(0.001)``), parallelism 2 on a
local cluster of 2 TaskExecutors with 2 slots each; every network queue in front of the slow
stage is full. Checkpoints every second, for ``--bp-seconds`` per mode, in three modes —
aligned, unaligned, and aligned with a 1 s aligned-checkpoint timeout — each on a cluster
without and one with buffer debloating (a TaskExecutor setting). The first completed
checkpoint of a run is left out (queues may not be full yet); of the others, the duration
(trigger to completion) p50 and p99 and the median of the persisted in-flight bytes are
reported.

(b) **Overhead.** The vectorised and per-record word counts of ``bench_wordcount.py`` (same
input, same cluster, parallelism 2), without checkpointing and with a checkpoint every
second to the cluster's ``file://`` checkpoint directory, alternating, ``--runs`` each;
overhead = median(with) / median(without) - 1 (0.08 = 8% slower). A bounded job with
checkpointing also waits for its final checkpoint before it ends (FLIP-147): that is part
of the cost measured.

(c) **Recovery.** A keyed job builds ``--state-mb`` of RocksDB state (``KEYS`` keys with a
value of ``VALUE_BYTES`` each; the keyed function writes it once per key, then the source
slows down), checkpoints it (incremental, to ``file://``), then one TaskExecutor is
SIGKILLed (restart delay 0). Recovery time = from the SIGKILL to the first record processed
by the restarted keyed task (it writes a timestamp on its first record): failure
detection, cancellation, redeployment, state download and RocksDB restore, and the first
record. Spare TaskExecutors provide the slots.

Results: a table on stdout and ``benchmarks/results/checkpoint.json`` (keys
``unaligned_p99_s``, ``aligned_p50_s``, ``unaligned_p50_s``, ``aligned_unaligned_p50_ratio``,
``checkpoint_overhead_vectorized``, ``checkpoint_overhead_per_record``, ``recovery_s``,
the per-mode table and per-run times). Targets: unaligned p99 <= 1.5 s; aligned/unaligned
p50 ratio >= 10; overhead <= 10%.

Usage::

    python benchmarks/bench_checkpoint.py --quick      # under 2 minutes
    python benchmarks/bench_checkpoint.py              # 100 MB of state, longer runs
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
    engine_revision,
    format_table,
    machine_info,
    median,
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

# -- (a) backpressure -------------------------------------------------------------------------


def wide_record(n: int) -> tuple[int, str]:
    return (n % 100, "x" * 200)


def slow(record: tuple[int, str]) -> tuple[int, str]:
    time.sleep(0.001)
    return record


def key_of(record: tuple[int, Any]) -> int:
    return record[0]


def weir_cli(cluster: LocalCluster, *args: str) -> str:
    """The output of ``weir COMMAND --dir DIR ARGS``; raises ClusterError if it fails."""
    return cluster.weir(*args, timeout=60, check=True).stdout


def checkpoints(cluster: LocalCluster, job_id: str) -> list[dict[str, Any]]:
    return json.loads(weir_cli(cluster, "checkpoints", job_id, "--json"))  # type: ignore[no-any-return]


def backpressured_run(cluster: LocalCluster, mode: str, seconds: float) -> list[dict[str, Any]]:
    env = cluster.environment({"execution.checkpointing.interval": "1 s",
                               "pipeline.batch-size": 200, **MODES[mode]})
    env.set_parallelism(PARALLELISM)
    (env.from_sequence(0, 10**12).map(wide_record).key_by(key_of).map(slow)
        .sink_to(DiscardingSink()))
    job = env.execute_async(f"bench checkpoint backpressure {mode}")
    try:
        time.sleep(seconds)
        rows = checkpoints(cluster, job.job_id)
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
    return {"checkpoints": len(rows), "p50_s": round(percentile(durations, 0.5), 3),
            "p99_s": round(percentile(durations, 0.99), 3),
            "persisted_bytes": int(statistics.median(r["persisted_bytes"] for r in rows))
            if rows else 0,
            "unaligned": sum(r["unaligned"] for r in rows)}


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
                        help="short runs and 20 MB of state (under 2 minutes)")
    parser.add_argument("--runs", type=int, help="timed runs per word-count form "
                        "(default 3; quick 2)")
    parser.add_argument("--bp-seconds", type=float,
                        help="seconds per backpressure mode (default 25; quick 7)")
    parser.add_argument("--state-mb", type=int, help="RocksDB state for the recovery "
                        "measurement (default 100; quick 20)")
    parser.add_argument("--words", type=int, help="word-count input (default 10,000,000; "
                        "quick 2,000,000)")
    parser.add_argument("--skip-backpressure", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "checkpoint.json",
                        help="where the JSON results go")
    args = parser.parse_args(argv)
    args.runs = args.runs or (2 if args.quick else 3)
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
            options = [DEBLOAT] if debloat else []
            with LocalCluster(CLUSTER_DIR, 2, 2, options) as cluster:
                for mode in MODES:
                    name = f"{mode}{' + debloat' if debloat else ''}"
                    summary = summarize(backpressured_run(cluster, mode, args.bp_seconds))
                    table[name] = summary
                    print(f"  {name:26} {summary}", flush=True)
        result["backpressure"] = table
        result["aligned_p50_s"] = table["aligned"]["p50_s"]
        result["unaligned_p50_s"] = table["unaligned"]["p50_s"]
        result["unaligned_p99_s"] = table["unaligned"]["p99_s"]
        result["aligned_unaligned_p50_ratio"] = round(
            table["aligned"]["p50_s"] / max(table["unaligned"]["p50_s"], 1e-3), 1)
    if not args.skip_overhead:
        root = ensure_dataset(args.words)
        with LocalCluster(CLUSTER_DIR, 2, 2) as cluster:
            times: dict[str, list[float]] = {}
            for form in ("vectorized", "per_record"):
                run_form(cluster, form, root, {})  # warm-up
                for run in range(args.runs):
                    for label, config in (("off", {}), ("1s", {
                            "execution.checkpointing.interval": "1 s"})):
                        wall = run_form(cluster, form, root, config).wall_s
                        times.setdefault(f"{form}_{label}", []).append(round(wall, 3))
                        print(f"  run {run + 1}/{args.runs}: {form:10} checkpoints {label:3} "
                              f"{wall:6.2f} s", flush=True)
        result["overhead_times_s"] = times
        for form in ("vectorized", "per_record"):
            result[f"checkpoint_overhead_{form}"] = round(
                median(times[f"{form}_1s"]) / median(times[f"{form}_off"]) - 1, 3)
    if not args.skip_recovery:
        with LocalCluster(CLUSTER_DIR, 4, 2) as cluster:
            recovery = recovery_run(cluster, args.state_mb)
        print(f"  recovery {recovery}", flush=True)
        result.update(recovery)
    result["seconds"] = round(time.perf_counter() - begun, 1)
    write_json(args.output, result)
    print()
    if table:
        print(format_table(["mode", "checkpoints", "p50 s", "p99 s", "persisted in-flight",
                            "unaligned"],
                           [[name, s["checkpoints"], s["p50_s"], s["p99_s"],
                             f"{s['persisted_bytes']:,} B", s["unaligned"]]
                            for name, s in table.items()]))
        print(f"aligned/unaligned p50 {result['aligned_unaligned_p50_ratio']}x (target >= 10); "
              f"unaligned p99 {result['unaligned_p99_s']} s (target <= 1.5)")
    for form in ("vectorized", "per_record"):
        key = f"checkpoint_overhead_{form}"
        if key in result:
            print(f"checkpoint overhead {form}: {result[key]:+.1%} (target <= 10%)")
    if "recovery_s" in result:
        print(f"recovery with {result['state_bytes'] / 2**20:.0f} MiB of RocksDB state: "
              f"{result['recovery_s']} s from SIGKILL to the first record processed")
    print(f"{result['seconds']} s in all; results in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
