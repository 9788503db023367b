"""The broadcast state pattern as PyFlink programs write it (imports aside): rules
broadcast to a stream (keyed or not), read in ``process_element``, written in
``process_broadcast_element``, ``apply_to_keyed_state``; on a real cluster the broadcast
state and the keyed state are restored exactly once after TaskExecutor kills."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.exactly_once import committed_output, diff, run_job_with_kills
from tests.support.operators import CollectingOutput
from weir import (
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
    MapStateDescriptor,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
)
from weir.core.records import Elements
from weir.operators.broadcast import BroadcastProcessOperator
from weir.operators.keys import FunctionKeySpec
from weir.state.descriptors import ListStateDescriptor
from weir.state.operator_state import DistributionMode, OperatorStateBackend, redistribute
from weir.taskexecutor.operator import OperatorContext, StateContext

pytestmark = pytest.mark.usefixtures("runs_on")

THRESHOLDS = MapStateDescriptor("thresholds", Types.STRING(), Types.INT())


class AboveThreshold(BroadcastProcessFunction):
    """Passes the numbers at or above the broadcast threshold; numbers that come before
    the threshold wait for it (in the function: this in-process test takes no
    checkpoint)."""

    def __init__(self):
        self.waiting = []

    def process_element(self, value, ctx):
        threshold = ctx.get_broadcast_state(THRESHOLDS).get("min")
        if threshold is None:
            self.waiting.append(value)
        elif value >= threshold:
            yield value

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(THRESHOLDS).put("min", value)
        waiting, self.waiting = self.waiting, []
        yield from (v for v in waiting if v >= value)


class CountAndReset(KeyedBroadcastProcessFunction):
    """Counts records per key; a broadcast "reset" record zeroes every key's count."""

    COUNT = ValueStateDescriptor("count")

    def open(self, runtime_context):
        self.count = runtime_context.get_state(self.COUNT)

    def process_element(self, value, ctx):
        readonly = ctx.get_broadcast_state(THRESHOLDS)
        with pytest.raises(AttributeError):
            readonly.put("min", 0)  # process_element cannot change broadcast state
        self.count.update((self.count.value() or 0) + 1)

    def process_broadcast_element(self, value, ctx):
        seen: list[Any] = []
        ctx.apply_to_keyed_state(self.COUNT, lambda key, state: seen.append(
            (key, state.value())))
        ctx.get_broadcast_state(THRESHOLDS).put("applied", len(seen))
        yield from seen


def test_broadcast_state_is_written_by_broadcast_records_and_read_by_the_others() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    thresholds = env.from_collection([5])
    numbers = env.from_collection(list(range(20)))
    got = numbers.connect(thresholds.broadcast(THRESHOLDS)).process(AboveThreshold())
    assert sorted(got.execute_and_collect()) == list(range(5, 20))


def test_a_keyed_broadcast_function_visits_every_keys_state() -> None:
    """The operator fed directly, so that the broadcast record comes after the words."""
    operator = BroadcastProcessOperator("Keyed Broadcast Process", CountAndReset(),
                                        [THRESHOLDS], FunctionKeySpec(lambda w: w))
    out = CollectingOutput()
    operator.setup(OperatorContext("task", 0, 1, 128), out)
    operator.initialize_state(StateContext())
    operator.open()
    words = ["a", "b", "a", "c", "a"]
    operator.process(Elements.from_records(words), 0)
    operator.process(Elements.from_records(["report"]), 1)
    operator.close()
    assert sorted(out.records) == sorted(Counter(words).items())


def test_a_plain_stream_cannot_run_a_keyed_broadcast_function() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    connected = env.from_collection([1]).connect(
        env.from_collection([2]).broadcast(THRESHOLDS))
    with pytest.raises(TypeError, match="keyed stream"):
        connected.process(CountAndReset())


