"""The rest of PyFlink's DataStream and environment surface as programs call it: chaining
hints, partitionings, projections, min_by/max_by, state backend and restart strategy
objects, the execution plan; and PyFlink calls weir has no use for fail with a line
naming the feature."""

from __future__ import annotations

import json

import pytest

from weir import (
    CoMapFunction,
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    ReduceFunction,
    RestartStrategies,
    SlotSharingGroup,
    StreamExecutionEnvironment,
    Time,
    Types,
    ValueStateDescriptor,
)
from weir.core.errors import InvalidJobError

pytestmark = pytest.mark.usefixtures("runs_on")


def _env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def test_partitionings_projection_and_keyed_min_by_max_by() -> None:
    env = _env()
    records = [("a", 3, "x"), ("b", 1, "y"), ("a", 1, "z"), ("b", 5, "w"), ("a", 1, "q")]
    base = env.from_collection(records)
    moved = base.shuffle().map(lambda r: r).rescale().map(lambda r: r).forward()
    assert sorted(moved.project(0, 2).execute_and_collect()) == sorted(
        (r[0], r[2]) for r in records)
    mins = list(env.from_collection(records).key_by(lambda r: r[0]).min_by(1)
                .execute_and_collect())
    # The running minimum record per key; the first of equal ones stays.
    assert [r for r in mins if r[0] == "a"] == [("a", 3, "x"), ("a", 1, "z"), ("a", 1, "z")]
    maxs = list(env.from_collection(records).key_by(lambda r: r[0]).max_by(1)
                .execute_and_collect())
    assert [r for r in maxs if r[0] == "b"] == [("b", 1, "y"), ("b", 5, "w")]


def test_chaining_hints_shape_the_tasks() -> None:
    def tasks(env: StreamExecutionEnvironment) -> list[list[str]]:
        chains: dict[str, list[str]] = {}
        for node in json.loads(env.get_execution_plan())["nodes"]:
            chains.setdefault(node["task"], []).append(node["type"])
        return list(chains.values())

    def build(env: StreamExecutionEnvironment, hint: str = "") -> None:
        m2 = env.from_collection([1, 2]).map(lambda x: x).name("m1").map(lambda x: x)
        m2 = m2.name("m2")
        if hint:
            getattr(m2, hint)()
        m2.filter(lambda x: True).name("f").print()

    env = _env(1)
    build(env)
    assert tasks(env) == [["Source: Collection", "m1", "m2", "f", "Sink: Print"]]
    env = _env(1)
    build(env, "start_new_chain")
    assert tasks(env) == [["Source: Collection", "m1"], ["m2", "f", "Sink: Print"]]
    env = _env(1)
    build(env, "disable_chaining")
    assert tasks(env) == [["Source: Collection", "m1"], ["m2"], ["f", "Sink: Print"]]
    env = _env(1)
    env.disable_operator_chaining()
    build(env)
    assert len(tasks(env)) == 5 and not env.is_chaining_enabled()


class Tag(CoMapFunction):
    def map1(self, value):
        return ("first", value)

    def map2(self, value):
        return ("second", value)


def test_the_execution_plan_is_flinks_json_of_operators_and_ship_strategies() -> None:
    env = _env(2)
    source = env.from_collection([1, 2, 3])
    mapped = source.map(lambda x: x).name("m")
    parts = [mapped.shuffle().map(lambda x: x).name("shuffled"),
             mapped.rescale().map(lambda x: x).name("rescaled"),
             mapped.rebalance().map(lambda x: x).name("rebalanced"),
             mapped.forward().map(lambda x: x).name("forwarded"),
             mapped.broadcast().map(lambda x: x).name("broadcast"),
             mapped.key_by(lambda x: x).map(lambda x: x).name("keyed")]
    parts[0].union(*parts[1:]).connect(source).map(Tag()).name("co").print()
    nodes = {n["type"]: n for n in json.loads(env.get_execution_plan())["nodes"]}
    assert nodes["Source: Collection"]["pact"] == "Data Source"
    assert nodes["Source: Collection"]["parallelism"] == 1
    assert nodes["Sink: Print"]["pact"] == "Data Sink" and nodes["m"]["pact"] == "Operator"
    ids = {name: node["id"] for name, node in nodes.items()}
    assert nodes["m"]["predecessors"] == [{"id": ids["Source: Collection"],
                                           "ship_strategy": "REBALANCE"}]
    for name, strategy in [("shuffled", "SHUFFLE"), ("rescaled", "RESCALE"),
                           ("rebalanced", "REBALANCE"), ("forwarded", "FORWARD"),
                           ("broadcast", "BROADCAST"), ("keyed", "HASH")]:
        assert nodes[name]["predecessors"] == [{"id": ids["m"], "ship_strategy": strategy}]
    co = nodes["co"]["predecessors"]
    assert [e["id"] for e in co[:-1]] == [ids[p] for p in ("shuffled", "rescaled",
                                                             "rebalanced", "forwarded",
                                                             "broadcast", "keyed")]
    assert co[-1] == {"id": ids["Source: Collection"], "ship_strategy": "REBALANCE",
                      "side": "second"}


