"""The demo job: Spark generates and cleans click events, weir counts clicks per page.

    weir cluster start && weir run examples/clickstream.py [ROWS] [OUT]

Spark (local mode, on the client) builds >= 1,000,000 realistic click events, cleans them
(bots, duplicates, broken rows) and partitions them by user; the staged Parquet splits are
read by a parallel weir source and aggregated with a vectorised keyed count. Every event
emits its page's new running count.

Without OUT, the counts stream back to the client (``execute_and_collect``). With OUT, they
go through the exactly-once FileSink to that directory, and the job checkpoints every
second (to the cluster's ``state.checkpoints.dir``: the embedded S3 of ``weir cluster start
--with-s3``); the committed files are then checked record for record: each page must have
exactly the counts 1..N once, N being Spark's own ``groupBy('page').count()`` — nothing
lost, nothing counted twice, whatever failed meanwhile. The source is throttled to last
several seconds, long enough for ``make demo`` to kill a TaskExecutor mid-job.
"""

import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from clickstream_data import click_events

from weir import FileSink, StreamExecutionEnvironment
from weir.datastream.connectors.spark_stager import spark_session

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_200_000
OUT = sys.argv[2] if len(sys.argv) > 2 else None


def events(spark):
    return click_events(spark, rows=ROWS)


def throttle(batch):
    time.sleep(0.15)  # about 7 s per subtask for the default rows: time to fail mid-job
    return batch


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
clicks = env.from_spark(events, name="Source: Spark click events")
started = time.monotonic()
if OUT is None:
    per_page = clicks.key_by("page").count().name("Clicks per page")
    counts = Counter(tuple(r) for r in per_page.execute_and_collect("clickstream: clicks"))
else:
    env.enable_checkpointing(1000)
    env.configure({"pipeline.batch-size": 10_000})
    (clicks.map_batches(throttle).name("Throttle")
        .key_by("page").count().name("Clicks per page")
        .sink_to(FileSink(OUT, format="parquet")))
    env.execute("clickstream: clicks per page, exactly once")
    counts = Counter()
    for part in sorted(Path(OUT).glob("part-*.parquet")):   # committed files only
        table = pq.read_table(part)
        counts.update(zip(table.column(0).to_pylist(), table.column(1).to_pylist(),
                          strict=True))
elapsed = time.monotonic() - started

spark = spark_session()
expected_totals = {r["page"]: r["count"] for r in events(spark).groupBy("page").count().collect()}
expected = Counter((page, c) for page, total in expected_totals.items()
                   for c in range(1, total + 1))
total = sum(expected_totals.values())
print()
print(f"{total:,} click events from Spark, {sum(counts.values()):,} running-count updates "
      f"from weir in {elapsed:.1f} s (Spark staging included)")
print(f"{len(expected_totals)} pages; top 10 by clicks:")
for page, count in sorted(expected_totals.items(), key=lambda kv: -kv[1])[:10]:
    print(f"  {page:28} {count:>9,}  {count / total:6.1%}")
lost, duplicated = expected - counts, counts - expected
print("every count matches Spark's groupBy('page').count(), each exactly once:",
      "yes" if not lost and not duplicated else
      f"NO ({sum(lost.values())} lost, {sum(duplicated.values())} duplicated)")
if lost or duplicated:
    sys.exit(1)
