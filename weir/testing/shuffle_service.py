"""The conformance suite of shuffle services: what every implementation of the FLIP-31
interfaces (:mod:`weir.shuffle.api`) must do — the pipelined shuffle, the external shuffle
service, or a new one named by ``shuffle-service-factory.class``.

A service is given as its :class:`~weir.shuffle.api.ShuffleServiceFactory` and a
:class:`~weir.core.config.Configuration` it works with (e.g. ``shuffle-service.address`` of
a running external service). Each check builds what a JobMaster and two TaskExecutors
(``te-1``, ``te-2``, on 127.0.0.1) would hold — one ShuffleMaster, two started
ShuffleEnvironments — in this process, runs producing and consuming tasks on threads of
their own, and closes everything again. Run them all with :func:`check_shuffle_service`, or
one by one (:data:`SHUFFLE_SERVICE_CHECKS`).

What is checked: partitions register with the master and stop being available once
released or (unless the service keeps them: ``reconsumable``) lost with their producer;
records of mixed kinds arrive at local and remote consumers in the order each channel was
written, each channel ending with one end-of-partition, and writers and gates wake their
task when it can go on; memory is bounded — a pipelined producer whose consumer does not
read is held back within its buffers and credits, a reconsumable partition is kept by the
service, for consumers that come after its producer is gone and for a consumer that reads
it again; a released partition, and one that was never produced, is refused with
PartitionNotFoundError naming it.

Example:
    >>> from weir.core.config import Configuration
    >>> from weir.shuffle.pipelined.factory import PipelinedShuffleServiceFactory
    >>> check_shuffle_service(PipelinedShuffleServiceFactory(), Configuration())
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import PartitionNotFoundError
from weir.core.ids import ExecutionAttemptId, JobId, PartitionId, ResourceId
from weir.core.records import Elements
from weir.proto import jobgraph_pb2
from weir.shuffle import options as shuffle_options
from weir.shuffle.api import (
    InputGate,
    PartitionDescriptor,
    ProducerDescriptor,
    ResultPartitionWriter,
    ShuffleEnvironment,
    ShuffleEnvironmentContext,
    ShuffleServiceFactory,
    TaskShuffleContext,
)

JOB = JobId("0123456789abcdef0123456789abcdef")
#: How long a task waits to be woken, and a check for what a service does on its own.
TIMEOUT = 20.0
TASK_EXECUTORS = ("te-1", "te-2")

#: What the suite adds to the configuration it is given (unless that sets them): small
#: buffers, so that a few records fill one, and a short back-off, so that a missing
#: partition is reported quickly.
SUITE_OPTIONS = {
    options.SEGMENT_SIZE.key: "4kb",
    shuffle_options.REQUEST_BACKOFF_INITIAL.key: "10 ms",
    shuffle_options.REQUEST_BACKOFF_MAX.key: "40 ms",
}


class TaskWakeup:
    """What a task's mailbox thread is to its writers and gates: a wake-up flag."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.woken = threading.Event()
        self.context = TaskShuffleContext(JOB, name, ExecutionAttemptId(f"attempt-{name}"),
                                          self.woken.set)

    def wait_woken(self, what: str) -> None:
        """Wait (at most TIMEOUT) to be woken, and clear the flag."""
        assert self.woken.wait(TIMEOUT), f"{self.name}: {what} never woke the task"
        self.woken.clear()


