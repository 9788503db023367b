"""Jobs that keep their sources under full backpressure, in the shapes a user writes
without tuning anything, for the checkpoint tests and the checkpoint benchmark:

* ``slow-map``: a keyed exchange, then a per-record function of about 1 ms a record, on
  records of an int and a 64-character string;
* ``fan-out``: a ``flat_map`` emitting 50 records of a few hundred bytes for each input,
  then a keyed per-record function;
* ``big-records``: records of 1 MiB each, through a keyed exchange to a slow function.

Each job counts records per key in keyed state (a running count, one output per record)
and writes ``(key, count)`` through the transactional FileSink, so that its committed
output can be compared with :func:`expected_counts`, computed without weir. An optional
*gate* file slows the second half of the input down until the test opens it (a test that
kills TaskExecutors gets every kill in first).

The job file is self-contained (TaskExecutors import nothing of the tests).
"""

from __future__ import annotations

from collections import Counter

#: Keys of every shape.
KEYS = 7
#: Records out of the flat_map for each input (``fan-out``).
FAN_OUT = 50
#: Bytes of a ``big-records`` record's payload.
BIG = 1 << 20

#: Shape -> (input records for a run of a few seconds under backpressure, seconds a
#: record takes in the slow keyed function).
SHAPES: dict[str, tuple[int, float]] = {
    "slow-map": (6_000, 0.001),
    "fan-out": (160, 0.0002),
    "big-records": (400, 0.01),
}

JOB = f'''
import os
import sys
import time

from weir import FileSink, KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

OUT, SHAPE, N, SECONDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
GATE = sys.argv[5] if len(sys.argv) > 5 else ""
KEYS, FAN_OUT, BIG = {KEYS}, {FAN_OUT}, {BIG}


def held(n):
    # While the gate (if any) is closed, the second half of the input crawls: about 30 s
    # for all of it. A record is slow, never blocked, so checkpoints still reach the
    # source (a function that never returns would block them, as in Flink).
    if GATE and n >= N // 2 and not os.path.exists(GATE):
        time.sleep(min(1.0, 120 / N))
    return n


class SlowCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        time.sleep(SECONDS)  # the workload: far slower than the source
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield (ctx.get_current_key(), count)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
numbers = env.from_sequence(0, N - 1).map(held)
if SHAPE == "slow-map":
    records = numbers.map(lambda n: (n % KEYS, "x" * 64))
elif SHAPE == "fan-out":
    records = numbers.flat_map(
        lambda n: [((n * FAN_OUT + i) % KEYS, "y" * 300) for i in range(FAN_OUT)])
else:
    records = numbers.map(lambda n: (n % KEYS, bytes([n % 256]) * BIG))
records.key_by(lambda r: r[0]).process(SlowCount()).sink_to(FileSink(OUT))
env.execute(SHAPE)
'''


def job_args(out: str, shape: str, gate: str = "", records: int | None = None) -> list[str]:
    """The arguments of :data:`JOB` for ``shape`` (its default size unless ``records``)."""
    n, seconds = SHAPES[shape]
    return [out, shape, str(records or n), str(seconds), *([gate] if gate else [])]


def expected_counts(shape: str, records: int | None = None) -> Counter[tuple[int, int]]:
    """Every ``(key, running count)`` the job commits, computed without weir."""
    n = records or SHAPES[shape][0]
    if shape == "fan-out":
        keys = [(i * FAN_OUT + j) % KEYS for i in range(n) for j in range(FAN_OUT)]
    else:
        keys = [i % KEYS for i in range(n)]
    per_key = Counter(keys)
    return Counter((key, c) for key, total in per_key.items() for c in range(1, total + 1))
