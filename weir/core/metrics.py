"""Prometheus endpoint shared by every daemon: collectors read state at scrape time.

Example:
    >>> from weir.core.metrics import parse_port_range
    >>> parse_port_range("9249-9251")
    [9249, 9250, 9251]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from weir.core.errors import ConfigError


def parse_port_range(spec: str) -> list[int]:
    """``"0"``, ``"9249"`` or ``"9249-9299"`` -> candidate ports."""
    text = str(spec).strip()
    try:
        if "-" in text:
            low, high = (int(p) for p in text.split("-", 1))
            if not 0 < low <= high < 65536:
                raise ValueError(text)
            return list(range(low, high + 1))
        port = int(text)
        if not 0 <= port < 65536:
            raise ValueError(text)
        return [port]
    except ValueError as err:
        msg = (f"invalid value for 'metrics.reporter.prom.port': {spec!r} "
               "(a port, a range like 9249-9299, or 0 for a free port)")
        raise ConfigError(msg) from err


#: How often the endpoint's loop looks whether it should stop: ``stop`` waits for it.
_POLL_S = 0.05


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class MetricsServer:
    """The /metrics HTTP endpoint of one daemon (prometheus-client's WSGI app), served by a
    thread of its own until ``stop``."""

    def __init__(self, host: str, port_spec: str, registry: CollectorRegistry) -> None:
        app = make_wsgi_app(registry)
        last_error: OSError | None = None
        for port in parse_port_range(port_spec):
            try:
                self._server = make_server(host, port, app, _ThreadingWSGIServer,
                                           handler_class=_QuietHandler)
                break
            except OSError as err:
                last_error = err
        else:
            msg = (f"cannot start the metrics endpoint on {host}:{port_spec} ({last_error}): "
                   "set metrics.reporter.prom.port to a free port or 0")
            raise ConfigError(msg)
        # prometheus-client's own server polls every 0.5 s, which every stop then waits for.
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": _POLL_S},
                                        name="metrics-http", daemon=True)
        self._thread.start()
        self.port = self._server.server_port
        self.url = f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class CallbackCollector(Collector):
    """A collector whose metric families come from a function called at scrape time."""

    def __init__(self, produce: Callable[[], Iterable[Any]]) -> None:
        self._produce = produce
        self._lock = threading.Lock()

    def collect(self) -> Iterable[Any]:
        with self._lock:
            return list(self._produce())


def gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"weir_{name}", doc, labels=labels)
