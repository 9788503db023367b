"""Throughput and memory of weir's data plane: one keyed exchange between two TaskExecutors.

What is measured
----------------
Cluster: one local cluster for the whole run (``weir cluster start``: a JobMaster and 2
TaskExecutors with **1 slot each**, all separate OS processes). Jobs run at parallelism 2,
so with slot sharing subtask *i* of every vertex runs on TaskExecutor *i*: every producer
keeps about half of its rows (keys hashed to its own subtask, handed over in memory) and
sends the other half over TCP to the other TaskExecutor.

1. Throughput (``mb_per_s``, ``records_per_s``)::

       from_sequence(0, N - 1)
           .map_batches(Widen(100))        # int64 -> (key int64, payload binary(100))
           .key_by("key")                  # vectorised murmur3 key groups, split per target
           .sink_to(DiscardingSink())

   ``Widen`` builds each batch without disk I/O and without a Python call per row: the
   number becomes ``key``, and ``payload`` is a 100-byte value per row whose bytes are a
   zero-copy slice of a random pool built once per task. A row is 8 (key) + 4 (offset) +
   100 (payload) = 112 bytes of Arrow buffers, so N = bytes / 112 (1 GB: 8.9M rows, also
   with ``--quick``, which does fewer runs and a shorter backpressure window). The
   consumer discards what it gets, so the exchange (hashing, splitting, hand-over, Arrow
   IPC encoding, TCP, decoding) is what costs.
   Time: from submitting the job to the JobMaster reporting FINISHED (``run_job``);
   ``MB/s = N * 112 / 1e6 / seconds`` (all rows through the exchange, local and remote
   channels). The fixed cost of a job (same pipeline over 1,000 rows, 3 times) is reported
   too, and rates net of it. Median of ``--runs`` runs (3; 2 with ``--quick``), after one
   untimed full-size warm-up run.

2. Ceiling (``ceiling_mb_per_s``), measured in the same run, interleaved with the jobs:
   two fresh Python processes (``multiprocessing``, spawn) over loopback TCP, the sender
   ``sendall``-ing ``[u32 length][payload]`` frames of the engine's buffer size
   (``taskmanager.memory.segment-size``, 32 KiB by default; ``--segment-size``), the
   receiver reading each frame with ``recv_into`` into a preallocated buffer. Same total
   bytes as the job, all of them over TCP (the job sends only about half over TCP), with
   TCP_NODELAY as the data plane sets it. Timed by the receiver from ``accept`` to the
   end-of-stream frame; 3 transfers per timed run, median over all.
   ``ratio_to_ceiling = mb_per_s / ceiling_mb_per_s``. The project's target is 0.40 (a
   bare Python gRPC stream of 32 KiB messages reaches about 0.15).

3. Backpressure memory (``backpressure_peak_rss_mb``, ``backpressure_rss_growth_mb``): the
   same source and exchange with 8,192-row batches (``--bp-batch-size``) into a
   deliberately slow consumer (``Throttle``: sleeps ``rows / 50,000`` s per batch, i.e.
   about 5.6 MB/s per subtask; ``--slow-rows-per-s``) for 60 s (15 s with ``--quick``)
   after a warm-up of 5 s (3 s). The source could produce far faster, so it must be held
   back by the bounded network buffers. Every 0.5 s the benchmark reads VmRSS of both
   TaskExecutor processes (``/proc/PID/status``) and scrapes their ``/metrics``
   (``weir_task_backPressuredTimeMsPerSecond``, ``numRecordsOut``/``In``). Reported per
   TaskExecutor: the peak RSS and the growth = peak - median RSS of the first 20% of the
   window; the JSON keys hold the largest of the two. Flat means a growth under
   ``--rss-tolerance-mb`` (50 MB), while several hundred MB pass through the exchange in
   the window. The job is cancelled afterwards with ``weir cancel --dir DIR JOB_ID``.

Correctness guard: before timing, the pipeline runs over 300,000 rows with a collecting
consumer that reports rows, key sum and payload bytes per batch; the totals must match.

CPU: the TaskExecutors' CPU seconds per GB in each run, split into user and system
(kernel: socket copies, wake-ups) time, next to the ceiling's.

``--profile`` adds one throughput run with py-spy on both TaskExecutors (``py-spy record
--threads``; raw stacks under ``build/bench-profiles/``). It reports the CPU time of
every thread group (producer task, network send, credit reader, network receive,
consumer task) read from ``/proc/PID/task/TID/stat`` during the run, with threads named
through py-spy's thread ids. That is the reliable measure: py-spy's "busy" samples also
count threads that wait for the GIL or block in ``recv``. It also reports busy samples by
thread group and kind of work (serialisation, socket writes/reads, hashing, splitting,
task loop, locks, ...; matched on function names and the source lines they execute) and
the top functions. ``--profile-gil`` samples only the GIL holder instead: the Python-level
work, without waiting threads.

Results: a table on stdout and ``benchmarks/results/shuffle.json``.

Usage::

    python benchmarks/bench_shuffle.py --quick             # well under 2 minutes
    python benchmarks/bench_shuffle.py                     # 1 GB, 3 runs, 60 s backpressure
    python benchmarks/bench_shuffle.py --quick --profile --skip-backpressure
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BUILD_DIR,
    RESULTS_DIR,
    LocalCluster,
    Profiler,
    ThreadCpuSampler,
    categorise_profile,
    engine_revision,
    format_table,
    frame_source,
    machine_info,
    median,
    process_cpu_split,
    profile_thread_names,
    rate,
    rss_bytes,
    run_job,
    scrape_metrics,
    summarise_profile,
    write_json,
)

from weir import DiscardingSink

MB = 1_000_000  #: MB/s are decimal megabytes per second, for the job and the ceiling alike
FULL_BYTES = 1_000_000_000
QUICK_BYTES = FULL_BYTES  # the exchange needs about a second even for 1 GB
PAYLOAD_BYTES = 100
VERIFY_ROWS = 300_000
EMPTY_ROWS = 1_000
PARALLELISM = 2
CEILING_REPEATS = 3
BP_BATCH_SIZE = 8192
SLOW_ROWS_PER_S = 50_000
SAMPLE_INTERVAL_S = 0.5
RSS_TOLERANCE_MB = 50.0
TARGET_RATIO = 0.40
BP_SEQUENCE_END = 10**15  #: "endless": the backpressure job is cancelled, never finishes

CLUSTER_DIR = BUILD_DIR / "bench-cluster-shuffle"
PROFILE_DIR = BUILD_DIR / "bench-profiles"


def row_bytes(payload_bytes: int) -> int:
    """Arrow buffer bytes per row: int64 key + int32 offset + payload."""
    return 8 + 4 + payload_bytes


# -- job functions (shipped to the TaskExecutors by value) ------------------------------------


class Widen:
    """``map_batches`` function: an int64 batch -> (key int64, payload binary) of known size.

    The payload bytes are a zero-copy slice of a random pool, created in the task on first
    use (not pickled with the function), at an offset that depends on the batch.
    """

    SLACK = 1 << 16

    def __init__(self, payload_bytes: int) -> None:
        self.payload_bytes = payload_bytes
        self._pool: pa.Buffer | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"payload_bytes": self.payload_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.payload_bytes = state["payload_bytes"]
        self._pool = None

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        keys = batch.column(0)
        n = len(keys)
        size = n * self.payload_bytes
        pool = self._pool
        if pool is None or pool.size < size + self.SLACK:
            rng = np.random.default_rng(20240611)
            pool = self._pool = pa.py_buffer(
                rng.integers(0, 256, size + self.SLACK, dtype=np.uint8))
        start = (keys[0].as_py() * 61) % self.SLACK if n else 0
        wide = size >= 2**31 - 1
        offsets = np.arange(0, size + 1, self.payload_bytes,
                            dtype=np.int64 if wide else np.int32)
        payload = pa.Array.from_buffers(pa.large_binary() if wide else pa.binary(), n,
                                        [None, pa.py_buffer(offsets),
                                         pool.slice(start, size)])
        return pa.RecordBatch.from_arrays([keys, payload], names=["key", "payload"])


class Throttle:
    """Slow consumer (``map_batches``): sleeps ``rows / rows_per_s`` per batch, emits nothing."""

    def __init__(self, rows_per_s: float) -> None:
        self.rows_per_s = rows_per_s

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        time.sleep(batch.num_rows / self.rows_per_s)
        return batch.slice(0, 0)


def batch_totals(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Correctness guard: rows, key sum and payload bytes of one batch, as one row."""
    keys = batch.column("key").to_numpy()
    payload = batch.column("payload")
    offsets = np.frombuffer(payload.buffers()[1], dtype=np.int32 if pa.types.is_binary(
        payload.type) else np.int64)[payload.offset:payload.offset + len(payload) + 1]
    return pa.record_batch({"rows": [batch.num_rows], "key_sum": [int(keys.sum())],
                            "payload_bytes": [int(offsets[-1] - offsets[0])]})


