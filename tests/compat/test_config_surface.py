"""PyFlink's configuration surface, as its own tests use it: restart strategies compare and
read back, ExecutionConfig keeps (or writes the option of) every setting it accepts,
CheckpointConfig has PyFlink's constants and older names, metric and type classes import
from PyFlink's module paths, and types print as PyFlink prints them."""

from __future__ import annotations

import pickle
import time
from datetime import timedelta

import pytest

from weir import (
    CheckpointConfig,
    CheckpointingMode,
    Duration,
    ExecutionConfig,
    ExternalizedCheckpointCleanup,
    InvalidJobError,
    JobExecutionResult,
    ProcessFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
    Types,
    WatermarkStrategy,
)
from weir.core.types import TypeInformation


def _env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment()


def _restart_options(env: StreamExecutionEnvironment) -> dict[str, str]:
    return {key: value for key, value in env.get_configuration().to_dict().items()
            if key.startswith("restart-strategy.")}


# -- restart strategies ----------------------------------------------------------------------


def test_restart_strategies_compare_by_kind_and_settings() -> None:
    env = _env()
    env.set_restart_strategy(RestartStrategies.no_restart())
    assert env.get_restart_strategy() == RestartStrategies.no_restart()
    assert hash(env.get_restart_strategy()) == hash(RestartStrategies.no_restart())
    assert RestartStrategies.fixed_delay_restart(3, 1000) != \
        RestartStrategies.fixed_delay_restart(4, 1000)
    assert RestartStrategies.fixed_delay_restart(3, timedelta(seconds=1)) == \
        RestartStrategies.fixed_delay_restart(3, 1000)
    assert RestartStrategies.no_restart() != RestartStrategies.fall_back_restart()
    assert isinstance(RestartStrategies.failure_rate_restart(5, 10_000, 5000),
                      RestartStrategies.FailureRateRestartStrategyConfiguration)


def test_restart_strategy_getters_give_pyflinks_types() -> None:
    fixed = RestartStrategies.FixedDelayRestartStrategyConfiguration(4, 10_000)
    assert (fixed.get_restart_attempts(), fixed.get_delay_between_attempts_interval()) == (
        4, timedelta(seconds=10))
    rate = RestartStrategies.failure_rate_restart(5, timedelta(minutes=1), 2500)
    assert (rate.get_max_failure_rate(), rate.get_failure_interval(),
            rate.get_delay_between_attempts_interval()) == (
        5, timedelta(minutes=1), timedelta(milliseconds=2500))
    backoff = RestartStrategies.exponential_delay_restart(100, 10_000, 2.0, jitter_factor=0.5)
    assert (backoff.get_initial_backoff(), backoff.get_jitter_factor(),
            backoff.get_reset_backoff_threshold()) == (
        timedelta(milliseconds=100), 0.5, timedelta(hours=1))  # the option's default
    assert "4" in fixed.get_description()


def test_each_strategy_writes_its_options_and_clears_the_previous_ones() -> None:
    env = _env()
    env.set_restart_strategy(RestartStrategies.failure_rate_restart(5, 60_000, 1000))
    assert _restart_options(env) == {
        "restart-strategy.type": "failure-rate",
        "restart-strategy.failure-rate.max-failures-per-interval": "5",
        "restart-strategy.failure-rate.failure-rate-interval": "60000 ms",
        "restart-strategy.failure-rate.delay": "1000 ms"}
    env.set_restart_strategy(RestartStrategies.exponential_delay_restart(
        100, 5000, 1.5, reset_backoff_threshold=60_000, jitter_factor=0.2))
    assert _restart_options(env) == {
        "restart-strategy.type": "exponential-delay",
        "restart-strategy.exponential-delay.initial-backoff": "100 ms",
        "restart-strategy.exponential-delay.max-backoff": "5000 ms",
        "restart-strategy.exponential-delay.backoff-multiplier": "1.5",
        "restart-strategy.exponential-delay.reset-backoff-threshold": "60000 ms",
        "restart-strategy.exponential-delay.jitter-factor": "0.2"}
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 500))
    assert _restart_options(env) == {"restart-strategy.type": "fixed-delay",
                                     "restart-strategy.fixed-delay.attempts": "2",
                                     "restart-strategy.fixed-delay.delay": "500 ms"}
    # Falling back means the cluster's strategy: the job sets no restart option at all.
    env.set_restart_strategy(RestartStrategies.fall_back_restart())
    assert _restart_options(env) == {}
    assert env.get_restart_strategy() == RestartStrategies.fall_back_restart()


