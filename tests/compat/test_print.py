"""``print()`` writes records as PyFlink does: ``str(record)`` for records of no declared
type, Java's ``toString`` for typed ones (PyFlink's typed records are Java objects), so a
ported program's output reads the same, line for line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import REPO, write_job
from weir import Row, RowKind, Types
from weir.operators.sinks.printing import flink_string, java_double

JOB = '''
from weir.common import Row, Types
from weir.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
words = env.from_collection([("hi", 1), ("hello", 2), ("hi", 3)],
                            type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
words.key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).print("sum")
words.map(lambda t: Row(t[0], t[1] > 1, t[1] / 4),
          output_type=Types.ROW([Types.STRING(), Types.BOOLEAN(), Types.DOUBLE()])
          ).print("row")
words.map(lambda t: t[0]).print("plain")
env.execute("print")
'''


def test_a_typed_stream_prints_as_pyflink_prints_it(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(write_job(tmp_path, JOB))],
                            capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # Keyed reduce keeps its input's declared type (a Tuple), as in PyFlink.
    assert [x for x in lines if x.startswith("sum> ")] == [
        "sum> (hi,1)", "sum> (hello,2)", "sum> (hi,4)"]
    assert [x for x in lines if x.startswith("row> ")] == [
        "row> +I[hi, false, 0.25]", "row> +I[hello, true, 0.5]", "row> +I[hi, true, 0.75]"]
    assert [x for x in lines if x.startswith("plain> ")] == [
        "plain> hi", "plain> hello", "plain> hi"]


@pytest.mark.parametrize(("value", "type_info", "expected"), [
    (("a", None), Types.TUPLE([Types.STRING(), Types.LONG()]), "(a,null)"),
    ((["x", "y"], {"k": 1}), Types.TUPLE([Types.LIST(Types.STRING()),
                                          Types.MAP(Types.STRING(), Types.INT())]),
     "([x, y],{k=1})"),
    (Row("a", 1), Types.ROW([Types.STRING(), Types.INT()]), "+I[a, 1]"),
    (1e-5, Types.DOUBLE(), "1.0E-5"),
    (True, Types.BOOLEAN(), "true"),
    ({"a": 1}, None, "{'a': 1}"),
])
def test_records_print_by_their_type(value: object, type_info: object, expected: str) -> None:
    assert flink_string(value, type_info) == expected  # type: ignore[arg-type]


def test_a_rows_kind_prefixes_it() -> None:
    row = Row("a", 1)
    row.set_row_kind(RowKind.UPDATE_AFTER)
    assert flink_string(row, Types.ROW([Types.STRING(), Types.INT()])) == "+U[a, 1]"


@pytest.mark.parametrize(("value", "expected"), [
    (1.0, "1.0"), (0.001, "0.001"), (0.0001, "1.0E-4"), (1234567.0, "1234567.0"),
    (12345678.9, "1.23456789E7"), (-2.5e-10, "-2.5E-10"), (float("nan"), "NaN"),
    (float("-inf"), "-Infinity"), (0.0, "0.0")])
def test_doubles_print_as_java_prints_them(value: float, expected: str) -> None:
    assert java_double(value) == expected