if __name__ != "__main__":
    # Imported (e.g. by a test): ship the functions above by value, as the TaskExecutors
    # cannot import this module. (Run as a script, __main__ is pickled by value anyway.)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def exchange(env: Any, rows: int, payload_bytes: int) -> Any:
    """The throughput pipeline up to the keyed exchange."""
    return (env.from_sequence(0, rows - 1)
            .map_batches(Widen(payload_bytes))
            .key_by("key"))


# -- the ceiling: plain TCP between two processes ---------------------------------------------


_FRAME_HEADER = struct.Struct("!I")


def _recv_exact_into(conn: socket.socket, view: memoryview) -> bool:
    got, size = 0, len(view)
    while got < size:
        n = conn.recv_into(view[got:], size - got)
        if n == 0:
            return False
        got += n
    return True


def _ceiling_receiver(ports: Any, results: Any, frame_size: int, repeats: int) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    ports.send(server.getsockname()[1])
    header = bytearray(_FRAME_HEADER.size)
    header_view = memoryview(header)
    buffer = bytearray(frame_size)
    view = memoryview(buffer)
    out = []
    for _ in range(repeats):
        conn, _ = server.accept()
        started = time.perf_counter()
        cpu = time.process_time()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        received = 0
        while _recv_exact_into(conn, header_view):
            (length,) = _FRAME_HEADER.unpack(header)
            if length == 0:
                break  # end of stream
            if length > len(buffer):
                buffer = bytearray(length)
                view = memoryview(buffer)
            if not _recv_exact_into(conn, view[:length]):
                break
            received += length
        out.append((time.perf_counter() - started, time.process_time() - cpu, received))
        conn.close()
    server.close()
    results.send(out)


