"""PyFlink's module paths exist under ``weir``: every public name of every PyFlink module
(``pyflink.common.typeinfo``, ``pyflink.datastream.functions``, ...) either is weir's own
object of that name or fails in one line naming the feature; Java connectors' modules fail
the same way, also through ``weir run``."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import weir
from tests.support.cluster import REPO, write_job
from tests.support.pyflink_surface import ALIASES, JAVA_MODULES, MODULES, NOT_TOP_LEVEL, UNSUPPORTED
from weir.unsupported import UnsupportedFeatureError

PAIRS = [(module, name) for module, names in MODULES.items() for name in names]


@pytest.mark.parametrize(("module", "name"), PAIRS, ids=[f"{m}.{n}" for m, n in PAIRS])
def test_every_pyflink_name_is_weirs_object_or_one_clear_line(module: str, name: str) -> None:
    mod = importlib.import_module(module)
    if name in UNSUPPORTED:
        with pytest.raises(UnsupportedFeatureError) as err:
            getattr(mod, name)
        message = str(err.value)
        assert message.startswith(f"{name} ({module}) is not supported by weir: ")
        assert "\n" not in message and len(message) > len(name) + 40
        return
    value = getattr(mod, name)
    if module in NOT_TOP_LEVEL:
        assert callable(value)
    else:
        assert value is getattr(weir, ALIASES.get(name, name))
    assert name in dir(mod) and name in mod.__all__


def _api_modules() -> list[str]:
    """Every module of weir's PyFlink paths (the packages, and the modules below them)."""
    found = []
    for package in ("weir.common", "weir.datastream", "weir.metrics"):
        root = Path(importlib.import_module(package).__file__).parent  # type: ignore[arg-type]
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found.append(".".join([package, *(p for p in parts if p != "__init__")]))
    return found


@pytest.mark.parametrize("module", _api_modules())
def test_a_name_is_one_object_wherever_it_is_named(module: str) -> None:
    mod = importlib.import_module(module)
    for name in getattr(mod, "__all__", ()):  # modules without are the API's internals
        value = getattr(mod, name)
        if name in weir.__all__:
            assert value is getattr(weir, name), f"{module}.{name} is not weir.{name}"


def test_weirs_names_are_its_api_modules_names() -> None:
    names = {name for module in weir.API_MODULES
             for name in importlib.import_module(module).__all__}
    assert set(weir.__all__) == names - {"Counter", "Distribution", "Meter", "Metric"}
    assert len(weir.__all__) == len(set(weir.__all__))


def test_from_import_and_star_import_work_as_in_pyflink() -> None:
    namespace: dict[str, Any] = {}
    exec("from weir.datastream.window import *\n"
         "from weir.common.typeinfo import Types\n"
         "from weir.common import Row, WatermarkStrategy, Encoder\n"
         "from weir.datastream.state import ValueStateDescriptor\n", namespace)
    assert namespace["TumblingEventTimeWindows"] is weir.TumblingEventTimeWindows
    assert namespace["Types"] is weir.Types and namespace["Encoder"] is weir.Encoder
    assert "TimeWindowSerializer" not in namespace  # refused names are not in __all__


def test_async_retry_predicates_are_pyflinks_functions() -> None:
    from weir.datastream.async_retry_predicates import (
        empty_result_predicate,
        exception_type_predicate,
    )
    assert empty_result_predicate([]) and not empty_result_predicate([1])
    assert exception_type_predicate(ValueError("x"), ValueError)
    assert not exception_type_predicate(KeyError("x"), ValueError)


def test_functions_pickle_by_their_defining_module() -> None:
    from weir.datastream.functions import MapFunction

    class Double(MapFunction):
        def map(self, value: int) -> int:
            return value * 2

    copy = pickle.loads(cloudpickle.dumps(Double()))
    assert copy.map(21) == 42 and MapFunction.__module__ == "weir.datastream.functions"


@pytest.mark.parametrize("module", sorted(JAVA_MODULES))
def test_java_connector_modules_refuse_every_name(module: str) -> None:
    feature = JAVA_MODULES[module]
    mod = importlib.import_module(module)
    with pytest.raises(UnsupportedFeatureError, match=f"{feature} is a Java connector"):
        mod.SomeSource


@pytest.mark.parametrize(("module", "name"), [
    ("weir.table", "StreamTableEnvironment"), ("weir.table.expressions", "col"),
    ("weir.table.udf", "udf"), ("weir.java_gateway", "get_gateway")])
def test_the_table_api_and_the_java_gateway_refuse_every_name(module: str, name: str) -> None:
    feature = "Table API" if module.startswith("weir.table") else "Java gateway"
    with pytest.raises(UnsupportedFeatureError, match=f"weir has no {feature}"):
        getattr(importlib.import_module(module), name)


def test_unknown_names_are_attribute_errors_not_refusals() -> None:
    import weir.datastream.functions as functions

    with pytest.raises(AttributeError):
        functions.NoSuchFunction
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("weir.datastream.no_such_module")


KAFKA_JOB = '''
from weir.datastream import StreamExecutionEnvironment
from weir.datastream.connectors.kafka import FlinkKafkaConsumer

env = StreamExecutionEnvironment.get_execution_environment()
env.add_source(FlinkKafkaConsumer("topic", None, {})).print()
env.execute()
'''


def test_weir_run_of_a_kafka_job_fails_in_one_line(shared_cluster: Any,
                                                   tmp_path: Path) -> None:
    job = write_job(tmp_path, KAFKA_JOB)
    result = shared_cluster.weir("run", str(job))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "FlinkKafkaConsumer" in lines[0] and "Kafka connector" in lines[0]
    assert shared_cluster.weir("list").stdout.count("RUNNING") == 0  # nothing submitted


@pytest.mark.extended
def test_python_job_py_with_pyflink_imports_runs(tmp_path: Path) -> None:
    job = write_job(tmp_path, '''
        from weir.common import Types
        from weir.common.watermark_strategy import WatermarkStrategy
        from weir.datastream import StreamExecutionEnvironment
        from weir.datastream.connectors.number_seq import NumberSequenceSource
        from weir.datastream.functions import KeyedProcessFunction, RuntimeContext
        from weir.datastream.state import ValueStateDescriptor


        class Sum(KeyedProcessFunction):
            def open(self, runtime_context: RuntimeContext):
                self.total = runtime_context.get_state(
                    ValueStateDescriptor("total", Types.LONG()))

            def process_element(self, value, ctx):
                self.total.update((self.total.value() or 0) + value)
                yield ctx.get_current_key(), self.total.value()


        env = StreamExecutionEnvironment.get_execution_environment()
        ds = env.from_source(NumberSequenceSource(1, 100), WatermarkStrategy.no_watermarks(),
                             "numbers")
        ds.key_by(lambda n: n % 2).process(Sum()).print()
        env.execute()
    ''')
    result = subprocess.run([sys.executable, str(job)], capture_output=True, text=True,
                            timeout=120, cwd=REPO, env={"PATH": "/usr/bin:/bin",
                                                        "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    finals: dict[int, int] = {}
    for line in result.stdout.splitlines():
        key, total = eval(line.split("> ")[-1])
        finals[key] = max(finals.get(key, 0), total)
    assert finals == {0: sum(range(2, 101, 2)), 1: sum(range(1, 101, 2))}
