"""Durations for the user API, with PyFlink's spellings: ``Time.seconds(10)`` and
``Duration.of_seconds(5)``. Both are milliseconds underneath.

Example:
    >>> Time.seconds(10).to_milliseconds()
    10000
    >>> Duration.of_minutes(1).to_milliseconds()
    60000
"""

from __future__ import annotations

import datetime


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


class Instant:
    """A point in time: seconds and nanoseconds since the epoch (PyFlink's ``Instant``).
    Records of ``Types.INSTANT()`` are UTC ``datetime`` values; :meth:`to_datetime` gives
    one.

    Example:
        >>> Instant.of_epoch_milli(1_500).to_epoch_milli(), Instant(1, 500_000_000)
        (1500, Instant<1, 500000000>)
    """

    __slots__ = ("nanos", "seconds")

    def __init__(self, seconds: int, nanos: int) -> None:
        extra, self.nanos = divmod(int(nanos), 1_000_000_000)
        self.seconds = int(seconds) + extra

    @staticmethod
    def of_epoch_milli(epoch_milli: int) -> Instant:
        seconds, millis = divmod(int(epoch_milli), 1000)
        return Instant(seconds, millis * 1_000_000)

    def to_epoch_milli(self) -> int:
        return self.seconds * 1000 + self.nanos // 1_000_000

    def to_datetime(self) -> datetime.datetime:
        """This instant as a UTC datetime (microsecond precision)."""
        return datetime.datetime.fromtimestamp(0, datetime.UTC) + datetime.timedelta(
            seconds=self.seconds, microseconds=self.nanos // 1000)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Instant) and (self.seconds, self.nanos) == (
            other.seconds, other.nanos)

    def __hash__(self) -> int:
        return hash((self.seconds, self.nanos))

    def __repr__(self) -> str:
        return f"Instant<{self.seconds}, {self.nanos}>"
