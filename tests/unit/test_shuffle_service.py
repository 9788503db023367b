"""External shuffle service: storage, the gRPC service, and what is particular to its
FLIP-31 implementation (the conformance suite, in test_shuffle_conformance.py, checks
what every shuffle service does).

Real gRPC on loopback with the service in this process and ``tmp_path`` as its data dir.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pytest

from weir.core.config import Configuration
from weir.core.errors import ConfigError, PartitionNotFoundError, RemoteTransportError
from weir.core.records import Elements
from weir.core.rpc import create_channel
from weir.core.types import Types
from weir.proto import jobgraph_pb2, shuffle_service_pb2_grpc
from weir.proto import shuffle_service_pb2 as pb
from weir.shuffle.api import (
    PartitionDescriptor,
    ProducerDescriptor,
    ShuffleEnvironmentContext,
)
from weir.shuffle.external.environment import (
    ExternalResultPartitionWriter,
    decode_chunk,
    encode_chunks,
)
from weir.shuffle.external.factory import ExternalShuffleServiceFactory
from weir.shuffle.external.service import ShuffleServiceDaemon
from weir.shuffle.external.storage import ShuffleStorageError
from weir.testing.cluster import poll
from weir.testing.shuffle_service import TaskWakeup, drain, produce

JOB = "0123456789abcdef0123456789abcdef"
OTHER_JOB = "fedcba9876543210fedcba9876543210"
TIMEOUT = 10.0


# -- helpers ---------------------------------------------------------------------------------

@pytest.fixture
def stubs() -> Iterator[Callable[..., shuffle_service_pb2_grpc.ShuffleServiceStub]]:
    channels: list[grpc.Channel] = []

    def stub(address: str, token: str | None = None) -> shuffle_service_pb2_grpc.ShuffleServiceStub:
        channel = create_channel(address, token)
        channels.append(channel)
        return shuffle_service_pb2_grpc.ShuffleServiceStub(channel)

    yield stub
    for channel in channels:
        channel.close()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll an observable condition (for state only visible through polling)."""
    poll(condition, TIMEOUT, interval=0.005, what=what)


def requests(job: str, partition: str, n: int, chunks: list[tuple[int, bytes]],
             commit: bool = True) -> Iterator[pb.WritePartitionRequest]:
    yield pb.WritePartitionRequest(job_id=job, partition_id=partition, num_subpartitions=n)
    for sub, data in chunks:
        yield pb.WritePartitionRequest(job_id=job, partition_id=partition, num_subpartitions=n,
                                       subpartition=sub, data=data)
    if commit:
        yield pb.WritePartitionRequest(commit=True, total_chunks=len(chunks),
                                       total_bytes=sum(len(d) for _, d in chunks))


def write(stub, partition: str, chunks: list[tuple[int, bytes]], n: int = 3,
          job: str = JOB) -> pb.WritePartitionResponse:
    return stub.WritePartition(requests(job, partition, n, chunks), timeout=TIMEOUT)


def read(stub, partition: str, sub: int, job: str = JOB, max_bytes: int = 0) -> list[bytes]:
    """Every chunk of a subpartition, resuming call after call as a channel does."""
    chunks: list[bytes] = []
    while True:
        responses = list(stub.ReadSubpartition(pb.ReadSubpartitionRequest(
            job_id=job, partition_id=partition, subpartition=sub, start_chunk=len(chunks),
            max_bytes=max_bytes), timeout=TIMEOUT))
        for response in responses:
            chunks.extend(response.chunks)
        if responses[-1].end_of_subpartition:
            return chunks


def random_chunks(n: int, count: int, seed: int = 7) -> list[tuple[int, bytes]]:
    """Chunks of random size for random subpartitions, each with unique content."""
    rng = random.Random(seed)
    return [(sub, f"<{sub}:{i}>".encode() * rng.randint(5, 60))
            for i in range(count) for sub in [rng.randrange(n)]]


