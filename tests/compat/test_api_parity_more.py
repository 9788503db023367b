"""More PyFlink names as programs use them: the clocks of process and broadcast function
contexts (``ctx.timer_service()``, ``ctx.current_watermark()``), global job parameters
read through the runtime context, PyFlink's async retry factories and predicates, keyed
streams that keep their partitioning, ``execute_and_collect(limit=...)`` and the chaining
and description of sinks."""

from __future__ import annotations

import time
from functools import partial

import pytest

from tests.support.operators import CollectingOutput, OperatorHarness
from weir import (
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryStrategy,
    BaseBroadcastProcessFunction,
    BroadcastProcessFunction,
    BroadcastStream,
    CloseableIterator,
    CoMapFunction,
    CoProcessFunction,
    DiscardingSink,
    Duration,
    InvalidJobError,
    KeyedBroadcastProcessFunction,
    MapFunction,
    MapStateDescriptor,
    ProcessFunction,
    Row,
    RuntimeContext,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    Time,
    UserError,
    WatermarkStrategy,
    async_retry_predicates,
)
from weir.core.processing_time import ProcessingTimeService
from weir.core.records import MIN_WATERMARK, Elements
from weir.datastream.async_retry_strategies import AsyncRetryPredicate
from weir.operators.basic import ProcessOperator
from weir.operators.broadcast import BroadcastProcessOperator
from weir.operators.co import CoOperator
from weir.operators.keys import key_spec
from weir.taskexecutor.operator import OperatorContext, StateContext


def _env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


# -- 1. The clocks of process and broadcast function contexts ----------------------------


class Clocks(ProcessFunction):
    """Each record with the time its context tells."""

    def process_element(self, value, ctx):
        service = ctx.timer_service()
        yield value, service.current_processing_time(), service.current_watermark()


class SetsATimer(ProcessFunction):
    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(value)


def test_a_process_function_context_tells_the_operators_time() -> None:
    harness = OperatorHarness(ProcessOperator("Process", Clocks()), start_ms=1_000)
    harness.process(["a"])
    harness.watermark(50)
    harness.advance_time(2_000)
    harness.process(["b"])
    assert harness.output.records == [("a", 1_000, MIN_WATERMARK), ("b", 2_000, 50)]


def test_timers_need_a_keyed_stream_as_in_flink() -> None:
    harness = OperatorHarness(ProcessOperator("Process", SetsATimer()))
    with pytest.raises(UserError, match="only supported on a keyed stream"):
        harness.process([10])


class CoClocks(CoProcessFunction):
    def process_element1(self, value, ctx):
        yield "first", ctx.timer_service().current_watermark()

    def process_element2(self, value, ctx):
        yield "second", ctx.timer_service().current_processing_time()


def test_a_co_process_function_context_tells_the_time() -> None:
    harness = OperatorHarness(CoOperator("Co-Process", CoClocks(), "process"), start_ms=7)
    harness.watermark(30)
    harness.operator.process(_elements([1]), 0)
    harness.operator.process(_elements([2]), 1)
    assert harness.output.records == [("first", 30), ("second", 7)]


def _elements(records: list) -> Elements:
    return Elements.from_records(records)


RULES = MapStateDescriptor("rules")


class BroadcastClocks(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield "element", ctx.current_processing_time(), ctx.current_watermark()

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value, True)
        yield "rule", ctx.current_processing_time(), ctx.current_watermark()


