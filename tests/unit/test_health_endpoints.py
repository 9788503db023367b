"""/healthz and /readyz on the metrics HTTP server: status codes, JSON bodies, HEAD, and
what a broken probe answers (a real server on a free port, probes set by the test)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry, Counter

from weir.core.metrics import Health, HealthChecks, MetricsServer


@dataclass
class Probes:
    """Answers the test changes between requests."""

    live: Health = field(default_factory=lambda: Health(True, "alive", "serving"))
    ready: Health = field(default_factory=lambda: Health(False, "not ready", "registering"))
    broken: bool = False

    def liveness(self) -> Health:
        return self.live

    def readiness(self) -> Health:
        if self.broken:
            msg = "no such field"
            raise AttributeError(msg)
        return self.ready


@pytest.fixture
def probes() -> Probes:
    return Probes()


@pytest.fixture
def server(probes: Probes) -> Iterator[MetricsServer]:
    registry = CollectorRegistry()
    Counter("weir_example", "An example.", registry=registry).inc()
    served = MetricsServer("127.0.0.1", "0", registry,
                           HealthChecks(probes.liveness, probes.readiness))
    yield served
    served.stop()


def request(server: MetricsServer, path: str, method: str = "GET"
            ) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_liveness_and_readiness_answer_with_their_status_and_reason(
        server: MetricsServer, probes: Probes) -> None:
    status, headers, body = request(server, "/healthz")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"status": "alive", "reason": "serving"}
    status, _, body = request(server, "/readyz")
    assert status == 503
    assert json.loads(body) == {"status": "not ready", "reason": "registering"}
    probes.ready = Health(True, "ready", "registered")
    probes.live = Health(False, "stopping", "shutting down")
    assert request(server, "/readyz")[0] == 200
    status, _, body = request(server, "/healthz?verbose=1")  # a query changes nothing
    assert status == 503 and json.loads(body)["status"] == "stopping"


def test_head_answers_the_status_without_a_body(server: MetricsServer) -> None:
    get_status, get_headers, get_body = request(server, "/readyz")
    status, headers, body = request(server, "/readyz", "HEAD")
    assert (status, body) == (get_status, b"")
    assert headers["Content-Length"] == get_headers["Content-Length"] == str(len(get_body))


def test_other_methods_are_refused(server: MetricsServer) -> None:
    status, headers, _ = request(server, "/healthz", "POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"


def test_a_probe_that_raises_answers_503_with_the_error(server: MetricsServer,
                                                        probes: Probes) -> None:
    probes.broken = True
    status, _, body = request(server, "/readyz")
    assert status == 503
    assert json.loads(body) == {"status": "failed", "reason": "the health check failed: "
                                                              "AttributeError: no such field"}


def test_metrics_are_served_beside_the_probes(server: MetricsServer) -> None:
    status, _, body = request(server, "/metrics")
    assert status == 200 and b"weir_example_total 1.0" in body


def test_without_probes_the_paths_are_metrics_as_before() -> None:
    served = MetricsServer("127.0.0.1", "0", CollectorRegistry())
    try:
        status, headers, _ = request(served, "/healthz")
        assert status == 200 and "json" not in headers["Content-Type"]
    finally:
        served.stop()