def test_state_backend_restart_strategy_and_savepoint_directory_objects() -> None:
    env = _env()
    env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, Time.seconds(2)))
    env.set_default_savepoint_directory("file:///tmp/savepoints")
    config = env.get_configuration().to_dict()
    assert (config["state.backend.type"], config["state.backend.incremental"]) == (
        "rocksdb", "true")
    assert (config["restart-strategy.type"], config["restart-strategy.fixed-delay.attempts"],
            config["restart-strategy.fixed-delay.delay"]) == ("fixed-delay", "3", "2000 ms")
    assert env.get_default_savepoint_directory() == "file:///tmp/savepoints"
    env.set_state_backend(HashMapStateBackend())
    assert env.get_configuration().to_dict()["state.backend.type"] == "hashmap"
    words = ["a", "b"]
    assert sorted(env.from_collection(words).execute_and_collect()) == words


def test_pyflink_calls_weir_has_no_use_for_name_the_feature() -> None:
    env = _env()
    with pytest.warns(UserWarning, match="has no effect: weir runs no JVM"):
        env.add_jars("file:///flink-connector-kafka.jar")
    with pytest.raises(InvalidJobError, match=r"set_python_requirements.*install the packages"):
        env.set_python_requirements("requirements.txt")
    with pytest.warns(UserWarning, match=r"set_python_executable.* has no effect"):
        env.set_python_executable("python3")
    with pytest.warns(UserWarning, match="register_type has no effect"):
        env.register_type("com.example.Order")
    assert env.get_config().get_registered_pojo_types() == ["com.example.Order"]
    stream = env.from_collection([1])
    group = SlotSharingGroup.builder("heavy").set_cpu_cores(2.0).build()
    with pytest.warns(UserWarning, match=r"slot_sharing_group\('heavy'\) has no effect"):
        assert stream.slot_sharing_group(group) is stream
    with pytest.warns(UserWarning, match="register_slot_sharing_group"):
        assert env.register_slot_sharing_group(group) is env
    with pytest.raises(InvalidJobError, match="slot sharing group for KeyedStream"):
        stream.key_by(lambda v: v).slot_sharing_group("heavy")
    with pytest.raises(AttributeError, match="no attribute 'no_such_method'"):
        stream.no_such_method()


def test_min_by_on_plain_values_and_a_key_selector_returning_a_list() -> None:
    # PyFlink keys by the serialized key, so a list is a key; min_by/max_by of plain
    # values compare the values themselves.
    env = _env()
    values = [3, 1, 4, 1, 5, 9, 2, 6]
    keyed = env.from_collection(values).key_by(lambda v: [v % 2])
    running = list(keyed.max_by().execute_and_collect())
    for parity in (0, 1):
        seen = [v for v in values if v % 2 == parity]
        expected = [max(seen[:i + 1]) for i in range(len(seen))]
        assert sorted(v for v in running if v % 2 == parity) == sorted(expected)


class CountingReduce(ReduceFunction):
    """Keeps keyed state of its own next to the reduction (PyFlink allows it)."""

    def open(self, runtime_context):
        self.calls = runtime_context.get_state(ValueStateDescriptor("calls", Types.INT()))

    def reduce(self, value1, value2):
        calls = (self.calls.value() or 0) + 1
        self.calls.update(calls)
        return value1[0], value1[1] + value2[1], calls


def test_a_reduce_function_has_keyed_state() -> None:
    env = _env()
    records = [("a", 1, 0), ("b", 2, 0), ("a", 3, 0), ("a", 4, 0), ("b", 5, 0)]
    got = env.from_collection(records).key_by(lambda r: r[0]).reduce(CountingReduce())
    assert sorted(got.execute_and_collect()) == sorted(
        [("a", 1, 0), ("b", 2, 0), ("a", 4, 1), ("a", 8, 2), ("b", 7, 1)])
