"""Asking a daemon's health probes (``/healthz``, ``/readyz``) over HTTP, as a kubelet
does."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

from weir.testing.cluster import poll


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def probe(metrics_url: str, path: str) -> tuple[int, dict[str, Any]]:
    """GET ``path`` (/healthz, /readyz) beside ``metrics_url``; (status, JSON body)."""
    url = metrics_url.rsplit("/", 1)[0] + path
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_probe(metrics_url: str, path: str, status: int, timeout: float = 20,
               reason_ends: str = "") -> dict[str, Any]:
    """Poll ``path`` until it answers ``status`` (with a reason ending in ``reason_ends``,
    when given); returns the body."""
    def answered() -> dict[str, Any] | None:
        code, body = probe(metrics_url, path)
        if code == status and str(body.get("reason", "")).endswith(reason_ends):
            return body
        return None

    return poll(answered, timeout, interval=0.05,
                what=f"{path} to answer {status} {reason_ends}".rstrip())