class ShuffleCluster:
    """A ShuffleMaster and a started ShuffleEnvironment per TaskExecutor, in this process.

    Example:
        >>> from weir.shuffle.pipelined.factory import PipelinedShuffleServiceFactory
        >>> with ShuffleCluster(PipelinedShuffleServiceFactory(), Configuration()) as c:
        ...     sorted(c.environments)
        ['te-1', 'te-2']
    """

    def __init__(self, factory: ShuffleServiceFactory, configuration: Configuration) -> None:
        conf = Configuration(configuration)
        for key, value in SUITE_OPTIONS.items():
            if not conf.contains_key(key):
                conf.set_raw(key, value)
        self.configuration = conf
        self.factory = factory
        self.master = factory.create_shuffle_master(conf)
        self.environments: dict[str, ShuffleEnvironment] = {}
        self.data_addresses: dict[str, str] = {}
        try:
            for resource_id in TASK_EXECUTORS:
                env = factory.create_shuffle_environment(
                    ShuffleEnvironmentContext(conf, ResourceId(resource_id), "127.0.0.1"))
                self.environments[resource_id] = env
                self.data_addresses[resource_id] = env.start()
        except BaseException:
            self.close()
            raise

    def register(self, partition_id: str, subpartitions: int, producer: str = "te-1") -> bytes:
        """Register a partition produced on TaskExecutor ``producer``: its descriptor."""
        return self.master.register_partition_with_producer(
            PartitionDescriptor(JOB, PartitionId(partition_id), subpartitions,
                                ExecutionAttemptId(f"attempt-{partition_id}")),
            ProducerDescriptor(ResourceId(producer), self.data_addresses[producer]))

    def writer(self, task: TaskWakeup, partition_id: str, subpartitions: int, on: str = "te-1",
               blocking: bool = False) -> ResultPartitionWriter:
        return self.environments[on].create_result_partition_writer(
            task.context, jobgraph_pb2.ResultPartitionDeployment(
                partition_id=partition_id, num_subpartitions=subpartitions, blocking=blocking))

    def gate(self, task: TaskWakeup, descriptors: list[bytes], subpartition: int,
             on: str = "te-2") -> InputGate:
        return self.environments[on].create_input_gate(
            task.context, jobgraph_pb2.InputGateDeployment(channels=[
                jobgraph_pb2.InputChannelDeployment(shuffle_descriptor=d,
                                                    subpartition=subpartition)
                for d in descriptors]))

    def close(self) -> None:
        """Close the environments and the master (also after a failed check)."""
        for env in self.environments.values():
            with contextlib.suppress(Exception):
                env.close()
        self.master.close()

    def __enter__(self) -> ShuffleCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def produce(task: TaskWakeup, writer: ResultPartitionWriter, producer: int, subpartitions: int,
            batches: int, finish: bool = False) -> dict[int, list[Any]]:
    """Emit ``batches`` small batches of mixed kinds (tuples, strings, Arrow-native ints)
    to random subpartitions, as a task does: waiting to be woken while the writer is not
    available; then, with ``finish``, finish the partition. Returns the records sent to
    each subpartition, in order."""
    rng = random.Random(producer)
    sent: dict[int, list[Any]] = {s: [] for s in range(subpartitions)}
    for i in range(batches):
        while not writer.is_available():
            task.woken.clear()
            if not writer.is_available():
                task.wait_woken("the writer's freed capacity")
        sub = rng.randrange(subpartitions)
        kind = i % 3
        records: list[Any]
        if kind == 0:
            records = [(producer, sub, i, j) for j in range(rng.randint(1, 40))]
            elements = Elements.from_records(records)
        elif kind == 1:
            records = [f"p{producer}-{i}-{j}" for j in range(rng.randint(1, 40))]
            elements = Elements.from_records(records)
        else:
            records = [i * 1000 + j for j in range(rng.randint(1, 40))]
            elements = Elements.from_arrow(Elements.from_records(records).arrow())
        writer.emit(sub, elements)
        sent[sub].extend(records)
    if finish:
        writer.finish()
    return sent


def drain(task: TaskWakeup, gate: InputGate, requested: bool = False,
          channels: int | None = None) -> dict[int, list[Any]]:
    """Every record per channel, as a task loop reads them (after requesting the
    partitions, unless ``requested`` already), waiting to be woken while nothing is there.
    Checks that each data item has a size, and that each channel (``channels`` of them, if
    given) ends with one end-of-partition, after all its data."""
    records: dict[int, list[Any]] = {}
    ends: list[int] = []
    if not requested:
        gate.request_partitions()
    while not gate.is_finished():
        task.woken.clear()
        item = gate.poll_next()
        if item is None:
            task.wait_woken("arriving data")
        elif item.end_of_partition:
            assert item.channel not in ends, f"channel {item.channel} ended twice"
            ends.append(item.channel)
        elif item.elements is not None:
            assert item.channel not in ends, f"data on channel {item.channel} after its end"
            assert item.size > 0, f"a buffer of channel {item.channel} without a size"
            records.setdefault(item.channel, []).extend(
                r for e in item.elements for r in e.records())
    assert gate.poll_next() is None, "a finished gate delivered more"
    if channels is not None:
        assert sorted(ends) == list(range(channels)), f"ends of channels {sorted(ends)}"
    return records


class _StillThereError(AssertionError):
    """A partition expected to be gone delivered data."""


def not_found(task: TaskWakeup, gate: InputGate, partition_id: str) -> PartitionNotFoundError:
    """Poll ``gate`` (with a deadline: back-offs take their time) until it raises
    PartitionNotFoundError, which must name ``partition_id``; returns it."""
    gate.request_partitions()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            item = gate.poll_next()
        except PartitionNotFoundError as err:
            assert partition_id in str(err), str(err)
            return err
        if item is not None:
            msg = f"the missing partition {partition_id} delivered {item}"
            raise _StillThereError(msg)
        task.woken.wait(0.05)
        task.woken.clear()
    msg = f"no PartitionNotFoundError for {partition_id} within {TIMEOUT} s"
    raise AssertionError(msg)


