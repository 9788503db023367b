"""A JobMaster with high availability recovers what its job store holds — and only what it
can trust: a stored job whose graph, pointer or checkpoint is damaged or missing is skipped
with one error line naming the job, the file and the cause, its data left alone, while the
JobMaster goes on with the other jobs. Submissions are stored before they are
acknowledged. (In-process JobMasters on real file:// storage, no TaskExecutors: the
recovered jobs wait for slots.)"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cluster import poll
from weir.checkpoint.metadata import write_metadata
from weir.checkpoint.storage import create_storage
from weir.client.cluster_client import JobMasterClient, job_status_name
from weir.core.config import Configuration
from weir.core.errors import InvalidJobError
from weir.jobmaster.daemon import JobMaster
from weir.jobmaster.high_availability import StorageJobStore, create_job_store
from weir.proto.checkpoint_pb2 import CheckpointMetadata


def job_graph(checkpoints: Path | None = None) -> object:
    from weir import DiscardingSink, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(0, 10**9).map(lambda n: n).uid("map").sink_to(DiscardingSink())
    graph = env.get_job_graph("stored job")
    if checkpoints is not None:
        graph.config["execution.checkpointing.interval"] = "1 s"
        graph.config["state.checkpoints.dir"] = checkpoints.as_uri()
    return graph


@pytest.fixture
def ha_conf(tmp_path: Path) -> Configuration:
    return Configuration.from_pairs({
        "high-availability.type": "file",
        "high-availability.storageDir": (tmp_path / "ha").as_uri(),
        "jobmaster.rpc.port": "0", "metrics.reporter.prom.port": "0", "rest.port": "0",
        "slot.request.timeout": "5 min"})


@pytest.fixture
def start_jobmaster() -> Iterator[Callable[[Configuration], JobMaster]]:
    started: list[JobMaster] = []

    def start(conf: Configuration) -> JobMaster:
        jm = JobMaster(conf)
        jm.start()
        started.append(jm)
        return jm

    yield start
    for jm in started:
        jm.stop()


def store_of(conf: Configuration) -> StorageJobStore:
    store = create_job_store(conf)
    assert isinstance(store, StorageJobStore)
    return store


def listed(jm: JobMaster) -> dict[str, str]:
    client = JobMasterClient(jm.address, timeout=10)
    try:
        return {j.job_id: job_status_name(j.status) for j in client.list_jobs()}
    finally:
        client.close()


def test_every_stored_job_is_recovered_under_its_id_and_broken_ones_are_skipped(
        ha_conf, start_jobmaster, tmp_path, caplog):
    store = store_of(ha_conf)
    checkpoints = tmp_path / "checkpoints"
    chk_storage = create_storage(checkpoints.as_uri())
    fresh, restored, bad_pointer, bad_graph, lost_checkpoint = (
        job_graph(), job_graph(checkpoints), job_graph(checkpoints), job_graph(),
        job_graph(checkpoints))
    for graph in (fresh, restored, bad_pointer, bad_graph, lost_checkpoint):
        store.put_job(graph.SerializeToString(), graph.job_id)
    # A job that completed checkpoint 3 under the JobMaster that died.
    path = write_metadata(chk_storage, CheckpointMetadata(job_id=restored.job_id,
                                                          checkpoint_id=3))
    store.put_checkpoint_pointer(restored.job_id, 3, path)
    # Damage: a flipped bit in a pointer, a truncated graph, a checkpoint deleted by hand.
    store.put_checkpoint_pointer(bad_pointer.job_id, 2, path)
    pointer_file = Path(store.location(bad_pointer.job_id, "checkpoint").removeprefix("file://"))
    data = bytearray(pointer_file.read_bytes())
    data[-2] ^= 0x20
    pointer_file.write_bytes(bytes(data))
    graph_file = Path(store.location(bad_graph.job_id, "jobgraph").removeprefix("file://"))
    graph_file.write_bytes(graph_file.read_bytes()[:-40])
    store.put_checkpoint_pointer(lost_checkpoint.job_id, 5,
                                 f"{chk_storage.base_uri}/{lost_checkpoint.job_id}/chk-5")

    with caplog.at_level(logging.INFO, logger="weir.jobmaster"):
        jm = start_jobmaster(ha_conf)
        jobs = poll(lambda: len(d := listed(jm)) == 2 and d, 30, what="the recovered jobs")
        poll(lambda: sum("cannot be recovered" in r.message for r in caplog.records) == 3,
             30, what="the three broken jobs to be reported")

    assert jobs == {fresh.job_id: "RUNNING", restored.job_id: "RUNNING"}
    client = JobMasterClient(jm.address, timeout=10)
    try:
        history = client.checkpoints(restored.job_id)
        assert history.restored_checkpoint_id == 3
    finally:
        client.close()
    job = jm.main.call(lambda: jm.jobs[restored.job_id])
    latest = jm.main.call(lambda: job.checkpointing.coordinator.latest_completed())
    assert latest.checkpoint_id == 3 and latest.external_path == path

    errors = {r.getMessage() for r in caplog.records if r.levelno == logging.ERROR}
    assert len(errors) == 3, errors
    for job_id, file, cause in [
            (bad_pointer.job_id, "checkpoint", "checksum mismatch"),
            (bad_graph.job_id, "jobgraph", "truncated"),
            (lost_checkpoint.job_id, "chk-5/_metadata", "does not exist")]:
        line = next(e for e in errors if job_id in e)
        assert "\n" not in line
        assert f"{job_id}/{file}" in line and cause in line, line
    # Nothing of a skipped job is deleted: it can be repaired by hand.
    assert sorted(store.job_ids()) == sorted(
        g.job_id for g in (fresh, restored, bad_pointer, bad_graph, lost_checkpoint))
    assert (checkpoints / restored.job_id / "chk-3" / "_metadata").exists()


def test_stopping_keeps_the_jobs_and_cancelling_forgets_them(ha_conf, start_jobmaster):
    jm = start_jobmaster(ha_conf)
    client = JobMasterClient(jm.address, timeout=10)
    try:
        kept, cancelled = job_graph(), job_graph()
        for graph in (kept, cancelled):
            assert client.submit_job(graph) == graph.job_id
        store = store_of(ha_conf)
        # Stored before the submission was acknowledged.
        assert store.job_ids() == sorted([kept.job_id, cancelled.job_id])
        client.cancel_job(cancelled.job_id)
        poll(lambda: store.job_ids() == [kept.job_id], 30,
             what="the cancelled job to leave the store")
    finally:
        client.close()
    jm.stop()
    # A JobMaster that stops does not end its jobs: the next one recovers them.
    assert store.job_ids() == [kept.job_id]
    successor = start_jobmaster(ha_conf)
    assert poll(lambda: listed(successor), 30, what="the job to be recovered") == {
        kept.job_id: "RUNNING"}


def test_a_submission_whose_graph_cannot_be_stored_is_refused_and_not_registered(
        tmp_path, start_jobmaster):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the storage directory should be")
    jm = start_jobmaster(Configuration.from_pairs({
        "high-availability.type": "file", "high-availability.storageDir": blocker.as_uri(),
        "jobmaster.rpc.port": "0", "metrics.reporter.prom.port": "0", "rest.port": "0"}))
    client = JobMasterClient(jm.address, timeout=10)
    try:
        with pytest.raises(InvalidJobError, match="the job was not submitted: high "
                                                  "availability is on and storing its graph"):
            client.submit_job(job_graph())
        assert client.list_jobs() == []
    finally:
        client.close()
    assert jm.main.call(lambda: (dict(jm.jobs), set(jm._reserved))) == ({}, set())


def test_a_checkpoint_whose_pointer_cannot_be_stored_does_not_complete(
        ha_conf, start_jobmaster, tmp_path):
    """The pointer is stored before the checkpoint counts as complete (so no sink commits
    what a recovered JobMaster would not restore); failing to store it fails that
    checkpoint, not the JobMaster."""
    from weir.core.errors import StorageError

    jm = start_jobmaster(ha_conf)
    graph = job_graph(tmp_path / "checkpoints")
    jm.submit_durably(graph)
    job = jm.main.call(lambda: jm.jobs[graph.job_id])
    hook = job.checkpointing.on_metadata_written
    assert hook is not None
    hook(1, "file:///c/chk-1")                 # what a finalization does on the I/O pool
    store = store_of(ha_conf)
    assert store.checkpoint_pointer(graph.job_id).checkpoint_id == 1
    # The storage fails: the pointer's name is taken by a directory.
    pointer = tmp_path / "ha" / "default" / "jobs" / graph.job_id / "checkpoint"
    pointer.unlink()
    (pointer / "in-the-way").mkdir(parents=True)
    with pytest.raises(StorageError, match="for high availability") as err:
        hook(2, "file:///c/chk-2")
    assert str(pointer) in str(err.value)
    assert listed(jm) == {graph.job_id: "RUNNING"}
    (pointer / "in-the-way").rmdir()
    pointer.rmdir()
    hook(3, "file:///c/chk-3")
    assert store.checkpoint_pointer(graph.job_id).checkpoint_id == 3
