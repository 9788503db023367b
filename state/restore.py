"""Restoring keyed state from snapshots into a backend, for any key-group range.

Each new subtask reads the snapshots whose key groups overlap its range and inserts only
the entries of its own key groups, so the union of the restored subtasks is the original
state, with no key in two of them, whatever the old and new parallelism.

Example:
    >>> import io
    >>> from state.canonical import write_canonical
    >>> from state.descriptors import ValueStateDescriptor
    >>> from state.heap import HashMapStateBackend
    >>> from state.key_groups import KeyGroupRange
    >>> source = HashMapStateBackend(128, KeyGroupRange(0, 127))
    >>> count = source.get_state(ValueStateDescriptor("count"))
    >>> for user in ("ann", "bob", "cyd"):
    ...     source.set_current_key(user); count.update(1)
    >>> out = io.BytesIO()
    >>> _ = write_canonical(source.entries(), out)
    >>> halves = [HashMapStateBackend(128, KeyGroupRange(0, 63)),
    ...           HashMapStateBackend(128, KeyGroupRange(64, 127))]
    >>> sum(restore_canonical(half, [out.getvalue()]) for half in halves)
    3
"""

from __future__ import annotations

from collections.abc import Iterable

from state.backend import KeyedStateBackend
from state.canonical import read_canonical


def restore_canonical(backend: KeyedStateBackend,
                      snapshots: Iterable[bytes | memoryview]) -> int:
    """Load the entries of ``snapshots`` in ``backend``'s key-group range; returns how many
    entries were loaded."""
    loaded = 0
    for data in snapshots:
        loaded += backend.load_entries(read_canonical(data, backend.key_group_range))
    return loaded
