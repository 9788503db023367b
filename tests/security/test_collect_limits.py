"""execute_and_collect() results are bounded by the gRPC message limit
(``weir.core.rpc.MAX_MESSAGE_BYTES``): large batches travel in several messages, and a single
record larger than one message fails the job at once instead of spinning on
RESOURCE_EXHAUSTED."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.cluster import LocalCluster, write_job
from weir.client.cluster_client import job_status_name
from weir.core import rpc
from weir.jobmaster.collect import CollectBuffer
from weir.operators.sinks.collect import RecordTooLargeError, collect_payloads, from_ipc
from weir.taskexecutor.jobmaster_gateway import collect_payload_limit

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = LocalCluster(tmp_path_factory.mktemp("collect") / "cluster").start(1, 2)
    yield cluster
    cluster.stop()


def test_a_record_larger_than_one_message_fails_the_job_quickly(cluster: LocalCluster,
                                                                 tmp_path: Path):
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment
        from weir.core import rpc

        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        huge = env.from_collection([rpc.MAX_MESSAGE_BYTES + 1]).map(lambda n: "x" * n)
        for record in huge.execute_and_collect("huge"):
            print(len(record))
    """)
    started = time.monotonic()
    try:
        result = cluster.weir("run", str(job), timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the job did not end within 90 s: the sink retries a message that can "
                    "never fit")
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed < 60
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert "RecordTooLargeError: a collected record of 256.0 MiB" in errors[0], errors[0]
    assert f"({collect_payload_limit() / MiB:.1f} MiB, {collect_payload_limit():,} bytes" \
        in errors[0], errors[0]
    assert result.stdout == ""
    # the job is failed, not retrying in the background
    jobs = cluster.client().list_jobs()
    assert [j.name for j in jobs if j.name == "huge"]
    assert {job_status_name(j.status) for j in jobs if j.name == "huge"} == {"FAILED"}


@pytest.mark.extended
def test_batches_larger_than_one_message_are_collected_exactly_in_order(
        cluster: LocalCluster, tmp_path: Path):
    # Each of the two inputs becomes one batch of 70 x 4 MiB = 280 MiB: more than one message.
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment

        COUNT, SIZE = 70, 4 * 1024 * 1024

        def payload(key, i):
            return bytes([(key * COUNT + i) % 251]) * SIZE

        def explode(key):
            return [(key, i, payload(key, i)) for i in range(COUNT)]

        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        results = (env.from_collection([0, 1]).rebalance().flat_map(explode)
                   .execute_and_collect("mid-size"))
        for key, i, data in results:
            print(key, i, data == payload(key, i))
    """)
    try:
        result = cluster.weir("run", str(job), timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the job did not end within 120 s: a batch larger than one message was "
                    "never delivered")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()]
    assert all(ok == "True" for _, _, ok in rows), "a payload arrived damaged"
    for key in ("0", "1"):
        assert [int(i) for k, i, _ in rows if k == key] == list(range(70)), \
            f"records of input {key} missing, duplicated or out of order"
    assert len(rows) == 140


def _batch(sizes: list[int]) -> pa.RecordBatch:
    return pa.record_batch({"f0": list(range(len(sizes))),
                            "f1": [bytes([i % 251]) * size for i, size in enumerate(sizes)]})


def test_payloads_split_by_rows_within_the_limit_and_keep_order():
    batch = _batch([100_000] * 37 + [5] * 20 + [300_000])
    payloads = list(collect_payloads(batch, limit=400_000))
    assert len(payloads) > 1
    assert all(len(p) <= 400_000 for p in payloads)
    rows = pa.Table.from_batches([b for p in payloads for b in from_ipc(p)])
    assert rows.equals(pa.Table.from_batches([batch]))


def test_a_single_row_over_the_limit_is_refused_with_its_size():
    batch = _batch([10, 3 * MiB, 10])
    with pytest.raises(RecordTooLargeError, match=r"record of 3\.0 MiB.*\(1\.0 MiB"):
        list(collect_payloads(batch, limit=MiB))


def test_the_default_limit_follows_the_rpc_constant(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rpc, "MAX_MESSAGE_BYTES", 2 * MiB)
    payloads = list(collect_payloads(_batch([MiB // 2] * 10)))
    assert len(payloads) > 2
    assert all(len(p) < 2 * MiB for p in payloads)
    assert collect_payload_limit() < 2 * MiB
    with pytest.raises(RecordTooLargeError, match=r"record of 3\.0 MiB.*\(1\.9 MiB"):
        list(collect_payloads(_batch([3 * MiB])))


def test_a_fetch_returns_no_more_bytes_than_one_message_holds():
    buffer = CollectBuffer(capacity=10)
    for data in (b"a" * 60, b"b" * 60, b"c" * 30, b"d" * 200):
        assert buffer.push(data, wait=0)
    assert buffer.fetch(10, wait=0, max_bytes=100) == ([b"a" * 60], False)
    assert buffer.fetch(10, wait=0, max_bytes=100) == ([b"b" * 60, b"c" * 30], False)
    # a batch alone larger than max_bytes still goes (pushes are bounded by the same limit)
    assert buffer.fetch(10, wait=0, max_bytes=100) == ([b"d" * 200], False)
