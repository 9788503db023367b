"""Paths to handlers: ``/jobs/:jobid/vertices/:vertexid`` style patterns, matched segment
by segment (no regular expressions to get wrong), pure and thread-safe once built.

Example:
    >>> router = Router()
    >>> router.add("GET", "/jobs/:jobid", "job")
    >>> router.match("GET", "/jobs/abc/")
    Match(handler='job', params={'jobid': 'abc'}, allowed=())
    >>> router.match("POST", "/jobs/abc").allowed
    ('GET',)
    >>> router.match("GET", "/nowhere") is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

H = TypeVar("H")


@dataclass(frozen=True)
class Match(Generic[H]):
    """A path that matched: its ``handler`` and the values of its ``:name`` segments, or
    (``handler`` None) the methods ``allowed`` on a path that matched for another method
    (HTTP 405)."""

    handler: H | None
    params: dict[str, str] = field(default_factory=dict)
    allowed: tuple[str, ...] = ()


def _segments(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


class Router(Generic[H]):
    """Routes, tried in the order they were added; build it before serving (``add`` is
    not synchronised with ``match``)."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, list[str], H]] = []

    def add(self, method: str, pattern: str, handler: H) -> None:
        """Route ``method`` on ``pattern`` (segments ``:name`` match any one segment)."""
        self._routes.append((method.upper(), _segments(pattern), handler))

    def patterns(self) -> list[tuple[str, str]]:
        """Every route as (method, pattern), in order (for the docs' table and tests)."""
        return [(method, "/" + "/".join(parts)) for method, parts, _ in self._routes]

    def match(self, method: str, path: str) -> Match[H] | None:
        """The route for ``method`` on ``path``; a Match without handler when only other
        methods are routed there; None when no route has this path."""
        parts = _segments(path)
        allowed: list[str] = []
        for route_method, pattern, handler in self._routes:
            params = _bind(pattern, parts)
            if params is None:
                continue
            if route_method == method.upper():
                return Match(handler, params)
            allowed.append(route_method)
        if allowed:
            return Match(None, allowed=tuple(dict.fromkeys(allowed)))
        return None


def _bind(pattern: list[str], parts: list[str]) -> dict[str, str] | None:
    if len(pattern) != len(parts):
        return None
    params: dict[str, str] = {}
    for expected, actual in zip(pattern, parts, strict=True):
        if expected.startswith(":"):
            params[expected[1:]] = actual
        elif expected != actual:
            return None
    return params
