"""The REST server of an in-process JobMaster: where it binds without a token, that a busy
main thread is answered 503 in JSON within the HTTP deadline (not waited for), a port in
use, and HTTPS with the cluster's certificates."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from weir.core.config import Configuration
from weir.core.errors import ConfigError
from weir.core.metrics import REQUEST_DEADLINE_S
from weir.core.tls import generate_cluster_pki
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


def test_a_rest_port_in_use_is_one_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        jm = JobMaster(Configuration.from_pairs({
            "jobmaster.rpc.port": "0", "metrics.reporter.prom.port": "0",
            "rest.port": str(taken.getsockname()[1])}))
        try:
            with caplog.at_level(logging.INFO, logger="weir.jobmaster.daemon"), \
                    pytest.raises(ConfigError, match=r"REST API .* set rest.port to a free port"):
                jm.start()
        finally:
            jm.stop()
    # No token: it said it serves this host only.
    assert "REST API binds 127.0.0.1 only" in caplog.text


def test_tls_serves_https_to_the_cluster_certificate_or_the_token(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tls = generate_cluster_pki(tmp_path / "pki", ["127.0.0.1", "localhost"])
    jm = JobMaster(Configuration.from_pairs({
        "jobmaster.rpc.port": "0", "metrics.reporter.prom.port": "0", "rest.port": "0",
        "security.auth.token": "tls-token", **tls.as_options()}))
    with caplog.at_level(logging.INFO, logger="weir.jobmaster.daemon"):
        jm.start()
    try:
        assert jm.rest_url.startswith("https://127.0.0.1:")
        assert f"REST API {jm.rest_url}" in caplog.text
        assert "binds 127.0.0.1 only" not in caplog.text  # a token is set
        anonymous = ssl.create_default_context(cafile=str(tls.truststore))
        member = ssl.create_default_context(cafile=str(tls.truststore))
        member.load_cert_chain(tls.cert, tls.key)

        def get(context: ssl.SSLContext, token: str | None) -> int:
            request = urllib.request.Request(f"{jm.rest_url}/jobs")
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=10, context=context) as answer:
                    return int(answer.status)
            except urllib.error.HTTPError as err:
                return err.code

        assert (get(member, None), get(anonymous, "tls-token")) == (200, 200)
        assert (get(anonymous, None), get(anonymous, "wrong")) == (401, 401)
    finally:
        jm.stop()