# -- ExecutionConfig -------------------------------------------------------------------------


def test_execution_config_constants_and_restart_strategy() -> None:
    assert (ExecutionConfig.PARALLELISM_DEFAULT, ExecutionConfig.PARALLELISM_UNKNOWN) == (-1, -2)
    env = _env()
    config = env.get_config()
    assert config.get_restart_strategy() == RestartStrategies.fall_back_restart()
    config.set_restart_strategy(RestartStrategies.fixed_delay_restart(4, 10_000))
    assert env.get_restart_strategy() == RestartStrategies.fixed_delay_restart(4, 10_000)
    assert isinstance(config.get_restart_strategy(),
                      RestartStrategies.FixedDelayRestartStrategyConfiguration)
    assert _restart_options(env)["restart-strategy.fixed-delay.attempts"] == "4"


def test_accepted_settings_are_kept_with_the_environment() -> None:
    env = _env()
    defaults = env.get_config()
    assert (defaults.is_object_reuse_enabled(), defaults.is_closure_cleaner_enabled(),
            defaults.has_auto_generated_uids_enabled(), defaults.is_use_snapshot_compression(),
            defaults.get_latency_tracking_interval(),
            defaults.get_task_cancellation_interval()) == (False, True, True, False, 0, -1)
    (env.get_config().enable_object_reuse().disable_closure_cleaner()
     .disable_auto_generated_uids().set_use_snapshot_compression(True)
     .set_latency_tracking_interval(500).set_task_cancellation_interval(1000))
    later = env.get_config()  # a new view on the same environment
    assert (later.is_object_reuse_enabled(), later.is_closure_cleaner_enabled(),
            later.has_auto_generated_uids_enabled(), later.is_use_snapshot_compression(),
            later.get_latency_tracking_interval(),
            later.get_task_cancellation_interval()) == (True, False, False, True, 500, 1000)
    later.disable_object_reuse().enable_closure_cleaner().enable_auto_generated_uids()
    assert not env.get_config().is_object_reuse_enabled()
    assert env.get_config().is_closure_cleaner_enabled()
    assert env.get_config().has_auto_generated_uids_enabled()
    assert not _env().get_config().is_object_reuse_enabled()  # per environment


def test_task_cancellation_timeout_is_weirs_option() -> None:
    env = _env()
    config = env.get_config()
    assert config.get_task_cancellation_timeout() == -1  # not set: the cluster's default
    config.set_task_cancellation_timeout(3000)
    assert config.get_task_cancellation_timeout() == 3000
    assert env.get_configuration().to_dict()["task.cancellation.timeout"] == "3000 ms"
    with pytest.raises(ValueError, match="must be positive"):
        config.set_task_cancellation_timeout(0)


def test_serializer_registrations_warn_and_change_nothing() -> None:
    env = _env()
    config = env.get_config()
    before = env.get_configuration().to_dict()
    with pytest.warns(UserWarning, match="register_kryo_type has no effect: weir records "
                                         "travel as Arrow columns or pickles"):
        config.register_kryo_type("com.example.Pojo")
    with pytest.warns(UserWarning, match="add_default_kryo_serializer has no effect"):
        config.add_default_kryo_serializer("com.example.Pojo", "com.example.Serializer")
    with pytest.warns(UserWarning, match="enable_force_avro has no effect"):
        config.enable_force_avro()
    with pytest.warns(UserWarning, match="disable_generic_types"):
        config.disable_generic_types()
    with pytest.warns(UserWarning, match="register_pojo_type"):
        config.register_pojo_type(TypeInformation)
    assert env.get_configuration().to_dict() == before
    assert config.get_registered_kryo_types() == ["com.example.Pojo"]
    assert config.get_default_kryo_serializer_classes() == {
        "com.example.Pojo": "com.example.Serializer"}
    assert config.get_registered_pojo_types() == ["weir.core.types.TypeInformation"]
    assert config.is_force_avro_enabled() and config.has_generic_types_disabled()
    assert not config.is_force_kryo_enabled()
    # The DataSet API's settings stay refused.
    with pytest.raises(InvalidJobError, match="DataSet API"):
        config.set_execution_mode(None)


