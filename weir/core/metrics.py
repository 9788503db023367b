"""Prometheus endpoint shared by every daemon: collectors read state at scrape time.

The same HTTP server answers the daemon's health probes (for Kubernetes and operators):
``GET /healthz`` (liveness) and ``GET /readyz`` (readiness), 200 or 503 with a small JSON
body saying why (:class:`Health`). The daemon's probe functions run on the server's
threads: they read a few fields and never wait for a lock another thread may hold.

Example:
    >>> from weir.core.metrics import parse_port_range
    >>> parse_port_range("9249-9251")
    [9249, 9250, 9251]
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.registry import Collector

from weir.core.errors import ConfigError
from weir.core.metric_names import Gauge


def parse_port_range(spec: str, key: str = "metrics.reporter.prom.port") -> list[int]:
    """``"0"``, ``"9249"`` or ``"9249-9299"`` -> candidate ports (ConfigError naming
    ``key`` otherwise)."""
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
        msg = (f"invalid value for '{key}': {spec!r} "
               "(a port, a range like 9249-9299, or 0 for a free port)")
        raise ConfigError(msg) from err


#: How often the endpoint's loop looks whether it should stop: ``stop`` waits for it.
_POLL_S = 0.05


#: Threads that answer requests: a scrape takes milliseconds, so a few serve any scraper.
WORKERS = 4
#: Connections accepted at once (answered or waiting for a thread); when a new one comes
#: and all are taken, the oldest is closed: a scraper that connects later is answered
#: within REQUEST_DEADLINE_S whatever idle connections were opened before it.
MAX_CONNECTIONS = 32
#: From accept to the last byte of the answer: a client sending its request a byte at a
#: time (or reading the answer so) is cut off then.
REQUEST_DEADLINE_S = 10.0
#: Longest wait for one read or write of a connection.
IO_TIMEOUT_S = 5.0


class _BoundedWSGIServer(WSGIServer):
    """A WSGI server with a fixed pool of threads and a bounded number of connections,
    each with a deadline (``socketserver.ThreadingMixIn`` starts a thread per connection
    and waits for none: hundreds of half-sent requests left hundreds of threads).

    The accept loop enforces the deadlines between accepts (``service_actions`` runs every
    poll interval): an overdue connection's socket is shut down, which ends its thread's
    blocking read or write."""

    # Connections the kernel queues before the loop accepts them (socketserver's 5 drops
    # the SYNs of a burst of scrapers, who then retry a second later).
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Before the base class binds: a port in use makes it call server_close at once.
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="metrics-http")
        self._lock = threading.Lock()
        # Connection -> its deadline (monotonic), oldest first.
        self._open: OrderedDict[socket.socket, float] = OrderedDict()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            while len(self._open) >= MAX_CONNECTIONS:
                oldest, _ = self._open.popitem(last=False)
                _cut(oldest)
            self._open[request] = time.monotonic() + REQUEST_DEADLINE_S
        try:
            self._pool.submit(self._handle, request, client_address)
        except RuntimeError:  # the pool was shut down: the server is stopping
            self._forget(request)
            self.shutdown_request(request)

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            with self._lock:
                waiting = request in self._open
            if waiting:  # not closed as the oldest while it waited for a thread
                if isinstance(request, ssl.SSLSocket):
                    # Here, not in accept: a client that never finishes its handshake
                    # holds one answering thread until its deadline, not the accept loop.
                    request.settimeout(IO_TIMEOUT_S)
                    request.do_handshake()
                self.finish_request(request, client_address)
        except Exception:  # one client's failure ends its connection only
            self.handle_error(request, client_address)
        finally:
            self._forget(request)
            self.shutdown_request(request)

    def _forget(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A cut-off or misbehaving client is not worth a traceback on stderr."""

    def service_actions(self) -> None:
        now = time.monotonic()
        with self._lock:
            overdue = [c for c, deadline in self._open.items() if deadline <= now]
            for connection in overdue:
                del self._open[connection]
        for connection in overdue:
            _cut(connection)

    def server_close(self) -> None:
        super().server_close()
        with self._lock:
            connections = list(self._open)
            self._open.clear()
        for connection in connections:
            _cut(connection)
        self._pool.shutdown(wait=True, cancel_futures=True)


def _cut(connection: socket.socket) -> None:
    """End a connection's reads and writes, from any thread (its owner closes it)."""
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)


class _QuietHandler(WSGIRequestHandler):
    timeout = IO_TIMEOUT_S

    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        # With TLS (CERT_OPTIONAL), a certificate is only returned once it was verified.
        connection = self.connection
        environ["weir.client_cert"] = bool(isinstance(connection, ssl.SSLSocket)
                                           and connection.getpeercert())
        return environ

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


