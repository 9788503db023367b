"""Changing a running job on a real cluster: ``weir rescale`` and ``weir update``.

The rescaled job is the exactly-once job (keyed counts, event-time windows, the
transactional FileSink): rescaled 2 -> 3 -> 1 while it runs, its committed output must be
exactly the output computed without weir. The updated job tags its keyed running counts
with its program version: after the update, every key's counts go on from where they
were (the state was kept) and switch from v1 to v2 at one point (one checkpoint).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import REPO, LocalCluster, job_details, poll, weir_cli, write_job
from tests.support.exactly_once import (
    finished_exactly_once,
    running_counts,
    status_name,
    submit,
    wait_ended,
)
from weir.proto import common_pb2

N = 6000
HELD = {"pause_every": 100, "held_slowdown": 50.0}


def _config(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"execution.checkpointing.interval": "300 ms",
            "state.checkpoints.dir": (tmp_path / "checkpoints").as_uri(),
            "state.backend.type": "rocksdb", "pipeline.batch-size": "50",
            "state.backend.local-recovery": "true", **extra}


def _running(cluster: LocalCluster, job_id: str, parallelism: int | None = None) -> Any:
    def ready() -> Any:
        details = job_details(cluster, job_id)
        subtasks = [s for v in details.vertices for s in v.subtasks]
        return (status_name(details) == "RUNNING" and details.last_checkpoint_id > 0
                and all(s.state in (common_pb2.RUNNING, common_pb2.FINISHED)
                        for s in subtasks)
                and (parallelism is None
                     or max(v.parallelism for v in details.vertices) == parallelism)
                and details)

    return poll(ready, 90, interval=0.1, what=f"job {job_id} to run")


def _change(result: Any) -> int:
    assert result.returncode == 0, result.stderr + result.stdout
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("downtime "), result.stdout
    return int(line.split()[1])


def test_rescale_2_to_3_to_1_is_exactly_once(cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, config=_config(tmp_path), gate=gate, **HELD)
    _running(cluster, job_id)
    _change(cluster.weir("rescale", job_id, "--parallelism", "3"))
    details = _running(cluster, job_id, 3)
    assert {v.parallelism for v in details.vertices} == {3}
    assert details.last_change.kind == "rescale" and details.last_change.downtime_ms > 0
    assert status_name(details) == "RUNNING" and details.summary.restarts == 0
    _change(cluster.weir("rescale", job_id, "--parallelism", "1"))
    details = _running(cluster, job_id, 1)
    assert {v.parallelism for v in details.vertices} == {1}
    gate.touch()
    finished_exactly_once(cluster, job_id, out, N)


@pytest.mark.slow
def test_rescale_beyond_the_cluster_is_refused(cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(1, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, config=_config(tmp_path), gate=gate, **HELD)
    _running(cluster, job_id)
    refused = cluster.weir("rescale", job_id, "--parallelism", "5")
    assert refused.returncode == 2 and "slots" in refused.stderr, refused.stderr
    unknown = cluster.weir("rescale", job_id, "--operator", "no-such-uid=2")
    assert unknown.returncode == 2 and "no-such-uid" in unknown.stderr
    assert status_name(job_details(cluster, job_id)) == "RUNNING"
    gate.touch()
    finished_exactly_once(cluster, job_id, out, N)


UPDATED_JOB = '''
import os
import sys
import time

from weir import (FileSink, KeyedProcessFunction, ListStateDescriptor,
                  StreamExecutionEnvironment, ValueStateDescriptor)

OUT, N, KEYS, VERSION, GATE = sys.argv[1], int(sys.argv[2]), 7, sys.argv[3], sys.argv[4]
AS_LIST = bool(os.environ.get("COUNT_AS_LIST"))


def throttle(n):
    if n % 50 == 0:
        time.sleep(0.01 if os.path.exists(GATE) else 0.5)
    return n


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        if AS_LIST:  # an incompatible change of the state's kind
            self.count = runtime_context.get_list_state(ListStateDescriptor("count"))
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield (value[0], value[1] % KEYS, count)


def tag(n):
    return (VERSION, n)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
numbers = env.from_sequence(0, N - 1).uid("numbers").map(throttle).uid("throttle")
counts = (numbers.map(tag).uid("tag").key_by(lambda t: t[1] % KEYS)
          .process(CountPerKey()).uid("counts"))
if os.environ.get("DROP_COUNTS"):
    counts = numbers.map(lambda n: ("plain", n % KEYS, 0)).uid("plain")
counts.sink_to(FileSink(OUT, format="json")).uid("sink")
env.execute("updatable")
'''


UPDATABLE_N = 4000


def _start_updatable(cluster: LocalCluster, tmp_path: Path, out: Path, gate: Path
                     ) -> tuple[str, Any]:
    """Run version v1 of the updatable job; returns its id and ``update(version, **env)``,
    which runs ``weir update`` with that version of the program."""
    job = write_job(tmp_path, UPDATED_JOB, "updatable.py")
    pairs = [f"-D{k}={v}" for k, v in _config(tmp_path).items()]
    program = [str(job), str(out), str(UPDATABLE_N)]
    started = cluster.weir("run", "--detached", *pairs, *program, "v1", str(gate))
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip().splitlines()[-1]

    def update(version: str, **env: str) -> Any:
        return weir_cli("update", "--dir", str(cluster.dir), job_id, *pairs, *program,
                        version, str(gate), env=env)

    return job_id, update


def _assert_counts_exactly_once(records: list[tuple[str, int, int]], n: int) -> None:
    """Every key's running counts 1..its total, once each (whatever version wrote them)."""
    got: dict[tuple[int, int], int] = defaultdict(int)
    for _, key, count in records:
        got[(key, count)] += 1
    assert got == dict(running_counts(n, 7))