def rpc_error(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def job_files(daemon: ShuffleServiceDaemon, job: str = JOB) -> list[str]:
    root = Path(daemon.data_dir) / job
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


# -- the service and its storage -------------------------------------------------------------

def test_partition_spilled_in_many_runs_reads_back_in_order_per_subpartition(start_shuffle_daemon,
                                                                             stubs):
    daemon = start_shuffle_daemon(spill_threshold=4096)
    stub = stubs(daemon.address)
    chunks = random_chunks(4, 400)  # subpartition 4 of 5 stays empty
    response = write(stub, "p1", chunks, n=5)

    total = sum(len(d) for _, d in chunks)
    assert (response.chunks, response.bytes) == (400, total)
    assert response.runs >= total // 4096 - 1 > 5  # spilled many times, not at commit only
    assert job_files(daemon) == ["p1", "p1/data", "p1/index"]
    for sub in range(5):
        expected = [d for s, d in chunks if s == sub]  # arrival order within a subpartition
        assert read(stub, "p1", sub) == expected
        assert read(stub, "p1", sub, max_bytes=1000) == expected  # resumed at start_chunk
    assert (write(stub, "empty", []).runs, read(stub, "empty", 2)) == (0, [])
    [_, info] = stub.ListPartitions(pb.ListPartitionsRequest(job_id=JOB)).partitions
    assert (info.partition_id, info.state, info.num_subpartitions, info.chunks, info.bytes,
            info.runs) == ("p1", pb.PartitionInfo.COMMITTED, 5, 400, total, response.runs)


def test_unknown_or_uncommitted_partition_is_not_found(start_shuffle_daemon, stubs):
    daemon = start_shuffle_daemon()
    stub = stubs(daemon.address)
    err = rpc_error(lambda: read(stub, "nope", 0))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "unknown" in err.details()

    may_commit = threading.Event()

    def slow_requests():
        yield from requests(JOB, "p1", 2, [(0, b"a"), (1, b"b")], commit=False)
        may_commit.wait(TIMEOUT)
        yield pb.WritePartitionRequest(commit=True, total_chunks=2, total_bytes=2)

    future = stub.WritePartition.future(slow_requests(), timeout=TIMEOUT)
    wait_until(lambda: stub.ListPartitions(pb.ListPartitionsRequest()).partitions,
               "the write to begin")
    err = rpc_error(lambda: read(stub, "p1", 0))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "being written" in err.details()
    assert ("weir-partition-state", "in-progress") in err.trailing_metadata()
    may_commit.set()
    assert future.result().chunks == 2
    assert read(stub, "p1", 1) == [b"b"]
    err = rpc_error(lambda: read(stub, "p1", 2))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "out of range" in err.details()


def test_broken_or_uncommitted_write_stream_leaves_nothing(start_shuffle_daemon, stubs):
    daemon = start_shuffle_daemon(spill_threshold=256)
    stub = stubs(daemon.address)
    proceed = threading.Event()

    def breaking_requests():
        yield from requests(JOB, "p1", 3, random_chunks(3, 50), commit=False)
        proceed.wait(TIMEOUT)

    future = stub.WritePartition.future(breaking_requests(), timeout=TIMEOUT)
    wait_until(lambda: any(i.chunks == 50 for i in stub.ListPartitions(
        pb.ListPartitionsRequest()).partitions), "the chunks to arrive")
    [info] = stub.ListPartitions(pb.ListPartitionsRequest()).partitions
    assert info.state == pb.PartitionInfo.IN_PROGRESS and info.runs > 1  # spilled to disk
    assert next(f for f in job_files(daemon) if f.endswith("/data")).startswith("_inprogress-")
    future.cancel()  # the producer's connection breaks
    proceed.set()
    assert daemon.store.wait_idle(TIMEOUT)
    assert not (Path(daemon.data_dir) / JOB).exists()
    assert list(stub.ListPartitions(pb.ListPartitionsRequest()).partitions) == []

    # A stream that simply ends without its commit message stores nothing either.
    err = rpc_error(lambda: stub.WritePartition(
        requests(JOB, "p2", 3, random_chunks(3, 20), commit=False), timeout=TIMEOUT))
    assert err.code() == grpc.StatusCode.ABORTED and "without a commit" in err.details()
    assert daemon.store.wait_idle(TIMEOUT)
    assert not (Path(daemon.data_dir) / JOB).exists()
    err = rpc_error(lambda: read(stub, "p2", 0))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "unknown" in err.details()


def test_commit_totals_must_match_what_arrived(start_shuffle_daemon, stubs):
    daemon = start_shuffle_daemon()
    stub = stubs(daemon.address)

    def lying():
        yield from requests(JOB, "p1", 1, [(0, b"abc")], commit=False)
        yield pb.WritePartitionRequest(commit=True, total_chunks=2, total_bytes=6)

    err = rpc_error(lambda: stub.WritePartition(lying(), timeout=TIMEOUT))
    assert err.code() == grpc.StatusCode.DATA_LOSS
    assert "the service received 1 (3 bytes)" in err.details()
    assert daemon.store.wait_idle(TIMEOUT)
    assert not (Path(daemon.data_dir) / JOB).exists()


def test_release_of_partitions_and_of_a_whole_job(start_shuffle_daemon, stubs):
    daemon = start_shuffle_daemon()
    stub = stubs(daemon.address)
    for partition in ("p1", "p2", "p3"):
        write(stub, partition, [(0, partition.encode())])
    write(stub, "q1", [(1, b"q")], job=OTHER_JOB)

    def release(**kwargs) -> int:
        return stub.ReleasePartitions(pb.ReleasePartitionsRequest(**kwargs)).released

    assert release(job_id=JOB, partition_ids=["p1", "unknown"]) == 1
    assert job_files(daemon) == ["p2", "p2/data", "p2/index", "p3", "p3/data", "p3/index"]
    assert rpc_error(lambda: read(stub, "p1", 0)).code() == grpc.StatusCode.NOT_FOUND
    assert read(stub, "p2", 0) == [b"p2"]

    # A partition still being written is released too: its stream is cancelled.
    hold = threading.Event()

    def unfinished():
        yield from requests(JOB, "w1", 2, [(0, b"w")], commit=False)
        hold.wait(TIMEOUT)

    future = stub.WritePartition.future(unfinished(), timeout=TIMEOUT)
    wait_until(lambda: len(stub.ListPartitions(pb.ListPartitionsRequest(
        job_id=JOB)).partitions) == 3, "the write to begin")
    assert release(job_id=JOB, all_of_job=True) == 3
    assert rpc_error(future.result).code() == grpc.StatusCode.CANCELLED
    hold.set()
    assert not (Path(daemon.data_dir) / JOB).exists()
    assert release(job_id=JOB, all_of_job=True) == 0
    assert read(stub, "q1", 1, job=OTHER_JOB) == [b"q"]
    assert release(job_id=OTHER_JOB, partition_ids=["q1"]) == 1  # its last partition
    assert sorted(p.name for p in Path(daemon.data_dir).iterdir()) == [".lock"]


@pytest.mark.parametrize("damage", ["flip a data byte", "truncate the data file",
                                    "truncate the index"])
def test_corrupt_or_truncated_files_are_a_clear_error(start_shuffle_daemon, stubs, damage):
    daemon = start_shuffle_daemon(spill_threshold=1024)
    stub = stubs(daemon.address)
    write(stub, "p1", random_chunks(3, 60))
    directory = Path(daemon.data_dir) / JOB / "p1"
    if damage == "flip a data byte":
        data = bytearray((directory / "data").read_bytes())
        data[8 + 1] ^= 0x40  # in the first chunk, after its 8-byte frame header
        (directory / "data").write_bytes(bytes(data))
        expected = "fails its checksum"
    elif damage == "truncate the data file":
        with open(directory / "data", "r+b") as f:
            f.truncate(f.seek(0, 2) - 10)
        expected = "truncated"
    else:
        with open(directory / "index", "r+b") as f:
            f.truncate(40)
        expected = "index"
    errors = []
    for sub in range(3):
        try:
            read(stub, "p1", sub)
        except grpc.RpcError as err:
            errors.append(err)
    assert errors, "the damage went unnoticed"
    for err in errors:
        assert err.code() == grpc.StatusCode.DATA_LOSS
        assert expected in err.details() and str(directory) in err.details()


def test_restarted_service_serves_committed_partitions_and_drops_leftovers(start_shuffle_daemon,
                                                                          stubs, tmp_path):
    daemon = start_shuffle_daemon()
    stub = stubs(daemon.address)
    write(stub, "p1", [(2, b"kept")])
    with pytest.raises(ShuffleStorageError, match="in use by another shuffle service"):
        ShuffleServiceDaemon(daemon.data_dir).start()
    hold = threading.Event()

    def unfinished():
        yield from requests(JOB, "p3", 1, [(0, b"lost")], commit=False)
        hold.wait(TIMEOUT)

    future = stub.WritePartition.future(unfinished(), timeout=TIMEOUT)
    wait_until(lambda: len(daemon.store.list(JOB)) == 2, "the write to begin")
    daemon.stop()  # cancels the write, which deletes its files before stop returns
    hold.set()
    assert rpc_error(future.result).code() in (grpc.StatusCode.CANCELLED,
                                               grpc.StatusCode.UNAVAILABLE)
    assert job_files(daemon) == ["p1", "p1/data", "p1/index"]
    assert not [t for t in threading.enumerate() if t.name.startswith("shuffle-service")]
    daemon.stop()  # idempotent
    leftover = Path(daemon.data_dir) / JOB / "_inprogress-p2-0a1b2c3d"
    leftover.mkdir()
    (leftover / "data").write_bytes(b"half a partition")

    restarted = start_shuffle_daemon()
    assert not leftover.exists()
    assert read(stubs(restarted.address), "p1", 2) == [b"kept"]


# -- the FLIP-31 implementation ---------------------------------------------------------------

def configuration(address: str, **extra: str) -> Configuration:
    return Configuration.from_pairs({
        "shuffle-service-factory.class":
            "weir.shuffle.external.factory.ExternalShuffleServiceFactory",
        "shuffle-service.address": address, "taskmanager.memory.segment-size": "2kb",
        **extra})


def environment(conf: Configuration, resource_id: str):
    env = ExternalShuffleServiceFactory().create_shuffle_environment(
        ShuffleEnvironmentContext(conf, resource_id, "127.0.0.1"))
    env.start()
    return env


def gate_deployment(descriptors: list[bytes], sub: int) -> jobgraph_pb2.InputGateDeployment:
    return jobgraph_pb2.InputGateDeployment(channels=[
        jobgraph_pb2.InputChannelDeployment(shuffle_descriptor=d, subpartition=sub)
        for d in descriptors])


def test_jobs_shuffle_through_the_service_end_to_end_with_auth(start_shuffle_daemon, stubs):
    daemon = start_shuffle_daemon(token="s3cret", spill_threshold=8192)
    err = rpc_error(lambda: stubs(daemon.address).ListPartitions(pb.ListPartitionsRequest()))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    conf = configuration(daemon.address, **{"security.auth.token": "s3cret"})
    master = ExternalShuffleServiceFactory().create_shuffle_master(conf)
    producer_env, consumer_env = environment(conf, "te-1"), environment(conf, "te-2")
    try:
        n, producers = 3, 2
        descriptors, sent = [], []
        for p in range(producers):
            descriptors.append(master.register_partition_with_producer(
                PartitionDescriptor(JOB, f"attempt{p}.1", n, f"attempt{p}"),
                ProducerDescriptor("te-1", "external")))
            task = TaskWakeup(f"map{p}")
            writer = producer_env.create_result_partition_writer(
                task.context, jobgraph_pb2.ResultPartitionDeployment(
                    partition_id=f"attempt{p}.1", num_subpartitions=n))
            sent.append(produce(task, writer, p, n, 300))
            writer.finish()
            assert writer.committed and writer.metrics()["bytesOut"] > 0
        producer_env.close()  # the producers' TaskExecutor goes away: its output stays
        assert master.on_producer_lost("te-1") == []
        assert master.is_partition_available("attempt0.1")
        listed = stubs(daemon.address, "s3cret").ListPartitions(pb.ListPartitionsRequest())
        assert all(i.runs > 1 for i in listed.partitions)  # 8 KiB threshold: spilled

        for sub in range(n):
            task = TaskWakeup(f"reduce{sub}")
            gate = consumer_env.create_input_gate(task.context,
                                                  gate_deployment(descriptors, sub))
            got = drain(task, gate, channels=len(descriptors))
            assert [got.get(p, []) for p in range(producers)] == [s[sub] for s in sent]
            assert gate.metrics()["bytesIn"] > 0
            gate.close()
        assert not [t for t in threading.enumerate() if t.name.startswith("shuffle-read")]

        # A write no descriptor names (a zombie attempt) is swept with the job's last
        # partition.
        zombie_task = TaskWakeup("zombie")
        zombie = consumer_env.create_result_partition_writer(
            zombie_task.context, jobgraph_pb2.ResultPartitionDeployment(
                partition_id="zombie.1", num_subpartitions=1))
        zombie.emit(0, Elements.from_records([1]))
        zombie.flush_all()
        wait_until(lambda: len(daemon.store.list(JOB)) == 3, "the zombie's write")
        for descriptor in descriptors:
            master.release_partition_externally(descriptor)
        assert master.wait_for_releases(TIMEOUT)
        assert not master.is_partition_available("attempt0.1")
        assert not (Path(daemon.data_dir) / JOB).exists()
        assert zombie_task.woken.wait(TIMEOUT)
        with pytest.raises(RemoteTransportError, match=r"zombie\.1 .* failed: CANCELLED"):
            zombie.emit(0, Elements.from_records([2]))
    finally:
        master.close()
        producer_env.close()
        consumer_env.close()
    daemon.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("shuffle-service")]


