"""Vectorised keyed aggregations over Arrow batches (``key_by("user").sum("amount")``).

Flink's semantics — the updated aggregate is emitted for every input record — computed per
batch with pyarrow.compute and numpy: rows are grouped by key, running aggregates within
the batch come from a cumulative sum (or a segmented min/max scan) per group, started from
each key's total of the earlier batches. The operator keeps the totals in columns
(:class:`weir.state.columnar.KeyedAggregates`: a key -> slot index and numpy arrays, written
back to the keyed backend before each snapshot), so a batch takes a fixed number of numpy and
pyarrow calls, whatever the number of its distinct keys; Python runs per key only for a key
met for the first time and for the few longest keys of a float sum.

Example:
    >>> import pyarrow as pa
    >>> from weir.operators.vectorized import running_aggregate
    >>> state = {}
    >>> batch = pa.record_batch({"k": ["a", "b", "a"], "v": [1, 2, 3]})
    >>> running_aggregate(batch, "k", "sum", "v", state).column(1).to_pylist()
    [1, 2, 4]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from weir.core.records import Elements
from weir.core.types import KIND_KEY, KIND_PICKLE
from weir.operators.base import KeyedOperator
from weir.state.columnar import KeyedAggregates
from weir.state.descriptors import ValueStateDescriptor

if TYPE_CHECKING:
    from weir.core.ids import CheckpointId
    from weir.state.snapshot import SnapshotLocation
    from weir.taskexecutor.operator import OperatorSnapshot

AGGREGATIONS = ("count", "sum", "min", "max")
#: The keyed state holding each key's running total.
_STATE = "aggregate"


class _Groups(NamedTuple):
    """A batch's rows grouped by key: ``order`` sorts the rows by group, group ``g`` is
    ``distinct[g]`` and its rows are ``order[starts[g]:ends[g]]``."""

    distinct: pa.Array
    order: npt.NDArray[np.intp]
    group_of_row: npt.NDArray[np.intp]
    starts: npt.NDArray[np.intp]
    ends: npt.NDArray[np.intp]


def _groups(keys: pa.Array | pa.ChunkedArray) -> _Groups:
    if pa.types.is_floating(keys.type):
        # -0.0 + 0.0 is 0.0: one group, as they are one key (Arrow's hashing tells them apart).
        keys = pc.add(keys, 0.0)
    encoded = pc.dictionary_encode(keys, null_encoding="encode")
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    distinct = encoded.dictionary
    # dictionary_encode numbers distinct keys 0..k-1, so after a stable sort by code,
    # group g is code g: its key is distinct[g] and its rows are contiguous.
    if len(distinct) <= 1 << 16:
        # A stable sort of 16-bit keys is a radix sort: linear, not n log n.
        codes = codes.astype(np.uint16)
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=len(distinct))
    ends = np.cumsum(sizes)
    return _Groups(distinct, order, codes[order], ends - sizes, ends)


def _values(batch: pa.RecordBatch, kind: str, field: str | int | None
            ) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_] | None, str]:
    """The values to aggregate, which of them are valid (None: all) and the output name.
    Nulls are filled: with 0 (a sum adds nothing), or for a min/max with a value that
    :func:`_running` masks."""
    if kind == "count":
        return np.ones(batch.num_rows, dtype=np.int64), None, "count"
    column = batch.column(field)
    name = batch.schema.field(field).name
    valid = None
    if column.null_count:
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        fill: Any = 0 if kind == "sum" else pc.min(column)
        if not isinstance(fill, int) and not fill.is_valid and \
                pa.types.is_integer(column.type):
            fill = 0  # all null: keep integers integers
        column = pc.fill_null(column, fill)
    return column.to_numpy(zero_copy_only=False), valid, name


def _identity(kind: str, dtype: np.dtype[Any]) -> Any:
    """The value a min (max) over ``dtype`` starts from: nothing is above (below) it."""
    if dtype.kind == "f":
        return np.inf if kind == "min" else -np.inf
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.max if kind == "min" else info.min
    return kind == "min"  # bool


def _running(kind: str, values: npt.NDArray[Any], valid: npt.NDArray[np.bool_] | None,
             groups: _Groups, prior: npt.NDArray[Any], prior_has: npt.NDArray[np.bool_]
             ) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_] | None]:
    """The running aggregate of every row, in group order (``groups.order``), from each
    group's prior aggregate (``prior[g]``, where ``prior_has[g]``; count and sum start from 0
    otherwise), and which rows have one (None: all)."""
    order, group_of_row, starts, ends = groups.order, groups.group_of_row, groups.starts, \
        groups.ends
    if kind == "count":
        # Row i of a group is its (i + 1)-th: a position less the group's start.
        if prior.dtype.kind in "iub":
            prior = prior.astype(np.int64)
        offset = prior - starts + 1
        return np.arange(len(order), dtype=np.int64) + offset[group_of_row], None
    sorted_values = values[order]
    if kind in ("count", "sum") and sorted_values.dtype.kind in "iub":
        # Integers are exact: one cumulative sum over all groups, minus what came before.
        cumulative = np.cumsum(sorted_values)
        before_group = np.zeros(len(starts), dtype=cumulative.dtype)
        before_group[1:] = cumulative[starts[1:] - 1]
        if prior.dtype.kind in "iub":
            prior = prior.astype(cumulative.dtype)
        return cumulative - before_group[group_of_row] + prior[group_of_row], None
    if kind == "sum":
        # Floats: subtracting other groups' sums would lose precision, so each group adds
        # up its own values in order, from its prior total, exactly as record by record.
        return _segmented_sums(sorted_values, starts, ends, prior), None
    sorted_valid = None if valid is None else valid[order]
    if sorted_values.dtype.kind not in "iufb":
        return _running_extreme_by_group(kind, sorted_values, sorted_valid, starts, ends,
                                         prior, prior_has)
    op = np.minimum if kind == "min" else np.maximum
    identity = _identity(kind, sorted_values.dtype)
    if sorted_valid is not None:
        sorted_values = sorted_values.copy()
        sorted_values[~sorted_valid] = identity
    running = _segmented_scan(op, sorted_values, starts, ends, group_of_row)
    if prior_has.any():
        start = np.where(prior_has, prior, identity) if not prior_has.all() else prior
        if start.dtype != running.dtype and start.dtype.kind in "iuf":
            # The totals came from values of this column's type: keep the output's type
            # (int32 stays int32, float32 float32) when they fit it exactly.
            narrowed = start.astype(running.dtype)
            if np.array_equal(narrowed.astype(start.dtype), start, equal_nan=True):
                start = narrowed
        running = op(running, start[group_of_row])
    if sorted_valid is None:
        return running, None
    # A row has an aggregate once its group had a prior one or a valid value up to it.
    counts = np.cumsum(sorted_valid, dtype=np.int64)
    before = np.zeros(len(starts), dtype=np.int64)
    before[1:] = counts[starts[1:] - 1]
    seen = (counts - before[group_of_row] > 0) | prior_has[group_of_row]
    return running, seen


#: Costs (in microseconds) that choose how a float sum is run (see _segmented_sums): a step
#: over the i-th rows of all groups, and a group summed on its own.
_RANK_STEP_US = 5.0
_GROUP_LOOP_US = 8.0


def _segmented_sums(values: npt.NDArray[Any], starts: npt.NDArray[np.intp],
                    ends: npt.NDArray[np.intp], prior: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Per-group running sums of ``values`` (grouped rows), each from its ``prior``, added in
    row order as a record-by-record sum would (bit for bit).

    Rows ``0..r-1`` of every group are added in ``r`` vectorised steps (step ``i`` adds the
    ``i``-th row of each group that has one); the rest of the groups longer than ``r`` are
    summed one group at a time. ``r`` is chosen per batch from the group sizes so that the
    Python loop runs over only a few long groups (a Zipf key) and the steps stay few.
    """
    sizes = ends - starts
    out = np.empty(values.size, dtype=np.result_type(values.dtype, prior.dtype, np.float64))
    if values.size == 0:
        return out
    longest = int(sizes.max())
    # longer[r]: groups with more than r rows.
    longer = len(sizes) - np.cumsum(np.bincount(sizes, minlength=longest + 1))
    cost = _RANK_STEP_US * np.arange(longest + 1) + _GROUP_LOOP_US * longer
    steps = int(np.argmin(cost))
    total = prior.astype(out.dtype)
    active = np.arange(len(sizes))
    for r in range(steps):
        active = active[sizes[active] > r]
        rows = starts[active] + r
        total[active] += values[rows]
        out[rows] = total[active]
    for g in np.flatnonzero(sizes > steps).tolist():
        s, e = int(starts[g]) + steps, int(ends[g])
        out[s:e] = np.cumsum(np.r_[total[g], values[s:e]])[1:]
    return out


