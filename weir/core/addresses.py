"""Bind addresses and advertised addresses of the daemons.

A daemon binds one address (``0.0.0.0``, or one interface of its host) and is reached by
its peers at another (a host name, a pod IP, a Service name). Binding a wildcard and
advertising it would hand every peer ``0.0.0.0:PORT``, which none can reach; the functions
here choose what a daemon advertises instead. They do no I/O unless they say so: the I/O
(a UDP ``connect``, a host name lookup) is passed in, so the choice is tested without a
network.

Example:
    >>> taskexecutor_hosts(None, None, local_address=lambda: "10.0.0.7")
    HostChoice(bind='127.0.0.1', advertised='127.0.0.1', reason='the default')
    >>> choice = taskexecutor_hosts(None, "0.0.0.0", local_address=lambda: "10.0.0.7")
    >>> choice.bind, choice.advertised
    ('0.0.0.0', '10.0.0.7')
    >>> join_host_port("::1", 6123)
    '[::1]:6123'
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass

#: Addresses that mean "every interface": bound, never advertised.
WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", "*", ""})
#: Where a daemon binds when nothing is configured: loopback, reachable by this host only.
DEFAULT_BIND_HOST = "127.0.0.1"


def is_wildcard(host: str) -> bool:
    """True for an address that binds every interface (and so names none).

    Example:
        >>> is_wildcard("0.0.0.0"), is_wildcard("::"), is_wildcard("10.0.0.1")
        (True, True, False)
    """
    return host.strip() in WILDCARDS


def host_problem(value: str) -> str | None:
    """Validator of the host options: a host name or an IP address, without a port or a
    scheme. Returns what is wrong, or None.

    Example:
        >>> host_problem("10.0.0.1") is None, host_problem("::1") is None
        (True, True)
        >>> host_problem("10.0.0.1:6123")
        'a host name or IP address without a port'
    """
    text = value.strip()
    if not text or "/" in text or any(c.isspace() for c in text):
        return "a host name or IP address without a port"
    if ":" in text:
        try:
            ipaddress.IPv6Address(text.strip("[]"))
        except ValueError:
            return "a host name or IP address without a port"
    return None


def join_host_port(host: str, port: int) -> str:
    """``HOST:PORT``, with an IPv6 address in brackets (as gRPC and URLs want it).

    Example:
        >>> join_host_port("10.0.0.1", 80), join_host_port("[::1]", 80)
        ('10.0.0.1:80', '[::1]:80')
    """
    bare = host.strip("[]")
    return f"[{bare}]:{port}" if ":" in bare else f"{host}:{port}"


def split_host_port(address: str) -> tuple[str, int]:
    """The host (IPv6 without brackets) and port of ``HOST:PORT``; raises ValueError.

    Example:
        >>> split_host_port("[::1]:6123"), split_host_port("jm.example:6123")
        (('::1', 6123), ('jm.example', 6123))
    """
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        msg = f"{address!r} is not HOST:PORT"
        raise ValueError(msg)
    return host.strip("[]"), int(port)


def local_address_toward(address: str) -> str:
    """The local address of the interface this host uses to reach ``address``
    (``HOST:PORT``): a UDP ``connect`` picks the route and sends no packet (Flink's "ip"
    bind policy). Raises OSError (the host does not resolve, no route) and ValueError (not
    HOST:PORT)."""
    host, port = split_host_port(address)
    family, kind, proto, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.connect(target)
        local: str = probe.getsockname()[0]
    return local


@dataclass(frozen=True)
class HostChoice:
    """What a daemon binds and what it advertises, and why it advertises that (for its
    start-up log)."""

    bind: str
    advertised: str
    reason: str


def taskexecutor_hosts(host: str | None, bind_host: str | None,
                       local_address: Callable[[], str]) -> HostChoice:
    """A TaskExecutor's bind and advertised host, from ``taskmanager.host`` (``host``) and
    ``taskmanager.bind-host`` (``bind_host``), either None when unset.

    ``taskmanager.host`` is advertised when set, and bound too unless a bind host is set.
    Otherwise the bind host (default loopback) is advertised, unless it is a wildcard: then
    ``local_address()`` (see :func:`local_address_toward`) is, never the wildcard.

    Example:
        >>> taskexecutor_hosts("tm-1.example", None, lambda: "10.0.0.7")
        HostChoice(bind='tm-1.example', advertised='tm-1.example', reason='taskmanager.host')
        >>> taskexecutor_hosts("127.0.0.2", "0.0.0.0", lambda: "10.0.0.7").advertised
        '127.0.0.2'
        >>> taskexecutor_hosts(None, "10.0.0.8", lambda: "10.0.0.7").advertised
        '10.0.0.8'
    """
    if host:
        return HostChoice(bind_host or host, host, "taskmanager.host")
    if bind_host is None:
        return HostChoice(DEFAULT_BIND_HOST, DEFAULT_BIND_HOST, "the default")
    if is_wildcard(bind_host):
        return HostChoice(bind_host, local_address(), "the interface that reaches the JobMaster")
    return HostChoice(bind_host, bind_host, "taskmanager.bind-host")


def jobmaster_host(rpc_address: str | None, bind_host: str,
                   host_name: Callable[[], str]) -> HostChoice:
    """The JobMaster's bind and advertised host, from ``jobmaster.rpc.address``
    (``rpc_address``, None when unset) and ``jobmaster.rpc.bind-host``: the rpc address
    when set, else the bind host, else (a wildcard) ``host_name()`` (``socket.getfqdn``).

    Example:
        >>> jobmaster_host(None, "0.0.0.0", lambda: "jm-0.example").advertised
        'jm-0.example'
        >>> jobmaster_host("jobmaster.weir.svc", "0.0.0.0", lambda: "jm-0").advertised
        'jobmaster.weir.svc'
    """
    if rpc_address:
        return HostChoice(bind_host, rpc_address, "jobmaster.rpc.address")
    if is_wildcard(bind_host):
        return HostChoice(bind_host, host_name(), "the host name")
    return HostChoice(bind_host, bind_host, "jobmaster.rpc.bind-host")


def metrics_host(metrics_bind: str, daemon: HostChoice) -> str:
    """The host of the metrics URL a daemon reports, whose endpoint binds ``metrics_bind``
    (``metrics.reporter.prom.host``): the daemon's advertised host when the endpoint binds
    every interface or the daemon's own bind address, else the address it binds.

    Example:
        >>> choice = HostChoice("0.0.0.0", "10.0.0.7", "taskmanager.host")
        >>> metrics_host("0.0.0.0", choice), metrics_host("127.0.0.1", choice)
        ('10.0.0.7', '127.0.0.1')
    """
    if is_wildcard(metrics_bind) or metrics_bind == daemon.bind:
        return daemon.advertised
    return metrics_bind


def metrics_url(host: str, port: int) -> str:
    """The URL of a /metrics endpoint at ``host:port``.

    Example:
        >>> metrics_url("::1", 9249)
        'http://[::1]:9249/metrics'
    """
    return f"http://{join_host_port(host, port)}/metrics"


def bind_target(host: str) -> str:
    """What to hand ``socket.create_server`` and gRPC for ``host``: a wildcard spelled
    ``*`` or ``[::]`` as the sockets API spells it.

    Example:
        >>> bind_target("*"), bind_target("[::]"), bind_target("10.0.0.1")
        ('0.0.0.0', '::', '10.0.0.1')
    """
    text = host.strip()
    if text in ("*", ""):
        return "0.0.0.0"
    return text.strip("[]")
