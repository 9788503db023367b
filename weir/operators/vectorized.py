"""Vectorised keyed aggregations over Arrow batches (``key_by("user").sum("amount")``).

Flink's semantics — the updated aggregate is emitted for every input record — computed per
batch with pyarrow.compute and numpy: rows are grouped by key, running aggregates within
the batch come from a cumulative sum (or min/max accumulate) per group, and the state from
earlier batches is added per distinct key. Python runs once per distinct key in a batch,
never once per record.

Example:
    >>> import pyarrow as pa
    >>> from weir.operators.vectorized import running_aggregate
    >>> state = {}
    >>> batch = pa.record_batch({"k": ["a", "b", "a"], "v": [1, 2, 3]})
    >>> running_aggregate(batch, "k", "sum", "v", state).column(1).to_pylist()
    [1, 2, 4]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from weir.operators.base import StreamOperator
from weir.records import Elements

AGGREGATIONS = ("count", "sum", "min", "max")


def running_aggregate(batch: pa.RecordBatch, key: str | int, kind: str, field: str | int | None,
                      state: dict[Any, Any]) -> pa.RecordBatch:
    """Per-row running aggregate of ``field`` by ``key``; updates ``state`` (key -> total)."""
    keys = batch.column(key)
    n = batch.num_rows
    encoded = pc.dictionary_encode(keys, null_encoding="encode")
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    distinct = encoded.dictionary.to_pylist()
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    ends = np.r_[starts[1:], n]
    group_keys = [distinct[c] for c in sorted_codes[starts].tolist()]
    group_of_row = np.repeat(np.arange(len(starts)), ends - starts)

    if kind == "count":
        values = np.ones(n, dtype=np.int64)
        out_name = "count"
    else:
        column = batch.column(field)  # type: ignore[arg-type]
        out_name = batch.schema.field(field).name  # type: ignore[arg-type]
        if column.null_count:
            # Nulls do not contribute: the identity of each aggregation stands in for them.
            fill: Any = 0 if kind == "sum" else (pc.max(column) if kind == "min"
                                                 else pc.min(column))
            column = pc.fill_null(column, fill)
        values = column.to_numpy(zero_copy_only=False)
    sorted_values = values[order]

    if kind in ("count", "sum"):
        cumulative = np.cumsum(sorted_values)
        before_group = np.zeros(len(starts), dtype=cumulative.dtype)
        before_group[1:] = cumulative[starts[1:] - 1]
        prior = np.array([state.get(k, 0) for k in group_keys], dtype=cumulative.dtype)
        running = cumulative - before_group[group_of_row] + prior[group_of_row]
    else:
        accumulate = np.minimum.accumulate if kind == "min" else np.maximum.accumulate
        combine = np.minimum if kind == "min" else np.maximum
        running = np.empty_like(sorted_values)
        for g, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            segment = accumulate(sorted_values[s:e])
            previous = state.get(group_keys[g])
            running[s:e] = segment if previous is None else combine(segment, previous)

    state.update(zip(group_keys, running[ends - 1].tolist(), strict=True))
    result = np.empty_like(running)
    result[order] = running
    key_name = batch.schema.field(key).name
    return pa.RecordBatch.from_arrays([keys, pa.array(result)], names=[key_name, out_name])


class VectorizedAggregateOperator(StreamOperator):
    """``key_by(column).count()/sum(col)/min(col)/max(col)`` over Arrow batches."""

    def __init__(self, name: str, key: str | int, kind: str, field: str | int | None) -> None:
        super().__init__(name)
        if kind not in AGGREGATIONS:
            msg = f"unknown aggregation {kind!r} (one of {', '.join(AGGREGATIONS)})"
            raise ValueError(msg)
        self.key = key
        self.kind = kind
        self.field = field

    def open(self) -> None:
        self._state: dict[Any, Any] = {}

    def process(self, elements: Elements, input_index: int = 0) -> None:
        batch = elements.arrow()
        if batch.num_rows == 0:
            return
        try:
            result = running_aggregate(batch, self.key, self.kind, self.field, self._state)
        except KeyError as err:
            msg = (f"'{self.name}': column {err} not in the stream "
                   f"(columns: {', '.join(batch.schema.names)})")
            raise KeyError(msg) from None
        assert self.output is not None
        self.output.emit(Elements.from_arrow(result))
