"""What checkpoints leave in storage, and what a restarted task is given: ``_metadata``,
channel state, the per-task restore descriptor, and the checkpoint options of the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weir import (
    CheckpointingMode,
    Duration,
    ExternalizedCheckpointRetention,
    StreamExecutionEnvironment,
)
from weir.checkpoint.channel_state import ChannelStateWriter, read_channel_state
from weir.checkpoint.metadata import (
    encode_metadata,
    list_checkpoints,
    missing_files,
    read_metadata,
    write_metadata,
)
from weir.checkpoint.storage import StreamStateHandle, create_storage
from weir.core.config import Configuration
from weir.core.errors import CorruptStateError, MissingStateError
from weir.core.records import Elements
from weir.jobmaster.task_restore import task_restore
from weir.proto import checkpoint_pb2, jobgraph_pb2
from weir.proto.checkpoint_pb2 import CheckpointMetadata
from weir.state.handles import CanonicalStateHandle
from weir.state.key_groups import KeyGroupRange


def test_metadata_round_trip_and_listing(tmp_path: Path) -> None:
    storage = create_storage(str(tmp_path))
    for n in (3, 1, 12):
        write_metadata(storage, CheckpointMetadata(job_id="j", checkpoint_id=n))
    (tmp_path / "j" / "chk-7").mkdir()               # never completed: no _metadata
    listed = list_checkpoints(storage, "j")
    assert [n for n, _ in listed] == [1, 3, 12]
    assert read_metadata(storage, listed[-1][1]).checkpoint_id == 12


def test_damaged_or_missing_metadata_is_named(tmp_path: Path) -> None:
    storage = create_storage(str(tmp_path))
    path = write_metadata(storage, CheckpointMetadata(job_id="j", checkpoint_id=5))
    metadata = tmp_path / "j" / "chk-5" / "_metadata"
    data = bytearray(metadata.read_bytes())
    data[-1] ^= 1
    metadata.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match=r"chk-5/_metadata is corrupt \(checksum"):
        read_metadata(storage, path)
    metadata.write_bytes(b"hello")
    with pytest.raises(CorruptStateError, match="not a weir checkpoint metadata file"):
        read_metadata(storage, path)
    metadata.unlink()
    with pytest.raises(MissingStateError, match="does not exist"):
        read_metadata(storage, path)


def test_missing_files_finds_every_kind_of_reference(tmp_path: Path) -> None:
    storage = create_storage(str(tmp_path))
    present = storage.write("j/chk-1/0-0/op", b"state")
    keyed = CanonicalStateHandle(KeyGroupRange(0, 127), 1,
                                 StreamStateHandle(f"{storage.base_uri}/j/chk-1/0-0/keyed",
                                                   4, "crc32:00000000"))
    metadata = CheckpointMetadata(job_id="j", checkpoint_id=1)
    sub = metadata.subtasks.add(vertex_id=0, subtask_index=0)
    sub.state.operators.add(operator_uid="a", keyed_state=json.dumps([keyed.to_dict()]),
                            operator_state=checkpoint_pb2.StreamHandle(
                                uri=present.uri, size=present.length))
    sub.state.channel_state.data.uri = f"{storage.base_uri}/j/chk-1/0-0/channel-state"
    assert missing_files(storage, metadata) == [keyed.data.uri,
                                                sub.state.channel_state.data.uri]
    assert len(encode_metadata(metadata)) > 0


def test_channel_state_round_trip_and_damage() -> None:
    writer = ChannelStateWriter(9)
    writer.add_input(3, Elements.from_records([("a", 1), ("b", 2)]))
    writer.add_output(1, 0, [Elements.from_records([10]), Elements.from_records([11])])
    data = writer.to_bytes()
    state = read_channel_state(data, "chk-9/0-1/channel-state")
    assert [e.records() for e in state.inputs[3]] == [[("a", 1), ("b", 2)]]
    assert [e.records() for e in state.outputs[(1, 0)]] == [[10], [11]]
    with pytest.raises(CorruptStateError, match="chk-9/0-1/channel-state is truncated"):
        read_channel_state(data[:-5], "chk-9/0-1/channel-state")
    with pytest.raises(CorruptStateError, match="bad magic"):
        read_channel_state(b"nope" + data, "x")


def metadata_with_two_subtasks() -> CheckpointMetadata:
    metadata = CheckpointMetadata(job_id="j", checkpoint_id=4)
    metadata.vertices.add(vertex_id=1, parallelism=2, max_parallelism=128,
                          operator_uids=["src", "agg"])
    for index, key_groups in enumerate((KeyGroupRange(0, 63), KeyGroupRange(64, 127))):
        sub = metadata.subtasks.add(vertex_id=1, subtask_index=index)
        handle = CanonicalStateHandle(key_groups, 4, StreamStateHandle(
            f"file:///c/keyed-{index}", 10, "crc32:0"))
        sub.state.operators.add(operator_uid="agg", keyed_state=json.dumps([handle.to_dict()]))
        sub.state.operators.add(operator_uid="src", operator_state=checkpoint_pb2.StreamHandle(
            uri=f"file:///c/splits-{index}", size=3))
        sub.state.channel_state.data.uri = f"file:///c/in-flight-{index}"
    return metadata


def vertex(parallelism: int) -> jobgraph_pb2.JobVertex:
    return jobgraph_pb2.JobVertex(id=1, name="agg", parallelism=parallelism,
                                  max_parallelism=128, operator_uids=["src", "agg"])


def test_each_subtask_gets_its_key_groups_every_operator_state_and_its_in_flight_data() -> None:
    restore = task_restore(metadata_with_two_subtasks(), vertex(2), 1)
    by_uid = {op.operator_uid: op for op in restore.operators}
    assert [json.loads(k)[0]["data"]["uri"] for k in by_uid["agg"].keyed_state] == [
        "file:///c/keyed-1"]
    assert [h.uri for h in by_uid["src"].operator_state] == ["file:///c/splits-0",
                                                            "file:///c/splits-1"]
    assert restore.channel_state.data.uri == "file:///c/in-flight-1"


def test_in_flight_data_can_be_left_out_and_is_redistributed_when_rescaled() -> None:
    """At another parallelism every subtask reads every old subtask's in-flight data for
    its share of the input records, and old subtask j's output records are sent again by
    subtask j % parallelism."""
    metadata = metadata_with_two_subtasks()
    restore = task_restore(metadata, vertex(2), 0, without_channel_state=True)
    assert not restore.HasField("channel_state") and not restore.rescaled_inputs
    for parallelism, subtask, outputs in ((1, 0, [0, 1]), (3, 1, [1]), (3, 2, [])):
        rescaled = task_restore(metadata, vertex(parallelism), subtask)
        assert not rescaled.HasField("channel_state")
        assert [h.data.uri for h in rescaled.rescaled_inputs] == \
            ["file:///c/in-flight-0", "file:///c/in-flight-1"]
        assert [h.data.uri for h in rescaled.rescaled_outputs] == \
            [f"file:///c/in-flight-{j}" for j in outputs]


def test_a_finished_subtask_finishes_again() -> None:
    metadata = CheckpointMetadata(checkpoint_id=2)
    metadata.vertices.add(vertex_id=1, parallelism=1)
    metadata.subtasks.add(vertex_id=1, subtask_index=0, finished=True)
    restore = task_restore(metadata, vertex(1), 0)
    assert restore.finished and not restore.operators


def test_pyflink_checkpoint_config_writes_the_job_configuration() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_checkpoint_interval() == -1
    env.enable_checkpointing(500, CheckpointingMode.AT_LEAST_ONCE)
    config = env.get_checkpoint_config()
    config.set_checkpoint_timeout(60_000)
    config.set_min_pause_between_checkpoints(Duration.of_millis(250))
    config.set_max_concurrent_checkpoints(2)
    config.set_tolerable_checkpoint_failure_number(3)
    config.enable_unaligned_checkpoints()
    config.set_aligned_checkpoint_timeout(Duration.of_seconds(2))
    config.set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.DELETE_ON_CANCELLATION)
    pairs = env.get_configuration().to_dict()
    assert pairs["execution.checkpointing.interval"] == "500 ms"
    assert pairs["execution.checkpointing.mode"] == "AT_LEAST_ONCE"
    assert pairs["execution.checkpointing.timeout"] == "60000 ms"
    assert pairs["execution.checkpointing.min-pause"] == "250 ms"
    assert pairs["execution.checkpointing.max-concurrent-checkpoints"] == "2"
    assert pairs["execution.checkpointing.tolerable-failed-checkpoints"] == "3"
    assert pairs["execution.checkpointing.unaligned.enabled"] == "true"
    assert pairs["execution.checkpointing.aligned-checkpoint-timeout"] == "2000 ms"
    assert (config.get_checkpointing_mode(), config.get_max_concurrent_checkpoints(),
            config.is_externalized_checkpoints_enabled()) == (
        CheckpointingMode.AT_LEAST_ONCE, 2, True)


def test_the_deprecated_unaligned_key_still_works() -> None:
    from weir.checkpoint import options

    conf = Configuration.from_pairs({"execution.checkpointing.unaligned": "true"})
    assert conf.get(options.UNALIGNED) is True


def test_unaligned_checkpoints_refuse_concurrent_checkpoints() -> None:
    from weir.core.errors import ConfigError
    from weir.jobmaster.checkpointing import checkpoint_config

    conf = Configuration.from_pairs({
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.unaligned.enabled": "true",
        "execution.checkpointing.max-concurrent-checkpoints": "2"})
    with pytest.raises(ConfigError, match="max-concurrent-checkpoints"):
        checkpoint_config(conf)


def test_savepoint_metadata_is_relative_and_restores_wherever_it_is(tmp_path):
    """Every path in a savepoint's _metadata is relative to its directory (local copies
    dropped); read back from a copy elsewhere, the paths point into the copy."""
    import json
    import shutil

    from weir.checkpoint.metadata import read_metadata, write_savepoint_metadata
    from weir.checkpoint.storage import create_storage
    from weir.proto.checkpoint_pb2 import CheckpointMetadata, StreamHandle

    original = create_storage(str(tmp_path / "sp"))
    base = original.base_uri
    keyed = {"kind": "canonical", "key_group_range": [0, 127], "checkpoint_id": 3,
             "data": {"uri": f"{base}/1-0/keyed-state.canonical", "length": 4,
                      "checksum": "crc32c:00000000"},
             "local": {"directory": "/te/local", "files": {}}}
    metadata = CheckpointMetadata(job_id="j", checkpoint_id=3, savepoint=True)
    sub = metadata.subtasks.add(vertex_id=1, subtask_index=0)
    sub.state.operators.add(operator_uid="op", keyed_state=json.dumps([keyed]),
                            operator_state=StreamHandle(uri=f"{base}/1-0/operator-state",
                                                        size=2))
    sub.state.channel_state.data.uri = "s3://elsewhere/absolute/stays"
    write_savepoint_metadata(original, metadata)
    raw = (tmp_path / "sp" / "_metadata").read_bytes()
    assert base.encode() not in raw and b"/te/local" not in raw
    shutil.copytree(tmp_path / "sp", tmp_path / "moved")
    moved = create_storage(str(tmp_path / "moved")).base_uri
    restored = read_metadata(create_storage(str(tmp_path)), moved)
    operator = restored.subtasks[0].state.operators[0]
    assert operator.operator_state.uri == f"{moved}/1-0/operator-state"
    handle = json.loads(operator.keyed_state)[0]
    assert handle["data"]["uri"] == f"{moved}/1-0/keyed-state.canonical"
    assert handle["local"] is None
    assert restored.subtasks[0].state.channel_state.data.uri == "s3://elsewhere/absolute/stays"
