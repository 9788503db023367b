"""Synthetic click-stream data for the weir demo, generated and cleaned with Spark SQL.

:func:`click_events` builds a realistic, deterministic set of web click events from
``spark.range(rows)`` using only Spark SQL expressions (no Python UDFs), cleans it the way a
real pipeline would, and returns it partitioned by user, ready for
:func:`weir.datastream.connectors.spark_stager.stage_batch`.

Randomness is *seeded and positional*: every random draw is ``xxhash64(row id, seed, salt)``
mapped to a uniform number in ``[0, 1)``. Unlike ``rand(seed)``, whose values depend on how
``spark.range`` is split into partitions (and so on the number of cores), this gives the same
data for the same arguments on any machine and any ``partitions``, and it lets injected
duplicate rows be exact copies of their originals, so ``dropDuplicates`` is deterministic too.

Run ``python examples/clickstream_data.py [rows]`` to time generation and staging.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

DAY_START_UTC_S = 1_717_200_000  # 2024-06-01T00:00:00Z
"""Start of the simulated day; every ``ts`` lies in [DAY_START, DAY_START + 24 h)."""
DEFAULT_SEED = 20240601

# fmt: off
# ~40 paths, most popular first; the page draw is skewed towards the front of this list.
PAGES: tuple[str, ...] = (
    "/home", "/search", "/category/shoes", "/product/1001", "/cart", "/category/jackets",
    "/product/1002", "/product/2040", "/deals", "/product/1017", "/category/accessories",
    "/checkout", "/product/3105", "/login", "/product/2211", "/account", "/product/1450",
    "/category/kids", "/product/3307", "/checkout/payment", "/wishlist", "/product/4012",
    "/product/1188", "/category/sale", "/checkout/confirm", "/product/2555", "/orders",
    "/product/5120", "/help", "/product/3999", "/new-arrivals", "/product/4420", "/stores",
    "/account/settings", "/returns", "/product/6001", "/blog", "/blog/summer-style-guide",
    "/about", "/careers",
)
REFERRERS: tuple[tuple[str, float], ...] = (
    ("(direct)", 0.34), ("google.com", 0.31), ("facebook.com", 0.08), ("newsletter", 0.07),
    ("instagram.com", 0.06), ("bing.com", 0.05), ("t.co", 0.04), ("reddit.com", 0.03),
    ("duckduckgo.com", 0.02),
)
COUNTRIES: tuple[tuple[str, float], ...] = (
    ("US", 0.30), ("DE", 0.10), ("GB", 0.09), ("FR", 0.07), ("IN", 0.07), ("BR", 0.06),
    ("CA", 0.05), ("JP", 0.05), ("NL", 0.04), ("ES", 0.04), ("IT", 0.04), ("AU", 0.03),
    ("PL", 0.02), ("SE", 0.02), ("MX", 0.02),
)
DEVICES: tuple[tuple[str, float], ...] = (("mobile", 0.56), ("desktop", 0.37), ("tablet", 0.07))
USER_AGENTS: dict[str, str] = {
    "mobile": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
    "desktop": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "tablet": "Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
}
BOT_AGENTS: tuple[str, ...] = (
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "python-requests/2.31.0",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
)
# fmt: on
BOT_PATTERN = "(?i)(bot|crawler|spider|python-requests|curl/|headless)"
"""User agents matching this are automated traffic and removed by cleaning."""

# Fractions of dirty rows injected by raw_click_events.
NULL_USER_FRACTION = 0.005
NEGATIVE_DURATION_FRACTION = 0.004
BOT_FRACTION = 0.008
DUPLICATE_FRACTION = 0.01

COLUMNS: tuple[tuple[str, str], ...] = (
    ("event_id", "bigint"),
    ("user", "string"),
    ("page", "string"),
    ("referrer", "string"),
    ("country", "string"),
    ("device", "string"),
    ("ts", "timestamp"),
    ("duration_ms", "bigint"),
)
"""Output columns of click_events and their Spark SQL types."""


def _uniform(key: Column, seed: int, salt: int) -> Column:
    """A uniform double in [0, 1) determined by (key, seed, salt): the top 53 hash bits."""
    return F.shiftrightunsigned(F.xxhash64(key, F.lit(seed), F.lit(salt)), 11) / float(1 << 53)


def _weighted(u: Column, choices: Sequence[tuple[str, float]]) -> Column:
    """Pick a value with the given relative weights using the uniform ``u``."""
    total = sum(w for _, w in choices)
    expr, cumulative = None, 0.0
    for value, weight in choices[:-1]:
        cumulative += weight / total
        expr = F.when(u < cumulative, value) if expr is None else expr.when(u < cumulative, value)
    last = F.lit(choices[-1][0])
    return last if expr is None else expr.otherwise(last)


def raw_click_events(
    spark: SparkSession,
    rows: int = 1_200_000,
    users: int = 50_000,
    *,
    seed: int = DEFAULT_SEED,
) -> DataFrame:
    """The uncleaned events: the columns of :func:`click_events` plus ``user_agent``.

    About 1.7 % of the ``rows`` generated events are dirty: a null ``user``
    (``NULL_USER_FRACTION``), a negative ``duration_ms`` (``NEGATIVE_DURATION_FRACTION``) or a
    bot ``user_agent`` (``BOT_FRACTION``); in addition ``DUPLICATE_FRACTION`` of the events
    appear twice (exact copies, same ``event_id``), so the result has about
    ``rows * 1.01`` rows.
    """
    if rows < 0 or users <= 0:
        raise ValueError(f"need rows >= 0 and users > 0, got rows={rows}, users={users}")

    # Every draw is computed once, as a column (Spark does not inline a column that is used
    # several times, e.g. by the CASE chains of _weighted, so each hash runs once per row).
    event_salts = (1, 2, 3, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18)
    user_salts = (4, 7)

    def u(salt: int) -> Column:
        return F.col(f"_u{salt}")

    # Power transform: u**3 piles probability near 0, so low user numbers are far more active
    # (user-00000 alone gets ~2.7 % of the events with 50,000 users).
    user_idx = F.col("_user_idx")
    width = max(5, len(str(users - 1)))
    user = F.when(u(2) < NULL_USER_FRACTION, F.lit(None).cast("string")).otherwise(
        F.format_string(f"user-%0{width}d", user_idx)
    )
    pages = F.array(*[F.lit(p) for p in PAGES])
    page_idx = F.floor(F.pow(u(3), 1.8) * len(PAGES)).cast("int")
    # A user mostly stays on one device and always lives in one country.
    primary_device = _weighted(u(4), DEVICES)
    device = F.when(u(5) < 0.85, primary_device).otherwise(_weighted(u(6), DEVICES))
    country = _weighted(u(7), COUNTRIES)
    bot_agents = F.array(*[F.lit(b) for b in BOT_AGENTS])
    human_agent = (
        F.when(F.col("device") == "mobile", USER_AGENTS["mobile"])
        .when(F.col("device") == "tablet", USER_AGENTS["tablet"])
        .otherwise(USER_AGENTS["desktop"])
    )
    user_agent = F.when(
        u(8) < BOT_FRACTION,
        F.element_at(bot_agents, (F.floor(u(9) * len(BOT_AGENTS)) + 1).cast("int")),
    ).otherwise(human_agent)
    # Diurnal traffic: 60 % around an evening peak (~20:00 UTC), the rest spread over the day.
    peak = (u(10) + u(11) + u(12)) / 3.0  # roughly normal around 0.5
    day_fraction = F.when(u(13) < 0.6, F.pmod(20.0 / 24.0 + (peak - 0.5), F.lit(1.0))).otherwise(
        u(14)
    )
    ts = F.timestamp_micros(
        (F.lit(DAY_START_UTC_S * 1_000_000) + F.floor(day_fraction * 86_400_000_000)).cast("long")
    )
    # Log-normal dwell time (median ~3 s) via Box-Muller, capped at 30 minutes.
    normal = F.sqrt(-2.0 * F.log(1.0 - u(15))) * F.cos(2.0 * 3.141592653589793 * u(16))
    duration = F.least(F.floor(F.exp(8.0 + 1.1 * normal)), F.lit(1_800_000)).cast("long")
    duration = F.when(u(17) < NEGATIVE_DURATION_FRACTION, -duration - 1).otherwise(duration)

    draws = spark.range(rows).select(
        "id", *[_uniform(F.col("id"), seed, salt).alias(f"_u{salt}") for salt in event_salts]
    )
    draws = draws.withColumn(
        "_user_idx", F.least(F.floor(F.pow(u(1), 3.0) * users), F.lit(users - 1)).cast("long")
    ).select("*", *[_uniform(user_idx, seed, salt).alias(f"_u{salt}") for salt in user_salts])
    events = draws.withColumn("device", device).select(
        F.col("id").alias("event_id"),
        user.alias("user"),
        F.element_at(pages, page_idx + 1).alias("page"),
        _weighted(u(18), REFERRERS).alias("referrer"),
        country.alias("country"),
        F.col("device"),
        ts.alias("ts"),
        duration.alias("duration_ms"),
        user_agent.alias("user_agent"),
    )
    # Exact duplicates, e.g. from a client retrying a beacon: emit some events twice.
    copies = F.when(_uniform(F.col("event_id"), seed, 19) < DUPLICATE_FRACTION, 2).otherwise(1)
    return events.withColumn("_copy", F.explode(F.array_repeat(F.lit(True), copies))).drop("_copy")


def clean_click_events(raw: DataFrame, partitions: int = 8) -> DataFrame:
    """Clean raw events: drop null users, negative durations, bots and duplicate event ids."""
    return (
        raw.where(F.col("user").isNotNull())
        .where(F.col("duration_ms") >= 0)
        .where(~F.col("user_agent").rlike(BOT_PATTERN))
        .dropDuplicates(["event_id"])
        .drop("user_agent")
        .repartition(partitions, "user")
    )


def click_events(
    spark: SparkSession, rows: int = 1_200_000, users: int = 50_000, partitions: int = 8
) -> DataFrame:
    """Generate and clean a day of web click events, partitioned by ``user``.

    Columns (see ``COLUMNS``):

    * ``event_id`` (bigint): unique id of the event, in ``[0, rows)``.
    * ``user`` (string): ``user-00042`` style id out of ``users``; heavily skewed, so a few
      users are far more active than the long tail.
    * ``page`` (string): one of ~40 paths (``/home``, ``/product/1001``, ``/cart``,
      ``/checkout``...), skewed towards the popular ones.
    * ``referrer`` (string): ``(direct)``, ``google.com``, ``newsletter``... weighted.
    * ``country`` (string): 2-letter ISO code, fixed per user, weighted (US most common).
    * ``device`` (string): ``mobile``, ``desktop`` or ``tablet``, mostly fixed per user.
    * ``ts`` (timestamp): event time within 2024-06-01 UTC, peaking in the evening.
    * ``duration_ms`` (bigint): time on page, log-normal (median ~3 s), at most 30 min.

    The raw data (:func:`raw_click_events`) has ~1.7 % dirty events (null users, negative
    durations, bot user agents) and ~1 % duplicated events; they are removed with filters and
    ``dropDuplicates(["event_id"])``, leaving ~98.3 % of ``rows`` (1.18 M for the defaults).
    The result is deterministic for the same ``rows`` and ``users`` (the rows, not their
    order), whatever ``partitions`` and the cluster size.

    Example::

        df = click_events(spark, rows=20_000, users=500)
        df.groupBy("page").count().orderBy("count", ascending=False).show(5)
    """
    return clean_click_events(raw_click_events(spark, rows, users), partitions)


def main(argv: Sequence[str] | None = None) -> None:
    """Time Spark start-up, generating the default data set and staging it."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from weir.datastream.connectors.spark_stager import spark_session, stage_batch

    args = list(sys.argv[1:] if argv is None else argv)
    rows = int(args[0]) if args else 1_200_000
    t0 = time.monotonic()
    spark = spark_session("local[*]")
    t1 = time.monotonic()
    print(f"spark start-up: {t1 - t0:.1f} s")
    try:
        count = click_events(spark, rows).count()
        t2 = time.monotonic()
        print(f"click_events({rows}) generate+clean+count: {count} rows in {t2 - t1:.1f} s")
        with tempfile.TemporaryDirectory(prefix="weir-clicks-") as staging:
            result = stage_batch(lambda s: click_events(s, rows), staging, spark=spark)
            t3 = time.monotonic()
            size = sum(os.path.getsize(f) for f in result.files)
            print(
                f"stage_batch: {result.rows} rows, {len(result.files)} splits, "
                f"{size / 1e6:.1f} MB in {t3 - t2:.1f} s"
            )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