def test_broadcast_state_is_snapshotted_once_and_restored_to_every_subtask() -> None:
    snapshots = []
    for subtask in range(3):
        backend = OperatorStateBackend()
        state = backend.get_broadcast_state(THRESHOLDS, writer=subtask == 0)
        state.put("min", 5)
        snapshots.append(backend.snapshot())
    # Only subtask 0 wrote the entries.
    assert len(snapshots[0]) > len(snapshots[1]) == len(snapshots[2])
    for parallelism in (1, 2, 5):
        for subtask in range(parallelism):
            restored = OperatorStateBackend()
            restored.restore(snapshots, subtask, parallelism)
            assert restored.get_broadcast_state(THRESHOLDS, writer=False).items() == \
                [("min", 5)]
    assert redistribute([[1], [], []], DistributionMode.BROADCAST, 2) == [[1], [1]]
    mixed = OperatorStateBackend()
    mixed.get_broadcast_state(THRESHOLDS, writer=True)
    with pytest.raises(Exception, match="broadcast state"):
        mixed.get_list_state(ListStateDescriptor("thresholds"))


# -- on a cluster, under failures -----------------------------------------------------------

BROADCAST_JOB = '''
import os
import sys
import time

from weir import (FileSink, KeyedBroadcastProcessFunction, MapStateDescriptor,
                  StreamExecutionEnvironment, ValueStateDescriptor)

OUT, N, KEYS, GATE = sys.argv[1], int(sys.argv[2]), 7, sys.argv[3]
FACTORS = MapStateDescriptor("factors")


def throttle(n, every=200, total=N):
    if n % every == 0:
        held = n >= total // 2 and not os.path.exists(GATE)
        time.sleep(0.4 if held else 0.02)
    return n


def slow_factor(n):
    # The broadcast side runs as long as the other: its task is still running when the
    # TaskExecutors are killed.
    return throttle(n, 20, N // 10) % 10


class Weighted(KeyedBroadcastProcessFunction):
    """Per key, a running count; each output also reports how many factor records this
    subtask's broadcast state has seen (all of them, once the factors are in)."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield ("count", ctx.get_current_key(), count)

    def process_broadcast_element(self, value, ctx):
        factors = ctx.get_broadcast_state(FACTORS)
        if not factors.contains(value):
            factors.put(value, True)
            if len(factors.keys()) == 10:
                yield ("factors", "all", 10)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
numbers = env.from_sequence(0, N - 1).map(throttle)
factors = env.from_sequence(0, N // 10 - 1).set_parallelism(1).map(slow_factor).set_parallelism(1)
(numbers.key_by(lambda n: n % KEYS).connect(factors.broadcast(FACTORS))
 .process(Weighted()).sink_to(FileSink(OUT, format="json")))
env.execute("broadcast state")
'''

N = 20_000


def _expected(n: int, keys: int = 7) -> Counter[tuple[Any, ...]]:
    per_key = Counter(i % keys for i in range(n))
    out: Counter[tuple[Any, ...]] = Counter(
        ("count", key, c) for key, total in per_key.items() for c in range(1, total + 1))
    # Each of the 2 subtasks reports once that its broadcast state holds all 10 factors;
    # a restored subtask does not again: its restored state already holds them.
    out[("factors", "all", 10)] = 2
    return out


# In `make chaos`: the keyed two-input job of test_connected_streams.py keeps a two-input
# task under kills in `make test`.
# Unaligned: the broadcast input stays aligned (forced), the keyed one may be recorded.
@pytest.mark.slow
@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_a_keyed_broadcast_job_is_exactly_once_under_taskexecutor_kills(
        cluster_factory: Any, tmp_path: Path, unaligned: bool) -> None:
    cluster = cluster_factory(4, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = {"execution.checkpointing.unaligned.enabled": str(unaligned).lower()}
    run_job_with_kills(cluster, tmp_path, BROADCAST_JOB, [str(out), str(N), str(gate)], 1,
                       config=config, gate=gate)
    expected, got = _expected(N), committed_output(out)
    assert got == expected, diff(expected, got)