def test_consumer_waits_while_its_partition_is_being_written(start_shuffle_daemon):
    daemon = start_shuffle_daemon()
    # A short back-off: were the channel to count this wait against it, it would fail.
    conf = configuration(daemon.address, **{
        "taskmanager.network.request-backoff.initial": "10 ms",
        "taskmanager.network.request-backoff.max": "40 ms"})
    master = ExternalShuffleServiceFactory().create_shuffle_master(conf)
    env = environment(conf, "te-1")
    try:
        descriptor = master.register_partition_with_producer(
            PartitionDescriptor(JOB, "a.1", 1, "a"), ProducerDescriptor("te-1", "external"))
        writer = env.create_result_partition_writer(
            TaskWakeup("map").context, jobgraph_pb2.ResultPartitionDeployment(
                partition_id="a.1", num_subpartitions=1))
        writer.emit(0, Elements.from_records([1, 2, 3]))
        writer.flush_all()
        consumer = TaskWakeup("reduce")
        gate = env.create_input_gate(consumer.context, gate_deployment([descriptor], 0))
        gate.request_partitions()
        wait_until(lambda: [i.chunks for i in daemon.store.list(JOB)] == [1],
                   "the flushed chunk")
        # Far past the back-off: the channel keeps waiting for the commit, without a sound.
        assert not consumer.woken.wait(0.3)
        assert gate.poll_next() is None
        writer.emit(0, Elements.from_records([4]))
        writer.finish()
        assert drain(consumer, gate, requested=True, channels=1) == {0: [1, 2, 3, 4]}
        gate.close()
    finally:
        master.close()
        env.close()


