"""Side outputs as PyFlink programs use them (imports aside): ``yield tag, value`` in a
process function, ``ctx.output(tag, value)``, ``get_side_output(tag)``, and records too
late for their window sent to a side output."""

from __future__ import annotations

import pytest

from tests.support.operators import OperatorHarness
from weir import (
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
)
from weir.operators.keys import FunctionKeySpec
from weir.operators.window.operator import REDUCE, WindowOperator

pytestmark = pytest.mark.usefixtures("runs_on")

ODD = OutputTag("odd")
MULTIPLES_OF_THREE = OutputTag("threes")


class SplitOdd(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            yield ODD, value
        else:
            yield value


class FlagThrees(KeyedProcessFunction):
    def process_element(self, value, ctx):
        if value % 3 == 0:
            ctx.output(MULTIPLES_OF_THREE, (ctx.get_current_key(), value))
        yield value


def test_yielded_tag_value_pairs_go_to_the_side_output() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    main = env.from_collection(list(range(30))).process(SplitOdd())
    both = main.map(lambda v: ("main", v)).union(
        main.get_side_output(ODD).map(lambda v: ("side", v)))
    expected = [("side" if v % 2 else "main", v) for v in range(30)]
    assert sorted(both.execute_and_collect()) == sorted(expected)


def test_ctx_output_in_a_keyed_process_function() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    main = env.from_collection(list(range(20))).key_by(lambda v: v % 4).process(FlagThrees())
    threes = main.get_side_output(MULTIPLES_OF_THREE)
    both = main.map(lambda v: ("main", v)).union(threes.map(lambda t: ("side", t)))
    expected = [("main", v) for v in range(20)] + [("side", (v % 4, v))
                                                    for v in range(20) if v % 3 == 0]
    assert sorted(both.execute_and_collect()) == sorted(expected)


def test_records_too_late_for_their_window_go_to_the_late_side_output() -> None:
    late = OutputTag("late")
    operator = WindowOperator("Window", FunctionKeySpec(lambda r: r[0]),
                              TumblingEventTimeWindows.of(Time.milliseconds(10)), REDUCE,
                              lambda a, b: (a[0], a[1] + b[1]), late_data_tag=late.tag_id)
    harness = OperatorHarness(operator)
    harness.process([("a", 1), ("a", 2)], timestamps=[1, 5])
    harness.watermark(15)                        # window [0, 10) fires
    harness.process([("a", 4), ("a", 8)], timestamps=[3, 12])  # 3 is late, 12 is not
    harness.watermark(25)
    assert harness.output.records == [("a", 3), ("a", 8)]
    assert harness.output.side == {"late": [("a", 4)]}
    assert operator.num_late_records_dropped == 0


def test_side_outputs_are_read_from_operators_only() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    keyed = env.from_collection([1, 2]).key_by(lambda v: v)
    with pytest.raises(TypeError, match="side output of an operator"):
        keyed.get_side_output(ODD)
    with pytest.raises(ValueError, match="non-empty"):
        OutputTag("")
