"""Event time: timestamp assigners and watermark strategies (PyFlink's
``pyflink.common.watermark_strategy``). The operator that applies a strategy is
:mod:`weir.operators.event_time`.

A watermark ``w`` says that no record with timestamp ``<= w`` is expected any more. A
:class:`WatermarkStrategy` given to ``assign_timestamps_and_watermarks`` decides each
record's timestamp (its :class:`TimestampAssigner`, one Python call per record, or a column
of the batch, vectorised) and how watermarks follow the timestamps seen: bounded
out-of-orderness emits ``max timestamp - bound - 1`` every ``pipeline.auto-watermark-interval``.
With ``with_idleness``, an input that sees no records for that long is marked idle, so it
no longer holds back the watermark downstream (each task takes the minimum over its active
inputs).

Example:
    >>> from weir.common.time import Duration
    >>> class ByField(TimestampAssigner):
    ...     def extract_timestamp(self, value, record_timestamp):
    ...         return value[1]
    >>> strategy = (WatermarkStrategy
    ...             .for_bounded_out_of_orderness(Duration.of_seconds(5))
    ...             .with_timestamp_assigner(ByField())
    ...             .with_idleness(Duration.of_minutes(1)))
    >>> strategy.max_out_of_orderness_ms, strategy.idle_timeout_ms
    (5000, 60000)
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from weir.common.time import TimeSpan
from weir.core.time import to_millis
from weir.unsupported import INTERNAL, refuse, refusing

__all__ = ["TimestampAssigner", "WatermarkStrategy"]

__unsupported__ = {
    "AssignerWithPeriodicWatermarksWrapper": f"{INTERNAL}; use WatermarkStrategy",
}
__getattr__ = refusing(__name__, __unsupported__)

#: PyFlink's methods of WatermarkStrategy weir has no such thing for -> why.
_UNSUPPORTED_METHODS: dict[str, str] = {}


class TimestampAssigner(ABC):
    """Extracts the event-time timestamp (epoch milliseconds) of a record."""

    @abstractmethod
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """The record's timestamp; ``record_timestamp`` is the one it already carries
        (``weir.core.records.NO_TIMESTAMP`` if none)."""


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a stream gets timestamps and watermarks (build with the class methods)."""

    #: PyFlink's methods this class refuses, with why (read by ``weir.docgen``).
    __unsupported__ = _UNSUPPORTED_METHODS

    #: None: no watermarks at all (only the end of input advances event time).
    max_out_of_orderness_ms: int | None = 0
    timestamp_assigner: TimestampAssigner | Callable[[Any, int], int] | None = None
    #: Vectorised alternative to an assigner: a column holding the timestamps (int64
    #: epoch milliseconds or an Arrow timestamp).
    timestamp_column: str | int | None = None
    idle_timeout_ms: int | None = None

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """Timestamps never decrease: the watermark is the largest timestamp seen, minus 1."""
        return WatermarkStrategy(0)

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: TimeSpan) -> WatermarkStrategy:
        """Records arrive at most ``max_out_of_orderness`` (Duration, Time or ms) late."""
        bound = to_millis(max_out_of_orderness)
        if bound < 0:
            msg = f"max out-of-orderness must not be negative, got {bound} ms"
            raise ValueError(msg)
        return WatermarkStrategy(bound)

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        return WatermarkStrategy(None)

    def with_timestamp_assigner(self, timestamp_assigner: TimestampAssigner
                                | Callable[[Any, int], int]) -> WatermarkStrategy:
        """A :class:`TimestampAssigner` or a function ``(value, record_timestamp) -> int``."""
        if not (callable(getattr(timestamp_assigner, "extract_timestamp", None))
                or callable(timestamp_assigner)):
            msg = ("with_timestamp_assigner expects a TimestampAssigner or a function "
                   f"(value, record_timestamp) -> int, got {type(timestamp_assigner).__name__}")
            raise TypeError(msg)
        return replace(self, timestamp_assigner=timestamp_assigner, timestamp_column=None)

    def with_timestamp_column(self, column: str | int) -> WatermarkStrategy:
        """Take timestamps from a column, vectorised (no Python call per record)."""
        return replace(self, timestamp_column=column, timestamp_assigner=None)

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("_"):
            raise AttributeError(name)
        refuse(type(self).__name__, name, self.__unsupported__)

    def with_watermark_alignment(self, watermark_group: str,
                                 max_allowed_watermark_drift: TimeSpan,
                                 update_interval: TimeSpan | None = None
                                 ) -> WatermarkStrategy:
        """Accepted, with a warning, without effect: alignment only pauses sources whose
        watermarks run ahead of their group's, to bound what waits downstream; weir does
        not pause them, which changes no result."""
        warnings.warn(f"with_watermark_alignment({watermark_group!r}, ...) has no effect: "
                      f"weir does not pause sources that run ahead (results are the same; "
                      f"more may wait in windows)", UserWarning, stacklevel=2)
        return self

    def with_idleness(self, idle_timeout: TimeSpan) -> WatermarkStrategy:
        """Mark the stream idle after ``idle_timeout`` without records."""
        timeout = to_millis(idle_timeout)
        if timeout <= 0:
            msg = f"the idle timeout must be positive, got {timeout} ms"
            raise ValueError(msg)
        return replace(self, idle_timeout_ms=timeout)
