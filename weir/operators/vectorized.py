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

from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from weir.core.records import Elements
from weir.core.types import KIND_KEY, KIND_PICKLE
from weir.operators.base import KeyedOperator
from weir.state.backend import MISSING
from weir.state.descriptors import ValueStateDescriptor
from weir.state.key_groups import key_groups_of_array

AGGREGATIONS = ("count", "sum", "min", "max")
#: The keyed state holding each key's running total.
_STATE = "aggregate"


def running_aggregate(batch: pa.RecordBatch, key: str | int, kind: str, field: str | int | None,
                      state: dict[Any, Any]) -> pa.RecordBatch:
    """Per-row running aggregate of ``field`` by ``key``; updates ``state`` (key -> total)."""
    keys = batch.column(key)
    n = batch.num_rows
    encoded = pc.dictionary_encode(keys, null_encoding="encode")
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    distinct = encoded.dictionary.to_pylist()
    # dictionary_encode numbers distinct keys 0..k-1, so after a stable sort by code,
    # group g is code g: its key is distinct[g] and its rows are contiguous.
    order = np.argsort(codes, kind="stable")
    group_of_row = codes[order]
    sizes = np.bincount(codes, minlength=len(distinct))
    ends = np.cumsum(sizes)
    starts = ends - sizes
    group_keys = distinct

    valid: np.ndarray | None = None
    if kind == "count":
        values = np.ones(n, dtype=np.int64)
        out_name = "count"
    else:
        column = batch.column(field)
        out_name = batch.schema.field(field).name
        if column.null_count:
            # Nulls do not contribute: they add 0 to a sum and leave a min/max unchanged
            # (null while a key has no value yet). The fill only gives numpy a value.
            valid = column.is_valid().to_numpy(zero_copy_only=False)[order]
            fill: Any = 0 if kind == "sum" else pc.min(column)
            if not isinstance(fill, int) and not fill.is_valid and \
                    pa.types.is_integer(column.type):
                fill = 0  # all null: keep integers integers
            column = pc.fill_null(column, fill)
        values = column.to_numpy(zero_copy_only=False)
    sorted_values = values[order]
    seen: np.ndarray | None = None  # rows whose key has an aggregate (min/max with nulls)

    if kind in ("count", "sum") and sorted_values.dtype.kind in "iub":
        # Integers are exact: one cumulative sum over all groups, minus what came before.
        cumulative = np.cumsum(sorted_values)
        before_group = np.zeros(len(starts), dtype=cumulative.dtype)
        before_group[1:] = cumulative[starts[1:] - 1]
        prior = np.fromiter(map(state.get, group_keys, repeat(0)), dtype=cumulative.dtype,
                            count=len(group_keys))
        running = cumulative - before_group[group_of_row] + prior[group_of_row]
    elif kind == "sum":
        # Floats: subtracting other groups' sums would lose precision, so each group adds
        # up its own values in order, from its prior total, exactly as record by record.
        running = np.empty(n, dtype=np.result_type(sorted_values.dtype, np.float64))
        for g, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            prior_total = state.get(group_keys[g], 0)
            running[s:e] = np.cumsum(np.r_[prior_total, sorted_values[s:e]])[1:]
    else:
        accumulate = np.minimum.accumulate if kind == "min" else np.maximum.accumulate
        combine = np.minimum if kind == "min" else np.maximum
        running = np.empty_like(sorted_values)
        if valid is not None:
            seen = np.ones(n, dtype=bool)
        for g, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            previous = state.get(group_keys[g])
            if valid is None:
                segment = accumulate(sorted_values[s:e])
                running[s:e] = segment if previous is None else combine(segment, previous)
                continue
            ok = valid[s:e]
            # Running aggregate over the valid values; row i takes it after its valid count.
            taken = sorted_values[s:e][ok]
            counts = np.cumsum(ok)
            has = counts > 0
            if len(taken):
                segment = accumulate(taken)
                if previous is not None:
                    segment = combine(segment, previous)
                running[s:e][has] = segment[counts[has] - 1]
            if previous is not None:
                running[s:e][~has] = previous
            else:
                assert seen is not None
                seen[s:e] = has

    finals = running[ends - 1].tolist()
    if seen is None:
        state.update(zip(group_keys, finals, strict=True))
    else:
        last = (ends - 1).tolist()
        for g, k in enumerate(group_keys):
            if seen[last[g]]:
                state[k] = finals[g]
    result = np.empty_like(running)
    result[order] = running
    mask = None
    if seen is not None:
        mask = np.empty(n, dtype=bool)
        mask[order] = ~seen
    key_name = batch.schema.field(key).name
    return pa.RecordBatch.from_arrays([keys, pa.array(result, mask=mask)],
                                      names=[key_name, out_name])


class VectorizedAggregateOperator(KeyedOperator):
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
        self._state = self.open_keyed().get_state(ValueStateDescriptor(_STATE))
        self._final_only = self.final_values_only()
        self._names: list[str] | None = None

    def finish(self) -> None:
        super().finish()
        if self._final_only and self._names is not None:
            assert self.backend is not None
            keys, totals = [], []
            for key in list(self.backend.keys(_STATE)):
                self.backend.set_current_key(key)
                keys.append(key)
                totals.append(self._state.value())
            if keys:
                assert self.output is not None
                self.output.emit(Elements.from_arrow(pa.RecordBatch.from_pydict(
                    dict(zip(self._names, (keys, totals), strict=True)))))

    def _aggregate(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The running aggregate of ``batch``, its keys' totals read from and written back
        to the keyed backend in one batched read and one batched write."""
        assert self.ctx is not None and self.backend is not None
        distinct = pc.unique(batch.column(self.key))
        keys = distinct.to_pylist()
        groups = key_groups_of_array(distinct, self.ctx.max_parallelism)
        stored = self.backend.get_many(_STATE, groups, keys)
        totals = {k: v for k, v in zip(keys, stored, strict=True) if v is not MISSING}
        result = running_aggregate(batch, self.key, self.kind, self.field, totals)
        present = [i for i, k in enumerate(keys) if k in totals]
        self.backend.put_many(_STATE, groups[present], [keys[i] for i in present], None,
                               [totals[keys[i]] for i in present])
        return result

    def process(self, elements: Elements, input_index: int = 0) -> None:
        batch = elements.arrow()
        if batch.num_rows == 0:
            return
        try:
            if (batch.schema.metadata or {}).get(KIND_KEY) == KIND_PICKLE:
                # Records with mixed value types travel pickled: build the two columns the
                # aggregation needs from the records (Arrow may widen ints to floats here).
                names = [self.key] if self.field is None else [self.key, self.field]
                records = elements.records()
                batch = pa.RecordBatch.from_pydict(
                    {str(n): [r[n] for r in records] for n in names})
            result = self._aggregate(batch)
        except KeyError as err:
            wanted = [self.key] if self.field is None else [self.key, self.field]
            missing = [n for n in wanted if isinstance(n, str) and n not in batch.schema.names]
            column = repr(missing[0]) if missing else str(err)
            msg = (f"'{self.name}': column {column} not in the stream "
                   f"(columns: {', '.join(batch.schema.names)})")
            raise KeyError(msg) from None
        if self._final_only:
            self._names = list(result.schema.names)
            return
        assert self.output is not None
        self.output.emit(Elements.from_arrow(result, elements.timestamps))
