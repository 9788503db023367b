"""BATCH runtime mode: blocking exchanges, stages one after another, slots freed per stage."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support.cluster import ClientEnvironment, LocalCluster
from weir import InvalidJobError


def _stamp(directory: str, stage: str):
    """A map function that records when each subtask first and last ran."""
    import os
    import time

    def fn(value):
        path = os.path.join(directory, f"{stage}-{os.getpid()}-{id(fn)}")
        now = time.time()
        with open(path, "a") as f:
            f.write(f"{now}\n")
        return value

    return fn


def test_batch_job_runs_stage_after_stage(shared_cluster: LocalCluster, tmp_path: Path):
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    words = [f"w{i % 97}" for i in range(20_000)]
    with ClientEnvironment(shared_cluster) as env:
        env.set_runtime_mode("BATCH")
        env.set_parallelism(2)
        env.configure({"pipeline.batch-size": 1000})
        counts = (env.from_collection(words).map(_stamp(str(stamps), "a"))
                  .key_by(lambda w: w).map(lambda w: (w, 1)).map(_stamp(str(stamps), "b"))
                  .key_by(lambda t: t[0]).reduce(lambda x, y: (x[0], x[1] + y[1])))
        results = list(counts.execute_and_collect("batch word count"))
    # BATCH semantics (as Flink's): one final count per word, no running updates.
    assert sorted(results) == sorted(Counter(words).items())
    a_times = [float(t) for p in stamps.glob("a-*") for t in p.read_text().split()]
    b_times = [float(t) for p in stamps.glob("b-*") for t in p.read_text().split()]
    assert a_times and b_times
    assert max(a_times) < min(b_times), "a consumer stage started before its input finished"


def test_batch_mode_refuses_an_unbounded_source(shared_cluster: LocalCluster, tmp_path: Path):
    with ClientEnvironment(shared_cluster) as env:
        env.set_runtime_mode("BATCH")
        env.from_source(str(tmp_path), format="parquet", monitor_interval=1.0).print()
        with pytest.raises(InvalidJobError, match="unbounded"):
            env.execute("unbounded batch")