def _segmented_scan(op: np.ufunc, values: npt.NDArray[Any], starts: npt.NDArray[np.intp],
                    ends: npt.NDArray[np.intp], group_of_row: npt.NDArray[np.intp]
                    ) -> npt.NDArray[Any]:
    """``op.accumulate`` within each group of grouped rows, for all groups at once: a
    log-step (Hillis-Steele) scan, exact for min and max whatever the order they combine in."""
    out = values.copy()
    rank = np.arange(values.size) - starts[group_of_row]
    longest = int((ends - starts).max()) if len(starts) else 0
    step = 1
    while step < longest:
        rows = np.flatnonzero(rank >= step)
        out[rows] = op(out[rows], out[rows - step])
        step *= 2
    return out


def _running_extreme_by_group(kind: str, values: npt.NDArray[Any],
                              valid: npt.NDArray[np.bool_] | None, starts: npt.NDArray[np.intp],
                              ends: npt.NDArray[np.intp], prior: npt.NDArray[Any],
                              prior_has: npt.NDArray[np.bool_]
                              ) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_] | None]:
    """A running min/max of values numpy has no order identity for (strings, dates), one
    group at a time."""
    accumulate = np.minimum.accumulate if kind == "min" else np.maximum.accumulate
    combine = np.minimum if kind == "min" else np.maximum
    running = np.empty_like(values)
    seen = None if valid is None else np.ones(values.size, dtype=bool)
    for g, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        previous = prior[g] if prior_has[g] else None
        if valid is None:
            segment = accumulate(values[s:e])
            running[s:e] = segment if previous is None else combine(segment, previous)
            continue
        ok = valid[s:e]
        # Running aggregate over the valid values; row i takes it after its valid count.
        taken = values[s:e][ok]
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
    return running, seen


