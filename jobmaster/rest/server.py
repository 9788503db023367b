"""The JobMaster's one HTTP front door: the REST API under Flink's paths (``handlers``),
on the bounded HTTP server the metrics endpoint uses, with the cluster's token and TLS.

Authentication mirrors the gRPC server's: with ``security.auth.token`` set a request needs
``Authorization: Bearer <token>``; with TLS on (``security.ssl.*``) it is served over HTTPS
with the cluster's certificate, and a client certificate that chains to the cluster's
trust store is accepted instead of the token (with TLS and no token, it is required).
A refused request gets 401 and Flink's error body, never data.

The web dashboard's static files are served without authentication (they hold no data;
the page sends the token with each API request): ``/`` is its page and ``/static/...`` its
scripts, styles and vendored libraries, read from the installed package. Other paths the
router does not know are 404 with a JSON body.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.resources
import json
import logging
import ssl
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

from weir.core.addresses import is_wildcard, join_host_port
from weir.core.metrics import BoundedHttpServer
from weir.core.tls import TlsFiles
from weir.jobmaster.rest.handlers import Handler, Request, RestError, error_status
from weir.jobmaster.rest.router import Router

log = logging.getLogger(__name__)

#: Flink's one API version: ``/v1/jobs`` is ``/jobs``.
API_VERSION = "/v1"
#: Largest request body read (savepoint and stop requests are a few fields).
MAX_BODY_BYTES = 64 * 1024
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def rest_bind_host(configured: str | None, token: str | None, rpc_bind_host: str) -> str:
    """What the REST server binds: ``rest.bind-address`` when set, else 127.0.0.1 without
    a token (the API must not be open to the network unprotected), else the JobMaster's
    gRPC bind host.

    Example:
        >>> rest_bind_host(None, None, "0.0.0.0"), rest_bind_host(None, "t", "0.0.0.0")
        ('127.0.0.1', '0.0.0.0')
        >>> rest_bind_host("10.0.0.2", None, "0.0.0.0")
        '10.0.0.2'
    """
    if configured:
        return configured
    return "127.0.0.1" if token is None else rpc_bind_host


def rest_url(advertised: str | None, bind: str, jobmaster_host: str, port: int,
             tls: bool) -> str:
    """The URL the JobMaster reports: ``rest.address`` when set, else the bind address,
    else (a wildcard) the JobMaster's advertised host.

    Example:
        >>> rest_url(None, "0.0.0.0", "jm-0", 8081, False)
        'http://jm-0:8081'
        >>> rest_url(None, "127.0.0.1", "jm-0", 8081, True)
        'https://127.0.0.1:8081'
    """
    host = advertised or (jobmaster_host if is_wildcard(bind) else bind)
    return f"{'https' if tls else 'http'}://{join_host_port(host, port)}"


def _json(status: int, body: Any) -> tuple[str, list[tuple[str, str]], bytes]:
    data = json.dumps(body).encode()
    return (f"{status} {HTTPStatus(status).phrase}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
             ("Cache-Control", "no-store")], data)


def _error(status: int, message: str) -> tuple[str, list[tuple[str, str]], bytes]:
    return _json(status, {"errors": [message]})


Answer = tuple[str, list[tuple[str, str]], bytes]

#: Where the dashboard's files are served from (no API path starts with it).
STATIC_PREFIX = "/static/"
#: Content types by file suffix; other suffixes are not served.
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
                 ".json": "application/json", ".txt": "text/plain; charset=utf-8"}
#: The vendored libraries change only with a release of weir: browsers may keep them a day.
#: The dashboard's own files are revalidated on every load (by ETag, so a 304 is cheap).
VENDOR_CACHE = "public, max-age=86400"
OWN_CACHE = "no-cache"
_SAFE_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def static_name(path: str) -> str | None:
    """The file below ``web/static`` that a request path names: ``/`` is ``index.html``,
    ``/static/a/b.js`` is ``a/b.js``; None for any other path, and for one that could leave
    the folder or name a hidden file (segments of letters, digits, ``.``, ``_``, ``-``
    only, none starting with a dot).

    Example:
        >>> static_name("/"), static_name("/static/js/app.js")
        ('index.html', 'js/app.js')
        >>> static_name("/static/../rest/server.py"), static_name("/static/.env")
        (None, None)
        >>> static_name("/jobs"), static_name("/static/a//b"), static_name("/static/a%2fb")
        (None, None, None)
    """
    if path in ("/", "/index.html"):
        return "index.html"
    if not path.startswith(STATIC_PREFIX):
        return None
    parts = path[len(STATIC_PREFIX):].split("/")
    for part in parts:
        if not part or part.startswith(".") or not _SAFE_NAME.issuperset(part):
            return None
    return "/".join(parts)


class StaticFiles:
    """The dashboard's files from the installed package (``weir.jobmaster.rest``'s
    ``web/static``). Read on each request (they are small, and a browser revalidates its
    copy by ETag, answered 304)."""

    def __init__(self) -> None:
        self._root = importlib.resources.files("weir.jobmaster.rest").joinpath("web", "static")

    def answer(self, name: str, environ: dict[str, Any]) -> Answer:
        """The file ``name`` (from :func:`static_name`): 200 with its content type and
        caching headers, 304 when the client's ``If-None-Match`` is its ETag, 404 (JSON)
        when there is no such file or its type is not served."""
        suffix = name[name.rfind("."):] if "." in name else ""
        content_type = CONTENT_TYPES.get(suffix.lower())
        resource = self._root.joinpath(*name.split("/"))
        if content_type is None or not resource.is_file():
            return _error(404, f"not found: {environ.get('PATH_INFO', '/')}")
        data = resource.read_bytes()
        etag = f'"{hashlib.sha256(data).hexdigest()[:32]}"'
        cache = VENDOR_CACHE if name.startswith("vendor/") else OWN_CACHE
        headers = [("Cache-Control", cache), ("ETag", etag),
                   ("X-Content-Type-Options", "nosniff")]
        if etag in environ.get("HTTP_IF_NONE_MATCH", ""):
            return f"304 {HTTPStatus.NOT_MODIFIED.phrase}", headers, b""
        return (f"200 {HTTPStatus.OK.phrase}",
                [("Content-Type", content_type), ("Content-Length", str(len(data))), *headers],
                data)


class RestApp:
    """The WSGI application: authentication, routing, JSON in and out. Every failure is a
    JSON answer (a bug is logged with its traceback and answered 500 without it)."""

    def __init__(self, router: Router[Handler], token: str | None, tls: bool) -> None:
        self._router = router
        self._token = token.encode() if token else None
        self._tls = tls
        self._static = StaticFiles()

    def _authorised(self, environ: dict[str, Any]) -> bool:
        if self._tls and environ.get("weir.client_cert"):
            return True
        if self._token is None:
            return not self._tls  # TLS without a token: a client certificate is required
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                                  self._token)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, headers, body = self.answer(environ)
        start_response(status, headers)
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

    def answer(self, environ: dict[str, Any]) -> Answer:
        """The status line, headers and body for one request."""
        method = environ.get("REQUEST_METHOD", "GET").upper()
        path = environ.get("PATH_INFO", "/")
        if method in ("GET", "HEAD") and (path in ("/", "/index.html") or
                                          path.startswith(STATIC_PREFIX)):
            # The dashboard's files hold no data: no token needed.
            name = static_name(path)
            if name is None:
                return _error(404, f"not found: {path}")
            return self._static.answer(name, environ)
        if not self._authorised(environ):
            status, headers, body = _error(
                401, "authentication required: send 'Authorization: Bearer <token>' with "
                     "the cluster's security.auth.token" +
                     (" or a client certificate of the cluster" if self._tls else ""))
            return status, [*headers, ("WWW-Authenticate", "Bearer")], body
        if path == API_VERSION or path.startswith(API_VERSION + "/"):
            path = path[len(API_VERSION):] or "/"  # Flink's versioned paths, /v1/jobs
        match = self._router.match("GET" if method == "HEAD" else method, path)
        if match is None:
            return _error(404, f"not found: {path}")
        if match.handler is None:
            status, headers, body = _error(405, f"{method} is not allowed on {path}")
            return status, [*headers, ("Allow", ", ".join(match.allowed))], body
        try:
            request = Request(match.params, dict(parse_qsl(environ.get("QUERY_STRING", ""))),
                              _read_body(environ))
            code, result = match.handler(request)
            return _json(code, result)
        except Exception as err:
            code = error_status(err)
            if code == 500:
                log.exception("REST %s %s failed", method, path)
                return _error(500, f"internal error ({type(err).__name__}); this is a bug "
                                   "in weir, see the JobMaster log")
            if isinstance(err, TimeoutError):
                return _error(code, "the JobMaster is busy and did not answer in time; "
                                    "try again")
            return _error(code, str(err))


def _read_body(environ: dict[str, Any]) -> dict[str, Any]:
    text = environ.get("CONTENT_LENGTH") or "0"
    try:
        length = int(text)
    except ValueError:
        raise RestError(400, f"bad Content-Length {text!r}") from None
    if length == 0:
        return {}
    if length > MAX_BODY_BYTES:
        raise RestError(413, f"request body of {length} bytes is over {MAX_BODY_BYTES}")
    data = environ["wsgi.input"].read(length)
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise RestError(400, f"the request body is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise RestError(400, "the request body must be a JSON object")
    return body


class RestServer:
    """The REST API of one JobMaster on ``host:port`` (port 0: a free one) until
    ``stop``; HTTPS when ``tls`` is given."""

    def __init__(self, host: str, port: int, router: Router[Handler], token: str | None,
                 tls: TlsFiles | None) -> None:
        context = None
        if tls is not None:
            context = tls.server_context()
            # A client certificate is optional: a token is the other way in.

            context.verify_mode = ssl.CERT_OPTIONAL
        self.app = RestApp(router, token, tls is not None)
        self._http = BoundedHttpServer(host, str(port), self.app, name="rest-http",
                                       what="REST API", port_key="rest.port", tls=context)
        self.port = self._http.port

    def stop(self) -> None:
        self._http.stop()
