"""gRPC plumbing shared by every process: channels, servers, the auth token, errors.

Example:
    >>> from weir.core.rpc import auth_metadata
    >>> auth_metadata("s3cret")
    (('authorization', 'Bearer s3cret'),)
"""

from __future__ import annotations

import hmac
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from weir.core.addresses import bind_target, join_host_port, split_host_port
from weir.core.errors import (
    AuthenticationError,
    ClusterUnreachableError,
    InvalidJobError,
    JobNotFoundError,
    UserError,
)
from weir.core.tls import TlsFiles

if TYPE_CHECKING:
    # grpc-stubs makes the interceptors generic in the request and response messages;
    # grpc's own classes are not subscriptable. These interceptors pass any message on.
    _UnaryUnaryClientInterceptor = grpc.UnaryUnaryClientInterceptor[Any, Any]
    _StreamStreamClientInterceptor = grpc.StreamStreamClientInterceptor[Any, Any]
    _UnaryStreamClientInterceptor = grpc.UnaryStreamClientInterceptor[Any, Any]
    _StreamUnaryClientInterceptor = grpc.StreamUnaryClientInterceptor[Any, Any]
    _ServerInterceptor = grpc.ServerInterceptor[Any, Any]
else:
    _UnaryUnaryClientInterceptor = grpc.UnaryUnaryClientInterceptor
    _StreamStreamClientInterceptor = grpc.StreamStreamClientInterceptor
    _UnaryStreamClientInterceptor = grpc.UnaryStreamClientInterceptor
    _StreamUnaryClientInterceptor = grpc.StreamUnaryClientInterceptor
    _ServerInterceptor = grpc.ServerInterceptor