def _committed(out: Path) -> list[tuple[str, int, int]]:
    return [tuple(json.loads(line)) for part in sorted(out.glob("part-*"))
            for line in part.read_text().splitlines()]


@pytest.mark.extended
def test_hot_update_keeps_keyed_state_and_switches_at_one_checkpoint(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id, update = _start_updatable(cluster, tmp_path, out, gate)
    details = _running(cluster, job_id)
    attempts = {s.attempt_id for v in details.vertices for s in v.subtasks}
    # An update that drops the keyed counts (state without an operator) is refused.
    refused = update("v1", DROP_COUNTS="1")
    assert refused.returncode == 2 and "'counts'" in refused.stderr, refused.stderr
    untouched = job_details(cluster, job_id)
    assert status_name(untouched) == "RUNNING"
    assert {s.attempt_id for v in untouched.vertices for s in v.subtasks} == attempts
    downtime = _change(update("v2"))
    details = _running(cluster, job_id)
    assert details.last_change.kind == "update"
    assert details.last_change.downtime_ms == downtime > 0
    assert "tag" in details.last_change.restarted_operators
    assert "counts" not in details.last_change.restarted_operators
    gate.touch()
    final = wait_ended(cluster, job_id)
    assert status_name(final) == "FINISHED", final.failure.message
    records = _committed(out)
    # Exactly once over the update: every key's counts 1..its total, once each.
    _assert_counts_exactly_once(records, UPDATABLE_N)
    # One switch per key: v1 for its first counts, v2 for the rest.
    versions: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for version, key, count in records:
        versions[key].append((count, version))
    for key, seen in versions.items():
        ordered = [v for _, v in sorted(seen)]
        assert ordered == sorted(ordered), f"key {key} switched back and forth"
    assert {v for v, _, _ in records} == {"v1", "v2"}


TWO_PIPELINES_JOB = UPDATED_JOB.replace(
    'counts.sink_to(FileSink(OUT, format="json")).uid("sink")',
    '''counts.sink_to(FileSink(OUT + "-a", format="json")).uid("sink")
others = (env.from_sequence(0, N - 1).uid("others").name("others")
          .map(throttle).uid("others-throttle").name("others-throttle"))
(others.map(lambda n: ("b", n)).uid("others-tag").name("others-tag")
 .key_by(lambda t: t[1] % KEYS).process(CountPerKey()).uid("others-counts").name("others-counts")
 .sink_to(FileSink(OUT + "-b", format="json")).uid("others-sink").name("others-sink"))''')


def _start_two_pipelines(cluster: LocalCluster, tmp_path: Path) -> tuple[str, list[str]]:
    """Run v1 of the two-pipeline job; returns its id and the ``weir update`` command
    line to v2."""
    job = write_job(tmp_path, TWO_PIPELINES_JOB, "two.py")
    pairs = [f"-D{k}={v}" for k, v in _config(tmp_path).items()]
    program = [str(job), str(tmp_path / "out"), str(UPDATABLE_N)]
    started = cluster.weir("run", "--detached", *pairs, *program, "v1",
                           str(tmp_path / "gate"))
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip().splitlines()[-1]
    return job_id, ["update", "--dir", str(cluster.dir), job_id, *pairs, *program, "v2",
                    str(tmp_path / "gate")]


def _attempts(details: Any) -> dict[str, set[str]]:
    return {v.name: {s.attempt_id for s in v.subtasks} for v in details.vertices}


def _assert_both_pipelines_exactly_once(cluster: LocalCluster, job_id: str,
                                        tmp_path: Path) -> list[tuple[str, int, int]]:
    """Let the job end; both outputs exactly once. Returns the first pipeline's."""
    (tmp_path / "gate").touch()
    final = wait_ended(cluster, job_id)
    assert status_name(final) == "FINISHED", final.failure.message
    first = _committed(tmp_path / "out-a")
    _assert_counts_exactly_once(first, UPDATABLE_N)
    second = _committed(tmp_path / "out-b")
    _assert_counts_exactly_once(second, UPDATABLE_N)
    assert {v for v, _, _ in second} == {"b"}
    return first


@pytest.mark.extended
def test_an_update_leaves_the_pipelines_it_does_not_change_running(
        cluster_factory: Any, tmp_path: Path) -> None:
    """A job of two independent pipelines; the update changes one of them: the other's
    tasks keep running (the same attempts) through it, and both are exactly once."""
    cluster = cluster_factory(2, 4)
    job_id, update = _start_two_pipelines(cluster, tmp_path)
    before = _attempts(_running(cluster, job_id))
    downtime = _change(weir_cli(*update))
    details = _running(cluster, job_id)
    after = _attempts(details)
    assert details.last_change.downtime_ms == downtime
    assert set(details.last_change.restarted_operators) == {"tag"}
    kept = [name for name in after if after[name] == before.get(name)]
    restarted = [name for name in after if after[name] != before.get(name)]
    assert kept and restarted, (before, after)
    assert all("others" in name for name in kept), kept
    assert not any("others" in name for name in restarted), restarted
    first = _assert_both_pipelines_exactly_once(cluster, job_id, tmp_path)
    assert {v for v, _, _ in first} == {"v1", "v2"}


@pytest.mark.chaos
def test_a_taskexecutor_killed_during_an_update_that_keeps_a_pipeline_running(
        cluster_factory: Any, tmp_path: Path) -> None:
    """SIGKILL a TaskExecutor (tasks of both pipelines) as soon as the update deploys
    new attempts: whether the update completes, restarts every task or is rolled back, the
    job recovers and both outputs are exactly once."""
    cluster = cluster_factory(3, 4)
    job_id, update = _start_two_pipelines(cluster, tmp_path)
    before = _attempts(_running(cluster, job_id))
    command = subprocess.Popen([sys.executable, "-m", "weir", *update], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        poll(lambda: _attempts(job_details(cluster, job_id)) != before, 60, interval=0.02,
             what="the update to deploy")
        cluster.kill_taskexecutor(0)
        command.communicate(timeout=300)
    finally:
        if command.poll() is None:
            command.kill()
            command.communicate()
    _assert_both_pipelines_exactly_once(cluster, job_id, tmp_path)


@pytest.mark.extended
def test_an_update_whose_state_does_not_fit_is_rolled_back(
        cluster_factory: Any, tmp_path: Path) -> None:
    """The new program declares a restored value state as a list state: its tasks fail
    while starting, the old program is deployed again from the same checkpoint, the
    command names the operator and the state, and the output stays exactly once."""
    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id, update = _start_updatable(cluster, tmp_path, out, gate)
    _running(cluster, job_id)
    failed = update("v2", COUNT_AS_LIST="1")
    assert failed.returncode == 2, failed.stdout
    assert "operator 'counts'" in failed.stderr and "'count' is value state" in failed.stderr
    assert "runs as before" in failed.stderr
    details = _running(cluster, job_id)
    assert not details.HasField("last_change")
    gate.touch()
    final = wait_ended(cluster, job_id)
    assert status_name(final) == "FINISHED", final.failure.message
    records = _committed(out)
    assert {v for v, _, _ in records} == {"v1"}
    _assert_counts_exactly_once(records, UPDATABLE_N)


BACKPRESSURED_COUNTS = '''
import sys
import time

from weir import FileSink, KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

OUT, N, KEYS = sys.argv[1], int(sys.argv[2]), 11


class SlowCount(KeyedProcessFunction):
    # About 1,000 records/s per subtask, far slower than the source: the buffers between
    # them are full, and unaligned barriers overtake them.
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        time.sleep(0.001)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield (value % KEYS, count)


def paced(n):
    # A little faster than the counts (about 1,250 records/s per subtask): the buffers
    # fill up while the source still runs, so barriers overtake them (a source that has
    # ended sends its barriers behind its data).
    time.sleep(0.0008)
    return n


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
(env.from_sequence(0, N - 1).uid("numbers").map(paced).uid("paced")
    .key_by(lambda n: n % KEYS).process(SlowCount()).uid("counts")
    .sink_to(FileSink(OUT, format="json")).uid("sink"))
env.execute("backpressured counts")
'''


@pytest.mark.extended
def test_rescale_from_an_unaligned_checkpoint_redistributes_in_flight_data(
        cluster_factory: Any, tmp_path: Path) -> None:
    """Under backpressure the rescale's checkpoint is unaligned and holds in-flight data
    (persisted bytes > 0); redistributed by key group to the new parallelism, every
    key's running count is still 1..its total, once each."""
    cluster = cluster_factory(2, 2)
    out, n = tmp_path / "out", 24_000
    job = write_job(tmp_path, BACKPRESSURED_COUNTS, "backpressured.py")
    config = _config(tmp_path, **{"execution.checkpointing.unaligned.enabled": "true",
                                  "pipeline.batch-size": "200"})
    pairs = [f"-D{k}={v}" for k, v in config.items()]
    started = cluster.weir("run", "--detached", *pairs, str(job), str(out), str(n))
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip().splitlines()[-1]
    _running(cluster, job_id)
    _change(cluster.weir("rescale", job_id, "--parallelism", "3"))
    details = _running(cluster, job_id, 3)
    history = json.loads(cluster.weir("checkpoints", job_id, "--json").stdout)
    rescaled = next(r for r in history if r["id"] == details.last_change.checkpoint_id)
    assert rescaled["unaligned"] and rescaled["persisted_bytes"] > 0, rescaled
    final = wait_ended(cluster, job_id, timeout=240)
    assert status_name(final) == "FINISHED", final.failure.message
    got: dict[tuple[int, int], int] = defaultdict(int)
    for key, count in (json.loads(line) for part in sorted(out.glob("part-*"))
                       for line in part.read_text().splitlines()):
        got[(key, count)] += 1
    assert got == dict(running_counts(n, 11))
