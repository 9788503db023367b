"""Keyed state for user functions: descriptors, handles and time-to-live (PyFlink's names).

The implementations live in the ``state`` package; this module is where user code finds
them (they are also importable from ``weir``).

Example:
    >>> from weir import KeyedProcessFunction, ListStateDescriptor
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

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "ReducingState",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "StateTtlConfig",
    "ValueState",
    "ValueStateDescriptor",
]
