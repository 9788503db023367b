"""The demo job: Spark generates and cleans click events, weir counts clicks per page.

    weir cluster start && weir run examples/clickstream.py [ROWS]

Spark (local mode, on the client) builds >= 1,000,000 realistic click events, cleans them
(bots, duplicates, broken rows) and partitions them by user; the staged Parquet splits are
read by a parallel weir source and aggregated with a vectorised keyed count. The result is
checked against Spark's own groupBy of the same data.
"""

import sys
import time

from clickstream_data import click_events

from weir import StreamExecutionEnvironment
from weir.connectors.spark_staging import spark_session

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_200_000


def events(spark):
    return click_events(spark, rows=ROWS)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)

clicks = env.from_spark(events, name="Source: Spark click events")
per_page = clicks.key_by("page").count().name("Clicks per page")

started = time.monotonic()
latest: dict[str, int] = {}
updates = 0
for page, count in per_page.execute_and_collect("clickstream: clicks per page"):
    latest[page] = max(latest.get(page, 0), count)  # every event emits its page's new count
    updates += 1
elapsed = time.monotonic() - started

spark = spark_session()
expected = {r["page"]: r["count"] for r in events(spark).groupBy("page").count().collect()}
total = sum(latest.values())
print()
print(f"{total:,} click events from Spark, {updates:,} running-count updates from weir "
      f"in {elapsed:.1f} s (Spark staging included)")
print(f"{len(latest)} pages; top 10 by clicks:")
for page, count in sorted(latest.items(), key=lambda kv: -kv[1])[:10]:
    print(f"  {page:28} {count:>9,}  {count / total:6.1%}")
print("matches Spark's own groupBy('page').count():", "yes" if latest == expected else "NO")
if latest != expected:
    sys.exit(1)
