"""Checkpoint sizes with and without the changelog state backend, in one process.

A keyed backend holds ``--keys`` values (about 100 bytes each); between two checkpoints
``--updates`` random keys change. Each configuration (hashmap, rocksdb; plain and with
the changelog) takes ``--checkpoints`` checkpoints to a local directory and prints, per
configuration, the median and largest upload of a checkpoint (``checkpointed_size``),
the state size a restore reads, the median time of a checkpoint's synchronous and
asynchronous parts, and the time of a restore from the last checkpoint. The changelog
runs one materialization halfway (as its periodic schedule would).

Run: ``.venv/bin/python benchmarks/bench_changelog.py [--keys N] [--updates N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from weir.checkpoint.changelog_storage import ChangelogStorage, ChangelogStorageOptions
from weir.checkpoint.storage import create_storage
from weir.core.ids import CheckpointId
from weir.state.backend import KeyedStateBackend
from weir.state.changelog import ChangelogKeyedStateBackend
from weir.state.descriptors import ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange
from weir.state.restore import restore
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.snapshot import SnapshotLocation

ALL = KeyGroupRange(0, 127)


def _plain(kind: str, root: Path) -> KeyedStateBackend:
    if kind == "hashmap":
        return HeapKeyedStateBackend(128, ALL)
    return RocksDBKeyedStateBackend(128, ALL, tempfile.mkdtemp(dir=root))


def run(kind: str, changelog: bool, keys: int, updates: int, checkpoints: int,
        root: Path) -> dict[str, Any]:
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
        started = time.perf_counter()
        running = state.snapshot_to(CheckpointId(n), SnapshotLocation.for_checkpoint(
            storage, "job", CheckpointId(n), "op"))
        middle = time.perf_counter()
        handle = running.run()
        done = time.perf_counter()
        state.notify_checkpoint_complete(CheckpointId(n))
        sync_ms.append((middle - started) * 1000)
        async_ms.append((done - middle) * 1000)
        if n > 1:  # the first checkpoint uploads everything in every configuration
            uploads.append(handle.checkpointed_size)
    assert handle is not None
    fresh = backend()
    started = time.perf_counter()
    restore(fresh, [handle], storage)
    restore_s = time.perf_counter() - started
    for b in made:
        b.dispose()
    log.close()
    return {"backend": kind, "changelog": changelog,
            "checkpointed_median_bytes": int(statistics.median(uploads)),
            "checkpointed_max_bytes": max(uploads), "state_size_bytes": handle.state_size,
            "sync_median_ms": round(statistics.median(sync_ms), 1),
            "async_median_ms": round(statistics.median(async_ms), 1),
            "restore_s": round(restore_s, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--updates", type=int, default=2_000)
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--quick", action="store_true",
                        help="20 000 keys, 200 changes per checkpoint (seconds)")
    args = parser.parse_args()
    if args.quick:
        args.keys, args.updates = 20_000, 200
    rows = []
    with tempfile.TemporaryDirectory(prefix="weir-bench-changelog-") as scratch:
        for kind in ("hashmap", "rocksdb"):
            for changelog in (False, True):
                root = Path(scratch) / f"{kind}-{changelog}"
                root.mkdir()
                row = run(kind, changelog, args.keys, args.updates, args.checkpoints, root)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{'backend':8} {'changelog':9} {'upload median':>14} {'upload max':>12} "
          f"{'state':>12} {'sync ms':>8} {'async ms':>9} {'restore s':>9}")
    for r in rows:
        print(f"{r['backend']:8} {r['changelog']!s:9} {r['checkpointed_median_bytes']:>14,} "
              f"{r['checkpointed_max_bytes']:>12,} {r['state_size_bytes']:>12,} "
              f"{r['sync_median_ms']:>8} {r['async_median_ms']:>9} {r['restore_s']:>9}")


if __name__ == "__main__":
    main()