def test_execution_configs_of_equal_settings_are_equal() -> None:
    first, second = _env().get_config(), _env().get_config()
    assert first == second and hash(first) == hash(second)
    first.set_parallelism(12)
    second.set_parallelism(11)
    assert first != second
    second.set_parallelism(12)
    assert first == second and hash(first) == hash(second)
    first.disable_closure_cleaner()
    assert first != second
    second.disable_closure_cleaner()
    second.set_auto_watermark_interval(1000)
    assert first != second
    first.set_auto_watermark_interval(1000)
    assert first == second


def test_auto_watermark_interval_zero_turns_periodic_watermarks_off() -> None:
    env = _env()
    config = env.get_config()
    config.set_auto_watermark_interval(0)
    assert config.get_auto_watermark_interval() == 0
    assert env.get_configuration().to_dict()["pipeline.auto-watermark-interval"] == "0 ms"
    with pytest.raises(ValueError, match="cannot be negative"):
        config.set_auto_watermark_interval(-1)
    config.set_auto_watermark_interval(50)
    assert config.get_auto_watermark_interval() == 50


class _SeenWatermark(ProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timer_service().current_watermark()


def _slow_second(value: int) -> int:
    if value == 2000:
        time.sleep(0.4)  # several watermark intervals pass between the two records
    return value


def _watermarks_seen(interval_ms: int) -> dict[int, int]:
    env = _env()
    env.set_parallelism(1)
    env.disable_operator_chaining()  # records and watermarks cross exchanges one by one
    env.configure({"pipeline.batch-size": 1, "execution.buffer-timeout": "0 ms"})
    env.get_config().set_auto_watermark_interval(interval_ms)
    seen = (env.from_collection([1000, 2000], type_info=Types.LONG())
            .map(_slow_second, output_type=Types.LONG())
            .assign_timestamps_and_watermarks(
                WatermarkStrategy.for_monotonous_timestamps()
                .with_timestamp_assigner(lambda value, _: value))
            .process(_SeenWatermark()))
    return dict(seen.execute_and_collect())


@pytest.mark.extended
def test_interval_zero_leaves_only_the_final_watermark() -> None:
    periodic = _watermarks_seen(20)
    assert periodic[2000] == 999  # a periodic watermark came between the two records
    off = _watermarks_seen(0)
    assert off[1000] == off[2000] < 0  # none before the end of input


# -- CheckpointConfig ------------------------------------------------------------------------


def test_checkpoint_config_constants_are_the_defaults() -> None:
    config = _env().get_checkpoint_config()
    assert CheckpointConfig.DEFAULT_MODE is CheckpointingMode.EXACTLY_ONCE
    assert CheckpointConfig.DEFAULT_TIMEOUT == config.get_checkpoint_timeout() == 600_000
    assert CheckpointConfig.DEFAULT_MIN_PAUSE_BETWEEN_CHECKPOINTS == \
        config.get_min_pause_between_checkpoints() == 0
    assert CheckpointConfig.DEFAULT_MAX_CONCURRENT_CHECKPOINTS == \
        config.get_max_concurrent_checkpoints() == 1


def test_externalized_checkpoints_with_pyflink_1_names() -> None:
    env = _env()
    config = env.get_checkpoint_config()
    assert not config.is_externalized_checkpoints_enabled()
    assert config.get_externalized_checkpoint_cleanup() is None
    config.enable_externalized_checkpoints(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    assert config.is_externalized_checkpoints_enabled()
    assert config.get_externalized_checkpoint_cleanup() is \
        ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    assert env.get_configuration().to_dict()[
        "execution.checkpointing.externalized-checkpoint-retention"] == "RETAIN_ON_CANCELLATION"
    config.enable_externalized_checkpoints(ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION)
    assert env.get_checkpoint_config().get_externalized_checkpoint_cleanup() is \
        ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION


def test_alignment_timeout_and_forced_unaligned_checkpoints() -> None:
    env = _env()
    config = env.get_checkpoint_config()
    assert config.get_alignment_timeout() == Duration.of_millis(0)
    assert not config.is_force_unaligned_checkpoints()
    config.enable_unaligned_checkpoints().set_alignment_timeout(Duration.of_minutes(1))
    assert config.get_alignment_timeout() == Duration.of_minutes(1)
    assert config.get_aligned_checkpoint_timeout() == Duration.of_minutes(1)
    assert env.get_configuration().to_dict()[
        "execution.checkpointing.aligned-checkpoint-timeout"] == "60000 ms"
    config.set_force_unaligned_checkpoints(True)
    assert env.get_checkpoint_config().is_force_unaligned_checkpoints()
    assert not _env().get_checkpoint_config().is_force_unaligned_checkpoints()


# -- metrics and types at PyFlink's module paths ----------------------------------------------


def test_metric_classes_import_from_pyflinks_paths() -> None:
    from weir.metrics import Counter, Distribution, Meter, MetricGroup
    from weir.metrics.metricbase import Counter as BaseCounter
    from weir.metrics.metricbase import Counter as WeirCounter
    from weir.metrics.metricbase import Metric

    group = MetricGroup()
    assert isinstance(group.counter("c"), Counter) and Counter is BaseCounter is WeirCounter
    assert isinstance(group.meter("m"), Meter) and isinstance(group.distribution("d"),
                                                              Distribution)
    assert issubclass(Counter, Metric)


def test_types_print_as_in_pyflink() -> None:
    assert [str(t) for t in (Types.STRING(), Types.LONG(), Types.INT(), Types.CHAR(),
                             Types.BIG_INT(), Types.SQL_DATE(), Types.INSTANT(),
                             Types.PICKLED_BYTE_ARRAY())] == [
        "String", "Long", "Integer", "Char", "BigInteger", "DateTypeInfo", "Instant",
        "PickledByteArrayTypeInfo"]
    assert str(Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.STRING()])) == \
        "RowTypeInfo(a: String, b: String)"
    assert str(Types.ROW([Types.INT(), Types.STRING()])) == "RowTypeInfo(Integer, String)"
    assert str(Types.TUPLE([Types.STRING(), Types.INT()])) == "TupleTypeInfo(String, Integer)"
    assert str(Types.LIST(Types.DOUBLE())) == "ListTypeInfo<Double>"
    assert str(Types.PRIMITIVE_ARRAY(Types.INT())) == "PrimitiveArrayTypeInfo<Integer>"
    assert repr(Types.MAP(Types.STRING(), Types.LIST(Types.INT()))) == \
        "MapTypeInfo<String, ListTypeInfo<Integer>>"
    nested = Types.ROW_NAMED(["t"], [Types.TUPLE([Types.LONG()])])
    assert str(nested) == "RowTypeInfo(t: TupleTypeInfo(Long))"


