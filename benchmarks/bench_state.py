"""Keyed state backends: update throughput, checkpoint size and time, rescaling, lazy restore.

What is measured
----------------
All in this process (no cluster): the state backends are used the way a task uses them.
Each number is the median of ``--runs`` runs (3; 2 with ``--quick``), and every ratio is
taken between numbers of the same run of this script.

1. Keyed updates/s (``updates``): N read-modify-write updates (a counter per key, 100,000
   distinct int keys, every batch of 4,096 a slice of a shuffled key sequence, so no key
   twice in one batch) on ``hashmap`` and ``rocksdb``:

   * per record: ``set_current_key(key, key_group)``, ``ValueState.value()``,
     ``ValueState.update(v + 1)``, as a per-record operator does;
   * vectorised: ``get_many`` and ``put_many`` per batch, as a vectorised operator does
     (key groups computed once per batch with ``key_groups_of_array``).

   Also RocksDB's multi-get (``get_many``) against a loop of single gets on the same keys.

2. Snapshots (``snapshot``): RocksDB state of ``--state-mb`` MB (1 GB; 96 MB with
   ``--quick``) — int keys with random (incompressible) 256-byte values — written with
   ``put_many`` and compacted once so the LSM tree is settled. Then, to a directory
   (``file://``) and to S3 (SeaweedFS on loopback, started here):

   * full: a native snapshot with no previous checkpoint (uploads every file); the
     synchronous part (flush + RocksDB checkpoint) and the upload are timed separately;
   * incremental: 1% of the keys get new values, then a native snapshot based on the last
     confirmed one. ``incremental_upload_fraction`` = bytes it uploaded / full size;
   * canonical: the backend-independent full snapshot (to the directory only).

3. Rescaling (``rescale``): the same amount of RocksDB state, checkpointed by 2 subtasks
   (native snapshots in a directory), restored into 3 new subtasks, and the 3 resulting
   subtasks' checkpoints (compacted first) restored into 2. Each new subtask is restored
   into a fresh backend with ``clip`` (base instance + ``delete_range``, insert the
   others' in-range rows) and with ``baseline`` (empty instance, insert every in-range
   row), alternately in each run. Time = sum over the new subtasks (one after the other:
   the machine has 2 cores); ``rescale_3_to_2_speedup`` = baseline / clip (target >= 2).
   A sample of keys is read back from each new subtask and checked.

4. Lazy restore (``lazy``): ``--lazy-keys`` keys (1 M; 200 k quick) in canonical
   snapshots of 2 old subtasks, restored into 1 subtask: the time until the first record
   (a random key) is processed, and until the whole state is loaded, against an eager
   restore of the same snapshots.

Results: a table on stdout and ``benchmarks/results/state.json``.

Usage::

    python benchmarks/bench_state.py --quick            # under 2 minutes
    python benchmarks/bench_state.py                    # 1 GB of RocksDB state
    python benchmarks/bench_state.py --skip-s3 --state-mb 256
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from common import (
    BUILD_DIR,
    RESULTS_DIR,
    engine_revision,
    format_table,
    machine_info,
    median,
    rate,
    write_json,
)

from weir.checkpoint.storage import CheckpointStorageAccess, create_storage
from weir.state.backend import MISSING, KeyedStateBackend
from weir.state.descriptors import ValueStateDescriptor
from weir.state.handles import KeyedStateHandle
from weir.state.heap import HeapKeyedStateBackend
from weir.state.incremental import IncrementalSnapshotStrategy
from weir.state.key_groups import KeyGroupRange, key_group_range_for_operator, key_groups_of_array
from weir.state.local_recovery import LocalCopyTracker
from weir.state.restore import restore
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.snapshot import CanonicalSnapshotStrategy, SnapshotLocation

MAX_PAR = 128
ALL = KeyGroupRange(0, MAX_PAR - 1)
MB = 1_000_000
VALUE_BYTES = 256
#: Bytes a row takes in RocksDB files (measured: key, pickled 256-byte value, overhead).
ROW_BYTES = 290
BATCH = 4096
UPDATE_KEYS = 100_000
CHANGED_FRACTION = 0.01
WORK_DIR = BUILD_DIR / "bench-state"


# -- helpers -----------------------------------------------------------------------------------


class Values:
    """Deterministic incompressible values: row i's value is a slice of a random pool,
    shifted by a generation so rewritten rows get new bytes."""

    def __init__(self, seed: int = 1) -> None:
        self.pool = np.random.default_rng(seed).bytes(1 << 22)
        self.slots = (len(self.pool) - VALUE_BYTES) // 7

    def of(self, keys: list[int], generation: int = 0) -> list[bytes]:
        pool, slots, size = self.pool, self.slots, VALUE_BYTES
        starts = [((k + generation * 7919) % slots) * 7 for k in keys]
        return [pool[s:s + size] for s in starts]


def key_groups(keys: np.ndarray) -> np.ndarray:
    return key_groups_of_array(pa.array(keys), MAX_PAR)


def fill(backend: KeyedStateBackend, keys: np.ndarray, values: Values, generation: int = 0,
         chunk: int = 50_000) -> None:
    backend.get_state(ValueStateDescriptor("v"))
    for start in range(0, len(keys), chunk):
        part = keys[start:start + chunk]
        listed = part.tolist()
        backend.put_many("v", key_groups(part), listed, None, values.of(listed, generation))


def rocksdb(directory: Path, key_range: KeyGroupRange = ALL) -> RocksDBKeyedStateBackend:
    return RocksDBKeyedStateBackend(MAX_PAR, key_range, tempfile.mkdtemp(dir=directory))


def subtasks(parallelism: int) -> list[KeyGroupRange]:
    return [key_group_range_for_operator(MAX_PAR, parallelism, i) for i in range(parallelism)]


def in_range(keys: np.ndarray, groups: np.ndarray, key_range: KeyGroupRange) -> np.ndarray:
    return keys[(groups >= key_range.start) & (groups <= key_range.end)]


def say(text: str) -> None:
    print(text, flush=True)


# -- 1. updates --------------------------------------------------------------------------------


def update_keys(updates: int, seed: int) -> list[np.ndarray]:
    """Batches of keys: consecutive slices of shuffled passes over the key space."""
    rng = np.random.default_rng(seed)
    batches: list[np.ndarray] = []
    while sum(len(b) for b in batches) < updates:
        order = rng.permutation(UPDATE_KEYS).astype(np.int64)
        batches.extend(order[i:i + BATCH] for i in range(0, UPDATE_KEYS, BATCH))
    return batches


def per_record(backend: KeyedStateBackend, batches: list[np.ndarray], updates: int) -> float:
    state = backend.get_state(ValueStateDescriptor("count"))
    done = 0
    started = time.perf_counter()
    for batch in batches:
        groups = key_groups(batch).tolist()  # the shuffle computed these already
        for key, group in zip(batch.tolist(), groups, strict=True):
            backend.set_current_key(key, group)
            value = state.value()
            state.update(1 if value is None else value + 1)
        done += len(groups)
        if done >= updates:
            break
    return done / (time.perf_counter() - started)


def vectorised(backend: KeyedStateBackend, batches: list[np.ndarray], updates: int) -> float:
    backend.get_state(ValueStateDescriptor("count"))
    done = 0
    started = time.perf_counter()
    for batch in batches:
        groups = key_groups(batch)
        keys = batch.tolist()
        old = backend.get_many("count", groups, keys)
        backend.put_many("count", groups, keys, None,
                         [1 if v is MISSING else v + 1 for v in old])
        done += len(keys)
        if done >= updates:
            break
    return done / (time.perf_counter() - started)


def multi_get_vs_loop(directory: Path, batches: list[np.ndarray]) -> tuple[float, float]:
    backend = rocksdb(directory)
    try:
        vectorised(backend, batches, UPDATE_KEYS)
        sample = batches[:40]
        started = time.perf_counter()
        for batch in sample:
            backend.get_many("count", key_groups(batch), batch.tolist())
        many = time.perf_counter() - started
        started = time.perf_counter()
        for batch in sample:  # the same through the generic per-key primitive
            KeyedStateBackend._get_many(backend, "count", key_groups(batch).tolist(),
                                        batch.tolist(), None)
        loop = time.perf_counter() - started
        rows = sum(len(b) for b in sample)
        return rows / many, rows / loop
    finally:
        backend.dispose()


def bench_updates(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    batches = update_keys(args.updates, seed=3)
    rates: dict[str, list[float]] = {}
    for run in range(args.runs):
        for kind in ("hashmap", "rocksdb"):
            for form, fn in (("per_record", per_record), ("vectorised", vectorised)):
                backend: KeyedStateBackend = HeapKeyedStateBackend(MAX_PAR, ALL) \
                    if kind == "hashmap" else rocksdb(directory)
                try:
                    rates.setdefault(f"{kind}_{form}", []).append(
                        fn(backend, batches, args.updates))
                finally:
                    backend.dispose()
        say(f"  updates run {run + 1}/{args.runs}: " + ", ".join(
            f"{k} {rate(v[-1])}/s" for k, v in rates.items()))
    many, loop = [], []
    for _ in range(args.runs):
        m, lo = multi_get_vs_loop(directory, batches)
        many.append(m)
        loop.append(lo)
    result: dict[str, Any] = {f"{k}_per_s": median(v) for k, v in rates.items()}
    result["runs_per_s"] = rates
    result["updates"] = args.updates
    result["distinct_keys"] = UPDATE_KEYS
    result["batch"] = BATCH
    result["rocksdb_multi_get_per_s"] = median(many)
    result["rocksdb_single_get_loop_per_s"] = median(loop)
    result["rocksdb_multi_get_speedup"] = median(many) / median(loop)
    return result


# -- 2. snapshots ------------------------------------------------------------------------------


def timed_snapshot(strategy: Any, checkpoint_id: int, location: SnapshotLocation
                   ) -> tuple[float, float, KeyedStateHandle]:
    started = time.perf_counter()
    running = strategy.snapshot(checkpoint_id, location)
    synchronous = time.perf_counter() - started
    handle = running.run()
    return synchronous, time.perf_counter() - started - synchronous, handle


def bench_snapshots(args: argparse.Namespace, directory: Path, values: Values,
                    targets: dict[str, CheckpointStorageAccess]) -> dict[str, Any]:
    rows = args.state_mb * MB // ROW_BYTES
    keys = np.arange(rows, dtype=np.int64)
    backend = rocksdb(directory)
    result: dict[str, Any] = {"rows": rows, "value_bytes": VALUE_BYTES}
    try:
        started = time.perf_counter()
        fill(backend, keys, values)
        result["fill_s"] = time.perf_counter() - started
        generation = 1
        rng = np.random.default_rng(5)
        for target, storage in targets.items():
            started = time.perf_counter()
            backend.compact()  # settle the LSM tree: compaction is not what is measured
            result[f"{target}_settle_s"] = time.perf_counter() - started
            full: list[tuple[float, float, KeyedStateHandle]] = []
            strategy = None
            for run in range(args.full_runs):
                strategy = IncrementalSnapshotStrategy(backend, LocalCopyTracker())
                if run:
                    storage.delete_prefix("state-bench")
                location = SnapshotLocation.for_checkpoint(storage, "state-bench", 1, "op-0")
                full.append(timed_snapshot(strategy, 1, location))
                say(f"  {target} full snapshot: {full[-1][0]:.2f} s sync + "
                    f"{full[-1][1]:.2f} s upload, {full[-1][2].state_size / MB:,.0f} MB")
            assert strategy is not None
            strategy.notify_checkpoint_complete(1)
            size = full[-1][2].state_size
            incremental: list[tuple[float, float, KeyedStateHandle]] = []
            for run in range(args.runs):
                changed = rng.choice(rows, int(rows * CHANGED_FRACTION), replace=False)
                fill(backend, np.sort(changed).astype(np.int64), values, generation)
                generation += 1
                n = 2 + run
                location = SnapshotLocation.for_checkpoint(storage, "state-bench", n, "op-0")
                incremental.append(timed_snapshot(strategy, n, location))
                strategy.notify_checkpoint_complete(n)
                handle = incremental[-1][2]
                say(f"  {target} incremental snapshot: {incremental[-1][0]:.2f} s sync + "
                    f"{incremental[-1][1]:.2f} s upload, "
                    f"{handle.checkpointed_size / MB:,.2f} MB "
                    f"({handle.checkpointed_size / size:.2%} of {size / MB:,.0f} MB)")
            result[target] = {
                "full_sync_s": median([f[0] for f in full]),
                "full_upload_s": median([f[1] for f in full]),
                "full_s": median([f[0] + f[1] for f in full]),
                "full_bytes": size,
                "full_files": len(full[-1][2].shared_state()) + len(full[-1][2].private_state()),
                "incremental_sync_s": median([i[0] for i in incremental]),
                "incremental_upload_s": median([i[1] for i in incremental]),
                "incremental_s": median([i[0] + i[1] for i in incremental]),
                "incremental_bytes": median([i[2].checkpointed_size for i in incremental]),
                "incremental_upload_fraction": median(
                    [i[2].checkpointed_size / size for i in incremental]),
                "incremental_runs": [{"sync_s": i[0], "upload_s": i[1],
                                      "uploaded_bytes": i[2].checkpointed_size,
                                      "files_reused": getattr(i[2], "files_reused", 0)}
                                     for i in incremental],
                "full_runs": [{"sync_s": f[0], "upload_s": f[1]} for f in full],
            }
            storage.delete_prefix("state-bench")
        storage = targets["file"]
        canonical = CanonicalSnapshotStrategy(backend)
        location = SnapshotLocation.for_checkpoint(storage, "state-bench", 100, "op-0")
        sync, upload, handle = timed_snapshot(canonical, 100, location)
        result["canonical_file"] = {"sync_s": sync, "upload_s": upload, "s": sync + upload,
                                    "bytes": handle.state_size}
        say(f"  canonical full snapshot to file: {sync + upload:.2f} s, "
            f"{handle.state_size / MB:,.0f} MB")
        storage.delete_prefix("state-bench")
    finally:
        backend.dispose()
    return result


# -- 3. rescaling ------------------------------------------------------------------------------


def checkpoint_subtasks(backends: list[RocksDBKeyedStateBackend], storage: CheckpointStorageAccess,
                        tag: str) -> list[KeyedStateHandle]:
    handles = []
    for index, backend in enumerate(backends):
        backend.compact()  # also drops what clipping deleted
        location = SnapshotLocation.for_checkpoint(storage, "rescale", 1, f"{tag}-{index}")
        handles.append(backend.snapshot_to(1, location).run())
    return handles


def check_sample(backend: KeyedStateBackend, keys: np.ndarray, groups: np.ndarray,
                 values: Values, rng: random.Random) -> None:
    mine = in_range(keys, groups, backend.key_group_range)
    sample = np.array(sorted(rng.sample(mine.tolist(), min(200, len(mine)))), dtype=np.int64)
    listed = sample.tolist()
    got = backend.get_many("v", key_groups(sample), listed)
    if got != values.of(listed):
        msg = f"rescaled subtask {backend.key_group_range} returned wrong values"
        raise AssertionError(msg)


def restore_all(handles: list[KeyedStateHandle], storage: CheckpointStorageAccess,
                parallelism: int, method: str, directory: Path, verify: Callable[[Any], None],
                keep: bool, phases: dict[str, float]
                ) -> tuple[float, list[float], list[RocksDBKeyedStateBackend]]:
    times = []
    kept = []
    for key_range in subtasks(parallelism):
        backend = rocksdb(directory, key_range)
        backend.get_state(ValueStateDescriptor("v"))
        started = time.perf_counter()
        native = restore(backend, handles, storage, rescale_method=method).native
        times.append(time.perf_counter() - started)
        assert native is not None
        phases["fetch_s"] += native.fetch_seconds
        phases["insert_s"] += native.insert_seconds
        phases["rows_inserted"] += native.rows_inserted
        verify(backend)
        if keep:
            kept.append(backend)
        else:
            backend.dispose()
    return sum(times), times, kept


def bench_rescale(args: argparse.Namespace, directory: Path, values: Values,
                  storage: CheckpointStorageAccess) -> dict[str, Any]:
    rows = args.state_mb * MB // ROW_BYTES
    keys = np.arange(rows, dtype=np.int64)
    groups = key_groups(keys)
    rng = random.Random(9)

    def verify(backend: KeyedStateBackend) -> None:
        check_sample(backend, keys, groups, values, rng)

    started = time.perf_counter()
    old = [rocksdb(directory, r) for r in subtasks(2)]
    for backend in old:
        fill(backend, in_range(keys, groups, backend.key_group_range), values)
    two = checkpoint_subtasks(old, storage, "p2")
    for backend in old:
        backend.dispose()
    build_s = time.perf_counter() - started
    result: dict[str, Any] = {"rows": rows, "state_bytes": sum(h.state_size for h in two),
                              "build_s": build_s}
    say(f"  state for rescaling: {result['state_bytes'] / MB:,.0f} MB in 2 subtasks "
        f"({build_s:.1f} s to build)")
    three: list[KeyedStateHandle] = []
    for label, old_handles, new_p in (("2_to_3", two, 3), ("3_to_2", None, 2)):
        times: dict[str, list[float]] = {"clip": [], "baseline": []}
        per_subtask: dict[str, list[list[float]]] = {"clip": [], "baseline": []}
        phases: dict[str, list[dict[str, float]]] = {"clip": [], "baseline": []}
        for run in range(args.rescale_runs):
            for method in ("clip", "baseline") if run % 2 == 0 else ("baseline", "clip"):
                handles = old_handles if old_handles is not None else three
                keep = label == "2_to_3" and method == "clip" and not three
                phase = {"fetch_s": 0.0, "insert_s": 0.0, "rows_inserted": 0}
                total, each, kept = restore_all(handles, storage, new_p, method, directory,
                                                verify, keep, phase)
                times[method].append(total)
                phases[method].append(phase)
                per_subtask[method].append(each)
                if kept:
                    three = checkpoint_subtasks(kept, storage, "p3")
                    for backend in kept:
                        backend.dispose()
                say(f"  rescale {label.replace('_', ' ')} run {run + 1}/{args.rescale_runs}:"
                    f" {method:8} {total:6.2f} s (" + ", ".join(f"{t:.2f}" for t in each)
                    + f" s per new subtask; fetch {phase['fetch_s']:.2f} s, insert "
                    f"{phase['insert_s']:.2f} s, {phase['rows_inserted']:,} rows inserted)")
        clip, baseline = median(times["clip"]), median(times["baseline"])
        result[label] = {
            "clip_s": clip, "baseline_s": baseline, "speedup": baseline / clip,
            "clip_runs_s": times["clip"], "baseline_runs_s": times["baseline"],
            "clip_per_subtask_s": per_subtask["clip"],
            "baseline_per_subtask_s": per_subtask["baseline"],
            "clip_phases": phases["clip"], "baseline_phases": phases["baseline"],
        }
    storage.delete_prefix("rescale")
    return result


# -- 4. lazy restore ---------------------------------------------------------------------------


def bench_lazy(args: argparse.Namespace, directory: Path, values: Values,
               storage: CheckpointStorageAccess) -> dict[str, Any]:
    keys = np.arange(args.lazy_keys, dtype=np.int64)
    groups = key_groups(keys)
    handles = []
    for index, key_range in enumerate(subtasks(2)):
        part = HeapKeyedStateBackend(MAX_PAR, key_range)
        fill(part, in_range(keys, groups, key_range), values)
        location = SnapshotLocation.for_checkpoint(storage, "lazy", 1, f"op-{index}")
        handles.append(part.snapshot_to(1, location).run())
        part.dispose()
    rng = random.Random(4)
    result: dict[str, Any] = {"keys": args.lazy_keys,
                              "snapshot_bytes": sum(h.state_size for h in handles)}
    for kind in ("hashmap", "rocksdb"):
        first, full, eager = [], [], []
        for _ in range(args.runs):
            probe = rng.randrange(args.lazy_keys)
            probe_group = int(key_groups(np.array([probe], dtype=np.int64))[0])
            backend: KeyedStateBackend = HeapKeyedStateBackend(MAX_PAR, ALL) \
                if kind == "hashmap" else rocksdb(directory)
            state = backend.get_state(ValueStateDescriptor("v"))
            started = time.perf_counter()
            lazy = restore(backend, handles, storage, lazy=True).lazy
            backend.set_current_key(probe, probe_group)
            value = state.value()
            first.append(time.perf_counter() - started)
            assert lazy is not None
            lazy.wait_until_loaded()
            full.append(lazy.finished_at - started)
            if value != values.of([probe])[0]:
                msg = "lazy restore returned a wrong value"
                raise AssertionError(msg)
            backend.dispose()
            backend = HeapKeyedStateBackend(MAX_PAR, ALL) if kind == "hashmap" \
                else rocksdb(directory)
            backend.get_state(ValueStateDescriptor("v"))
            started = time.perf_counter()
            restore(backend, handles, storage, lazy=False)
            eager.append(time.perf_counter() - started)
            backend.dispose()
        result[kind] = {"first_record_s": median(first), "full_restore_s": median(full),
                        "eager_restore_s": median(eager), "first_record_runs_s": first,
                        "full_restore_runs_s": full, "eager_restore_runs_s": eager}
        say(f"  lazy restore into {kind}: first record after {median(first):.3f} s, all "
            f"loaded after {median(full):.2f} s (eager restore: {median(eager):.2f} s)")
    storage.delete_prefix("lazy")
    return result


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smaller state and fewer runs: under 2 minutes")
    parser.add_argument("--runs", type=int, help="runs per measurement (default 3; quick 2)")
    parser.add_argument("--state-mb", type=int,
                        help="RocksDB state for snapshots and rescaling (default 1000; "
                             "quick 96)")
    parser.add_argument("--updates", type=int,
                        help="updates per throughput run (default 1,000,000; quick 200,000)")
    parser.add_argument("--lazy-keys", type=int,
                        help="keys of the lazy restore (default 1,000,000; quick 200,000)")
    parser.add_argument("--skip-s3", action="store_true", help="snapshots to file:// only")
    parser.add_argument("--no-revision", action="store_true",
                        help="do not record the engine's commit (skips calling git)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "state.json",
                        help="where the JSON results go")
    args = parser.parse_args(argv)
    args.runs = args.runs or (2 if args.quick else 3)
    args.state_mb = args.state_mb or (96 if args.quick else 1000)
    args.updates = args.updates or (200_000 if args.quick else 1_000_000)
    args.lazy_keys = args.lazy_keys or (200_000 if args.quick else 1_000_000)
    # Full snapshots and rescaling move the whole state each time: fewer runs there.
    args.full_runs = 1 if args.quick else 2
    args.rescale_runs = 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    begun = time.perf_counter()
    info = machine_info()
    revision = None if args.no_revision else engine_revision()
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="run-", dir=WORK_DIR))
    values = Values()
    result: dict[str, Any] = {"benchmark": "state", "quick": args.quick, "runs": args.runs,
                              "state_mb": args.state_mb}
    seaweed = None
    try:
        file_storage = create_storage(str(directory / "checkpoints"))
        targets: dict[str, CheckpointStorageAccess] = {"file": file_storage}
        if not args.skip_s3:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests.support.seaweedfs import SeaweedS3

            seaweed = SeaweedS3(data_dir=directory / "seaweed").start()
            seaweed.client().create_bucket(Bucket="state-bench")
            targets["s3"] = create_storage("s3://state-bench/checkpoints",
                                           seaweed.config("state-bench"))
        say(f"keyed updates ({args.updates:,} per run, {UPDATE_KEYS:,} keys):")
        result["updates"] = bench_updates(args, directory)
        say(f"snapshots of {args.state_mb:,} MB of RocksDB state:")
        result["snapshot"] = bench_snapshots(args, directory, values, targets)
        say(f"rescaling {args.state_mb:,} MB of RocksDB state:")
        result["rescale"] = bench_rescale(args, directory, values, file_storage)
        say(f"lazy restore of {args.lazy_keys:,} keys:")
        result["lazy"] = bench_lazy(args, directory, values, file_storage)
    finally:
        if seaweed is not None:
            seaweed.stop()
        shutil.rmtree(directory, ignore_errors=True)

    snapshot, rescale = result["snapshot"], result["rescale"]
    result["rescale_3_to_2_speedup"] = rescale["3_to_2"]["speedup"]
    result["rescale_2_to_3_speedup"] = rescale["2_to_3"]["speedup"]
    result["incremental_upload_fraction"] = snapshot["file"]["incremental_upload_fraction"]
    result["targets"] = {"rescale_3_to_2_speedup": 2.0}
    result["machine"] = info
    result["engine"] = revision
    result["total_benchmark_s"] = time.perf_counter() - begun
    write_json(args.output, result)
    print_tables(result)
    return 0


def print_tables(result: dict[str, Any]) -> None:
    updates = result["updates"]
    print()
    print(f"keyed updates/s (median of {result['runs']} runs, {updates['updates']:,} "
          f"read-modify-writes over {updates['distinct_keys']:,} keys):")
    rows = []
    for kind in ("hashmap", "rocksdb"):
        per, vec = updates[f"{kind}_per_record_per_s"], updates[f"{kind}_vectorised_per_s"]
        rows.append([kind, rate(per), rate(vec), f"{vec / per:.1f}x"])
    print(format_table(["backend", "per record", "vectorised", "ratio"], rows))
    print(f"rocksdb multi-get {rate(updates['rocksdb_multi_get_per_s'])}/s vs single gets "
          f"{rate(updates['rocksdb_single_get_loop_per_s'])}/s "
          f"({updates['rocksdb_multi_get_speedup']:.2f}x)")
    snapshot = result["snapshot"]
    print()
    print(f"snapshots of {result['state_mb']:,} MB of RocksDB state "
          f"({snapshot['rows']:,} rows), incremental after {CHANGED_FRACTION:.0%} of keys "
          "changed:")
    rows = []
    for target in ("file", "s3"):
        if target not in snapshot:
            continue
        s = snapshot[target]
        rows.append([f"{target} full", f"{s['full_sync_s']:.2f}", f"{s['full_upload_s']:.2f}",
                     f"{s['full_bytes'] / MB:,.1f}", "100%"])
        rows.append([f"{target} incremental", f"{s['incremental_sync_s']:.2f}",
                     f"{s['incremental_upload_s']:.2f}",
                     f"{s['incremental_bytes'] / MB:,.2f}",
                     f"{s['incremental_upload_fraction']:.2%}"])
    c = snapshot["canonical_file"]
    rows.append(["file canonical (full)", f"{c['sync_s']:.2f}", f"{c['upload_s']:.2f}",
                 f"{c['bytes'] / MB:,.1f}", ""])
    print(format_table(["snapshot", "sync s", "async s", "uploaded MB", "of full"], rows))
    rescale = result["rescale"]
    print()
    print(f"rescaling {rescale['state_bytes'] / MB:,.0f} MB of RocksDB state (sum over the new "
          "subtasks, median of runs):")
    rows = []
    for label in ("2_to_3", "3_to_2"):
        r = rescale[label]
        rows.append([label.replace("_", " "), f"{r['clip_s']:.2f}", f"{r['baseline_s']:.2f}",
                     f"{r['speedup']:.2f}x"])
    print(format_table(["", "clip s", "baseline s", "speedup"], rows))
    lazy = result["lazy"]
    print()
    print(f"lazy restore of {lazy['keys']:,} keys ({lazy['snapshot_bytes'] / MB:,.0f} MB "
          "canonical, 2 old subtasks -> 1):")
    rows = []
    for kind in ("hashmap", "rocksdb"):
        r = lazy[kind]
        rows.append([kind, f"{r['first_record_s']:.3f}", f"{r['full_restore_s']:.2f}",
                     f"{r['eager_restore_s']:.2f}"])
    print(format_table(["into", "first record s", "all loaded s", "eager s"], rows))
    print(f"\nrescale 3->2 speedup {result['rescale_3_to_2_speedup']:.2f}x (target >= 2), "
          f"2->3 {result['rescale_2_to_3_speedup']:.2f}x; incremental upload fraction "
          f"{result['incremental_upload_fraction']:.2%}; {result['total_benchmark_s']:.0f} s "
          "in all")


if __name__ == "__main__":
    sys.exit(main())
