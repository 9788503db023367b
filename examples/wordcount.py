"""Word count: per-record flat_map / key_by / reduce, checked against collections.Counter.

Run it on a local cluster:  weir cluster start && weir run examples/wordcount.py
or in-process:               python examples/wordcount.py
"""

from collections import Counter

from weir import StreamExecutionEnvironment

LINES = [
    "to be or not to be that is the question",
    "whether tis nobler in the mind to suffer",
    "the slings and arrows of outrageous fortune",
    "or to take arms against a sea of troubles",
] * 250

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
counts = (
    env.from_collection(LINES)
    .flat_map(lambda line: [(word, 1) for word in line.split()])
    .key_by(lambda pair: pair[0])
    .reduce(lambda a, b: (a[0], a[1] + b[1]))
)
final: dict[str, int] = {}
for word, count in counts.execute_and_collect("wordcount"):
    final[word] = max(final.get(word, 0), count)

expected = Counter(word for line in LINES for word in line.split())
assert final == dict(expected), "counts differ from collections.Counter"
for word, count in sorted(final.items(), key=lambda kv: -kv[1])[:5]:
    print(f"{word:10} {count}")