def test_field_names_and_types_of_rows_and_tuples() -> None:
    row = Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.INT()])
    assert row.get_field_names() == ["a", "b"]
    assert row.get_field_types() == [Types.STRING(), Types.INT()]
    assert (row.get_field_index("b"), row.get_field_index("c")) == (1, -1)
    assert Types.ROW([Types.STRING(), Types.STRING()]).get_field_names() == ["f0", "f1"]
    assert Types.TUPLE([Types.CHAR(), Types.INT()]).get_field_types() == [
        Types.CHAR(), Types.INT()]
    with pytest.raises(TypeError, match="row and tuple types"):
        Types.STRING().get_field_names()


def test_pyflinks_type_classes_build_and_recognise_weirs_types() -> None:
    from weir.common.typeinfo import (
        BasicArrayTypeInfo,
        BasicType,
        BasicTypeInfo,
        ListTypeInfo,
        MapTypeInfo,
        PickledBytesTypeInfo,
        PrimitiveArrayTypeInfo,
        RowTypeInfo,
        SqlTimeTypeInfo,
        TupleTypeInfo,
    )

    row = RowTypeInfo([Types.INT()], ["a"])
    assert row == Types.ROW_NAMED(["a"], [Types.INT()]) and type(row) is TypeInformation
    assert RowTypeInfo([Types.STRING(), Types.STRING()]) == \
        Types.ROW([Types.STRING(), Types.STRING()])
    assert RowTypeInfo([Types.STRING()], ["a"]) != RowTypeInfo([Types.INT()], ["a"])
    assert isinstance(Types.ROW([Types.INT()]), RowTypeInfo)
    assert not isinstance(Types.TUPLE([Types.INT()]), RowTypeInfo)
    assert TupleTypeInfo([Types.STRING(), Types.INT()]) == Types.TUPLE(
        [Types.STRING(), Types.INT()])
    assert isinstance(Types.TUPLE([Types.INT()]), TupleTypeInfo)
    assert BasicTypeInfo(BasicType.INT) == BasicTypeInfo.INT_TYPE_INFO() == Types.INT()
    assert isinstance(Types.STRING(), BasicTypeInfo)
    assert not isinstance(Types.LIST(Types.INT()), BasicTypeInfo)
    assert ListTypeInfo(Types.INT()) == Types.LIST(Types.INT())
    assert isinstance(Types.LIST(Types.INT()), ListTypeInfo)
    assert not isinstance(Types.LIST(Types.INT()), PrimitiveArrayTypeInfo)
    assert isinstance(Types.PRIMITIVE_ARRAY(Types.INT()), PrimitiveArrayTypeInfo)
    assert str(BasicArrayTypeInfo(Types.STRING())) == "BasicArrayTypeInfo<String>"
    assert MapTypeInfo(Types.STRING(), Types.INT()) == Types.MAP(Types.STRING(), Types.INT())
    assert isinstance(Types.PICKLED_BYTE_ARRAY(), PickledBytesTypeInfo)
    assert PickledBytesTypeInfo() == Types.PICKLED_BYTE_ARRAY()
    assert SqlTimeTypeInfo.DATE() == Types.SQL_DATE()
    # The values are weir's one TypeInformation class: they pickle and hash as before.
    copy = pickle.loads(pickle.dumps(row))
    assert copy == row and hash(copy) == hash(row) and str(copy) == "RowTypeInfo(a: Integer)"


