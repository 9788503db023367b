"""Durations for the user API, with PyFlink's spellings: ``Time.seconds(10)`` and
``Duration.of_seconds(5)``. Both are milliseconds underneath.

Example:
    >>> Time.seconds(10).to_milliseconds()
    10000
    >>> Duration.of_minutes(1).to_milliseconds()
    60000
"""

from __future__ import annotations


class Time:
    """A span of time in milliseconds (``Time.seconds(10)``, ``Time.milliseconds(500)``)."""

    __slots__ = ("_ms",)

    def __init__(self, milliseconds: int) -> None:
        if milliseconds < 0:
            msg = f"a time span cannot be negative, got {milliseconds} ms"
            raise ValueError(msg)
        self._ms = int(milliseconds)

    def to_milliseconds(self) -> int:
        return self._ms

    @classmethod
    def milliseconds(cls, n: float) -> Time:
        return cls(int(n))

    @classmethod
    def seconds(cls, n: float) -> Time:
        return cls(int(n * 1000))

    @classmethod
    def minutes(cls, n: float) -> Time:
        return cls(int(n * 60_000))

    @classmethod
    def hours(cls, n: float) -> Time:
        return cls(int(n * 3_600_000))

    @classmethod
    def days(cls, n: float) -> Time:
        return cls(int(n * 86_400_000))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Time) and other._ms == self._ms

    def __hash__(self) -> int:
        return hash(self._ms)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._ms} ms)"


class Duration(Time):
    """``Duration.of_seconds(5)`` and friends (PyFlink's ``Duration``)."""

    __slots__ = ()

    @classmethod
    def of_millis(cls, n: float) -> Duration:
        return cls(int(n))

    @classmethod
    def of_seconds(cls, n: float) -> Duration:
        return cls(int(n * 1000))

    @classmethod
    def of_minutes(cls, n: float) -> Duration:
        return cls(int(n * 60_000))

    @classmethod
    def of_hours(cls, n: float) -> Duration:
        return cls(int(n * 3_600_000))

    @classmethod
    def of_days(cls, n: float) -> Duration:
        return cls(int(n * 86_400_000))


def to_millis(span: object) -> int:
    """Milliseconds of a Time/Duration, a ``timedelta`` or a plain number of milliseconds."""
    if isinstance(span, Time):
        return span.to_milliseconds()
    total_seconds = getattr(span, "total_seconds", None)
    if callable(total_seconds):
        return int(total_seconds() * 1000)
    if isinstance(span, int | float):
        return int(span)
    msg = f"expected a Time, Duration, timedelta or milliseconds, got {span!r}"
    raise TypeError(msg)
