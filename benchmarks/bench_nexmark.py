"""Nexmark on weir: q0-q5, q7, q8 and q12 on a local cluster, per core, beside Flink's figures.

What is measured
----------------
Events: the Nexmark streams (persons, auctions, bids: 1 : 3 : 46 per 50 events) of
``benchmarks/nexmark/generator.py``, made with numpy from event numbers (the schema and
distributions of the nexmark/nexmark generator; 10 M events/s of event time, watermark
``dateTime - 4 s``). Each stream is ``env.from_sequence(0, N - 1).map_batches(make)``, so
the source is parallel and every job generates its input as it runs, as Flink's Nexmark
source does. The queries (``benchmarks/nexmark/queries.py``) follow the Flink SQL of
nexmark/nexmark, written with weir's DataStream API; each ends in a ``DiscardingSink``
(Flink's runs use the ``blackhole`` connector).

One local cluster (``weir cluster start``: a JobMaster and 2 TaskExecutors with 2 slots
each, separate OS processes) runs every job at parallelism 2, one query after the other,
``--events`` events each (10,000,000; 1,000,000 with ``--quick``). Per job: the wall time
from submission to FINISHED, and the CPU seconds of the cluster's processes (TaskExecutors
and JobMaster, from /proc) meanwhile. Reported per query:

* ``events/s``: events / wall time;
* ``cores``: CPU-s / wall time, the average number of cores the cluster kept busy (Flink's
  "Cores" column is the same: the workers' measured CPU usage);
* ``per core``: events / CPU-s, Flink's "Throughput/Cores" (events / (Cores x Time));
* ``per machine core``: events / (wall time x the machine's cores), a lower bound when
  other work shares the machine.

Flink's per-core throughput beside them is the published table of
https://github.com/nexmark/nexmark (README, "Nexmark Benchmark Result"): Flink 1.13, SQL
queries, 100 M events generated at 10 M events/s, parallelism 8 on 8 TaskManagers of one
slot on 3 workers of 8 cores and 32 GB each, RocksDB state backend, exactly-once
checkpoints every 3 minutes, mini-batch on. Those are JVM figures on other hardware, with
checkpoints on; they are a reference point, not a like-for-like run.

Bytewax (``bytewax==0.21.1`` from PyPI, installed by this script into
``build/venv-bytewax``; skipped with a one-line message if that fails) runs q0, q1
and q2 in the same run, one worker in one process, over ``--bytewax-events`` events
(1,000,000; 200,000 with ``--quick``) from the same generator, in two forms: one dict per
bid, and one Arrow batch per source poll (``benchmarks/nexmark/bytewax_flows.py``). Its
per-core rate is events / CPU-s of that process. PyFlink is not measured (see
``benchmarks/README.md``).

Correctness guard: before timing, every query runs once on the cluster with
``execute_and_collect`` over 20,000 events and must give what
``benchmarks/nexmark/reference.py`` computes in plain Python from the same events (q12,
in processing time: each bidder's counts add up to its bids), or the benchmark stops.

Results: the tables on stdout and ``benchmarks/results/nexmark.json``.

Usage::

    python benchmarks/bench_nexmark.py --quick            # a few minutes
    python benchmarks/bench_nexmark.py                    # 10 M events per query
    python benchmarks/bench_nexmark.py --queries q0,q5 --events 2000000 --profile
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BUILD_DIR,
    RESULTS_DIR,
    LocalCluster,
    Profiler,
    engine_revision,
    ensure_bytewax,
    format_table,
    machine_info,
    median,
    rate,
    run_job,
    summarise_profile,
    write_json,
)
from nexmark import queries, reference

from weir import DiscardingSink

FULL_EVENTS = 10_000_000
QUICK_EVENTS = 1_000_000
VERIFY_EVENTS = 20_000
FULL_BYTEWAX_EVENTS = 1_000_000
QUICK_BYTEWAX_EVENTS = 200_000
PARALLELISM = 2
QUERIES = list(queries.QUERIES)
BYTEWAX_QUERIES = ["q0", "q1", "q2"]
BYTEWAX_VERSION = "0.21.1"

CLUSTER_DIR = BUILD_DIR / "bench-cluster-nexmark"
PROFILE_DIR = BUILD_DIR / "bench-profiles"
BYTEWAX_FLOWS = Path(__file__).resolve().parent / "nexmark" / "bytewax_flows.py"

FLINK_SOURCE = "https://github.com/nexmark/nexmark (README, Nexmark Benchmark Result)"
FLINK_SETUP = ("Flink 1.13, 100 M events at 10 M events/s, parallelism 8, 3 workers x "
               "8 cores / 32 GB, RocksDB, exactly-once checkpoints every 3 min")
#: Flink's published "Throughput/Cores" (events per second per core), by query.
FLINK_PER_CORE: dict[str, float] = {
    "q0": 155_020, "q1": 157_940, "q2": 175_210, "q3": 152_120, "q4": 34_330,
    "q5": 22_140, "q7": 12_330, "q8": 146_140, "q12": 75_670,
}


# -- weir -------------------------------------------------------------------------------------


def verify(cluster: LocalCluster, names: list[str]) -> dict[str, float]:
    """Every query on VERIFY_EVENTS events against the plain-Python reference."""
    events = reference.Events.generate(VERIFY_EVENTS)
    took = {}
    for name in names:
        env = cluster.environment()
        env.set_parallelism(PARALLELISM)
        started = time.perf_counter()
        with queries.QUERIES[name](env, VERIFY_EVENTS).execute_and_collect(
                f"nexmark {name} verify") as results:
            rows = list(results)
        took[name] = time.perf_counter() - started
        problem = reference.check(name, rows, events)
        if problem:
            msg = f"WRONG RESULT of nexmark {name} on {VERIFY_EVENTS:,} events: {problem}"
            raise AssertionError(msg)
        print(f"  {name:4} correct: {len(rows):,} results ({took[name]:.1f} s)", flush=True)
    return took


def run_query(cluster: LocalCluster, name: str, events: int) -> Any:
    env = cluster.environment()
    env.set_parallelism(PARALLELISM)
    queries.QUERIES[name](env, events).sink_to(DiscardingSink())
    pids = [*cluster.taskexecutor_pids(), cluster.jobmaster_pid()]
    return run_job(env, f"nexmark {name} ({events:,} events)", cpu_pids=pids)


# -- Bytewax ----------------------------------------------------------------------------------


def run_bytewax(python: Path, events: int) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(python), str(BYTEWAX_FLOWS), str(events), ",".join(BYTEWAX_QUERIES),
         "records,batches"], capture_output=True, text=True, timeout=3600, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"Bytewax failed: {last}", flush=True)
        return []
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_EVENTS:,} events per query, {QUICK_BYTEWAX_EVENTS:,} "
                             "for Bytewax")
    parser.add_argument("--events", type=int,
                        help=f"events per query (default {FULL_EVENTS:,}; quick "
                             f"{QUICK_EVENTS:,})")
    parser.add_argument("--runs", type=int, default=1,
                        help="timed runs of each query (default 1; medians are reported)")
    parser.add_argument("--queries", default=",".join(QUERIES),
                        help=f"comma-separated queries (default: {','.join(QUERIES)})")
    parser.add_argument("--bytewax-events", type=int,
                        help=f"events per Bytewax query (default {FULL_BYTEWAX_EVENTS:,}; "
                             f"quick {QUICK_BYTEWAX_EVENTS:,})")
    parser.add_argument("--no-bytewax", action="store_true", help="do not run Bytewax")
    parser.add_argument("--no-verify", action="store_true", help="skip the correctness guard")
    parser.add_argument("--profile", action="store_true",
                        help="one extra run per query under py-spy (TaskExecutor processes)")
    parser.add_argument("-D", dest="cluster_options", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="configuration of the cluster's daemons (repeatable)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "nexmark.json",
                        help="where to write the JSON results")
    args = parser.parse_args(argv)
    args.events = args.events or (QUICK_EVENTS if args.quick else FULL_EVENTS)
    args.bytewax_events = args.bytewax_events or (
        QUICK_BYTEWAX_EVENTS if args.quick else FULL_BYTEWAX_EVENTS)
    args.queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = set(args.queries) - set(QUERIES)
    if unknown or args.runs < 1 or args.events < 1:
        parser.error(f"unknown queries {sorted(unknown)} (known: {', '.join(QUERIES)}), or "
                     "--runs / --events below 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    begun = time.perf_counter()
    info = machine_info()
    revision = engine_revision()
    cores = os.cpu_count() or 1
    walls: dict[str, list[float]] = {q: [] for q in args.queries}
    cpus: dict[str, list[float]] = {q: [] for q in args.queries}
    profiles: dict[str, Any] = {}
    verified: dict[str, float] = {}

    print(f"starting a local cluster (2 TaskExecutors x 2 slots) in {CLUSTER_DIR}", flush=True)
    with LocalCluster(CLUSTER_DIR, taskexecutors=2, slots=2,
                      options=args.cluster_options) as cluster:
        if not args.no_verify:
            print(f"correctness guard on {VERIFY_EVENTS:,} events:", flush=True)
            verified = verify(cluster, args.queries)
        run_query(cluster, "q0", 10_000)  # warm-up: imports in the TaskExecutors
        for run in range(1, args.runs + 1):
            for name in args.queries:
                timing = run_query(cluster, name, args.events)
                walls[name].append(timing.wall_s)
                cpus[name].append(sum(timing.cpu_s.values()))
                print(f"  run {run}/{args.runs}: {name:4} {timing.wall_s:7.2f} s "
                      f"({rate(args.events / timing.wall_s)} events/s; cluster used "
                      f"{cpus[name][-1]:.1f} CPU-s)", flush=True)
        if args.profile:
            for name in args.queries:
                label = f"nexmark-{name}-{args.events}"
                with Profiler(cluster.taskexecutor_pids(), PROFILE_DIR, label) as profiler:
                    timing = run_query(cluster, name, args.events)
                summary = summarise_profile(profiler.outputs, rate_hz=profiler.rate_hz)
                summary["wall_s"] = round(timing.wall_s, 3)
                summary["raw_files"] = [str(p) for p in profiler.outputs]
                profiles[name] = summary
                print(f"\nprofile of {name} ({summary['samples']:,} samples, "
                      f"{timing.wall_s:.1f} s):")
                for row in summary["self"][:10]:
                    print(f"    {row['percent']:5.1f}%  {row['function']}")

    bytewax: list[dict[str, Any]] = []
    bytewax_note = "not run (--no-bytewax)"
    if not args.no_bytewax:
        python = ensure_bytewax()
        bytewax_note = "could not be installed"
        if python is not None:
            print(f"Bytewax {BYTEWAX_VERSION}: {','.join(BYTEWAX_QUERIES)} on "
                  f"{args.bytewax_events:,} events, one worker", flush=True)
            bytewax = run_bytewax(python, args.bytewax_events)
            bytewax_note = f"bytewax=={BYTEWAX_VERSION}, one worker, one process"

    per_query: dict[str, Any] = {}
    flink_rows = []
    rows = []
    for name in args.queries:
        wall, cpu = median(walls[name]), median(cpus[name])
        entry = {
            "events": args.events, "wall_s": wall, "cpu_s": cpu, "run_wall_s": walls[name],
            "run_cpu_s": cpus[name], "events_per_s": args.events / wall,
            "cores_used": cpu / wall, "events_per_cpu_s": args.events / cpu,
            "events_per_machine_core_s": args.events / (wall * cores),
            "flink_events_per_core_s": FLINK_PER_CORE[name],
        }
        for b in bytewax:
            if b["query"] == name:
                entry[f"bytewax_{b['form']}_events_per_cpu_s"] = b["events"] / b["cpu_s"]
                entry[f"bytewax_{b['form']}_events_per_s"] = b["events"] / b["wall_s"]
        per_query[name] = entry
        flink_rows.append([name, f"{args.events:,}", f"{cpu / wall:.2f}", f"{wall:.3f}",
                           f"{cpu:.3f}", f"{rate(args.events / cpu)}/s"])
        rows.append([name, rate(entry["events_per_s"]), f"{cpu / wall:.2f}",
                     rate(entry["events_per_cpu_s"]), rate(entry["events_per_machine_core_s"]),
                     rate(FLINK_PER_CORE[name]),
                     rate(entry.get("bytewax_records_events_per_cpu_s", float("nan"))),
                     rate(entry.get("bytewax_batches_events_per_cpu_s", float("nan")))])

    result: dict[str, Any] = {
        "benchmark": "nexmark",
        "quick": args.quick,
        "events": args.events,
        "event_rate": queries.DEFAULT.rate,
        "parallelism": PARALLELISM,
        "cluster": {"taskexecutors": 2, "slots_per_taskexecutor": 2},
        "cluster_options": args.cluster_options,
        "runs": args.runs,
        "queries": per_query,
        "flink": {"source": FLINK_SOURCE, "setup": FLINK_SETUP,
                  "events_per_core_s": FLINK_PER_CORE},
        "bytewax": {"note": bytewax_note, "events": args.bytewax_events, "runs": bytewax},
        "verified": {"events": VERIFY_EVENTS, "seconds": verified} if verified else False,
        "profiles": profiles,
        "machine": info,
        "engine": revision,
        "total_benchmark_s": time.perf_counter() - begun,
    }
    write_json(args.output, result)

    print()
    print(f"weir, Nexmark, {args.events:,} events per query, parallelism {PARALLELISM} on 2 "
          f"TaskExecutors, median of {args.runs} run(s), {cores} CPUs (Flink's table format; "
          "Cores = cluster CPU-s / wall s)")
    print(format_table(["Nexmark Query", "Events Num", "Cores", "Time(s)", "Cores * Time(s)",
                        "Throughput/Cores"], flink_rows))
    print()
    print(f"events/s per core beside Flink's published figures ({FLINK_SETUP}; "
          f"{FLINK_SOURCE}) and Bytewax ({bytewax_note}, {args.bytewax_events:,} events)")
    print(format_table(["query", "weir events/s", "cores", "weir per core (CPU-s)",
                        f"weir per machine core (x{cores})", "Flink per core",
                        "Bytewax records per core", "Bytewax batches per core"], rows))
    print(f"results written to {args.output} (total {result['total_benchmark_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; the cluster was stopped", file=sys.stderr)
        sys.exit(130)