def test_missing_partition_or_service_fails_the_gate(start_shuffle_daemon):
    daemon = start_shuffle_daemon()
    conf = configuration(daemon.address, **{
        "taskmanager.network.request-backoff.initial": "10 ms",
        "taskmanager.network.request-backoff.max": "40 ms"})
    env = environment(conf, "te-1")
    try:
        for address, error in ((daemon.address, PartitionNotFoundError),
                               ("127.0.0.1:1", RemoteTransportError)):
            descriptor = pb.ExternalShuffleDescriptor(
                service_address=address, job_id=JOB, partition_id="never.1",
                num_subpartitions=1).SerializeToString()
            task = TaskWakeup("reduce")
            gate = env.create_input_gate(task.context, gate_deployment([descriptor], 0))
            with pytest.raises(error, match=f"partition never.1 in the shuffle service at "
                                            f"{address}"):
                drain(task, gate)
            gate.close()
    finally:
        env.close()


def test_failed_or_released_writer_commits_nothing(start_shuffle_daemon):
    daemon = start_shuffle_daemon(spill_threshold=1024)
    env = environment(configuration(daemon.address), "te-1")
    try:
        task = TaskWakeup("map")
        for partition, end in (("a.1", "fail"), ("b.1", "release"), ("c.1", "job released")):
            writer = env.create_result_partition_writer(
                task.context, jobgraph_pb2.ResultPartitionDeployment(
                    partition_id=partition, num_subpartitions=2))
            produce(task, writer, 0, 2, 100)
            writer.flush_all()
            wait_until(lambda p=partition: any(i.partition_id == p and i.runs > 0
                                               for i in daemon.store.list(JOB)),
                       "data on the service's disk")
            if end == "fail":
                writer.fail(RuntimeError("user code failed"))
            elif end == "release":
                writer.release()
            else:
                env.release_partitions_of_job(JOB)
            assert daemon.store.wait_idle(TIMEOUT)
            assert not (Path(daemon.data_dir) / JOB).exists()
            with pytest.raises(RemoteTransportError, match="released before it was finished"):
                writer.finish()
        # Records Arrow cannot encode (here: not the declared type) fail the writer with
        # the encoding error, and nothing is committed.
        writer = env.create_result_partition_writer(
            task.context, jobgraph_pb2.ResultPartitionDeployment(
                partition_id="d.1", num_subpartitions=1))
        writer.emit(0, Elements.from_records(["not a number"], Types.LONG()))
        with pytest.raises(TypeError, match="declared output_type"):
            writer.finish()
        assert daemon.store.wait_idle(TIMEOUT)
        assert not (Path(daemon.data_dir) / JOB).exists()
        assert env.metrics() == {"partitionsWriting": 0}
    finally:
        env.close()


