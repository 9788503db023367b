"""Connected streams as a PyFlink program writes them (imports aside): CoMap, CoFlatMap,
CoProcess and a KeyedCoProcessFunction with keyed state and event-time timers, in
process; on a real cluster a keyed two-input job survives SIGKILLed TaskExecutors with
exactly-once output (its state and both inputs' barriers are in every checkpoint).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.exactly_once import committed_output, diff, run_job_with_kills
from weir import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from weir.core.errors import InvalidJobError

pytestmark = pytest.mark.usefixtures("runs_on")


class Tag(CoMapFunction):
    def map1(self, value):
        return ("number", value)

    def map2(self, value):
        return ("word", value)


class Split(CoFlatMapFunction):
    def flat_map1(self, value):
        yield from range(value)

    def flat_map2(self, value):
        yield from value.split()


class Stamps(CoProcessFunction):
    def process_element1(self, value, ctx):
        yield ("left", value, ctx.timestamp())

    def process_element2(self, value, ctx):
        yield ("right", value, ctx.timestamp())


class PaidInTime(KeyedCoProcessFunction):
    """Orders (key, ts) and payments (key, ts): at ``ts + 10`` of its order, a key is
    reported paid if a payment at or before then came."""

    def open(self, runtime_context):
        self.paid_at = runtime_context.get_state(ValueStateDescriptor("paid_at"))

    def process_element1(self, order, ctx):
        ctx.timer_service().register_event_time_timer(order[1] + 10)

    def process_element2(self, payment, ctx):
        first = self.paid_at.value()
        if first is None or payment[1] < first:
            self.paid_at.update(payment[1])

    def on_timer(self, timestamp, ctx):
        paid = self.paid_at.value()
        yield ctx.get_current_key(), paid is not None and paid <= timestamp


def _env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def _stamped(env: StreamExecutionEnvironment, records: list[Any]) -> Any:
    return env.from_collection(records).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner(lambda record, _: record[1]))


def test_co_map_sends_each_input_to_its_method() -> None:
    env = _env()
    numbers, words = list(range(20)), ["a", "b", "c"]
    got = env.from_collection(numbers).connect(env.from_collection(words)).map(Tag())
    expected = [("number", n) for n in numbers] + [("word", w) for w in words]
    assert sorted(got.execute_and_collect(), key=repr) == sorted(expected, key=repr)


def test_co_flat_map_yields_any_number_per_record() -> None:
    env = _env()
    numbers, lines = [0, 3, 5], ["to be", "or not to be"]
    got = env.from_collection(numbers).connect(env.from_collection(lines)).flat_map(Split())
    expected = [i for n in numbers for i in range(n)] + [w for line in lines
                                                          for w in line.split()]
    assert sorted(got.execute_and_collect(), key=repr) == sorted(expected, key=repr)


def test_co_process_sees_each_records_timestamp() -> None:
    env = _env(1)
    left, right = [("a", 5), ("b", 7)], [("c", 1)]
    got = _stamped(env, left).connect(_stamped(env, right)).process(Stamps())
    expected = [("left", r, r[1]) for r in left] + [("right", r, r[1]) for r in right]
    assert sorted(got.execute_and_collect()) == sorted(expected)


def test_keyed_co_process_shares_state_by_key_and_fires_timers() -> None:
    env = _env()
    orders = [(key, 100 * key) for key in range(12)]
    # Some keys pay in time, some late, some twice, some never.
    payments = sorted([(key, 100 * key + (5 if key % 3 == 0 else 30)) for key in range(9)]
                      + [(4, 405)], key=lambda p: p[1])
    joined = (_stamped(env, orders).connect(_stamped(env, payments))
              .key_by(lambda o: o[0], lambda p: p[0]).process(PaidInTime()))
    first_payment = {key: min(ts for k, ts in payments if k == key)
                     for key, _ in payments}
    expected = [(key, key in first_payment and first_payment[key] <= ts + 10)
                for key, ts in orders]
    assert sorted(joined.execute_and_collect()) == sorted(expected)


def test_two_keyed_streams_connect_into_a_keyed_co_process() -> None:
    # PyFlink's other spelling: key each stream, then connect.
    env = _env()
    orders = [(key, 100 * key) for key in range(6)]
    payments = [(key, 100 * key + 5) for key in range(0, 6, 2)]
    joined = (_stamped(env, orders).key_by(lambda o: o[0])
              .connect(_stamped(env, payments).key_by(lambda p: p[0])).process(PaidInTime()))
    assert sorted(joined.execute_and_collect()) == [(k, k % 2 == 0) for k in range(6)]


def test_a_keyed_co_process_function_needs_keyed_inputs() -> None:
    env = _env()
    connected = env.from_collection([1]).connect(env.from_collection([2]))
    with pytest.raises(TypeError, match="key_by"):
        connected.process(PaidInTime())
    with pytest.raises(TypeError, match="CoMapFunction"):
        connected.map(lambda value: value)


def test_a_stream_connected_with_itself_is_refused_at_build_time() -> None:
    env = _env()
    numbers = env.from_collection([1, 2])
    numbers.connect(numbers).map(Tag()).print()
    with pytest.raises(InvalidJobError, match="two edges"):
        env.get_job_graph()


# -- on a cluster, under failures -----------------------------------------------------------

TWO_INPUT_JOB = '''
import os
import sys
import time

from weir import (FileSink, KeyedCoProcessFunction, StreamExecutionEnvironment,
                  ValueStateDescriptor)

OUT, N, KEYS, GATE = sys.argv[1], int(sys.argv[2]), 7, sys.argv[3]


def throttle(n):
    if n % 200 == 0:
        held = n >= N // 2 and not os.path.exists(GATE)
        time.sleep(0.4 if held else 0.02)
    return n


class Counts(KeyedCoProcessFunction):
    """Per key: a running count of each input, and one over both."""

    def open(self, runtime_context):
        self.left = runtime_context.get_state(ValueStateDescriptor("left"))
        self.right = runtime_context.get_state(ValueStateDescriptor("right"))
        self.both = runtime_context.get_state(ValueStateDescriptor("both"))

    def _count(self, state, side, key):
        count = (state.value() or 0) + 1
        state.update(count)
        both = (self.both.value() or 0) + 1
        self.both.update(both)
        return [(side, key, count), ("both", key, both)]

    def process_element1(self, value, ctx):
        return self._count(self.left, "left", ctx.get_current_key())

    def process_element2(self, value, ctx):
        return self._count(self.right, "right", ctx.get_current_key())


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
left = env.from_sequence(0, N - 1).map(throttle)
right = env.from_sequence(0, N // 2 - 1).map(throttle)
(left.connect(right).key_by(lambda n: n % KEYS, lambda n: (3 * n) % KEYS)
 .process(Counts()).sink_to(FileSink(OUT, format="json")))
env.execute("two inputs")
'''

N = 20_000


def _expected(n: int, keys: int = 7) -> Counter[tuple[Any, ...]]:
    left = Counter(i % keys for i in range(n))
    right = Counter((3 * i) % keys for i in range(n // 2))
    out: Counter[tuple[Any, ...]] = Counter()
    for side, totals in (("left", left), ("right", right), ("both", left + right)):
        out.update((side, key, c) for key, total in totals.items()
                   for c in range(1, total + 1))
    return out


@pytest.mark.parametrize("mode", [
    "aligned", pytest.param("unaligned", marks=pytest.mark.slow)])
def test_a_keyed_two_input_job_is_exactly_once_under_taskexecutor_kills(
        cluster_factory: Any, tmp_path: Path, mode: str) -> None:
    cluster = cluster_factory(4, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    kills = 1 if mode == "aligned" else 2  # the first in `make test`, both in `make chaos`
    run_job_with_kills(
        cluster, tmp_path, TWO_INPUT_JOB, [str(out), str(N), str(gate)], kills,
        {"execution.checkpointing.unaligned.enabled": str(mode == "unaligned").lower()},
        gate)
    expected, got = _expected(N), committed_output(out)
    assert got == expected, diff(expected, got)
