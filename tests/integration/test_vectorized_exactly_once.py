"""Exactly once for the vectorised keyed aggregations (``key_by("word").count()`` and
``.sum("n")``), whose totals live in columns written back to the keyed backend at each
checkpoint: TaskExecutors are SIGKILLed mid-job, and the committed running counts must be
exactly 1..total per key, the running sums one per record, all different and ending at each
key's total."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.exactly_once import committed_output, diff, run_job_with_kills

JOB = '''
import os
import sys
import time

from weir import FileSink, StreamExecutionEnvironment

OUT, N, KEYS, GATE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def throttle(n):
    if n % 200 == 0:
        held = n >= N // 2 and not os.path.exists(GATE)
        time.sleep(0.4 if held else 0.02)
    return {"word": "w%d" % (n % KEYS), "n": n + 1}


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
rows = env.from_sequence(0, N - 1).map(throttle)
counts = rows.key_by("word").count().map(lambda r: ("count", r.word, r.count))
sums = rows.key_by("word").sum("n").map(lambda r: ("sum", r.word, r.n))
counts.union(sums).sink_to(FileSink(OUT, format="json"))
env.execute("vectorised exactly once")
'''

N = 20_000
KEYS = 101


@pytest.mark.parametrize(("backend", "unaligned"), [("hashmap", False), ("rocksdb", True)])
def test_vectorised_aggregations_are_exactly_once_under_taskexecutor_kills(
        cluster_factory: Any, tmp_path: Path, backend: str, unaligned: bool) -> None:
    cluster = cluster_factory(4, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = {"state.backend.type": backend,
              "execution.checkpointing.unaligned.enabled": str(unaligned).lower()}
    run_job_with_kills(cluster, tmp_path, JOB, [str(out), str(N), str(KEYS), str(gate)], 2,
                       config=config, gate=gate)
    got = committed_output(out)
    per_key = Counter(f"w{i % KEYS}" for i in range(N))
    totals: dict[str, int] = defaultdict(int)
    for i in range(N):
        totals[f"w{i % KEYS}"] += i + 1
    counts = Counter({r: c for r, c in got.items() if r[0] == "count"})
    expected = Counter(("count", key, c) for key, total in per_key.items()
                       for c in range(1, total + 1))
    assert counts == expected, diff(expected, counts)
    sums: dict[str, list[int]] = defaultdict(list)
    for record, times in got.items():
        if record[0] == "sum":
            sums[record[1]].extend([record[2]] * times)
    # Values are positive: a key's running sums are distinct, one per record, and the
    # largest is its total; a record counted twice would pass the total.
    assert {k: len(v) for k, v in sums.items()} == dict(per_key)
    assert {k: max(v) for k, v in sums.items()} == dict(totals)
    assert all(len(set(v)) == len(v) for v in sums.values())
