"""Keyed and operator state for user functions (PyFlink's ``pyflink.datastream.state``):
descriptors, handles and time-to-live, broadcast state, and weir's operator state
(``CheckpointedFunction`` and what it is given).

The implementations live in the runtime's ``weir.state`` package (its backends and
snapshots use them); this module is where user code finds them (they are also importable
from ``weir``).

Example:
    >>> from weir.datastream.functions import KeyedProcessFunction
    >>> class History(KeyedProcessFunction):
    ...     def open(self, runtime_context):
    ...         self.seen = runtime_context.get_list_state(ListStateDescriptor("seen"))
    ...     def process_element(self, value, ctx):
    ...         self.seen.add(value)
    ...         yield (ctx.get_current_key(), len(self.seen.get()))
"""

from __future__ import annotations

from weir.state.backend import AggregatingState, ListState, MapState, ReducingState, ValueState
from weir.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from weir.state.operator_state import (
    BroadcastState,
    CheckpointedFunction,
    CheckpointListener,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OperatorListState,
    OperatorStateStore,
    ReadOnlyBroadcastState,
)

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BroadcastState",
    "CheckpointListener",
    "CheckpointedFunction",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "OperatorListState",
    "OperatorStateStore",
    "ReadOnlyBroadcastState",
    "ReducingState",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "StateTtlConfig",
    "ValueState",
    "ValueStateDescriptor",
]
