"""The JobMaster's main-thread executor: calls, timers, exceptions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from weir.jobmaster.errors import JobMasterStoppingError
from weir.jobmaster.main_thread import MainThreadExecutor


@pytest.fixture
def main() -> Iterator[MainThreadExecutor]:
    executor = MainThreadExecutor("test-main")
    executor.start()
    yield executor
    executor.stop()


def test_call_runs_on_the_main_thread(main) -> None:
    assert main.call(lambda: 1 + 1) == 2
    assert main.call(main.in_main_thread) is True
    assert not main.in_main_thread()
    name = main.call(lambda: threading.current_thread().name)
    assert name == "test-main"


def test_call_from_the_main_thread_runs_inline(main) -> None:
    # Would deadlock if the nested call queued behind the running one.
    assert main.call(lambda: main.call(lambda: 41) + 1, timeout=5) == 42


def test_exceptions_reach_the_caller(main) -> None:
    def fail() -> None:
        raise ValueError("bad request")

    with pytest.raises(ValueError, match=r"bad request"):
        main.call(fail)
    future = main.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        future.result(5)
    assert main.call(lambda: "still running") == "still running"


def test_submitted_work_runs_in_order(main) -> None:
    seen = []
    futures = [main.submit(lambda i=i: seen.append(i)) for i in range(50)]
    for future in futures:
        future.result(5)
    assert seen == list(range(50))


def test_timers_run_in_due_order(main) -> None:
    order = []
    done = threading.Event()
    lock = threading.Lock()

    def record(tag: str) -> None:
        with lock:
            order.append((tag, main.in_main_thread()))
            if len(order) == 4:
                done.set()

    def plan() -> None:
        # On the main thread, so that no timer can run before all are scheduled.
        main.schedule(0.5, lambda: record("late"))
        main.schedule(0.15, lambda: record("middle"))
        main.schedule(0.0, lambda: record("now-1"))
        main.schedule(0.0, lambda: record("now-2"))

    main.call(plan)
    assert done.wait(10)
    assert order == [("now-1", True), ("now-2", True), ("middle", True), ("late", True)]


def test_timer_does_not_run_early(main) -> None:
    fired = threading.Event()
    fired_at = []
    scheduled_at = time.monotonic()
    main.schedule(0.2, lambda: (fired_at.append(time.monotonic()), fired.set()))
    assert fired.wait(10)
    assert fired_at[0] - scheduled_at >= 0.2


def test_failing_timer_does_not_stop_the_thread(main, caplog) -> None:
    ran = threading.Event()

    def broken() -> None:
        raise RuntimeError("timer bug")

    main.schedule(0.0, broken)
    main.schedule(0.0, ran.set)
    assert ran.wait(10)
    assert main.call(lambda: 7) == 7
    assert any("timer on the main thread failed" in r.getMessage() for r in caplog.records)


def test_submit_after_stop_fails_fast() -> None:
    executor = MainThreadExecutor("stopped")
    executor.start()
    executor.stop()
    future = executor.submit(lambda: 1)
    with pytest.raises(JobMasterStoppingError, match=r"shutting down"):
        future.result(1)