class _FakeCall:
    def __init__(self, requests: Iterator[pb.WritePartitionRequest]) -> None:
        self.requests = requests
        self.cancelled = False

    def add_done_callback(self, callback) -> None:
        pass

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class _FakeStub:
    """Takes a write's messages only when the test says so (a stalled service)."""

    def __init__(self) -> None:
        self.calls: list[_FakeCall] = []
        self.WritePartition = self

    def future(self, requests) -> _FakeCall:
        self.calls.append(_FakeCall(requests))
        return self.calls[-1]


def test_writer_send_queue_is_bounded_and_wakes_the_task_when_drained():
    stub = _FakeStub()
    wakeups: list[int] = []
    writer = ExternalResultPartitionWriter(
        stub, "fake:1", JOB, "a.1", 2, chunk_bytes=100, queue_bytes=300,
        wakeup=lambda: wakeups.append(1))
    [call] = stub.calls
    header = next(call.requests)
    assert (header.partition_id, header.num_subpartitions, header.data) == ("a.1", 2, b"")
    emitted = 0
    while writer.is_available():
        writer.emit(emitted % 2, Elements.from_records(list(range(5))))  # 5 * 24 bytes
        emitted += 1
        assert emitted < 10, "the send queue is not bounded"
    assert emitted == 3 and writer.metrics()["outPoolUsage"] == 1.0
    first = next(call.requests)
    assert first.subpartition == 0 and first.data  # an Arrow IPC stream
    batch = pa.ipc.open_stream(first.data).read_next_batch()
    assert Elements.from_arrow(batch).records() == list(range(5))
    assert not writer.is_available() and not wakeups  # handed over, not yet sent
    next(call.requests)  # gRPC asks for the next message once the first one was sent
    assert writer.is_available() and wakeups == [1]
    writer.fail(RuntimeError("cancelled"))
    assert call.cancelled
    assert list(call.requests) == []  # the stream ends without a commit


