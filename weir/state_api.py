"""Keyed state handles available to functions on keyed streams (in-memory for now).

Example:
    >>> from weir.state_api import ValueStateDescriptor, HeapKeyedStateStore
    >>> store = HeapKeyedStateStore()
    >>> state = store.get_value_state(ValueStateDescriptor("total"))
    >>> store.set_current_key("k"); state.update(5); state.value()
    5
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from weir.types import TypeInformation


@dataclass(frozen=True)
class ValueStateDescriptor:
    """Names a ValueState; the type is optional."""

    name: str
    type_info: TypeInformation | None = None


class ValueState:
    """One value per key, scoped to the key of the record being processed."""

    def __init__(self, store: HeapKeyedStateStore, table: dict[Any, Any]) -> None:
        self._store = store
        self._table = table

    def value(self) -> Any:
        return self._table.get(self._store.current_key)

    def update(self, value: Any) -> None:
        if value is None:
            self._table.pop(self._store.current_key, None)
        else:
            self._table[self._store.current_key] = value

    def clear(self) -> None:
        self._table.pop(self._store.current_key, None)


class HeapKeyedStateStore:
    """Keyed state of one operator instance, in memory. Used only on the task thread."""

    def __init__(self) -> None:
        self.current_key: Any = None
        self._tables: dict[str, dict[Any, Any]] = {}

    def set_current_key(self, key: Any) -> None:
        self.current_key = key

    def get_value_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        table = self._tables.setdefault(descriptor.name, {})
        return ValueState(self, table)