def _run(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a thread of its own (a task), as a future."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="check-task")
    future = pool.submit(fn, *args)
    pool.shutdown(wait=False)
    return future


# -- the checks --------------------------------------------------------------------------------


def check_partitions_register_and_release(cluster: ShuffleCluster) -> None:
    """The master hands out a descriptor per partition, and knows which are available:
    not after a release, nor (unless the service keeps partitions) after their producer's
    TaskExecutor was lost."""
    master = cluster.master
    kept = cluster.register("kept.1", 2, producer="te-1")
    released = cluster.register("released.1", 2, producer="te-1")
    assert kept and released and kept != released
    assert master.is_partition_available(PartitionId("kept.1"))
    assert master.is_partition_available(PartitionId("released.1"))
    master.release_partition_externally(released)
    assert not master.is_partition_available(PartitionId("released.1"))
    assert master.is_partition_available(PartitionId("kept.1"))
    cluster.register("other.1", 1, producer="te-2")
    lost = master.on_producer_lost(ResourceId("te-1"))
    if master.reconsumable:
        assert lost == [] and master.is_partition_available(PartitionId("kept.1"))
    else:
        assert lost == ["kept.1"] and not master.is_partition_available(PartitionId("kept.1"))
    assert master.is_partition_available(PartitionId("other.1"))


def check_records_arrive_in_order(cluster: ShuffleCluster) -> None:
    """Two producers (one per TaskExecutor) write three subpartitions each; every consumer
    (local and remote to each producer) gets every record of its subpartition, in the order
    each producer wrote them, and then the end of each channel."""
    subpartitions, producers = 3, 2
    descriptors = [cluster.register(f"map{p}.1", subpartitions, producer=TASK_EXECUTORS[p])
                   for p in range(producers)]
    tasks = [TaskWakeup(f"map{p}") for p in range(producers)]
    writers = [cluster.writer(tasks[p], f"map{p}.1", subpartitions, on=TASK_EXECUTORS[p])
               for p in range(producers)]
    sending = [_run(produce, tasks[p], writers[p], p, subpartitions, 300, True)
               for p in range(producers)]
    # Consumers read at the same time: a pipelined producer waits for the slowest one.
    consumers = [TaskWakeup(f"reduce{sub}") for sub in range(subpartitions)]
    gates = [cluster.gate(task, descriptors, sub, on=TASK_EXECUTORS[sub % 2])
             for sub, task in enumerate(consumers)]
    reading = [_run(drain, task, gate, False, producers)
               for task, gate in zip(consumers, gates, strict=True)]
    sent = [future.result(TIMEOUT) for future in sending]
    for sub, (future, gate) in enumerate(zip(reading, gates, strict=True)):
        got = future.result(TIMEOUT)
        gate.close()
        assert [got.get(p, []) for p in range(producers)] == [s[sub] for s in sent]


def check_memory_is_bounded(cluster: ShuffleCluster) -> None:
    """A pipelined producer whose consumer does not read is held back within its buffers
    and the consumer's credits, and goes on (woken) once the consumer reads, losing
    nothing. A reconsumable partition is kept by the service instead: it is read in full
    after its producer's TaskExecutor is gone, and read again by a second consumer."""
    if cluster.master.reconsumable:
        _check_kept_by_the_service(cluster)
        return
    conf = cluster.configuration
    segment = int(conf.get(options.SEGMENT_SIZE))
    bound = int(conf.get(shuffle_options.SUBPARTITION_QUEUE)
                + conf.get(shuffle_options.BUFFERS_PER_CHANNEL)
                + conf.get(shuffle_options.FLOATING_BUFFERS_PER_GATE) + 1)
    descriptor = cluster.register("slow.1", 1)
    producer = TaskWakeup("producer")
    writer = cluster.writer(producer, "slow.1", 1)
    consumer = TaskWakeup("consumer")
    gate = cluster.gate(consumer, [descriptor], 0, on="te-2")
    gate.request_partitions()
    # Each emit fills one buffer; keep emitting while the writer takes more, and for as
    # long as it wakes the producer within a moment (credits still arriving).
    big = list(range(segment // 8 + 1))
    emitted = 0
    while emitted <= 10 * bound:
        if writer.is_available():
            writer.emit(0, Elements.from_records(big))
            emitted += 1
            continue
        producer.woken.clear()
        if not writer.is_available() and not producer.woken.wait(0.5):
            break
    assert emitted <= bound, (f"the producer was not held back: {emitted} buffers emitted "
                              f"to a consumer that reads nothing (bound {bound})")

    def rest() -> int:
        for _ in range(3 * bound):
            while not writer.is_available():
                producer.woken.clear()
                if not writer.is_available():
                    producer.wait_woken("the consumer reading")
            writer.emit(0, Elements.from_records(big))
        writer.finish()
        return emitted + 3 * bound

    total = _run(rest)
    got = drain(consumer, gate, requested=True, channels=1)
    gate.close()
    assert got == {0: big * total.result(TIMEOUT)}


def _check_kept_by_the_service(cluster: ShuffleCluster) -> None:
    descriptor = cluster.register("kept.1", 2, producer="te-1")
    producer = TaskWakeup("producer")
    writer = cluster.writer(producer, "kept.1", 2, on="te-1", blocking=True)
    sent = produce(producer, writer, 0, 2, 200, finish=True)   # nobody reads meanwhile
    cluster.environments["te-1"].close()          # the producer's TaskExecutor goes away
    assert cluster.master.on_producer_lost(ResourceId("te-1")) == []
    for attempt in range(2):                      # a consumer, and one restarted
        for sub in range(2):
            task = TaskWakeup(f"reduce{sub}-{attempt}")
            gate = cluster.gate(task, [descriptor], sub, on="te-2")
            assert drain(task, gate, channels=1) == ({0: sent[sub]} if sent[sub] else {})
            gate.close()


def check_released_partition_is_not_found(cluster: ShuffleCluster) -> None:
    """Once the master released a consumed partition and its producer's TaskExecutor
    released the job's partitions, a consumer asking for it gets PartitionNotFoundError."""
    descriptor = cluster.register("done.1", 1, producer="te-1")
    producer = TaskWakeup("producer")
    sending = _run(produce, producer, cluster.writer(producer, "done.1", 1), 0, 1, 20, True)
    consumer = TaskWakeup("consumer")
    gate = cluster.gate(consumer, [descriptor], 0, on="te-2")
    assert drain(consumer, gate, channels=1) == {0: sending.result(TIMEOUT)[0]}
    gate.close()
    cluster.master.release_partition_externally(descriptor)
    cluster.environments["te-1"].release_partitions_of_job(JOB)
    assert not cluster.master.is_partition_available(PartitionId("done.1"))
    for on in TASK_EXECUTORS:
        # A release may take effect asynchronously: a consumer that still read the whole
        # partition is tolerated until the deadline, a new one must then be refused.
        deadline = time.monotonic() + TIMEOUT
        while True:
            late = TaskWakeup(f"late-{on}")
            gate = cluster.gate(late, [descriptor], 0, on=on)
            try:
                not_found(late, gate, "done.1")
                break
            except _StillThereError:
                assert time.monotonic() < deadline, "a released partition is still read"
            finally:
                gate.close()


def check_missing_partition_is_not_found(cluster: ShuffleCluster) -> None:
    """A partition that is registered but never produced is refused, after the request
    back-off, with PartitionNotFoundError naming it, to consumers local and remote."""
    descriptor = cluster.register("never.1", 1, producer="te-1")
    for on in TASK_EXECUTORS:
        task = TaskWakeup(f"reduce-{on}")
        gate = cluster.gate(task, [descriptor], 0, on=on)
        not_found(task, gate, "never.1")
        gate.close()


#: Every check of the suite, in the order :func:`check_shuffle_service` runs them.
SHUFFLE_SERVICE_CHECKS: tuple[Callable[[ShuffleCluster], None], ...] = (
    check_partitions_register_and_release,
    check_records_arrive_in_order,
    check_memory_is_bounded,
    check_released_partition_is_not_found,
    check_missing_partition_is_not_found,
)


@contextlib.contextmanager
def shuffle_cluster(factory: ShuffleServiceFactory,
                    configuration: Configuration) -> Iterator[ShuffleCluster]:
    """A :class:`ShuffleCluster` for one check, closed afterwards."""
    cluster = ShuffleCluster(factory, configuration)
    try:
        yield cluster
    finally:
        cluster.close()


def check_shuffle_service(factory: ShuffleServiceFactory,
                          configuration: Configuration) -> None:
    """Run every check of the suite, each on a fresh :class:`ShuffleCluster`; raises
    AssertionError (naming what went wrong) at the first one that fails."""
    for check in SHUFFLE_SERVICE_CHECKS:
        with shuffle_cluster(factory, configuration) as cluster:
            check(cluster)
