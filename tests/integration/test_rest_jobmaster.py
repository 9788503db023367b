"""The REST server of an in-process JobMaster: where it binds without a token, and that
a busy main thread is answered 503 in JSON within the HTTP deadline, not waited for."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from weir.core.config import Configuration
from weir.core.metrics import REQUEST_DEADLINE_S
from weir.jobmaster.daemon import JobMaster
from weir.jobmaster.rest.handlers import READ_TIMEOUT_S


@pytest.fixture
def jobmaster() -> Iterator[JobMaster]:
    jm = JobMaster(Configuration.from_pairs({
        "jobmaster.rpc.port": "0", "metrics.reporter.prom.port": "0", "rest.port": "0",
        "jobmaster.rpc.bind-host": "0.0.0.0", "jobmaster.rpc.address": "jm.example"}))
    jm.start()
    try:
        yield jm
    finally:
        jm.stop()


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=REQUEST_DEADLINE_S + 5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_without_a_token_it_binds_loopback_and_answers_a_busy_main_thread_503(
        jobmaster: JobMaster) -> None:
    # Without a token the API stays on 127.0.0.1, whatever the RPC server binds.
    assert jobmaster.rest_url.startswith("http://127.0.0.1:")
    assert _get(f"{jobmaster.rest_url}/jobs") == (200, {"jobs": []})
    overview = _get(f"{jobmaster.rest_url}/overview")[1]
    assert (overview["taskmanagers"], overview["slots-total"]) == (0, 0)
    # The metrics endpoint is served as before, by its own server.
    with urllib.request.urlopen(jobmaster.metrics_url, timeout=10) as response:
        assert b"weir_" in response.read()

    release = threading.Event()
    jobmaster.main.submit(lambda: release.wait(60))
    try:
        started = time.monotonic()
        status, body = _get(f"{jobmaster.rest_url}/jobs/overview")
        waited = time.monotonic() - started
    finally:
        release.set()
    assert status == 503 and "try again" in body["errors"][0], body
    assert READ_TIMEOUT_S - 1 < waited < REQUEST_DEADLINE_S
    assert _get(f"{jobmaster.rest_url}/jobs")[0] == 200
