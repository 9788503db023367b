"""``assign_timestamps_and_watermarks``: stamps records and emits watermarks periodically
(the runtime side of :mod:`weir.common.watermark_strategy`).

Timestamps come from the strategy's assigner (one call per record) or, vectorised, from a
column. Watermarks are generated on a processing-time callback every
``pipeline.auto-watermark-interval``, as Flink's periodic generators: bounded
out-of-orderness ``B`` gives ``max timestamp seen - B - 1``. Watermarks from upstream are
not forwarded — this operator is where event time starts — except the final one, sent
when an input ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from weir.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from weir.core import options
from weir.core.errors import UserError
from weir.core.processing_time import ScheduledTimer
from weir.core.records import MAX_WATERMARK, MIN_WATERMARK, NO_TIMESTAMP, Elements
from weir.operators.base import close_functions, open_functions
from weir.taskexecutor.operator import StreamOperator

log = logging.getLogger(__name__)


class TimestampsAndWatermarksOperator(StreamOperator):
    """Applies a :class:`WatermarkStrategy` (see the module docstring)."""

    def __init__(self, name: str, strategy: WatermarkStrategy) -> None:
        super().__init__(name)
        self.strategy = strategy

    def functions(self) -> list[Any]:
        assigner = self.strategy.timestamp_assigner
        return [] if assigner is None else [assigner]

    def open(self) -> None:
        assert self.ctx is not None
        assigner = self.strategy.timestamp_assigner
        self._extract: Callable[[Any, int], object] | None
        if assigner is None:
            self._extract = None
        elif isinstance(assigner, TimestampAssigner):
            self._extract = assigner.extract_timestamp
        else:  # a function, or an object with the method that is no TimestampAssigner
            self._extract = getattr(assigner, "extract_timestamp", assigner)
        self._max_timestamp = MIN_WATERMARK
        self._warned_unstamped = False
        self._emitted = MIN_WATERMARK
        self._idle = False
        self._last_record_ms = self.ctx.processing_time.current_time_ms()
        interval = self.ctx.get_configuration().get(options.AUTO_WATERMARK_INTERVAL)
        self._interval_ms = max(1, round(interval * 1000))
        self._timer: ScheduledTimer | None = None
        # An interval of 0 turns periodic watermarks (and idleness checks) off.
        periodic = interval > 0 and (self.strategy.max_out_of_orderness_ms is not None
                                     or self.strategy.idle_timeout_ms is not None)
        if periodic:
            self._schedule()
        open_functions(self)

    def close(self) -> None:
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
        close_functions(self)

    def _schedule(self) -> None:
        assert self.ctx is not None
        service = self.ctx.processing_time
        self._timer = service.register_timer(service.current_time_ms() + self._interval_ms,
                                             self._on_periodic_emit)

    def process(self, elements: Elements, input_index: int = 0) -> None:
        if not len(elements):
            return
        timestamps = self._timestamps(elements)
        if timestamps is None:
            # As in Flink: records without timestamps pass unstamped and hold the watermark
            # back; only an event-time operator downstream needs them (and says so).
            if not self._warned_unstamped:
                self._warned_unstamped = True
                log.warning("'%s': the WatermarkStrategy has no timestamp assigner and the "
                            "records carry no timestamps, so watermarks do not advance "
                            "before the end of input: add with_timestamp_assigner(...) for "
                            "event time", self.name)
            assert self.output is not None
            self.output.emit(elements)
            return
        self._max_timestamp = max(self._max_timestamp, int(timestamps.max()))
        assert self.ctx is not None and self.output is not None
        self._last_record_ms = self.ctx.processing_time.current_time_ms()
        if self._idle:
            self._idle = False
            self.output.emit_watermark_status(False)
        self.output.emit(elements.with_timestamps(timestamps))

    def _timestamps(self, elements: Elements) -> np.ndarray | None:
        column = self.strategy.timestamp_column
        if column is not None:
            return _column_timestamps(elements.arrow(), column)
        if self._extract is None:
            return elements.timestamps
        extract = self._extract
        previous = elements.timestamps
        records = elements.records()
        if previous is None:
            values = [extract(r, NO_TIMESTAMP) for r in records]
        else:
            values = list(map(extract, records, previous.tolist()))
        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as err:
            msg = (f"'{self.name}': the timestamp assigner must return epoch milliseconds as "
                   f"int, got {values[0]!r}: {err}")
            raise UserError(msg) from err

    def _on_periodic_emit(self, now_ms: int) -> None:
        assert self.output is not None and self.ctx is not None
        idle_timeout = self.strategy.idle_timeout_ms
        if idle_timeout is not None and not self._idle and \
                self.ctx.processing_time.current_time_ms() - self._last_record_ms >= idle_timeout:
            self._idle = True
            self.output.emit_watermark_status(True)
        bound = self.strategy.max_out_of_orderness_ms
        if bound is not None and not self._idle and self._max_timestamp > MIN_WATERMARK:
            watermark = self._max_timestamp - bound - 1
            if watermark > self._emitted:
                self._emitted = watermark
                self.output.emit_watermark(watermark)
        self._schedule()

    def process_watermark(self, watermark: int) -> None:
        # Event time starts here: only the end of input's final watermark goes through.
        if watermark == MAX_WATERMARK and self._emitted < MAX_WATERMARK:
            self._emitted = MAX_WATERMARK
            assert self.output is not None
            self.output.emit_watermark(watermark)

    def process_watermark_status(self, idle: bool) -> None:
        """Idleness is this operator's own decision, not its input's."""


def _column_timestamps(batch: pa.RecordBatch, column: str | int) -> np.ndarray:
    try:
        array = batch.column(column)
    except (KeyError, IndexError):
        msg = (f"timestamp column {column!r} is not a column of the stream "
               f"(columns: {', '.join(batch.schema.names)})")
        raise UserError(msg) from None
    if pa.types.is_timestamp(array.type):
        array = pc.cast(array, pa.timestamp("ms")).cast(pa.int64())
    elif not pa.types.is_integer(array.type):
        msg = (f"timestamp column {column!r} has type {array.type}: it must hold int64 epoch "
               "milliseconds or Arrow timestamps")
        raise UserError(msg)
    if array.null_count:
        msg = f"timestamp column {column!r} has {array.null_count} null values"
        raise UserError(msg)
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.int64)