#: The largest message a client may send, and the most any server accepts (a submitted job's
#: pickled JobGraph, a TaskExecutor's deployment, a collect batch). Code that must fit a
#: payload into one message reads it here.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: The limit of control messages (heartbeats, state updates, queries): gRPC's own default.
SMALL_MESSAGE_BYTES = 4 * 1024 * 1024
_KEEPALIVE = [
    # Notice a dead peer on an idle channel within seconds, not hours.
    ("grpc.keepalive_time_ms", 5000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


#: Reconnect soon after a peer comes back. gRPC's default backoff grows to 120 s: a
#: TaskExecutor whose JobMaster was down for 30 s reached the restarted one 11 s late
#: (measured); capped at 1 s it reconnects within about a second.
_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def _channel_options(max_send_bytes: int) -> list[tuple[str, int]]:
    return [("grpc.max_send_message_length", max_send_bytes),
            # Responses (collect results, job details) are bounded by the server's send limit.
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            *_KEEPALIVE, *_RECONNECT]


def _server_options(max_receive_bytes: int) -> list[tuple[str, int]]:
    return [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", max_receive_bytes),
            *_KEEPALIVE,
            ("grpc.http2.min_ping_interval_without_data_ms", 1000),
            ("grpc.so_reuseport", 0)]


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying ``token`` (empty without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


class _ClientAuth(_UnaryUnaryClientInterceptor, _StreamStreamClientInterceptor,
                  _UnaryStreamClientInterceptor, _StreamUnaryClientInterceptor):
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


def create_channel(address: str, token: str | None = None,
                   max_send_bytes: int | None = None,
                   tls: TlsFiles | None = None) -> grpc.Channel:
    """A channel to ``address`` that adds the auth token to every call; with ``tls``, over
    mutual TLS (the server's certificate must chain to the truststore and name its host).

    A request larger than ``max_send_bytes`` (default :data:`MAX_MESSAGE_BYTES`) fails in
    the client with RESOURCE_EXHAUSTED before any of it is sent: pass the limit of the
    server it talks to.

    Example:
        >>> channel = create_channel("127.0.0.1:6123", "s3cret", max_send_bytes=1 << 20)
        >>> channel.close()
    """
    limit = MAX_MESSAGE_BYTES if max_send_bytes is None else max_send_bytes
    if tls is None:
        channel = grpc.insecure_channel(address, options=_channel_options(limit))
    else:
        channel = grpc.secure_channel(address, tls.grpc_channel_credentials(),
                                      options=_channel_options(limit))
    if token:
        channel = grpc.intercept_channel(channel, _ClientAuth(token))
    return channel


class _ServerAuth(_ServerInterceptor):
    """Refuses calls without the cluster's token, before reading their request.

    The refusal is a stream-request handler for every kind of method, because gRPC reads a
    unary request in full (up to the server's receive limit) before it calls a unary
    handler; a stream-request handler that never asks for a message leaves the body unread
    (measured: a 200 MiB unauthenticated request raised the JobMaster's peak RSS by under
    5 MiB, against 600 MiB with a unary refusal).
    """

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        def deny(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "missing or wrong security.auth.token: give the client the "
                          "cluster's token in WEIR_SECURITY_AUTH_TOKEN or in a file named "
                          "by security.auth.token-file (chmod 600)")

        # Serializers stay unset: nothing is parsed, and the refusal carries no message.
        self._deny = grpc.stream_stream_rpc_method_handler(deny)

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        for key, value in details.invocation_metadata or ():
            if key == "authorization" and hmac.compare_digest(value.encode(), self._expected):
                return continuation(details)
        # Unknown methods are refused alike: no hint of what exists without the token.
        return self._deny


class _Oversized:
    """What a bounded deserializer hands the handler instead of an unparsed request."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


class _MessageLimits(_ServerInterceptor):
    """Refuses a request message larger than its method's limit, before parsing it.

    gRPC has one receive limit per server; methods that only ever receive small messages
    get a tighter one here. By the time a deserializer runs the message has been received
    (within the server's limit), so this spares the parse (several times the message in
    Python objects) and answers RESOURCE_EXHAUSTED naming the method, instead of letting a
    runaway message reach the handler.
    """

    def __init__(self, limits: Mapping[str, int]) -> None:
        self._limits = dict(limits)
        self._bounded: dict[str, tuple[Any, Any]] = {}

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        limit = self._limits.get(details.method)
        if handler is None or limit is None:
            return handler
        cached = self._bounded.get(details.method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        bounded = _bounded_handler(handler, details.method, limit)
        self._bounded[details.method] = (handler, bounded)
        return bounded


def _bounded_handler(handler: Any, method: str, limit: int) -> Any:
    parse = handler.request_deserializer

    def deserialize(data: bytes) -> Any:
        if len(data) > limit:
            return _Oversized(len(data))
        return parse(data) if parse is not None else data

    def refuse(size: int, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      f"a {size}-byte message to {method} exceeds the {_mib(limit)} "
                      "that method accepts")

    kind = ("stream_" if handler.request_streaming else "unary_") + \
        ("stream" if handler.response_streaming else "unary")
    behavior = getattr(handler, kind)
    checked: Callable[[Any, grpc.ServicerContext], Any]
    if handler.request_streaming:
        def checked_messages(requests: Iterator[Any],
                             context: grpc.ServicerContext) -> Iterator[Any]:
            for request in requests:
                if isinstance(request, _Oversized):
                    refuse(request.size, context)
                yield request

        def checked_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            return behavior(checked_messages(requests, context), context)

        checked = checked_stream
    else:
        def checked_unary(request: Any, context: grpc.ServicerContext) -> Any:
            if isinstance(request, _Oversized):
                refuse(request.size, context)
            return behavior(request, context)

        checked = checked_unary

    return handler._replace(request_deserializer=deserialize, **{kind: checked})


def method_limits(service: ServiceDescriptor, default: int,
                  **overrides: int | None) -> dict[str, int]:
    """Request size limits for every method of ``service``, for :func:`create_server`.

    Every method gets ``default`` but those named (by their short name) in ``overrides``;
    an override of None leaves that method bounded by the server's receive limit alone. A
    name the service does not have raises ValueError, so a renamed RPC is noticed.

    Example:
        >>> from weir.proto import taskexecutor_pb2
        >>> service = taskexecutor_pb2.DESCRIPTOR.services_by_name["TaskExecutorService"]
        >>> limits = method_limits(service, 1024, SubmitTask=None, CancelTask=64)
        >>> limits["/weir.TaskExecutorService/CancelTask"]
        64
        >>> limits["/weir.TaskExecutorService/ReleaseJob"]
        1024
        >>> "/weir.TaskExecutorService/SubmitTask" in limits
        False
    """
    names = {m.name for m in service.methods}
    unknown = sorted(set(overrides) - names)
    if unknown:
        msg = f"{service.full_name} has no method {', '.join(unknown)}"
        raise ValueError(msg)
    limits = {m.name: overrides.get(m.name, default) for m in service.methods}
    return {f"/{service.full_name}/{name}": limit for name, limit in limits.items()
            if limit is not None}


def create_server(bind_host: str, port: int, token: str | None,
                  register: Callable[[grpc.Server], None],
                  max_workers: int = 32,
                  executor: futures.ThreadPoolExecutor | None = None,
                  max_receive_bytes: int | None = None,
                  limits: Mapping[str, int] | None = None,
                  tls: TlsFiles | None = None) -> tuple[grpc.Server, int]:
    """Start a gRPC server; returns it and the bound port (useful with ``port=0``). With
    ``tls``, only clients presenting a certificate from the truststore's CA get through.

    Pass ``executor`` to own the handler threads (e.g. to join them on shutdown).
    ``max_receive_bytes`` (default :data:`MAX_MESSAGE_BYTES`) is the largest request message
    gRPC reads at all; ``limits`` (full method name -> bytes, see :func:`method_limits`)
    tightens it per method. Either refusal answers RESOURCE_EXHAUSTED. With a ``token``,
    calls without it are refused before their request is read.

    Example:
        >>> server, port = create_server("127.0.0.1", 0, "s3cret", lambda s: None,
        ...                              max_receive_bytes=1 << 20)
        >>> port > 0
        True
        >>> server.stop(None).wait()
        True
    """
    receive = MAX_MESSAGE_BYTES if max_receive_bytes is None else max_receive_bytes
    interceptors: list[_ServerInterceptor] = [_ServerAuth(token)] if token else []
    if limits:
        interceptors.append(_MessageLimits(limits))
    pool = executor or futures.ThreadPoolExecutor(max_workers=max_workers,
                                                  thread_name_prefix="grpc")
    server = grpc.server(pool, interceptors=interceptors, options=_server_options(receive))
    register(server)
    target = join_host_port(bind_target(bind_host), port)
    try:
        bound = (server.add_insecure_port(target) if tls is None else
                 server.add_secure_port(target, tls.grpc_server_credentials()))
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


#: The method :func:`check_reachable` calls: no server has it, and any answer (UNIMPLEMENTED,
#: or UNAUTHENTICATED without the token) shows that a gRPC server is there.
_PROBE_METHOD = "/weir.Reachability/Probe"


def check_reachable(address: str, timeout: float, token: str | None = None,
                    tls: TlsFiles | None = None) -> str | None:
    """Whether a gRPC server answers at ``address`` (``HOST:PORT``) within ``timeout``
    seconds: None if it does, else the cause, e.g. ``"Connection refused"``.

    A TCP connection first, whose error names the cause (refused, timed out, the name does
    not resolve); then one call of a method no server has (with ``tls``, after the
    handshake, whose certificate must name the host of ``address``): any answer will do.
    Blocks the calling thread for ``timeout`` at most.

    Example:
        >>> server, port = create_server("127.0.0.1", 0, None, lambda s: None)
        >>> check_reachable(f"127.0.0.1:{port}", 5.0) is None
        True
        >>> server.stop(None).wait()
        True
        >>> check_reachable("not-an-address", 1.0)
        "'not-an-address' is not HOST:PORT"
    """
    deadline = time.monotonic() + timeout
    try:
        host, port = split_host_port(address)
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except ValueError as err:
        return str(err)
    except OSError as err:
        if isinstance(err, socket.gaierror):
            return f"the host name does not resolve ({err.strerror})"
        return err.strerror or str(err) or type(err).__name__
    channel = create_channel(address, token, max_send_bytes=SMALL_MESSAGE_BYTES, tls=tls)
    probe = channel.unary_unary(_PROBE_METHOD, request_serializer=bytes,
                                response_deserializer=bytes)
    try:
        probe(b"", timeout=max(0.1, deadline - time.monotonic()))
    except grpc.RpcError as err:
        code = err.code() if hasattr(err, "code") else None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return (f"a connection opens, but no gRPC server answers there within "
                    f"{timeout:g} s (another service on that port?)")
        if code == grpc.StatusCode.UNAVAILABLE:
            details = err.details() if hasattr(err, "details") else ""
            return (f"a connection opens, but gRPC fails there ({details}; with TLS, the "
                    "certificate must name that host)")
    finally:
        channel.close()
    return None


def translate_rpc_error(err: grpc.RpcError, address: str) -> Exception:
    """The user-facing error for a failed client call to the JobMaster at ``address``."""
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    if code == grpc.StatusCode.UNAVAILABLE and "handshake failed" in (details or "").lower():
        reason = (details or "").rsplit(": ", 2)[-2]
        return ClusterUnreachableError(
            f"TLS with the JobMaster at {address} failed ({reason}): "
            "the client needs a certificate from the cluster's CA and must trust it "
            "(security.ssl.internal.*; for a cluster started with --tls, use --dir DIR)")
    if code == grpc.StatusCode.UNAVAILABLE and "socket closed" in (details or "").lower():
        return ClusterUnreachableError(
            f"the JobMaster at {address} closed the connection: if the cluster uses TLS, "
            "the client needs security.ssl.enabled and its certificate (for a cluster "
            "started with --tls, use --dir DIR)")
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