def _ceiling_sender(port: int, results: Any, total_bytes: int, frame_size: int,
                    repeats: int) -> None:
    payload = os.urandom(frame_size)
    frame = _FRAME_HEADER.pack(frame_size) + payload
    full, rest = divmod(total_bytes, frame_size)
    last = _FRAME_HEADER.pack(rest) + payload[:rest] if rest else b""
    out = []
    for _ in range(repeats):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cpu = time.process_time()
        for _ in range(full):
            conn.sendall(frame)
        if last:
            conn.sendall(last)
        conn.sendall(_FRAME_HEADER.pack(0))
        conn.recv(1)  # the receiver closes once it has read everything
        out.append(time.process_time() - cpu)
        conn.close()
    results.send(out)


def measure_ceiling(total_bytes: int, frame_size: int, repeats: int) -> list[dict[str, float]]:
    """``repeats`` transfers of ``total_bytes`` in frames of ``frame_size`` bytes."""
    ctx = multiprocessing.get_context("spawn")
    port_r, port_w = ctx.Pipe(duplex=False)
    recv_r, recv_w = ctx.Pipe(duplex=False)
    send_r, send_w = ctx.Pipe(duplex=False)
    receiver = ctx.Process(target=_ceiling_receiver, args=(port_w, recv_w, frame_size, repeats),
                           name="ceiling-receiver", daemon=True)
    receiver.start()
    sender = None
    try:
        if not port_r.poll(60):
            msg = "the ceiling's receiver process did not start"
            raise RuntimeError(msg)
        port = port_r.recv()
        sender = ctx.Process(target=_ceiling_sender,
                             args=(port, send_w, total_bytes, frame_size, repeats),
                             name="ceiling-sender", daemon=True)
        sender.start()
        if not recv_r.poll(600) or not send_r.poll(60):
            msg = "the ceiling transfer did not finish"
            raise RuntimeError(msg)
        received = recv_r.recv()
        sender_cpu = send_r.recv()
    finally:
        for proc in (sender, receiver):
            if proc is not None:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
    runs = []
    for (seconds, cpu, got), cpu_sent in zip(received, sender_cpu, strict=True):
        if got != total_bytes:
            msg = f"the ceiling receiver got {got:,} of {total_bytes:,} bytes"
            raise AssertionError(msg)
        runs.append({"seconds": seconds, "receiver_cpu_s": cpu, "sender_cpu_s": cpu_sent})
    return runs


# -- the weir jobs ----------------------------------------------------------------------------


def run_throughput(cluster: LocalCluster, rows: int, payload_bytes: int,
                   config: dict[str, Any], label: str = "") -> Any:
    """Run the throughput job; its JobTiming gets ``user_sys_cpu_s``: the TaskExecutors'
    user and system (kernel: socket copies, wake-ups) CPU seconds during the job."""
    env = cluster.environment(config)
    env.set_parallelism(PARALLELISM)
    exchange(env, rows, payload_bytes).sink_to(DiscardingSink())
    pids = cluster.taskexecutor_pids()
    before = [process_cpu_split(pid) for pid in pids]
    timing = run_job(env, f"bench shuffle {rows} rows{label}", cpu_pids=pids)
    after = [process_cpu_split(pid) for pid in pids]
    timing.user_sys_cpu_s = (round(sum(a[0] - b[0] for a, b in zip(after, before,
                                                                   strict=True)), 3),
                             round(sum(a[1] - b[1] for a, b in zip(after, before,
                                                                   strict=True)), 3))
    return timing