def _result(batch: pa.RecordBatch, key: str | int, out_name: str, groups: _Groups,
            running: npt.NDArray[Any], seen: npt.NDArray[np.bool_] | None) -> pa.RecordBatch:
    """The output batch: each row's key and running aggregate, back in row order."""
    result = np.empty_like(running)
    result[groups.order] = running
    mask = None
    if seen is not None:
        mask = np.empty(len(running), dtype=bool)
        mask[groups.order] = ~seen
    key_name = batch.schema.field(key).name
    return pa.RecordBatch.from_arrays([batch.column(key), pa.array(result, mask=mask)],
                                      names=[key_name, out_name])


def running_aggregate(batch: pa.RecordBatch, key: str | int, kind: str, field: str | int | None,
                      state: dict[Any, Any]) -> pa.RecordBatch:
    """Per-row running aggregate of ``field`` by ``key``; updates ``state`` (key -> total)."""
    groups = _groups(batch.column(key))
    values, valid, out_name = _values(batch, kind, field)
    keys = groups.distinct.to_pylist()
    prior_has = np.fromiter((k in state for k in keys), dtype=bool, count=len(keys))
    prior = np.asarray([state.get(k, 0) for k in keys])
    if not prior_has.any():
        prior = np.zeros(len(keys), dtype=values.dtype)
    running, seen = _running(kind, values, valid, groups, prior, prior_has)
    finals = running[groups.ends - 1].tolist()
    has = [True] * len(keys) if seen is None else seen[groups.ends - 1].tolist()
    state.update((k, v) for k, v, h in zip(keys, finals, has, strict=True) if h)
    return _result(batch, key, out_name, groups, running, seen)


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
        backend = self.open_keyed()
        self._state = backend.get_state(ValueStateDescriptor(_STATE))
        # The totals live in columns, written back to the backend before each snapshot.
        context = self.state_context
        restored = context is not None and bool(context.keyed_handles)
        self._totals = KeyedAggregates(backend, _STATE, restored)
        self._final_only = self.final_values_only()
        self._names: list[str] | None = None

    def snapshot_state(self, checkpoint_id: CheckpointId, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot:
        self._totals.flush()
        return super().snapshot_state(checkpoint_id, timestamp_ms, location)

    def finish(self) -> None:
        super().finish()
        if self._final_only and self._names is not None:
            assert self.backend is not None
            self._totals.flush()
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
        """The running aggregate of ``batch``, its keys' totals gathered from and scattered
        back to the columns (keys new to them read from the backend in one batched read)."""
        keys = batch.column(self.key)
        groups = _groups(keys)
        values, valid, out_name = _values(batch, self.kind, self.field)
        totals = self._totals
        slots = totals.slots(groups.distinct)
        running, seen = _running(self.kind, values, valid, groups, totals.values[slots],
                                 totals.has[slots])
        last = groups.ends - 1
        totals.update(slots, running[last], None if seen is None else seen[last])
        return _result(batch, self.key, out_name, groups, running, seen)

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
