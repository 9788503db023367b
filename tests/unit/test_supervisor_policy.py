"""The local cluster supervisor's restart back-off, driven by a manual clock."""

from __future__ import annotations

from weir.cli.supervisor import INITIAL_DELAY_S, MAX_DELAY_S, STABLE_S, RestartPolicy


def test_a_crash_loop_backs_off_to_the_cap():
    policy = RestartPolicy()
    now, delays = 0.0, []
    for _ in range(8):
        started = now
        now += 0.5                                   # dies half a second after each start
        delays.append(policy.on_death(now, started))
        now += delays[-1]
    assert delays[:3] == [INITIAL_DELAY_S, 2 * INITIAL_DELAY_S, 4 * INITIAL_DELAY_S]
    assert delays[-1] == MAX_DELAY_S and max(delays) == MAX_DELAY_S


def test_a_process_that_ran_stably_restarts_quickly_again():
    policy = RestartPolicy()
    for started in (0.0, 2.0, 5.0):
        policy.on_death(started + 1, started)
    assert policy.delay > INITIAL_DELAY_S
    assert policy.on_death(100.0 + STABLE_S, 100.0) == INITIAL_DELAY_S
