"""Drive one operator directly: a manual clock, and an output that records everything.

Example:
    >>> from weir.operators.basic import MapOperator
    >>> harness = OperatorHarness(MapOperator("Map", lambda x: x * 2))
    >>> harness.process([1, 2], timestamps=[10, 20])
    >>> harness.output.records, harness.output.timestamps
    ([2, 4], [10, 20])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from weir.core.clock import ManualClock
from weir.core.config import Configuration
from weir.core.processing_time import ProcessingTimeService
from weir.core.records import Elements
from weir.taskexecutor.operator import OperatorContext, Output, StreamOperator


class CollectingOutput(Output):
    """Everything an operator emitted, in order: batches, watermarks, idleness changes."""

    def __init__(self) -> None:
        self.batches: list[Elements] = []
        #: Side output (OutputTag id) -> its records, in order.
        self.side: dict[str, list[Any]] = {}
        self.watermarks: list[int] = []
        self.statuses: list[bool] = []
        #: ("records", n) / ("watermark", w) / ("idle", bool), in emission order.
        self.events: list[tuple[str, Any]] = []

    def emit(self, elements: Elements) -> None:
        self.batches.append(elements)
        self.events.append(("records", len(elements)))

    def emit_side(self, tag: str, elements: Elements) -> None:
        self.side.setdefault(tag, []).extend(elements.records())

    def emit_watermark(self, watermark: int) -> None:
        self.watermarks.append(watermark)
        self.events.append(("watermark", watermark))

    def emit_watermark_status(self, idle: bool) -> None:
        self.statuses.append(idle)
        self.events.append(("idle", idle))

    @property
    def records(self) -> list[Any]:
        return [r for batch in self.batches for r in batch.records()]

    @property
    def timestamps(self) -> list[int | None]:
        out: list[int | None] = []
        for batch in self.batches:
            if batch.timestamps is None:
                out.extend([None] * len(batch))
            else:
                out.extend(batch.timestamps.tolist())
        return out

    def clear(self) -> None:
        self.batches.clear()
        self.watermarks.clear()
        self.statuses.clear()
        self.events.clear()


class OperatorHarness:
    """One opened operator with a manual processing-time clock (``advance_time``)."""

    def __init__(self, operator: StreamOperator, subtask_index: int = 0, parallelism: int = 1,
                 max_parallelism: int = 128, config: dict[str, str] | None = None,
                 start_ms: int = 0) -> None:
        self.clock = ManualClock(start_ms)
        self.processing_time = ProcessingTimeService(self.clock)
        self.operator = operator
        self.output = CollectingOutput()
        conf = dict(config or {})
        self.ctx = OperatorContext("task", subtask_index, parallelism, max_parallelism,
                                   config=conf, configuration=Configuration.from_pairs(conf),
                                   processing_time=self.processing_time)
        operator.setup(self.ctx, self.output)
        operator.open()

    def process(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        ts = None if timestamps is None else np.array(timestamps, dtype=np.int64)
        self.operator.process(Elements.from_records(records, None, ts))

    def process_elements(self, elements: Elements) -> None:
        self.operator.process(elements)

    def watermark(self, watermark: int) -> None:
        self.operator.process_watermark(watermark)

    @property
    def now_ms(self) -> int:
        return self.clock()

    def advance_time(self, to_ms: int) -> int:
        """Move the wall clock to ``to_ms`` (never back) and run the callbacks that became
        due."""
        self.clock.advance(to_ms - self.clock())
        return self.processing_time.fire_due()

    def finish(self) -> None:
        self.operator.finish()

    def close(self) -> None:
        self.operator.close()


def running_aggregate_reference(rows: list[tuple[Any, Any]], kind: str,
                                state: dict[Any, Any]
                                ) -> list[tuple[Any, Any]]:
    """What a keyed count/sum/min/max emits record by record (Flink's semantics): nulls
    add nothing to a sum and leave a min or max as it is. Updates ``state``."""
    out = []
    for k, v in rows:
        if kind == "count":
            state[k] = state.get(k, 0) + 1
        elif kind == "sum":
            state[k] = state.get(k, 0) + (0 if v is None else v)
        elif v is not None:
            state[k] = v if k not in state else (min if kind == "min" else max)(state[k], v)
        out.append((k, state.get(k)))
    return out
