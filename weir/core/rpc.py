"""gRPC plumbing shared by every process: channels, servers, the auth token, errors.

Example:
    >>> from weir.core.rpc import auth_metadata
    >>> auth_metadata("s3cret")
    (('authorization', 'Bearer s3cret'),)
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from weir.core.errors import (
    AuthenticationError,
    ClusterUnreachableError,
    InvalidJobError,
    JobNotFoundError,
    UserError,
)

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Notice a dead peer on an idle channel within seconds, not hours.
    ("grpc.keepalive_time_ms", 5000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
_SERVER_OPTIONS = [
    *_OPTIONS,
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),
    ("grpc.so_reuseport", 0),
]


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying ``token`` (empty without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


class _ClientAuth(grpc.UnaryUnaryClientInterceptor, grpc.StreamStreamClientInterceptor,
                  grpc.UnaryStreamClientInterceptor, grpc.StreamUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self._metadata = auth_metadata(token)

    def _details(self, details: Any) -> Any:
        metadata = list(details.metadata or []) + list(self._metadata)
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, it: Any) -> Any:
        return continuation(self._details(details), it)

    def intercept_stream_stream(self, continuation: Any, details: Any, it: Any) -> Any:
        return continuation(self._details(details), it)


def create_channel(address: str, token: str | None = None) -> grpc.Channel:
    """An insecure channel to ``address`` that adds the auth token to every call."""
    channel = grpc.insecure_channel(address, options=_OPTIONS)
    if token:
        channel = grpc.intercept_channel(channel, _ClientAuth(token))
    return channel


class _ServerAuth(grpc.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "missing or wrong security.auth.token: give the client the "
                          "cluster's token in WEIR_SECURITY_AUTH_TOKEN or in a file named "
                          "by security.auth.token-file (chmod 600)")

        self._deny_unary = grpc.unary_unary_rpc_method_handler(deny)
        self._deny_stream = grpc.stream_stream_rpc_method_handler(deny)

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        for key, value in details.invocation_metadata or ():
            if key == "authorization" and hmac.compare_digest(value.encode(), self._expected):
                return continuation(details)
        handler = continuation(details)
        if handler is not None and handler.request_streaming:
            return self._deny_stream
        return self._deny_unary


def create_server(bind_host: str, port: int, token: str | None,
                  register: Callable[[grpc.Server], None],
                  max_workers: int = 32,
                  executor: futures.ThreadPoolExecutor | None = None) -> tuple[grpc.Server, int]:
    """Start a gRPC server; returns it and the bound port (useful with ``port=0``).

    Pass ``executor`` to own the handler threads (e.g. to join them on shutdown).
    """
    interceptors = [_ServerAuth(token)] if token else []
    pool = executor or futures.ThreadPoolExecutor(max_workers=max_workers,
                                                  thread_name_prefix="grpc")
    server = grpc.server(pool, interceptors=interceptors, options=_SERVER_OPTIONS)
    register(server)
    try:
        bound = server.add_insecure_port(f"{bind_host}:{port}")
    except RuntimeError:
        bound = 0
    if bound == 0:
        if executor is None:
            pool.shutdown(wait=False)
        msg = (f"cannot listen on {bind_host}:{port} (port in use or address not local): "
               "choose another port, or 0 for a free one")
        raise UserError(msg)
    server.start()
    return server, bound


def translate_rpc_error(err: grpc.RpcError, address: str) -> Exception:
    """The user-facing error for a failed client call to the JobMaster at ``address``."""
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ClusterUnreachableError(
            f"cannot reach the JobMaster at {address} ({code.name.lower()}): start a cluster "
            "with `weir cluster start`, or pass --jobmaster HOST:PORT / --dir DIR")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return AuthenticationError(f"the JobMaster at {address} refused the call: {details}")
    if code == grpc.StatusCode.NOT_FOUND:
        return JobNotFoundError(details or "not found")
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
        return InvalidJobError(details or "invalid request")
    return UserError(f"the JobMaster at {address} failed the call ({code}): {details}")


_in_flight: set[Any] = set()
_in_flight_lock = threading.Lock()


def keep_until_done(future: Any, on_done: Callable[[Any], None] | None = None) -> None:
    """Hold a reference to an asynchronous call until it completes.

    gRPC cancels a call whose future is garbage collected, so a fire-and-forget call must
    be kept alive somewhere; ``on_done(future)`` runs on a gRPC thread when it completes.
    """
    with _in_flight_lock:
        _in_flight.add(future)

    def done(f: Any) -> None:
        with _in_flight_lock:
            _in_flight.discard(f)
        if on_done is not None:
            on_done(f)

    future.add_done_callback(done)
