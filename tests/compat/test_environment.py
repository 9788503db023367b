"""Environment and signature details of PyFlink programs: runtime modes, the execution
config, the deprecated time characteristic, ``key_by(..., key_type)`` and
``aggregate(..., accumulator_type=...)``, each run as a PyFlink user writes it."""

from __future__ import annotations

from collections import Counter

import pytest

from weir import (
    AggregateFunction,
    Row,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    Time,
    TimeCharacteristic,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)

pytestmark = pytest.mark.usefixtures("runs_on")


class Average(AggregateFunction):
    def create_accumulator(self):
        return 0, 0

    def add(self, value, accumulator):
        return accumulator[0] + value[1], accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


def test_automatic_mode_runs_a_bounded_job_as_batch() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    env.from_collection([1, 2, 3]).print()
    assert env.get_job_graph().config["execution.runtime-mode"] == "BATCH"
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    assert env.get_job_graph().config["execution.runtime-mode"] == "STREAMING"


def test_the_execution_config_sets_weirs_options() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    config = env.get_config()
    config.set_auto_watermark_interval(50).set_parallelism(3).enable_object_reuse()
    assert config.get_auto_watermark_interval() == 50
    assert env.get_configuration().to_dict()["pipeline.auto-watermark-interval"] == "50 ms"
    assert env.get_parallelism() == config.get_parallelism() == 3


def test_the_time_characteristic_is_accepted_and_deprecated() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.warns(DeprecationWarning, match="no effect"):
        env.set_stream_time_characteristic(TimeCharacteristic.EventTime)
    assert env.get_stream_time_characteristic() is TimeCharacteristic.EventTime
    words = ["a", "b", "a"]
    assert sorted(env.from_collection(words).execute_and_collect()) == sorted(words)


def test_key_by_with_a_key_type_and_aggregate_with_an_accumulator_type() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    readings = [(sensor, t, float(t % 7)) for t in range(0, 40) for sensor in (1, 2)]
    averages = (env.from_collection(readings)
                .assign_timestamps_and_watermarks(
                    WatermarkStrategy.for_monotonous_timestamps()
                    .with_timestamp_assigner(lambda r, _: r[1]))
                .map(lambda r: (r[0], r[2]))
                .key_by(lambda r: r[0], key_type=Types.INT())
                .window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
                .aggregate(Average(),
                           accumulator_type=Types.TUPLE([Types.FLOAT(), Types.INT()]),
                           output_type=Types.DOUBLE()))
    expected = []
    for sensor in (1, 2):
        for start in range(0, 40, 10):
            values = [float(t % 7) for t in range(start, start + 10)]
            expected.append(sum(values) / len(values))
    assert sorted(averages.execute_and_collect()) == sorted(expected)


def test_batch_mode_keyed_aggregations_emit_only_final_values() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(2)
    words = ["to", "be", "or", "not", "to", "be", "that", "is", "the", "question", "to", "be"]
    pairs = env.from_collection(words).map(lambda w: (w, 1))
    expected = sorted(Counter(words).items())
    reduced = pairs.key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
    assert sorted(reduced.execute_and_collect()) == expected
    assert sorted(pairs.key_by(lambda t: t[0]).sum(1).execute_and_collect()) == expected
    rows = env.from_collection([Row(word=w, n=1) for w in words],
                               type_info=Types.ROW_NAMED(["word", "n"],
                                                         [Types.STRING(), Types.INT()]))
    by_column = rows.key_by("word").sum("n")   # the vectorised aggregation
    assert sorted(tuple(r) for r in by_column.execute_and_collect()) == expected


def test_add_source_and_add_sink_take_weir_sources_and_sinks(tmp_path) -> None:
    from weir import DiscardingSink
    from weir.core.errors import InvalidJobError
    from weir.datastream.connectors.number_seq import SequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.add_source(SequenceSource(0, 9), "numbers")
    numbers.add_sink(DiscardingSink())
    assert sorted(numbers.execute_and_collect()) == list(range(10))
    with pytest.raises(InvalidJobError, match="Java source functions"):
        env.add_source(object())
    with pytest.raises(InvalidJobError, match="weir Sink"):
        numbers.add_sink(object())


def test_deprecated_state_backends_and_checkpoint_storage_set_weirs_options() -> None:
    from weir.common import Instant, JobStatus
    from weir.datastream.checkpoint_storage import FileSystemCheckpointStorage
    from weir.datastream.state_backend import FsStateBackend, RocksDBStateBackend

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_state_backend(RocksDBStateBackend("file:///tmp/ckpt", True))
    options = env.get_configuration().to_dict()
    assert (options["state.backend.type"], options["state.backend.incremental"],
            options["state.checkpoints.dir"]) == ("rocksdb", "true", "file:///tmp/ckpt")
    env.set_state_backend(FsStateBackend("s3://bucket/fs"))
    options = env.get_configuration().to_dict()
    assert (options["state.backend.type"], options["state.checkpoints.dir"]) == (
        "hashmap", "s3://bucket/fs")
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage(FileSystemCheckpointStorage("s3://bucket/other"))
    assert config.get_checkpoint_storage_dir() == "s3://bucket/other"
    assert env.get_configuration().to_dict()["state.checkpoints.dir"] == "s3://bucket/other"
    assert JobStatus("CANCELED").is_globally_terminal_state()
    assert not JobStatus.RUNNING.is_terminal_state() and JobStatus.SUSPENDED.is_terminal_state()
    assert Instant.of_epoch_milli(-1).to_epoch_milli() == -1
    assert Instant(0, 1_500_000_000) == Instant(1, 500_000_000)


def test_checkpointing_in_process_needs_no_checkpoint_directory() -> None:
    # PyFlink's local environment checkpoints without any storage configured; so does
    # `python job.py`: into the in-process cluster's own directory.
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    counts = env.from_collection(["a", "b", "a"]).key_by(lambda w: w).map(lambda w: (w, 1))
    assert sorted(counts.execute_and_collect()) == [("a", 1), ("a", 1), ("b", 1)]


def test_the_in_process_cluster_checkpoints_into_its_own_directory() -> None:
    from pathlib import Path

    from weir.client.minicluster import MiniCluster

    with MiniCluster() as cluster:
        directory = cluster.configuration.to_dict()["state.checkpoints.dir"]
        assert directory.startswith("file://") and "weir-mini-" in directory
        working = Path(directory.removeprefix("file://")).parent
        assert working.is_dir()
    assert not working.exists()


def test_in_process_the_default_parallelism_is_one_subtask_per_core() -> None:
    # PyFlink's local environment runs a subtask per CPU core; on a cluster the default
    # is parallelism.default (1), as in Flink.
    import os

    from weir.core.config import Configuration
    from weir.core.execution import ExecutionContext

    assert StreamExecutionEnvironment().get_parallelism() == (os.cpu_count() or 1)
    assert StreamExecutionEnvironment({"parallelism.default": 3}).get_parallelism() == 3
    on_a_cluster = ExecutionContext(address="127.0.0.1:1", token=None,
                                    configuration=Configuration())
    assert StreamExecutionEnvironment(None, on_a_cluster).get_parallelism() == 1
