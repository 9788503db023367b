"""Restart strategies with a manual clock: delays, the failure-rate window, exponential
backoff and its reset, and the defaults Flink 2 picks."""

from __future__ import annotations

import random

import pytest

from weir.core.clock import ManualClock
from weir.core.config import Configuration
from weir.core.errors import ConfigError
from weir.jobmaster.restart_strategy import (
    ExponentialDelayRestartStrategy,
    FailureRateRestartStrategy,
    FixedDelayRestartStrategy,
    NoRestartStrategy,
    create_restart_strategy,
)


def test_none_never_restarts() -> None:
    strategy = NoRestartStrategy()
    strategy.notify_failure()
    assert not strategy.can_restart()
    assert "none" in strategy.describe()


def test_fixed_delay_counts_attempts() -> None:
    strategy = FixedDelayRestartStrategy(attempts=3, delay_ms=2500, clock=ManualClock())
    for _ in range(3):
        strategy.notify_failure()
        assert strategy.can_restart() and strategy.backoff_ms() == 2500
    strategy.notify_failure()
    assert not strategy.can_restart()
    assert "3 restart" in strategy.describe()


def test_failure_rate_forgets_failures_outside_the_interval() -> None:
    clock = ManualClock(0)
    strategy = FailureRateRestartStrategy(max_failures=2, interval_ms=60_000, delay_ms=500,
                                          clock=clock)
    strategy.notify_failure()                      # t=0
    clock.advance(10_000)
    strategy.notify_failure()                      # t=10 s
    assert strategy.can_restart() and strategy.backoff_ms() == 500
    clock.advance(10_000)
    strategy.notify_failure()                      # t=20 s: three within a minute
    assert not strategy.can_restart()
    clock.advance(41_000)                          # t=61 s: the first one left the window
    assert strategy.can_restart()


def test_exponential_delay_grows_caps_and_resets() -> None:
    clock = ManualClock(0)
    strategy = ExponentialDelayRestartStrategy(
        initial_ms=1000, max_ms=5000, multiplier=2.0, jitter=0.0,
        reset_threshold_ms=3_600_000, clock=clock)
    delays = []
    for _ in range(5):
        strategy.notify_failure()
        delays.append(strategy.backoff_ms())
        clock.advance(10)
    assert delays == [1000, 2000, 4000, 5000, 5000]
    clock.advance(3_600_000)                       # ran an hour without failing
    strategy.notify_failure()
    assert strategy.backoff_ms() == 1000 and strategy.failures == 1


def test_exponential_delay_jitter_stays_within_its_factor() -> None:
    clock = ManualClock(0)
    strategy = ExponentialDelayRestartStrategy(
        initial_ms=10_000, max_ms=300_000, multiplier=2.0, jitter=0.1,
        reset_threshold_ms=3_600_000, clock=clock, rng=random.Random(7))
    strategy.notify_failure()
    samples = {strategy.backoff_ms() for _ in range(200)}
    assert min(samples) >= 9000 and max(samples) <= 11_000
    assert len(samples) > 50                       # it does vary


def test_exponential_delay_attempts_before_reset() -> None:
    clock = ManualClock(0)
    strategy = ExponentialDelayRestartStrategy(
        initial_ms=1, max_ms=10, multiplier=2.0, jitter=0.0, reset_threshold_ms=1000,
        attempts=2, clock=clock)
    strategy.notify_failure()
    strategy.notify_failure()
    assert strategy.can_restart()
    strategy.notify_failure()
    assert not strategy.can_restart()


@pytest.mark.parametrize(("pairs", "checkpointing", "expected"), [
    ({}, True, ExponentialDelayRestartStrategy),
    ({}, False, NoRestartStrategy),
    ({"restart-strategy.type": "fixed-delay"}, False, FixedDelayRestartStrategy),
    ({"restart-strategy.type": "fixeddelay"}, True, FixedDelayRestartStrategy),
    ({"restart-strategy.type": "failure-rate"}, True, FailureRateRestartStrategy),
    ({"restart-strategy.type": "off"}, True, NoRestartStrategy),
    ({"restart-strategy.type": "exponential-delay"}, False, ExponentialDelayRestartStrategy),
])
def test_configured_strategy(pairs: dict[str, str], checkpointing: bool,
                             expected: type) -> None:
    strategy = create_restart_strategy(Configuration.from_pairs(pairs), checkpointing)
    assert type(strategy) is expected


def test_configured_values_reach_the_strategy() -> None:
    conf = Configuration.from_pairs({
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "4",
        "restart-strategy.fixed-delay.delay": "250 ms"})
    strategy = create_restart_strategy(conf, True)
    assert isinstance(strategy, FixedDelayRestartStrategy)
    assert (strategy.attempts, strategy.delay_ms) == (4, 250)


def test_unknown_strategy_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match="fixed-delay"):
        Configuration.from_pairs({"restart-strategy.type": "sometimes"})


def test_summaries_say_the_strategy_and_its_settings_as_flinks_job_config() -> None:
    clock = ManualClock()
    assert NoRestartStrategy().summary() == "Restart deactivated."
    assert FixedDelayRestartStrategy(3, 1000, clock).summary() == \
        "Restart with fixed delay (1000 ms). #3 restart attempts."
    assert FailureRateRestartStrategy(2, 60_000, 500, clock).summary() == (
        "Failure rate restart with maximum of 2 failures within interval 60000 ms and fixed "
        "delay 500 ms.")
    summary = ExponentialDelayRestartStrategy(1000, 60_000, 1.5, 0.1, 3_600_000,
                                              clock=clock).summary()
    assert summary.startswith("Restart with exponential delay: starting at 1000 ms")
    assert "increasing by 1.5, with maximum 60000 ms" in summary
