"""Keyed state: key groups, backends, snapshots."""

from weir.state.key_groups import (
    DEFAULT_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    assign_to_key_group,
    check_parallelism,
    compute_operator_index_for_key_group,
    key_group_range_for_operator,
    key_groups_of_array,
    key_groups_of_columns,
    key_to_bytes,
    murmur3_32,
    operator_indexes,
)

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "assign_to_key_group",
    "check_parallelism",
    "compute_operator_index_for_key_group",
    "key_group_range_for_operator",
    "key_groups_of_array",
    "key_groups_of_columns",
    "key_to_bytes",
    "murmur3_32",
    "operator_indexes",
]
