"""CollectBuffer: bounded push, fetch, and the end of results."""

from __future__ import annotations

import threading
import time

from weir.jobmaster.collect import CollectBuffer


def test_push_then_fetch_in_order() -> None:
    buffer = CollectBuffer(capacity=10)
    for data in (b"a", b"b", b"c"):
        assert buffer.push(data, wait=1)
    assert buffer.fetch(2, wait=1) == ([b"a", b"b"], False)
    assert buffer.fetch(10, wait=1) == ([b"c"], False)


def test_push_times_out_when_full() -> None:
    buffer = CollectBuffer(capacity=2)
    assert buffer.push(b"1", wait=0)
    assert buffer.push(b"2", wait=0)
    started = time.monotonic()
    assert buffer.push(b"3", wait=0.1) is False
    assert time.monotonic() - started >= 0.1
    assert buffer.push(b"3", wait=0) is False
    assert buffer.fetch(10, wait=0) == ([b"1", b"2"], False)


def test_blocked_push_succeeds_once_the_client_fetches() -> None:
    buffer = CollectBuffer(capacity=1)
    assert buffer.push(b"first", wait=0)
    result = []
    thread = threading.Thread(target=lambda: result.append(buffer.push(b"second", wait=30)))
    thread.start()
    assert buffer.fetch(1, wait=1) == ([b"first"], False)
    thread.join(10)
    assert not thread.is_alive()
    assert result == [True]
    assert buffer.fetch(1, wait=1) == ([b"second"], False)


def test_fetch_waits_for_a_batch() -> None:
    buffer = CollectBuffer(capacity=4)
    thread = threading.Thread(target=lambda: buffer.push(b"late", wait=5))
    thread.start()
    assert buffer.fetch(4, wait=30) == ([b"late"], False)
    thread.join(10)


def test_fetch_with_nothing_times_out_without_ending() -> None:
    buffer = CollectBuffer(capacity=4)
    started = time.monotonic()
    assert buffer.fetch(4, wait=0.05) == ([], False)
    assert time.monotonic() - started >= 0.05


def test_end_is_reported_only_after_close_and_drain() -> None:
    buffer = CollectBuffer(capacity=4)
    buffer.push(b"x", wait=0)
    buffer.push(b"y", wait=0)
    buffer.close()
    assert buffer.fetch(1, wait=0) == ([b"x"], False)
    assert buffer.fetch(1, wait=0) == ([b"y"], True)
    assert buffer.fetch(1, wait=0) == ([], True)


def test_close_wakes_a_waiting_fetch() -> None:
    buffer = CollectBuffer(capacity=4)
    result = []
    thread = threading.Thread(target=lambda: result.append(buffer.fetch(4, wait=30)))
    thread.start()
    buffer.close()
    thread.join(10)
    assert not thread.is_alive()
    assert result == [([], True)]


def test_push_after_close_is_dropped_but_accepted() -> None:
    buffer = CollectBuffer(capacity=1)
    buffer.push(b"kept", wait=0)
    buffer.close()
    assert buffer.push(b"dropped", wait=5) is True  # a full buffer does not block when closed
    assert buffer.fetch(5, wait=0) == ([b"kept"], True)


def test_empty_pushes_are_not_results() -> None:
    buffer = CollectBuffer(capacity=1)
    assert buffer.push(b"", wait=0)
    assert buffer.push(b"only", wait=0)  # the empty push took no room
    buffer.close()
    assert buffer.fetch(5, wait=0) == ([b"only"], True)