@dataclass(frozen=True)
class Health:
    """One probe's answer: ``ok`` (HTTP 200, else 503), a one-word ``status`` and the
    ``reason`` for it, as operators read them in the JSON body.

    Example:
        >>> Health(False, "not ready", "registering with the JobMaster at h:6123").body()
        b'{"status": "not ready", "reason": "registering with the JobMaster at h:6123"}'
    """

    ok: bool
    status: str
    reason: str = ""

    def body(self) -> bytes:
        return json.dumps({"status": self.status, "reason": self.reason}).encode()


@dataclass(frozen=True)
class HealthChecks:
    """A daemon's probes, called on the HTTP server's threads for each request: they must
    answer at once (read flags and thread states; no locks a task thread may hold, no
    waiting for another thread, no I/O).

    ``liveness`` (``/healthz``): is the process working at all (503: it is stopping, or a
    fatal error stopped it; restart it). ``readiness`` (``/readyz``): does it do its job
    now (503: not yet, or not any more; send it no work)."""

    liveness: Callable[[], Health]
    readiness: Callable[[], Health]


#: The health paths and which probe of :class:`HealthChecks` answers each.
HEALTH_PATHS = {"/healthz": "liveness", "/readyz": "readiness"}

_WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _with_health(app: _WSGIApp, checks: HealthChecks) -> _WSGIApp:
    """``app`` with the health paths answered by ``checks`` (GET and HEAD)."""
    def route(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        probe_name = HEALTH_PATHS.get(environ.get("PATH_INFO", ""))
        if probe_name is None:
            return app(environ, start_response)
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"),
                                                      ("Content-Length", "0")])
            return [b""]
        try:
            health: Health = getattr(checks, probe_name)()
        except Exception as err:  # a broken probe must answer, and not with "healthy"
            health = Health(False, "failed", f"the health check failed: "
                                             f"{type(err).__name__}: {err}")
        body = health.body()
        start_response("200 OK" if health.ok else "503 Service Unavailable",
                       [("Content-Type", "application/json"),
                        ("Content-Length", str(len(body))), ("Cache-Control", "no-store")])
        return [b"" if method == "HEAD" else body]

    return route


class BoundedHttpServer:
    """A WSGI ``app`` served on ``host`` at the first free port of ``port_spec`` by a
    thread of its own and ``WORKERS`` answering threads until ``stop``: at most
    ``MAX_CONNECTIONS`` connections, each cut off ``REQUEST_DEADLINE_S`` after it was
    accepted. With ``tls`` it serves HTTPS; the TLS handshake runs on an answering thread
    (never the accept loop) and ``environ["weir.client_cert"]`` says whether the client
    presented a certificate the context verified.

    ``what`` and ``port_key`` name the endpoint and its port option in the one-line error
    when no port of ``port_spec`` can be bound (ConfigError)."""

    def __init__(self, host: str, port_spec: str, app: _WSGIApp, *, name: str, what: str,
                 port_key: str, tls: ssl.SSLContext | None = None) -> None:
        last_error: OSError | None = None
        for port in parse_port_range(port_spec, port_key):
            try:
                self._server = make_server(host, port, app, _BoundedWSGIServer,
                                           handler_class=_QuietHandler)
                break
            except OSError as err:
                last_error = err
        else:
            msg = (f"cannot start the {what} on {host}:{port_spec} ({last_error}): "
                   f"set {port_key} to a free port or 0")
            raise ConfigError(msg)
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True,
                                                  do_handshake_on_connect=False)
        # prometheus-client's own server polls every 0.5 s, which every stop then waits for.
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": _POLL_S},
                                        name=name, daemon=True)
        self._thread.start()
        self.port: int = self._server.server_port

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class MetricsServer:
    """The /metrics HTTP endpoint of one daemon (prometheus-client's WSGI app), and with
    ``health`` its ``/healthz`` and ``/readyz`` probes, on a :class:`BoundedHttpServer`."""

    def __init__(self, host: str, port_spec: str, registry: CollectorRegistry,
                 health: HealthChecks | None = None) -> None:
        app: _WSGIApp = make_wsgi_app(registry)
        if health is not None:
            app = _with_health(app, health)
        self._http = BoundedHttpServer(host, port_spec, app, name="metrics-http",
                                       what="metrics endpoint",
                                       port_key="metrics.reporter.prom.port")
        self.port = self._http.port
        self.url = f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._http.stop()


class CallbackCollector(Collector):
    """A collector whose metric families come from a function called at scrape time."""

    def __init__(self, produce: Callable[[], Iterable[Any]]) -> None:
        self._produce = produce
        self._lock = threading.Lock()

    def collect(self) -> Iterable[Any]:
        with self._lock:
            return list(self._produce())


def gauge(name: str, doc: str, labels: list[str] | None = None) -> Gauge:
    return Gauge(f"weir_{name}", doc, labels=labels)
