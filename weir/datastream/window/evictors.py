"""Evictors remove records from a window when it fires, before or after the window
function sees them (:class:`CountEvictor`, :class:`TimeEvictor`).

Example:
    >>> CountEvictor.of(2).evict_before([("a", 1), ("b", 2), ("c", 3)])
    [('b', 2), ('c', 3)]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from weir.datastream.window.windows import positive_ms

if TYPE_CHECKING:
    from weir.common.time import TimeSpan

__all__ = ["CountEvictor", "Evictor", "TimeEvictor"]


class Evictor(ABC):
    """Removes records from a window when it fires: before the window function sees them
    (``evict_before``) or after (``evict_after``). A window with an evictor keeps every
    record (with its timestamp) and applies the function when it fires, as Flink's
    evicting windows do. Both take and return ``(record, timestamp)`` pairs, oldest first."""

    def __init__(self, do_evict_after: bool = False) -> None:
        self.do_evict_after = do_evict_after

    @abstractmethod
    def _keep(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]: ...

    def evict_before(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        return records if self.do_evict_after else self._keep(records)

    def evict_after(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        return self._keep(records) if self.do_evict_after else records


class CountEvictor(Evictor):
    """Keeps the last ``max_count`` records of a window."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        super().__init__(do_evict_after)
        if max_count < 1:
            msg = f"a CountEvictor keeps at least 1 record, got {max_count}"
            raise ValueError(msg)
        self.max_count = max_count

    @classmethod
    def of(cls, max_count: int, do_evict_after: bool = False) -> CountEvictor:
        return cls(max_count, do_evict_after)

    def _keep(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        return records[-self.max_count:]


class TimeEvictor(Evictor):
    """Keeps the records of a window at most ``window_size`` older than its newest one."""

    def __init__(self, window_size: TimeSpan, do_evict_after: bool = False) -> None:
        super().__init__(do_evict_after)
        self.window_size = positive_ms(window_size, "evictor window size")

    @classmethod
    def of(cls, window_size: TimeSpan, do_evict_after: bool = False) -> TimeEvictor:
        return cls(window_size, do_evict_after)

    def _keep(self, records: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        if not records:
            return records
        newest = max(stamp for _, stamp in records)
        return [(r, stamp) for r, stamp in records if stamp >= newest - self.window_size]