def verify(cluster: LocalCluster, payload_bytes: int, config: dict[str, Any]) -> float:
    """The exchange delivers every row exactly once, with its payload."""
    env = cluster.environment(config)
    env.set_parallelism(PARALLELISM)
    stream = exchange(env, VERIFY_ROWS, payload_bytes).map_batches(batch_totals)
    started = time.perf_counter()
    rows = key_sum = payload = 0
    with stream.execute_and_collect("bench shuffle verify") as results:
        for record in results:
            rows += record[0]
            key_sum += record[1]
            payload += record[2]
    took = time.perf_counter() - started
    expected = (VERIFY_ROWS, VERIFY_ROWS * (VERIFY_ROWS - 1) // 2, VERIFY_ROWS * payload_bytes)
    if (rows, key_sum, payload) != expected:
        msg = (f"WRONG RESULT of the exchange: got rows/key sum/payload bytes "
               f"{(rows, key_sum, payload)}, expected {expected}")
        raise AssertionError(msg)
    print(f"  correct: {rows:,} rows, key sum and {payload:,} payload bytes ({took:.1f} s)",
          flush=True)
    return took


def placement(details: Any) -> dict[str, list[str]]:
    """The TaskExecutor (resource id) of each subtask of each vertex, by subtask index."""
    if details is None:
        return {}
    return {v.name: [s.resource_id for s in sorted(v.subtasks, key=lambda s: s.subtask_index)]
            for v in details.vertices}


def crosses_taskexecutors(placements: dict[str, list[str]]) -> bool:
    """Subtask i of every vertex on one TaskExecutor, different ones for i = 0 and 1."""
    columns = list(zip(*placements.values(), strict=True)) if placements else []
    return (len(columns) == PARALLELISM and all(len(set(c)) == 1 for c in columns)
            and len({c[0] for c in columns}) == PARALLELISM)


# -- backpressure -----------------------------------------------------------------------------


def _job_metrics(urls: list[str], job_id: str) -> dict[str, dict[str, float]]:
    """{metric: {"<task name>#<subtask>": value}} of one job, from every TaskExecutor."""
    out: dict[str, dict[str, float]] = {}
    for url in urls:
        with contextlib.suppress(OSError):
            for s in scrape_metrics(url, "weir_task_"):
                if s.labels.get("job_id") != job_id:
                    continue
                name = s.name.removeprefix("weir_task_")
                task = f"{s.labels.get('task_name', '?')}#{s.labels.get('subtask_index', '?')}"
                out.setdefault(name, {})[task] = s.value
    return out


def _wait_running(job: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        status = job.get_job_status().result()
        if status == "RUNNING":
            return
        if status in ("FAILED", "CANCELED", "FINISHED") or time.monotonic() > deadline:
            msg = f"the backpressure job is {status}, not RUNNING"
            raise RuntimeError(msg)
        time.sleep(0.1)


def run_backpressure(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    env = cluster.environment({"pipeline.batch-size": args.bp_batch_size})
    env.set_parallelism(PARALLELISM)
    (exchange(env, BP_SEQUENCE_END, args.payload_bytes)
     .map_batches(Throttle(args.slow_rows_per_s))
     .sink_to(DiscardingSink()))
    pids = cluster.taskexecutor_pids()
    urls = cluster.taskexecutor_metrics_urls()
    job = env.execute_async("bench shuffle backpressure")
    samples: list[dict[str, Any]] = []
    try:
        _wait_running(job)
        time.sleep(args.bp_warmup)
        started = time.monotonic()
        next_sample = started
        while True:
            now = time.monotonic()
            if now - started > args.bp_seconds:
                break
            rss = [rss_bytes(pid) for pid in pids]
            if any(r is None for r in rss):
                msg = "a TaskExecutor process is gone during the backpressure run"
                raise RuntimeError(msg)
            samples.append({"t": round(now - started, 3),
                            "rss_mb": [round(r / 2**20, 1) for r in rss if r is not None],
                            "metrics": _job_metrics(urls, job.job_id)})
            next_sample += SAMPLE_INTERVAL_S
            time.sleep(max(0.0, next_sample - time.monotonic()))
        status = job.get_job_status().result()
        if status != "RUNNING":
            msg = f"the backpressure job ended early ({status})"
            raise RuntimeError(msg)
    finally:
        with contextlib.suppress(Exception):
            cluster.cancel(job.job_id)
        with contextlib.suppress(Exception):
            job.wait(timeout=60, poll_interval=0.1)  # raises JobExecutionError: CANCELED
        final = "?"
        with contextlib.suppress(Exception):
            final = job.get_job_status().result()
        with contextlib.suppress(Exception):
            job.client.close()
    return summarise_backpressure(samples, pids, args, final)


def _fit_slope(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over ts (per second); 0 with fewer than 2 points."""
    if len(ts) < 2:
        return 0.0
    return float(np.polyfit(np.asarray(ts), np.asarray(ys), 1)[0])


def summarise_backpressure(samples: list[dict[str, Any]], pids: list[int],
                           args: argparse.Namespace, final_status: str) -> dict[str, Any]:
    if not samples:
        msg = "no samples were taken during the backpressure window"
        raise RuntimeError(msg)
    window = args.bp_seconds
    early = [s for s in samples if s["t"] <= 0.2 * window] or samples[:1]
    per_te = []
    for i, pid in enumerate(pids):
        series = [s["rss_mb"][i] for s in samples]
        baseline = median([s["rss_mb"][i] for s in early])
        peak = max(series)
        per_te.append({"pid": pid, "baseline_rss_mb": baseline, "peak_rss_mb": peak,
                       "growth_mb": round(peak - baseline, 1), "first_rss_mb": series[0],
                       "last_rss_mb": series[-1],
                       "slope_mb_per_min": round(60 * _fit_slope(
                           [s["t"] for s in samples], series), 2)})

    def task_values(sample: dict[str, Any], metric: str, producer: bool) -> list[float]:
        values = sample["metrics"].get(metric, {})
        return [v for task, v in values.items() if ("Source" in task) == producer]

    def over_window(metric: str, producer: bool) -> float:
        # Median over the samples of the mean over the subtasks of one side.
        means = [float(np.mean(v)) for s in samples if (v := task_values(s, metric, producer))]
        return median(means)

    def total_delta(metric: str, producer: bool) -> float:
        first = task_values(samples[0], metric, producer)
        last = task_values(samples[-1], metric, producer)
        return sum(last) - sum(first) if first and last else float("nan")

    seconds = samples[-1]["t"] - samples[0]["t"]
    bytes_per_row = row_bytes(args.payload_bytes)
    produced = total_delta("numRecordsOut", producer=True)
    consumed = total_delta("numRecordsIn", producer=False)
    growth = max(te["growth_mb"] for te in per_te)
    return {
        "window_s": window,
        "warmup_s": args.bp_warmup,
        "batch_size": args.bp_batch_size,
        "slow_rows_per_s_per_subtask": args.slow_rows_per_s,
        "samples": len(samples),
        "final_status": final_status,
        "peak_rss_mb": max(te["peak_rss_mb"] for te in per_te),
        "rss_growth_mb": growth,
        "flat": growth <= args.rss_tolerance_mb,
        "rss_tolerance_mb": args.rss_tolerance_mb,
        "taskexecutors": per_te,
        "source_back_pressured_ms_per_s": over_window("backPressuredTimeMsPerSecond", True),
        "source_busy_ms_per_s": over_window("busyTimeMsPerSecond", True),
        "consumer_busy_ms_per_s": over_window("busyTimeMsPerSecond", False),
        "consumer_idle_ms_per_s": over_window("idleTimeMsPerSecond", False),
        "source_records_in_window": produced,
        "consumer_records_in_window": consumed,
        "exchange_mb_in_window": produced * bytes_per_row / MB,
        "exchange_mb_per_s": produced * bytes_per_row / MB / seconds if seconds else 0.0,
        "rss_series": [{"t": s["t"], "rss_mb": s["rss_mb"]} for s in samples],
        "task_metrics_last_sample": samples[-1]["metrics"],
    }


# -- profile ----------------------------------------------------------------------------------

#: Thread groups (substrings of thread names). Task threads are "task <vertex> (i/n)"; the
#: data plane's threads are "data-server-<port>-out" (sends buffers), "data-server-*-in"
#: (reads requests and credit) and "data-client-<address>" (reads buffers).
THREAD_GROUPS = [
    ("producer task (source, widen, hash, split, hand-over)", ("Source",)),
    ("network send: buffer writer (data-server-*-out)", ("-out",)),
    ("network send: request/credit reader (data-server-*-in)", ("-in",)),
    ("network send, other (data server)", ("data-server",)),
    ("network receive (data client)", ("data-client", "channel-")),
    ("consumer task", ("task ",)),
    ("gRPC, heartbeats, metrics", ("grpc", "heartbeat", "metrics", "ThreadPoolExecutor",
                                   "process_request_thread")),
]

#: Kinds of work: substrings of a frame's name or of the source line it executes. The
#: innermost frame that matches decides; among categories, the first that matches.
CATEGORIES = [
    ("socket write", ("sendall", "sendmsg", "send_all (", ".send (")),
    ("socket read", ("recv_into", "recv_exact (", "recv_frame (", ".recv(")),
    ("Arrow IPC encode (serialize, split into segments)",
     ("elements_to_ipc", ".serialize(", "_frames", "new_stream", "write_batch")),
    ("Arrow IPC decode", ("ipc_to_elements", "read_record_batch", "read_schema",
                          "open_stream", "read_next_batch")),
    ("frame headers (protobuf)", ("buffer_frame (", "parse_buffer (", "BufferHeader(",
                                  "SerializeToString", "FromString")),
    ("hashing (key groups)", ("key_groups", "murmur", "operator_indexes")),
    ("split by target (bincount, argsort, take)", ("split_by_target", "bincount", "argsort",
                                                   ".take(")),
    ("source + widen (data generation)", ("Widen.", "_SequenceReader", "from_buffers")),
    ("locks, conditions, events", ("Condition.", "Lock", "Event.", "acquire", "notify",
                                   "with self._lock", "with self._cond", "Semaphore")),
    ("task loop, mailbox, availability", ("Task._loop", "_wait_timeout", "is_available",
                                          "is_writable", "Mailbox.", "_flush_if_due",
                                          "oldest_pending_age")),
    ("partition, gate and credit bookkeeping", ("Subpartition", "ResultPartition", "InputGate",
                                                "InputChannel", "SubpartitionView",
                                                "ServerConnection", "ClientConnection",
                                                "FloatingBufferPool", "_announce", "_Frame")),
    ("operator chain, counters", ("OperatorChain", "RecordWriter", "Output.", "emit (",
                                  "process (")),
    ("gRPC, heartbeats, metrics", ("grpc", "heartbeat", "metrics", "prometheus")),
]

#: Innermost frames of threads that wait rather than work (py-spy drops most idle threads
#: itself). Unlike common.WAITING_LEAVES, socket reads count as work here: a reader that
#: py-spy saw running in recv_into is copying data.
WAITING = ("Condition.wait (", "Event.wait (", "socket.accept (", "select (", "sleep (",
           "Queue.get (", "channel_spin (", "_serve (grpc")


def profile_throughput(cluster: LocalCluster, rows: int, args: argparse.Namespace,
                       config: dict[str, Any]) -> dict[str, Any]:
    pids = cluster.taskexecutor_pids()
    label = f"shuffle-{rows}" + ("-gil" if args.profile_gil else "")
    with Profiler(pids, PROFILE_DIR, label, rate_hz=args.profile_rate,
                  gil_only=args.profile_gil) as profiler, ThreadCpuSampler(pids) as threads:
        timing = run_throughput(cluster, rows, args.payload_bytes, config, " (profiled)")
    summary = summarise_profile(profiler.outputs, top=25, rate_hz=profiler.rate_hz,
                                waiting=WAITING)
    for row in summary["self"]:
        row["code"] = frame_source(row["function"])
    summary["wall_s"] = round(timing.wall_s, 3)
    summary["mb_per_s"] = rows * row_bytes(args.payload_bytes) / MB / timing.wall_s
    summary["cpu_s"] = {str(k): v for k, v in timing.cpu_s.items()}
    summary["mode"] = "gil" if args.profile_gil else "threads"
    summary["raw_files"] = [str(p) for p in profiler.outputs]
    summary["thread_cpu"] = thread_cpu_by_group(threads.result, profiler.outputs, pids)
    summary["breakdown"] = categorise_profile(profiler.outputs, CATEGORIES, THREAD_GROUPS,
                                              waiting=WAITING)
    return summary


def thread_cpu_by_group(cpu: dict[tuple[int, int], tuple[float, float]],
                        raw_files: list[Path], pids: list[int]) -> dict[str, Any]:
    """CPU seconds (user, system) per thread group, threads named from py-spy's output."""
    names: dict[tuple[int, int], str] = {}
    for pid, path in zip(pids, raw_files, strict=True):
        names.update({(pid, tid): name for tid, name in profile_thread_names(path).items()})
    groups: dict[str, list[float]] = {}
    threads = []
    for key, (user, system) in sorted(cpu.items(), key=lambda kv: -sum(kv[1])):
        if user + system < 0.01:
            continue
        name = names.get(key, "(not seen by py-spy)")
        group = next((label for label, needles in THREAD_GROUPS
                      if any(n in name for n in needles)), "other threads")
        total = groups.setdefault(group, [0.0, 0.0])
        total[0] += user
        total[1] += system
        threads.append({"pid": key[0], "tid": key[1], "name": name, "user_s": user,
                        "system_s": system})
    return {"groups": [{"group": g, "user_s": round(u, 2), "system_s": round(sy, 2)}
                       for g, (u, sy) in sorted(groups.items(), key=lambda kv: -sum(kv[1]))],
            "threads": threads}


def print_profile(summary: dict[str, Any]) -> None:
    what = "GIL-holding" if summary["mode"] == "gil" else "busy"
    print(f"\nprofile of a throughput run ({summary['mb_per_s']:.0f} MB/s under py-spy, "
          f"{summary['wall_s']:.1f} s): {summary['samples']:,} samples of {what} threads of "
          f"both TaskExecutors (~{summary.get('busy_thread_s', 0):.1f} thread-s; "
          f"{summary['waiting_percent']:.0f}% of samples were waiting and are left out)")
    cpu = summary["thread_cpu"]["groups"]
    total = sum(g["user_s"] + g["system_s"] for g in cpu) or 1.0
    print(f"  CPU time by thread group (/proc, {total:.2f} CPU-s in all; user + system):")
    for g in cpu:
        both = g["user_s"] + g["system_s"]
        print(f"    {100 * both / total:5.1f}%  {both:5.2f} s = {g['user_s']:.2f} + "
              f"{g['system_s']:.2f}  {g['group']}")
    print("  by thread group and kind of work (% of all busy samples):")
    for group in summary["breakdown"]["groups"]:
        print(f"    {group['percent']:5.1f}%  {group['group']}")
        for cat in group["categories"][:8]:
            if cat["percent"] >= 0.5:
                print(f"        {cat['percent']:5.1f}%  {cat['category']}")
    print("  by kind of work, all threads:")
    for cat in summary["breakdown"]["categories"]:
        print(f"    {cat['percent']:5.1f}%  {cat['category']}")
    print("  threads:")
    for row in summary["threads"][:10]:
        print(f"    {row['percent']:5.1f}%  {row['function']}")
    print("  top by self time (line with the most samples):")
    for row in summary["self"][:20]:
        code = f"  | {row['code'][:60]}" if row.get("code") else ""
        print(f"    {row['percent']:5.1f}%  {row['function']}{code}")
    print("  top by total time:")
    for row in summary["total"][:20]:
        print(f"    {row['percent']:5.1f}%  {row['function']}")


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from weir.core import options
    from weir.core.config import ByteSize

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="150 MB, 2 runs, 15 s of backpressure (under 2 minutes)")
    parser.add_argument("--runs", type=int, help="timed throughput runs (default 3; quick 2)")
    parser.add_argument("--bytes", type=float,
                        help=f"Arrow bytes through the exchange per run (default "
                             f"{FULL_BYTES:.0e}; quick {QUICK_BYTES:.0e})")
    parser.add_argument("--payload-bytes", type=int, default=PAYLOAD_BYTES,
                        help=f"payload bytes per row (default {PAYLOAD_BYTES})")
    parser.add_argument("--segment-size",
                        help="network buffer size: sets taskmanager.memory.segment-size on "
                             "the cluster and the ceiling's frame size (default: the "
                             f"engine's default, {options.SEGMENT_SIZE.default})")
    parser.add_argument("--batch-size", type=int,
                        help="pipeline.batch-size of the throughput jobs (default: the "
                             "engine's default)")
    parser.add_argument("-D", dest="cluster_options", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="configuration of the cluster's daemons (repeatable)")
    parser.add_argument("--bp-seconds", type=float,
                        help="backpressure window (default 60; quick 15)")
    parser.add_argument("--bp-warmup", type=float,
                        help="seconds before the window starts (default 5; quick 3)")
    parser.add_argument("--bp-batch-size", type=int, default=BP_BATCH_SIZE,
                        help=f"pipeline.batch-size of the backpressure job ({BP_BATCH_SIZE})")
    parser.add_argument("--slow-rows-per-s", type=float, default=SLOW_ROWS_PER_S,
                        help=f"rows/s each slow consumer subtask takes ({SLOW_ROWS_PER_S:,})")
    parser.add_argument("--rss-tolerance-mb", type=float, default=RSS_TOLERANCE_MB,
                        help=f"largest RSS growth that counts as flat ({RSS_TOLERANCE_MB:.0f})")
    parser.add_argument("--skip-backpressure", action="store_true",
                        help="only the throughput and the ceiling")
    parser.add_argument("--no-verify", action="store_true", help="skip the correctness guard")
    parser.add_argument("--profile", action="store_true",
                        help="one extra throughput run under py-spy (both TaskExecutors)")
    parser.add_argument("--profile-gil", action="store_true",
                        help="like --profile, sampling only the GIL-holding thread")
    parser.add_argument("--profile-rate", type=int, default=100,
                        help="py-spy samples per second (default 100)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "shuffle.json",
                        help="where to write the JSON results")
    args = parser.parse_args(argv)
    args.profile = args.profile or args.profile_gil
    args.runs = args.runs or (2 if args.quick else 3)
    args.bytes = int(args.bytes or (QUICK_BYTES if args.quick else FULL_BYTES))
    args.bp_seconds = args.bp_seconds or (15.0 if args.quick else 60.0)
    args.bp_warmup = args.bp_warmup if args.bp_warmup is not None else (
        3.0 if args.quick else 5.0)
    try:
        args.segment_bytes = int(ByteSize.parse(args.segment_size or
                                                  options.SEGMENT_SIZE.default))
    except ValueError as err:
        parser.error(str(err))
    if args.segment_size:
        args.cluster_options.append(f"taskmanager.memory.segment-size={args.segment_bytes}b")
    if args.runs < 1 or args.payload_bytes < 1 or args.bytes < row_bytes(args.payload_bytes):
        parser.error("bad --runs, --payload-bytes or --bytes")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    begun = time.perf_counter()
    info = machine_info()
    revision = engine_revision()  # at the start: others may edit the engine meanwhile
    bytes_per_row = row_bytes(args.payload_bytes)
    rows = args.bytes // bytes_per_row
    total_bytes = rows * bytes_per_row
    config: dict[str, Any] = {}
    if args.batch_size:
        config["pipeline.batch-size"] = args.batch_size

    times: list[float] = []
    cluster_times: list[float] = []
    cpu: list[float] = []
    cpu_split: list[tuple[float, float]] = []
    empty: list[float] = []
    ceiling: list[dict[str, float]] = []
    placements: dict[str, Any] = {}
    backpressure: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    verified: float | None = None

    print(f"{rows:,} rows x {bytes_per_row} B = {total_bytes / MB:,.0f} MB per run; "
          f"ceiling frames of {args.segment_bytes:,} B", flush=True)
    print(f"starting a local cluster (2 TaskExecutors x 1 slot) in {CLUSTER_DIR}", flush=True)
    with LocalCluster(CLUSTER_DIR, taskexecutors=2, slots=1,
                      options=args.cluster_options) as cluster:
        if not args.no_verify:
            print(f"correctness guard on {VERIFY_ROWS:,} rows:", flush=True)
            verified = verify(cluster, args.payload_bytes, config)
        for _ in range(3):  # warm-up, and the fixed cost of a (nearly) empty job
            empty.append(run_throughput(cluster, EMPTY_ROWS, args.payload_bytes, config,
                                        " (empty)").wall_s)
        # One untimed full-size run: the first big job of fresh TaskExecutors also pays for
        # growing their heaps and memory pools (measured: 1.7 against 1.2 CPU-s).
        warmup = run_throughput(cluster, rows, args.payload_bytes, config, " (warm-up)")
        print(f"  warm-up: weir    {warmup.wall_s:6.2f} s (not counted)", flush=True)
        for run in range(1, args.runs + 1):
            runs = measure_ceiling(total_bytes, args.segment_bytes, CEILING_REPEATS)
            ceiling.extend(runs)
            best = min(r["seconds"] for r in runs)
            timing = run_throughput(cluster, rows, args.payload_bytes, config)
            times.append(timing.wall_s)
            cluster_times.append(timing.cluster_s)
            cpu.append(sum(timing.cpu_s.values()))
            cpu_split.append(timing.user_sys_cpu_s)
            placements = placement(timing.details)
            print(f"  run {run}/{args.runs}: weir    {timing.wall_s:6.2f} s "
                  f"{total_bytes / MB / timing.wall_s:8.1f} MB/s  "
                  f"({rate(rows / timing.wall_s)} records/s, TaskExecutors used "
                  f"{cpu[-1]:.1f} CPU-s)", flush=True)
            print(f"  run {run}/{args.runs}: ceiling {best:6.2f} s "
                  f"{total_bytes / MB / best:8.1f} MB/s  (best of {CEILING_REPEATS})",
                  flush=True)
        if args.profile:
            profile = profile_throughput(cluster, rows, args, config)
            print_profile(profile)
        if not args.skip_backpressure:
            print(f"backpressure: slow consumer ({args.slow_rows_per_s:,.0f} rows/s per "
                  f"subtask), {args.bp_warmup:.0f} s warm-up + {args.bp_seconds:.0f} s "
                  f"window ...", flush=True)
            backpressure = run_backpressure(cluster, args)

    t = median(times)
    mb_per_s = total_bytes / MB / t
    ceiling_s = median([r["seconds"] for r in ceiling])
    ceiling_mb_per_s = total_bytes / MB / ceiling_s
    overhead = median(empty)
    net = max(t - overhead, 1e-9)
    result: dict[str, Any] = {
        "benchmark": "shuffle",
        "quick": args.quick,
        "mb_per_s": mb_per_s,
        "records_per_s": rows / t,
        "ceiling_mb_per_s": ceiling_mb_per_s,
        "ratio_to_ceiling": mb_per_s / ceiling_mb_per_s,
        "target_ratio_to_ceiling": TARGET_RATIO,
        "backpressure_rss_growth_mb": backpressure["rss_growth_mb"] if backpressure else None,
        "backpressure_peak_rss_mb": backpressure["peak_rss_mb"] if backpressure else None,
        "backpressure_flat": backpressure["flat"] if backpressure else None,
        "rows": rows,
        "bytes_per_row": bytes_per_row,
        "payload_bytes_per_row": args.payload_bytes,
        "total_mb": total_bytes / MB,
        "parallelism": PARALLELISM,
        "cluster": {"taskexecutors": 2, "slots_per_taskexecutor": 1},
        "segment_size_bytes": args.segment_bytes,
        "batch_size": args.batch_size or "engine default",
        "cluster_options": args.cluster_options,
        "runs": args.runs,
        "median_s": t,
        "warmup_s": round(warmup.wall_s, 3),
        "run_s": times,
        "cluster_run_s": cluster_times,
        "taskexecutor_cpu_s": cpu,
        "taskexecutor_cpu_s_per_gb": median(cpu) / (total_bytes / 1e9),
        "taskexecutor_user_system_cpu_s": cpu_split,
        "taskexecutor_system_cpu_share": (sum(x[1] for x in cpu_split)
                                          / max(sum(x[0] + x[1] for x in cpu_split), 1e-9)),
        "empty_job_s": empty,
        "net_mb_per_s": total_bytes / MB / net,
        "net_ratio_to_ceiling": total_bytes / MB / net / ceiling_mb_per_s,
        "placement": placements,
        "half_the_data_crosses_taskexecutors": crosses_taskexecutors(placements),
        "ceiling_median_s": ceiling_s,
        "ceiling_runs": ceiling,
        "ceiling_cpu_s_per_gb": median([r["sender_cpu_s"] + r["receiver_cpu_s"]
                                        for r in ceiling]) / (total_bytes / 1e9),
        "backpressure": backpressure,
        "verified": {"rows": VERIFY_ROWS, "seconds": verified} if verified else False,
        "profile": profile,
        "machine": info,
        "engine": revision,
        "total_benchmark_s": time.perf_counter() - begun,
    }
    write_json(args.output, result)

    print()
    print(f"keyed exchange, {total_bytes / MB:,.0f} MB ({rows:,} rows x {bytes_per_row} B), "
          f"parallelism 2 on 2 TaskExecutors x 1 slot, median of {args.runs} run(s), "
          f"{info['cpu_count']} CPUs")
    rows_table = [
        ["weir keyed exchange", f"{t:.2f}", f"{mb_per_s:.1f}", rate(rows / t),
         f"{mb_per_s / ceiling_mb_per_s:.1%}", f"{result['taskexecutor_cpu_s_per_gb']:.1f}"],
        ["  net of the fixed job cost", f"{net:.2f}", f"{result['net_mb_per_s']:.1f}",
         rate(rows / net), f"{result['net_ratio_to_ceiling']:.1%}", ""],
        [f"ceiling: TCP, {args.segment_bytes // 1024} KiB frames", f"{ceiling_s:.2f}",
         f"{ceiling_mb_per_s:.1f}", "", "100.0%", f"{result['ceiling_cpu_s_per_gb']:.1f}"],
    ]
    print(format_table(["", "median s", "MB/s", "records/s", "of ceiling", "CPU-s/GB"],
                       rows_table))
    where = ("subtask i of both vertices on TaskExecutor i: about half the rows cross TCP"
             if result["half_the_data_crosses_taskexecutors"]
             else f"UNEXPECTED placement {placements}")
    print(f"fixed cost of a job: {overhead:.2f} s; {where}")
    print(f"TaskExecutor CPU: {result['taskexecutor_system_cpu_share']:.0%} of it in the kernel "
          f"(system time: socket copies, wake-ups)")
    ok = mb_per_s / ceiling_mb_per_s >= TARGET_RATIO
    print(f"target: >= {TARGET_RATIO:.0%} of the ceiling: {'yes' if ok else 'NO'}")
    if backpressure:
        bp = backpressure
        print()
        print(f"backpressure, {bp['window_s']:.0f} s window: slow consumer at "
              f"{bp['slow_rows_per_s_per_subtask']:,.0f} rows/s per subtask, "
              f"{bp['batch_size']:,}-row batches, {bp['samples']} samples")
        print(format_table(
            ["TaskExecutor", "RSS first 20% MB", "peak MB", "growth MB", "slope MB/min",
             "last MB"],
            [[f"pid {te['pid']}", f"{te['baseline_rss_mb']:.1f}", f"{te['peak_rss_mb']:.1f}",
              f"{te['growth_mb']:.1f}", f"{te['slope_mb_per_min']:.2f}",
              f"{te['last_rss_mb']:.1f}"] for te in bp["taskexecutors"]]))
        print(f"source backpressured {bp['source_back_pressured_ms_per_s']:.0f} ms/s "
              f"(busy {bp['source_busy_ms_per_s']:.0f} ms/s); consumer busy "
              f"{bp['consumer_busy_ms_per_s']:.0f} ms/s; {bp['exchange_mb_in_window']:.0f} MB "
              f"({bp['exchange_mb_per_s']:.1f} MB/s) went through the exchange in the window")
        print(f"RSS flat (growth <= {bp['rss_tolerance_mb']:.0f} MB): "
              f"{'yes' if bp['flat'] else 'NO'}; job ended {bp['final_status']}")
    print(f"results written to {args.output} (total {result['total_benchmark_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; the cluster was stopped", file=sys.stderr)
        sys.exit(130)