class KeyedBroadcastClocks(KeyedBroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield ctx.get_current_key(), ctx.current_processing_time(), ctx.current_watermark()

    def process_broadcast_element(self, value, ctx):
        yield "rule", ctx.current_processing_time(), ctx.current_watermark()


def _opened_broadcast(operator: BroadcastProcessOperator, now: dict[str, int]
                      ) -> CollectingOutput:
    out = CollectingOutput()
    operator.setup(OperatorContext("task", 0, 1, 128,
                                   processing_time=ProcessingTimeService(lambda: now["ms"])),
                   out)
    operator.initialize_state(StateContext())
    operator.open()
    return out


@pytest.mark.parametrize("keyed", [False, True])
def test_broadcast_contexts_tell_the_time(keyed: bool) -> None:
    now = {"ms": 100}
    fn = KeyedBroadcastClocks() if keyed else BroadcastClocks()
    operator = BroadcastProcessOperator("Broadcast Process", fn, [RULES],
                                        key_spec(lambda r: r) if keyed else None)
    out = _opened_broadcast(operator, now)
    operator.process(_elements(["r"]), 1)
    operator.process_watermark(40)
    now["ms"] = 250
    operator.process(_elements(["k"]), 0)
    first = "k" if keyed else "element"
    assert out.records == [("rule", 100, MIN_WATERMARK), (first, 250, 40)]


def test_base_broadcast_process_function_is_the_public_base() -> None:
    assert issubclass(BroadcastProcessFunction, BaseBroadcastProcessFunction)
    assert issubclass(KeyedBroadcastProcessFunction, BaseBroadcastProcessFunction)
    for function in (BroadcastProcessFunction, KeyedBroadcastProcessFunction):
        assert issubclass(function.Context, BaseBroadcastProcessFunction.Context)
        assert issubclass(function.ReadOnlyContext, BaseBroadcastProcessFunction.ReadOnlyContext)
        assert issubclass(function.ReadOnlyContext, BaseBroadcastProcessFunction.BaseContext)
    # The read-only context stays read-only, the broadcast side's writable.
    state = {"rules": object()}
    assert BroadcastProcessFunction.Context(state).get_broadcast_state(RULES) is state["rules"]
    assert BroadcastProcessFunction.ReadOnlyContext(state).get_broadcast_state(RULES) \
        is not state["rules"]


@pytest.mark.usefixtures("runs_on")
def test_process_function_clocks_in_a_job() -> None:
    env = _env()
    records = [(i, 10 * i) for i in range(1, 200)]
    before = int(time.time() * 1000)
    got = list(env.from_collection(records)
               .assign_timestamps_and_watermarks(
                   WatermarkStrategy.for_monotonous_timestamps()
                   .with_timestamp_assigner(lambda r, _: r[1]))
               .process(Clocks()).execute_and_collect())
    after = int(time.time() * 1000)
    assert sorted(value for value, _, _ in got) == records
    for (_, stamp), now, watermark in got:
        assert before <= now <= after
        # Ascending timestamps per source subtask: the watermark is behind every record.
        assert MIN_WATERMARK <= watermark < stamp


# -- 2. Global job parameters and the task name with subtasks --------------------------------


class Scale(MapFunction):
    def open(self, runtime_context):
        self.factor = int(runtime_context.get_job_parameter("factor", "1"))
        self.label = runtime_context.get_job_parameter("label", "none")
        self.missing = runtime_context.get_job_parameter("missing", "default")

    def map(self, value):
        return value * self.factor, self.label, self.missing


def test_global_job_parameters_are_strings_and_replace_earlier_ones() -> None:
    config = _env().get_config()
    assert config.get_global_job_parameters() == {}
    config.set_global_job_parameters({"old": "1"})
    assert config.set_global_job_parameters({"factor": 3, "label": "x"}) is config
    assert config.get_global_job_parameters() == {"factor": "3", "label": "x"}


@pytest.mark.usefixtures("runs_on")
def test_functions_read_global_job_parameters_at_run_time() -> None:
    env = _env()
    env.get_config().set_global_job_parameters({"factor": 3, "label": "x"})
    values = list(range(1, 30))
    # key_by puts the map in a task of its own: the parameters reach every task.
    got = env.from_collection(values).key_by(lambda v: v % 2).map(Scale())
    assert sorted(got.execute_and_collect()) == sorted(
        (v * 3, "x", "default") for v in values)


class Where(MapFunction):
    def open(self, runtime_context):
        self.where = (runtime_context.get_task_name_with_subtasks(),
                      runtime_context.get_task_name(),
                      runtime_context.get_index_of_this_subtask(),
                      runtime_context.get_number_of_parallel_subtasks())

    def map(self, value):
        return self.where


def test_the_task_name_with_subtasks_is_formatted_as_flink_does() -> None:
    # PyFlink's documented example: the third of six subtasks of MyTask.
    assert RuntimeContext("MyTask", 2, 6, 128, 0).get_task_name_with_subtasks() \
        == "MyTask (3/6)"
    assert RuntimeContext("MyTask", 2, 6, 128, 0).get_job_parameter("k", "d") == "d"


@pytest.mark.usefixtures("runs_on")
def test_functions_see_their_task_name_with_subtasks() -> None:
    env = _env()
    got = set(env.from_collection(list(range(100))).rebalance().map(Where())
              .execute_and_collect())
    assert got and {n for *_, n in got} == {2}
    for with_subtasks, name, index, n in got:
        assert index in (0, 1)
        assert with_subtasks == f"{name} ({index + 1}/{n})"


# -- 3. PyFlink's async retry factories and predicates -------------------------------------


class Flaky(AsyncFunction):
    """For each value, the first ``failures`` calls raise (or answer nothing)."""

    def __init__(self, failures: int, error: type[Exception] | None = ConnectionError) -> None:
        self.failures = failures
        self.error = error

    def open(self, runtime_context):
        self.calls = {}

    async def async_invoke(self, value):
        calls = self.calls[value] = self.calls.get(value, 0) + 1
        if calls <= self.failures:
            if self.error is None:
                return []
            raise self.error("service unavailable")
        return [(value, calls)]


def _retried(function: AsyncFunction, strategy: AsyncRetryStrategy) -> list:
    stream = _env().from_collection([1, 2, 3])
    return sorted(AsyncDataStream.unordered_wait_with_retry(
        stream, function, Time.seconds(10), strategy).execute_and_collect())


@pytest.mark.usefixtures("runs_on")
def test_fixed_delay_retries_max_attempts_times_after_the_first_call() -> None:
    strategy = AsyncRetryStrategy.fixed_delay(
        2, 5, exception_predicate=async_retry_predicates.has_exception_predicate)
    # Two retries: the third call answers.
    assert _retried(Flaky(2), strategy) == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.usefixtures("runs_on")
def test_exponential_backoff_retries_empty_results() -> None:
    strategy = AsyncRetryStrategy.exponential_backoff(
        3, 1, 4, 2.0, result_predicate=async_retry_predicates.empty_result_predicate)
    assert _retried(Flaky(3, error=None), strategy) == [(1, 4), (2, 4), (3, 4)]


@pytest.mark.usefixtures("runs_on")
def test_exception_type_predicate_retries_the_given_type() -> None:
    only_connections = partial(async_retry_predicates.exception_type_predicate,
                               expected_error_type=ConnectionError)
    strategy = AsyncRetryStrategy.fixed_delay(1, 5, None, only_connections)
    assert _retried(Flaky(1), strategy) == [(1, 2), (2, 2), (3, 2)]


class UpToTwoRetries(AsyncRetryStrategy):
    """A strategy written as for PyFlink: the three methods, no weir constructor."""

    def __init__(self) -> None:
        pass

    def can_retry(self, current_attempts):
        return current_attempts <= 2

    def get_backoff_time_millis(self, current_attempts):
        return 1

    def get_retry_predicate(self):
        return AsyncRetryPredicate(None, async_retry_predicates.has_exception_predicate)


@pytest.mark.usefixtures("runs_on")
def test_a_retry_strategy_written_for_pyflink_is_followed() -> None:
    assert _retried(Flaky(2), UpToTwoRetries()) == [(1, 3), (2, 3), (3, 3)]


def test_retry_strategies_count_and_wait_as_pyflinks() -> None:
    fixed = AsyncRetryStrategy.fixed_delay(3, 100)
    assert [fixed.can_retry(n) for n in (1, 3, 4)] == [True, True, False]
    assert [fixed.get_backoff_time_millis(n) for n in (1, 2, 3)] == [100, 100, 100]
    backoff = AsyncRetryStrategy.exponential_backoff(5, 10, 35, 2.0)
    # The initial delay, then doubled each time, capped at the maximum.
    assert [backoff.get_backoff_time_millis(n) for n in (1, 2, 3, 4)] == [10, 20, 35, 35]
    assert [backoff.can_retry(n) for n in (5, 6)] == [True, False]
    assert not AsyncRetryStrategy.no_restart().can_retry(1)
    predicate = fixed.get_retry_predicate()
    assert predicate.result_predicate() is None and predicate.exception_predicate() is None
    with pytest.raises(ValueError, match="max_attempts should be greater than zero"):
        AsyncRetryStrategy.fixed_delay(0, 100)
    with pytest.raises(ValueError, match="multiplier should be greater than zero"):
        AsyncRetryStrategy.exponential_backoff(1, 10, 100, 0)


def test_retry_predicates_as_pyflinks() -> None:
    predicates = async_retry_predicates
    assert [predicates.empty_result_predicate(r) for r in (None, [], [0])] == [
        True, True, False]
    assert [predicates.has_exception_predicate(e) for e in (None, ValueError())] == [
        False, True]
    assert predicates.exception_type_predicate(ConnectionResetError(), ConnectionError)
    assert not predicates.exception_type_predicate(ValueError(), ConnectionError)


# -- 4. A keyed stream keeps its partitioning --------------------------------------------


class Tagged(KeyedBroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield "value", value

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value, True)
        yield "rule", value


@pytest.mark.usefixtures("runs_on")
def test_a_keyed_stream_keeps_its_partitioning() -> None:
    env = _env(2)
    keyed = env.from_collection(["r1", "r2"]).key_by(lambda r: r)
    for repartition in (keyed.shuffle, keyed.rebalance, keyed.rescale, keyed.forward,
                        keyed.broadcast):
        with pytest.raises(Exception, match=r"^Cannot override partitioning for KeyedStream\.$"):
            repartition()
    # Broadcast with descriptors (for broadcast state) works as before.
    rules = keyed.broadcast(RULES)
    assert isinstance(rules, BroadcastStream)
    values = [1, 2, 3]
    got = (env.from_collection(values).key_by(lambda v: v).connect(rules).process(Tagged())
           .execute_and_collect())
    # Every one of the two subtasks gets every rule.
    assert sorted(got) == sorted([("rule", r) for r in ("r1", "r2")] * 2
                                 + [("value", v) for v in values])


def test_a_keyed_stream_is_no_operator_to_name_or_configure() -> None:
    keyed = _env(2).from_collection([1]).key_by(lambda v: v)
    for configure in (lambda: keyed.name("k"), lambda: keyed.uid("k"), keyed.get_name,
                      lambda: keyed.set_parallelism(2), lambda: keyed.set_max_parallelism(4),
                      keyed.force_non_parallel, keyed.start_new_chain, keyed.disable_chaining):
        with pytest.raises(InvalidJobError, match=r"KeyedStream is not supported: set it on "
                                                  r"the operator that follows key_by"):
            configure()


@pytest.mark.usefixtures("runs_on")
def test_collecting_a_keyed_stream_gives_each_record_with_its_key() -> None:
    env = _env(2)
    records = [("pyflink", 1), ("datastream", 2), ("pyflink", 1)]
    with env.from_collection(records).key_by(lambda r: r[0]).execute_and_collect() as got:
        pairs = list(got)
    assert sorted(pairs) == sorted(Row(f0=r[0], f1=r) for r in records)
    assert all(p.f0 == p.f1[0] for p in pairs)


# -- 5. execute_and_collect with a limit ---------------------------------------------------


@pytest.mark.usefixtures("runs_on")
def test_execute_and_collect_with_a_limit_returns_a_list() -> None:
    env = _env(1)
    first = env.from_collection(list(range(100))).execute_and_collect(limit=5)
    assert first == [0, 1, 2, 3, 4]
    assert _env(1).from_collection([7, 8]).execute_and_collect("all", limit=10) == [7, 8]
    # An endless job: the first records, then the job is cancelled.
    endless = _env(1).from_sequence(0, 10**12).execute_and_collect(limit=3)
    assert endless == [0, 1, 2]
    with _env(1).from_collection([1]).execute_and_collect() as records:
        assert isinstance(records, CloseableIterator) and list(records) == [1]


def test_execute_and_collect_refuses_a_limit_below_one() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        _env().from_collection([1]).execute_and_collect(limit=0)


# -- 6. DataStreamSink: description, chaining, refusals ------------------------------------


def _vertex_names(env: StreamExecutionEnvironment) -> list[str]:
    return [vertex.name for vertex in env.get_job_graph().vertices]


@pytest.mark.usefixtures("runs_on")
def test_a_sink_can_be_described_and_kept_out_of_the_chain() -> None:
    chained = _env(1)
    chained.from_collection([1, 2]).map(lambda v: v).sink_to(DiscardingSink())
    (alone,) = _vertex_names(chained)
    source_and_map, _, sink = alone.rpartition(" -> ")
    env = _env(1)
    sink_stream = env.from_collection([1, 2]).map(lambda v: v).sink_to(DiscardingSink())
    assert sink_stream.set_description("drops everything") is sink_stream
    assert sink_stream.disable_chaining() is sink_stream
    assert _vertex_names(env) == [source_and_map, sink]
    env.execute("sink in a task of its own")


def test_a_sink_refuses_and_warns_as_a_stream_does_in_the_same_words() -> None:
    env = _env()
    stream = env.from_collection([1])
    sink = stream.print()
    with pytest.raises(InvalidJobError) as on_stream:
        stream.set_uid_hash("abc")
    with pytest.raises(InvalidJobError) as on_sink:
        sink.set_uid_hash("abc")
    assert str(on_sink.value) == str(on_stream.value)
    assert str(on_sink.value).startswith("set_uid_hash is not supported by weir: ")
    with pytest.warns(UserWarning, match="has no effect") as on_stream_warning:
        stream.slot_sharing_group("heavy")
    with pytest.warns(UserWarning, match="has no effect") as on_sink_warning:
        sink.slot_sharing_group("heavy")
    assert str(on_sink_warning[0].message) == str(on_stream_warning[0].message)
    with pytest.raises(AttributeError, match="'DataStreamSink' object has no attribute 'nope'"):
        sink.nope()


@pytest.mark.extended
def test_pyflink_keyword_names_and_the_print_identifier(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(execution_mode=RuntimeExecutionMode.STREAMING)
    env.set_parallelism(2)
    pairs = env.from_collection([("a", 1), ("b", 2), ("a", 3)])
    keyed = pairs.key_by(lambda p: p[0])
    assert sorted(keyed.sum(position_to_sum=1).execute_and_collect()) == [
        ("a", 1), ("a", 4), ("b", 2)]
    assert sorted(pairs.key_by(lambda p: p[0]).max_by(position_to_max_by=1)
                  .execute_and_collect()) == [("a", 1), ("a", 3), ("b", 2)]
    other = env.from_collection(["x"])
    assert sorted(pairs.connect(ds=other).map(_FirstOrSelf())
                  .execute_and_collect()) == ["a", "a", "b", "x"]
    env.from_collection(["r1", "r2"]).print(sink_identifier="words")
    env.execute()
    printed = [line.split("> ", 1) for line in capsys.readouterr().out.splitlines()]
    assert sorted(record for _, record in printed) == ["r1", "r2"]
    assert {label for label, _ in printed} <= {"words:1", "words:2"}, printed


class _FirstOrSelf(CoMapFunction):
    def map1(self, value):
        return value[0]

    def map2(self, value):
        return value


@pytest.mark.parametrize(("call", "feature"), [
    (lambda env: env.get_config().get_default_input_dependency_constraint(), "DataSet API"),
    (lambda env: env.get_config().set_execution_mode(None), "DataSet API"),
])
def test_pyflink_config_calls_without_meaning_in_weir_fail_in_one_line(call, feature: str
                                                                       ) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidJobError, match=feature) as err:
        call(env)
    assert "\n" not in str(err.value)
    with pytest.raises(AttributeError):
        env.get_config().no_such_method


def test_watermark_alignment_is_accepted_without_effect() -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    with pytest.warns(UserWarning, match="with_watermark_alignment.* has no effect"):
        assert strategy.with_watermark_alignment("group", Duration.of_seconds(1)) is strategy