def test_chunks_split_at_schema_changes_and_at_the_size_limit_and_decode_back():
    ints = Elements.from_records(list(range(10_000)))  # 80 kB as Arrow
    words = Elements.from_records(["a", "b"])
    chunks = encode_chunks([ints, words, Elements.from_records([]), ints],
                           max_chunk_bytes=16 * 1024)
    assert len(chunks) >= 2 * 5 + 1
    assert all(len(chunk) < 20 * 1024 for chunk in chunks)
    decoded = [r for chunk in chunks for e in decode_chunk(chunk) for r in e.records()]
    assert decoded == [*range(10_000), "a", "b", *range(10_000)]


def test_missing_or_invalid_service_address_is_a_config_error():
    factory = ExternalShuffleServiceFactory()
    with pytest.raises(ConfigError, match=r"'shuffle-service\.address' is not set"):
        factory.create_shuffle_master(Configuration())
    with pytest.raises(ConfigError, match=r"'shuffle-service\.address' is not set"):
        factory.create_shuffle_environment(
            ShuffleEnvironmentContext(Configuration(), "te-1", "127.0.0.1"))
    conf = Configuration.from_pairs({"shuffle-service.address": "no-port"})
    with pytest.raises(ConfigError, match=r"'shuffle-service\.address'.*HOST:PORT"):
        factory.create_shuffle_master(conf)
