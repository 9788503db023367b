"""The job the exactly-once tests and the checkpoint benchmark run, its expected output
computed independently, and a driver that SIGKILLs TaskExecutors while it runs.

The job reads the numbers ``0..n-1`` (event time: the number itself, in ms) from a parallel
source slowed to a fixed rate, and writes two kinds of records through the transactional
FileSink (JSON lines):

* ``["count", key, c]`` from a KeyedProcessFunction with a ValueState per key
  (``key = n % keys``): one record per input record, ``c`` running from 1 to the key's
  number of records — the same set whatever the order records arrive in;
* ``["reduce", key, c]``: the same running count from a keyed ``reduce`` (whose totals
  live in a write-back cache between checkpoints);
* ``["window", key, total]`` from tumbling event-time windows of ``window_ms``, reducing
  the sum of ``n`` per key and window.

An optional *gate* file holds the job back without blocking it: until the file exists, the
second half of the input goes ten times slower (or as many times as the submitter asks), so
a test that kills TaskExecutors gets every kill in before the job can finish, however fast
the machine, and then opens the gate.

The job file is self-contained (TaskExecutors import nothing of the tests).
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.support.cluster import LocalCluster, job_details, poll, weir_cli, write_job
from weir.testing.faults import kill_taskexecutor

JOB = '''
import os
import sys
import time

from weir import (FileSink, KeyedProcessFunction, StreamExecutionEnvironment, Time,
                  TumblingEventTimeWindows, ValueStateDescriptor, WatermarkStrategy)

OUT, N, KEYS, WINDOW_MS, PAUSE_EVERY, PAUSE_S = (
    sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
    float(sys.argv[6]))
GATE = sys.argv[7] if len(sys.argv) > 7 else ""
HELD = float(sys.argv[8]) if len(sys.argv) > 8 else 10.0


def throttle(n):
    if n % PAUSE_EVERY == 0:
        held = GATE and n >= N // 2 and not os.path.exists(GATE)
        time.sleep(PAUSE_S * HELD if held else PAUSE_S)
    return n


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield ("count", value % KEYS, count)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(int(os.environ.get("EXACTLY_ONCE_PARALLELISM", "2")))
stamped = (env.from_sequence(0, N - 1).map(throttle)
           .assign_timestamps_and_watermarks(
               WatermarkStrategy.for_monotonous_timestamps()
               .with_timestamp_assigner(lambda n, _: n)))
counts = stamped.key_by(lambda n: n % KEYS).process(CountPerKey())
windows = (stamped.map(lambda n: (n % KEYS, n)).key_by(lambda t: t[0])
           .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
           .reduce(lambda a, b: (a[0], a[1] + b[1]))
           .map(lambda t: ("window", t[0], t[1])))
reduced = (stamped.map(lambda n: (n % KEYS, 1)).name("Ones").key_by(lambda t: t[0])
           .reduce(lambda a, b: (a[0], a[1] + b[1]))
           .map(lambda t: ("reduce", t[0], t[1])))
counts.union(windows, reduced).sink_to(FileSink(OUT, format=os.environ.get("EXACTLY_ONCE_FORMAT",
                                                                  "json")))
env.execute("exactly once")
'''


def running_counts(n: int, keys: int) -> Counter[tuple[int, int]]:
    """(key, count so far) for every number below ``n`` keyed by ``% keys``: what a keyed
    running count emits, computed without weir."""
    per_key = Counter(i % keys for i in range(n))
    return Counter((key, c) for key, total in per_key.items() for c in range(1, total + 1))


def expected_output(n: int, keys: int, window_ms: int) -> Counter[tuple[Any, ...]]:
    """Every record the job must commit, computed without weir."""
    out: Counter[tuple[Any, ...]] = Counter()
    running = running_counts(n, keys)
    out.update(("count", key, c) for key, c in running.elements())
    out.update(("reduce", key, c) for key, c in running.elements())
    windows: Counter[tuple[int, int]] = Counter()
    for i in range(n):
        windows[(i % keys, i // window_ms)] += i
    out.update(("window", key, total) for (key, _), total in windows.items())
    return out


def part_records(name: str, data: bytes) -> list[tuple[Any, ...]]:
    """The records of one committed part file (JSON lines or Parquet, by its name)."""
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pq.read_table(pa.BufferReader(data))
        return list(zip(*(table.column(i).to_pylist() for i in range(table.num_columns)),
                        strict=True))
    return [tuple(json.loads(line)) for line in data.decode().splitlines()]


def committed_output(directory: Path) -> Counter[tuple[Any, ...]]:
    """Every record of the committed part files (names not starting with '.' or '_')."""
    out: Counter[tuple[Any, ...]] = Counter()
    for part in sorted(directory.glob("part-*")):
        out.update(part_records(part.name, part.read_bytes()))
    return out


def diff(expected: Counter[tuple[Any, ...]], got: Counter[tuple[Any, ...]]) -> str:
    lost, duplicated = expected - got, got - expected
    return (f"{sum(lost.values())} lost (e.g. {list(lost)[:3]}), "
            f"{sum(duplicated.values())} duplicated (e.g. {list(duplicated)[:3]})")


def submit(cluster: LocalCluster, tmp_path: Path, out: Path | str, n: int, keys: int = 13,
           window_ms: int = 1000, pause_every: int = 500, pause_s: float = 0.02,
           config: dict[str, str] | None = None, gate: Path | None = None,
           held_slowdown: float | None = None, run_args: tuple[str, ...] = (),
           parallelism: int = 2, sink_format: str = "json") -> str:
    """Start the job detached with ``config`` (-D pairs) and ``run_args`` (more options of
    ``weir run``) at ``parallelism``; returns its id. With ``gate``, the second half of the
    input is slowed down until that file exists: ``held_slowdown`` times (default 10; a
    long chaos run holds the job back for minutes). ``sink_format``: the FileSink's
    format (json or parquet)."""
    assert held_slowdown is None or gate is not None, "held_slowdown needs a gate"
    job = write_job(tmp_path, JOB, "exactly_once_job.py")
    pairs = [f"-D{k}={v}" for k, v in (config or {}).items()]
    result = weir_cli("run", "--dir", str(cluster.dir), "--detached", *pairs, *run_args,
                      str(job), str(out), str(n), str(keys), str(window_ms),
                      str(pause_every), str(pause_s), *([str(gate)] if gate else []),
                      *([str(held_slowdown)] if held_slowdown is not None else []),
                      env={"EXACTLY_ONCE_PARALLELISM": str(parallelism),
                           "EXACTLY_ONCE_FORMAT": sink_format})
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout.strip().splitlines()[-1]


def checkpoints(cluster: LocalCluster, job_id: str, tasks: bool = False
                ) -> list[dict[str, Any]]:
    """``weir checkpoints JOB_ID --json``: the job's checkpoint history, newest last
    (``tasks``: with each subtask's stats)."""
    result = cluster.weir("checkpoints", job_id, "--json", *(["--tasks"] if tasks else []))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def status_name(details: Any) -> str:
    from weir.client.cluster_client import job_status_name

    return job_status_name(details.summary.status)


#: The statuses a job ends in.
ENDED = ("FINISHED", "FAILED", "CANCELED")


def wait_ended(cluster: LocalCluster, job_id: str, timeout: float = 180,
               details: Callable[[], Any] | None = None) -> Any:
    """Poll until the job ended; returns its final details. ``details`` fetches them (None
    while they cannot be had, e.g. while a JobMaster restarts); default ``job_details``."""
    fetch = details or (lambda: job_details(cluster, job_id))
    return poll(lambda: (d := fetch()) and status_name(d) in ENDED and d,
                timeout, interval=0.2, what=f"job {job_id} to end")


def finished_exactly_once(cluster: LocalCluster, job_id: str, out: Path, n: int,
                          timeout: float = 180, details: Callable[[], Any] | None = None,
                          no_uncommitted: bool = True) -> Any:
    """Wait for the job to end and check it FINISHED with exactly the expected output of
    ``n`` records (13 keys, 1 s windows) committed in ``out`` and, with
    ``no_uncommitted``, no in-progress part file left; returns its final details."""
    final = wait_ended(cluster, job_id, timeout, details)
    assert status_name(final) == "FINISHED", final.failure.message
    expected, got = expected_output(n, 13, 1000), committed_output(out)
    assert got == expected, diff(expected, got)
    if no_uncommitted:
        assert not [p for p in out.iterdir() if p.name.startswith(".")], \
            "uncommitted part files were left behind"
    return final


def running_with_checkpoint_after(cluster: LocalCluster, job_id: str,
                                  checkpoint_id: int, timeout: float) -> Any:
    """Wait until every task runs and a checkpoint newer than ``checkpoint_id`` completed."""
    from weir.proto import common_pb2

    def ready() -> Any:
        details = job_details(cluster, job_id)
        if status_name(details) in ("FAILED", "CANCELED", "FINISHED"):
            return details
        subtasks = [s for v in details.vertices for s in v.subtasks]
        return (status_name(details) == "RUNNING" and subtasks
                and all(s.state == common_pb2.RUNNING for s in subtasks)
                and details.last_checkpoint_id > checkpoint_id and details)

    return poll(ready, timeout, interval=0.1,
                what=f"job {job_id} to run with a checkpoint after {checkpoint_id}")


def kill_busy_taskexecutor(cluster: LocalCluster, details: Any,
                           sig: int = signal.SIGKILL) -> str:
    """Send ``sig`` (SIGKILL) to a TaskExecutor that runs tasks of the job; returns its
    resource id."""
    busy = {s.resource_id for v in details.vertices for s in v.subtasks if s.resource_id}
    return kill_taskexecutor(cluster.dir, sorted(busy), sig)


def run_with_kills(cluster: LocalCluster, job_id: str, kills: int,
                   timeout: float = 240, gate: Path | None = None) -> Any:
    """Kill a busy TaskExecutor ``kills`` times, each after a checkpoint completed since
    the previous restart; then open ``gate`` (if the job was submitted with one) and wait
    for the job to end. Returns its final details."""
    deadline = time.monotonic() + timeout
    last = 0
    for _ in range(kills):
        details = running_with_checkpoint_after(cluster, job_id, last,
                                                deadline - time.monotonic())
        if status_name(details) != "RUNNING":
            break  # ended (or failed) before every kill: the test's assertions say why
        last = details.last_checkpoint_id
        restarts = details.summary.restarts
        kill_busy_taskexecutor(cluster, details)
        poll(lambda r=restarts: (d := job_details(cluster, job_id)).summary.restarts > r
             or status_name(d) in ENDED,
             max(1.0, deadline - time.monotonic()), interval=0.1,
             what="the job to restart after the kill")
    if gate is not None:
        gate.touch()
    return wait_ended(cluster, job_id, max(1.0, deadline - time.monotonic()))


def run_job_with_kills(cluster: LocalCluster, tmp_path: Path, job_text: str, args: list[str],
                       kills: int, config: dict[str, str] | None = None,
                       gate: Path | None = None) -> Any:
    """Run a self-contained job file (``job_text``, given ``args``) detached with
    checkpoints every 300 ms and a fixed-delay restart strategy (plus ``config``), kill a
    busy TaskExecutor ``kills`` times (see :func:`run_with_kills`), and check it FINISHED
    after every kill; returns its final details."""
    settings = {"execution.checkpointing.interval": "300 ms",
                "restart-strategy.type": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": "10",
                "restart-strategy.fixed-delay.delay": "200 ms", **(config or {})}
    job = write_job(tmp_path, job_text, "job_with_kills.py")
    started = weir_cli("run", "--dir", str(cluster.dir), "--detached",
                       *(f"-D{k}={v}" for k, v in settings.items()), str(job), *args)
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip().splitlines()[-1]
    details = run_with_kills(cluster, job_id, kills, gate=gate)
    assert status_name(details) == "FINISHED", details.failure.message
    assert details.summary.restarts == kills, "the job ended before every kill"
    return details
