"""Vectorised window aggregations: ``key_by("user").window(...).sum("amount")``.

For tumbling and sliding windows (event or processing time) keyed by a column, a batch is
aggregated without a Python call per record: numpy computes every row's window start(s)
and drops rows too late for their window, pyarrow groups the rows by (key, window) and
aggregates each group. Python then runs once per *group*, folding the group's partial result
into the keyed state of its window; each window's keys are read and written in one batch
each (one RocksDB multi-get and write batch) and get their timers in one batch. Firing emits
one Arrow batch of Rows ``(key column, window_start, window_end, <field or "count">)``.

Example:
    >>> import numpy as np
    >>> rows, starts = window_starts(np.array([12_500, 3_000]), 10_000, 5_000, 0)
    >>> rows.tolist(), starts.tolist()
    ([0, 0, 1, 1], [10000, 5000, 0, -5000])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from weir.core.errors import UserError
from weir.core.records import MAX_WATERMARK, Elements
from weir.datastream.window.assigners import WindowAssigner, _Sliding, _Tumbling
from weir.operators.base import KeyedOperator
from weir.state.backend import MISSING
from weir.state.descriptors import ValueStateDescriptor
from weir.state.key_groups import key_groups_of_array
from weir.state.timers import Timer

#: The keyed state holding each (key, window)'s aggregate; the namespace is the window start.
_STATE = "_window/aggregate"
_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "sum": lambda a, b: a + b, "count": lambda a, b: a + b, "min": min, "max": max}


def window_starts(timestamps: np.ndarray, size: int, slide: int,
                  offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(row index, window start) of every window each timestamp falls in, vectorised.

    A timestamp belongs to the windows starting at its last slide boundary and at every
    earlier boundary still less than ``size`` before it.
    """
    last = timestamps - (timestamps - offset) % slide
    per_row = -(-size // slide)  # ceil: the most windows one timestamp can fall in
    starts = last[:, None] - np.arange(per_row, dtype=np.int64)[None, :] * slide
    valid = starts > (timestamps - size)[:, None]
    rows = np.broadcast_to(np.arange(len(timestamps))[:, None], starts.shape)
    return rows[valid], starts[valid]


class VectorizedWindowAggregateOperator(KeyedOperator):
    """count/sum/min/max per key and window over Arrow batches (see the module docstring)."""

    def __init__(self, name: str, key_column: str, assigner: WindowAssigner, kind: str,
                 field: str | None, allowed_lateness_ms: int = 0) -> None:
        super().__init__(name)
        if kind not in _COMBINE:
            msg = f"unknown aggregation {kind!r}"
            raise ValueError(msg)
        if isinstance(assigner, _Sliding):
            self.size, self.slide = assigner.size, assigner.slide
        elif isinstance(assigner, _Tumbling):
            self.size = self.slide = assigner.size
        else:
            msg = "vectorised window aggregations need tumbling or sliding windows"
            raise ValueError(msg)
        self.offset = assigner.offset
        self.key_column = key_column
        self.assigner = assigner
        self.kind = kind
        self.field = field
        self.allowed_lateness_ms = allowed_lateness_ms if assigner.is_event_time() else 0

    def open(self) -> None:
        self._state = self.open_keyed().get_state(ValueStateDescriptor(_STATE))
        self._timers = self.open_timers("window")
        self._event_time = self.assigner.is_event_time()
        self.fire_processing_time_at_end = not self._event_time
        self._combine = _COMBINE[self.kind]
        self._out_name = "count" if self.kind == "count" else str(self.field)
        self._pending: list[tuple[Any, int, Any]] = []
        self.num_late_records_dropped = 0

    def _cleanup_times(self, max_timestamps: np.ndarray) -> np.ndarray:
        """:meth:`_cleanup_time` of each window end, vectorised."""
        # Saturate instead of overflowing int64 (a window near the end of time).
        lateness = self.allowed_lateness_ms
        cleanup: np.ndarray = np.minimum(max_timestamps, MAX_WATERMARK - lateness) + lateness
        return cleanup  # (numpy's ufuncs are typed to return Any)

    def _cleanup_time(self, max_timestamp: int) -> int:
        """When a window ending at ``max_timestamp`` is dropped (at most MAX_WATERMARK)."""
        lateness = self.allowed_lateness_ms
        return min(max_timestamp, MAX_WATERMARK - lateness) + lateness

    def process(self, elements: Elements, input_index: int = 0) -> None:
        assert self.ctx is not None
        n = len(elements)
        if n == 0:
            return
        batch = elements.arrow()
        if self._event_time:
            if elements.timestamps is None:
                msg = (f"'{self.name}' uses event-time windows, but the records have no "
                       "timestamps: call assign_timestamps_and_watermarks(...) upstream")
                raise UserError(msg)
            timestamps = elements.timestamps
        else:
            timestamps = np.full(n, self._timers.current_processing_time(), dtype=np.int64)
        rows, starts = window_starts(timestamps, self.size, self.slide, self.offset)
        if self._event_time:
            on_time = self._cleanup_times(starts + self.size - 1) > self._timers.current_watermark
            if not on_time.all():
                # A record is dropped when none of its windows is still open (Flink's count).
                self.num_late_records_dropped += len(np.unique(rows)) - \
                    len(np.unique(rows[on_time]))
                rows, starts = rows[on_time], starts[on_time]
            if not len(rows):
                return
        try:
            keys = batch.column(self.key_column)
            values = None if self.kind == "count" else batch.column(self.field)
        except KeyError as err:
            msg = (f"'{self.name}': no column {err} in the stream "
                   f"(columns: {', '.join(batch.schema.names)})")
            raise UserError(msg) from None
        groups = key_groups_of_array(keys, self.ctx.max_parallelism)
        take = pa.array(rows)
        table = pa.table({"k": keys.take(take), "s": starts, "g": groups[rows],
                          "v": pa.array(np.zeros(len(rows), np.int8)) if values is None
                          else values.take(take)})
        spec: list[tuple[str, str] | tuple[str, str, pc.CountOptions]]
        if self.kind == "count":
            spec = [("v", "count", pc.CountOptions(mode="all"))]
        else:
            spec = [("v", self.kind)]
        grouped = table.group_by(["k", "s", "g"], use_threads=False).aggregate(spec)
        self._fold(grouped.column("k").to_pylist(), grouped.column("s").to_pylist(),
                   grouped.column("g").to_pylist(), grouped.column(f"v_{spec[0][1]}").to_pylist())
        self._flush()

    def _fold(self, keys: list[Any], starts: list[int], groups: list[int],
              partials: list[Any]) -> None:
        """Fold one partial aggregate per (key, window) into state: per window, one batched
        read and one batched write of its keys, and one batched timer registration."""
        assert self.backend is not None
        by_window: dict[int, list[int]] = {}
        for i, (start, partial) in enumerate(zip(starts, partials, strict=True)):
            if partial is not None:  # a group of only nulls adds nothing
                by_window.setdefault(start, []).append(i)
        backend, timers, combine = self.backend, self._timers, self._combine
        watermark = timers.current_watermark
        for start, rows in by_window.items():
            window_keys = [keys[i] for i in rows]
            window_groups = [groups[i] for i in rows]
            stored = backend.get_many(_STATE, window_groups, window_keys, start)
            values = [partials[i] if old is MISSING else combine(old, partials[i])
                      for i, old in zip(rows, stored, strict=True)]
            backend.put_many(_STATE, window_groups, window_keys, start, values)
            max_timestamp = start + self.size - 1
            if not self._event_time:
                timers.register_processing_time_timers(window_keys, window_groups, start,
                                                       max_timestamp)
                continue
            if max_timestamp <= watermark:  # late, within the allowed lateness: fire now
                self._pending.extend((k, start, v) for k, v in zip(window_keys, values,
                                                                     strict=True))
            else:
                timers.register_event_time_timers(window_keys, window_groups, start,
                                                  max_timestamp)
            cleanup = self._cleanup_time(max_timestamp)
            if cleanup != max_timestamp and cleanup < MAX_WATERMARK:
                timers.register_event_time_timers(window_keys, window_groups, start, cleanup)

    def _on_timer(self, timer: Timer) -> None:
        start = timer.namespace
        max_timestamp = start + self.size - 1
        state = self._state
        state.set_current_namespace(start)
        if timer.timestamp == max_timestamp:
            value = state.value()
            if value is not None:
                self._pending.append((timer.key, start, value))
        if timer.timestamp == self._cleanup_time(max_timestamp):
            state.clear()

    def on_event_time(self, timer: Timer) -> None:
        self._on_timer(timer)

    def on_processing_time(self, timer: Timer) -> None:
        self._on_timer(timer)

    def after_timers(self) -> None:
        self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        keys, starts, values = zip(*self._pending, strict=True)
        self._pending = []
        start_array = np.array(starts, dtype=np.int64)
        end_array = start_array + self.size
        batch = pa.record_batch({self.key_column: pa.array(keys), "window_start": start_array,
                                 "window_end": end_array, self._out_name: pa.array(values)})
        assert self.output is not None
        self.output.emit(Elements.from_arrow(batch, end_array - 1))