def test_job_execution_result_has_no_accumulators() -> None:
    result = JobExecutionResult("j1", 0.5)
    assert result.get_accumulator_result("records") is None
    assert result.get_all_accumulator_results() == {}


def test_older_pyflink_settings_map_onto_weirs() -> None:
    env = _env()
    checkpoints = env.get_checkpoint_config()
    assert checkpoints.is_fail_on_checkpointing_errors()
    checkpoints.set_fail_on_checkpointing_errors(False)
    assert not checkpoints.is_fail_on_checkpointing_errors()
    assert checkpoints.get_tolerable_checkpoint_failure_number() == 2**31 - 1
    assert not checkpoints.is_prefer_checkpoint_for_recovery()
    checkpoints.set_prefer_checkpoint_for_recovery(True)
    assert env.get_checkpoint_config().is_prefer_checkpoint_for_recovery()
    config = env.get_config()
    assert config.get_task_cancellation_interval() == -1
    assert config.get_task_cancellation_timeout() == -1
    config.set_task_cancellation_timeout(3000)
    assert config.get_task_cancellation_timeout() == 3000
    assert not config.is_auto_type_registration_disabled()
    config.disable_auto_type_registration()
    assert env.get_config().is_auto_type_registration_disabled()
    assert env.is_changelog_state_backend_enabled() is None
    assert env.enable_changelog_state_backend(True) is env
    assert env.is_changelog_state_backend_enabled() is True
    env.enable_changelog_state_backend(False)
    assert env.is_changelog_state_backend_enabled() is False


def test_changelog_options() -> None:
    from weir.core.config import Configuration
    from weir.core.errors import ConfigError
    from weir.state import options

    # Flink's older key and the defaults of the log's options.
    conf = Configuration.from_pairs({"state.backend.changelog.enabled": "true"})
    assert conf.get(options.CHANGELOG_ENABLED) is True
    assert conf.get(options.CHANGELOG_MATERIALIZE_INTERVAL) == 600.0
    assert conf.get(options.CHANGELOG_MAX_IN_FLIGHT) == 100 * 1024 * 1024
    assert conf.get(options.CHANGELOG_PERSIST_DELAY) == 0.01
    with pytest.raises(ConfigError, match=r"state\.changelog\.storage.*accepted: filesystem"):
        Configuration.from_pairs({"state.changelog.storage": "memory"})


def test_local_time_types() -> None:
    import datetime

    from weir.common.typeinfo import LocalTimeTypeInfo

    assert str(Types.LOCAL_DATE_TIME()) == "LocalDateTime"
    assert isinstance(Types.LOCAL_DATE(), LocalTimeTypeInfo)
    assert LocalTimeTypeInfo.LOCAL_TIME() == Types.LOCAL_TIME()
    row = Types.ROW_NAMED(["day", "at"], [Types.LOCAL_DATE(), Types.LOCAL_DATE_TIME()])
    record = (datetime.date(2026, 11, 26), datetime.datetime(2026, 11, 26, 9, 30))
    env = _env()
    got = env.from_collection([record], type_info=row).rebalance().map(
        lambda r: r, output_type=row).execute_and_collect()
    assert [tuple(r) for r in got] == [record]
