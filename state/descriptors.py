"""State descriptors and time-to-live, with PyFlink's names.

Example:
    >>> from weir.core.types import Types
    >>> from weir.state.descriptors import StateTtlConfig, ValueStateDescriptor
    >>> from weir.core.time import Time
    >>> ttl = StateTtlConfig.new_builder(Time.seconds(10)).build()
    >>> descriptor = ValueStateDescriptor("total", Types.LONG())
    >>> descriptor.enable_time_to_live(ttl)
    >>> descriptor.ttl_config.ttl_ms
    10000
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from weir.core.generics import TypeParameters
from weir.core.time import to_millis
from weir.core.types import TypeInformation


class StateTtlConfig:
    """Time to live of state entries (processing time), as Flink's ``StateTtlConfig``."""

    class UpdateType(enum.Enum):
        """When an entry's clock restarts."""

        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class TtlTimeCharacteristic(enum.Enum):
        """The clock of the time to live: processing time (the only one, as in Flink)."""

        ProcessingTime = 0

    class StateVisibility(enum.Enum):
        """Whether an expired entry not yet cleaned up may still be read."""

        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    def __init__(self, ttl_ms: int, update_type: StateTtlConfig.UpdateType,
                 visibility: StateTtlConfig.StateVisibility) -> None:
        if ttl_ms <= 0:
            msg = f"the time to live must be positive, got {ttl_ms} ms"
            raise ValueError(msg)
        self.ttl_ms = ttl_ms
        self.update_type = update_type
        self.visibility = visibility
        #: The cleanup settings the builder was given (see Builder; recorded only).
        self.cleanup_strategies: dict[str, Any] = {}

    @staticmethod
    def new_builder(ttl: Any) -> StateTtlConfig.Builder:
        return StateTtlConfig.Builder(ttl)

    class Builder:
        def __init__(self, ttl: Any) -> None:
            self._ttl_ms = to_millis(ttl)
            self._update = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._cleanup: dict[str, Any] = {}

        def set_update_type(self, update_type: StateTtlConfig.UpdateType
                            ) -> StateTtlConfig.Builder:
            self._update = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, visibility: StateTtlConfig.StateVisibility
                                 ) -> StateTtlConfig.Builder:
            self._visibility = visibility
            return self

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(
                StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def set_ttl(self, ttl: Any) -> StateTtlConfig.Builder:
            self._ttl_ms = to_millis(ttl)
            return self

        def set_ttl_time_characteristic(self, characteristic: StateTtlConfig.
                                        TtlTimeCharacteristic) -> StateTtlConfig.Builder:
            """Only processing time exists (as in Flink)."""
            return self

        # Cleanup strategies. weir removes an expired entry when it is read (and, with
        # NeverReturnExpired, does not return it); these PyFlink settings are accepted and
        # kept on the config, and add no background cleanup: an expired entry nobody
        # reads stays in state (and snapshots) until its key's state is cleared.

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            self._cleanup["background"] = False
            return self

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            self._cleanup["full_snapshot"] = True
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool
                                  ) -> StateTtlConfig.Builder:
            self._cleanup["incremental"] = (cleanup_size, run_cleanup_for_every_record)
            return self

        def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries: int,
                                              periodic_compaction_time: Any = None
                                              ) -> StateTtlConfig.Builder:
            self._cleanup["rocksdb_compaction_filter"] = (query_time_after_num_entries,
                                                          periodic_compaction_time)
            return self

        def build(self) -> StateTtlConfig:
            config = StateTtlConfig(self._ttl_ms, self._update, self._visibility)
            config.cleanup_strategies = dict(self._cleanup)
            return config


_UNSET: Any = object()


def _one_of(state: str, pyflink_name: str, pyflink_value: Any, weir_value: Any) -> Any:
    """The type given under PyFlink's keyword or weir's ``type_info`` (not both)."""
    if pyflink_value is _UNSET:
        return None if weir_value is _UNSET else weir_value
    if weir_value is not _UNSET:
        msg = f"state {state!r}: give the type as {pyflink_name} or type_info, not both"
        raise TypeError(msg)
    return pyflink_value


@dataclass
class StateDescriptor(TypeParameters):
    """Names a piece of keyed state; the type is optional (values are pickled).

    Descriptors take PyFlink's keyword names (``value_type_info``, ``elem_type_info``,
    ``key_type_info``/``value_type_info``, ``state_type_info``) as well as ``type_info``.
    """

    name: str
    type_info: TypeInformation | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            msg = f"a state needs a non-empty name, got {self.name!r}"
            raise ValueError(msg)
        self.ttl_config: StateTtlConfig | None = None

    kind = "value"

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        self.ttl_config = ttl_config

    def get_name(self) -> str:
        return self.name


@dataclass(init=False)
class ValueStateDescriptor(StateDescriptor):
    """``ValueStateDescriptor("name", value_type_info)``; the type is optional."""

    kind = "value"

    def __init__(self, name: str, value_type_info: TypeInformation | None = _UNSET, *,
                 type_info: TypeInformation | None = _UNSET) -> None:
        super().__init__(name, _one_of(name, "value_type_info", value_type_info, type_info))


@dataclass(init=False)
class ListStateDescriptor(StateDescriptor):
    """``ListStateDescriptor("name", elem_type_info)``: the type of the elements, optional."""

    kind = "list"

    def __init__(self, name: str, elem_type_info: TypeInformation | None = _UNSET, *,
                 type_info: TypeInformation | None = _UNSET) -> None:
        super().__init__(name, _one_of(name, "elem_type_info", elem_type_info, type_info))


@dataclass(init=False)
class MapStateDescriptor(StateDescriptor):
    """``MapStateDescriptor("name", key_type_info, value_type_info)``; both types are
    optional. ``type_info`` (weir's keyword for the key type) is the key type."""

    value_type_info: TypeInformation | None = None
    kind = "map"

    def __init__(self, name: str, key_type_info: TypeInformation | None = _UNSET,
                 value_type_info: TypeInformation | None = None, *,
                 type_info: TypeInformation | None = _UNSET) -> None:
        super().__init__(name, _one_of(name, "key_type_info", key_type_info, type_info))
        self.value_type_info = value_type_info

    @property
    def key_type_info(self) -> TypeInformation | None:
        return self.type_info


@dataclass(init=False)
class ReducingStateDescriptor(StateDescriptor):
    """``ReducingStateDescriptor("name", reduce_function, type_info)``: a ReduceFunction
    or a function of two values."""

    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any,
                 type_info: TypeInformation | None = None) -> None:
        super().__init__(name, type_info)
        self.reduce_function = reduce_function

    def get_reduce_function(self) -> Any:
        """The reduce function, as given."""
        return self.reduce_function

    def reducer(self) -> Callable[[Any, Any], Any]:
        fn = self.reduce_function
        reduce: Callable[[Any, Any], Any] = fn.reduce if hasattr(fn, "reduce") else fn
        return reduce


@dataclass(init=False)
class AggregatingStateDescriptor(StateDescriptor):
    """``AggregatingStateDescriptor("name", agg_function, state_type_info)`` (the type of
    the accumulator, optional); the function has ``create_accumulator()``,
    ``add(value, accumulator)``, ``get_result(accumulator)`` (and ``merge(a, b)`` for
    session windows)."""

    kind = "aggregating"

    def __init__(self, name: str, agg_function: Any,
                 state_type_info: TypeInformation | None = _UNSET, *,
                 type_info: TypeInformation | None = _UNSET) -> None:
        super().__init__(name, _one_of(name, "state_type_info", state_type_info, type_info))
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(agg_function, method, None)):
                msg = f"the aggregate function of state {name!r} has no {method}() method"
                raise TypeError(msg)
        self.agg_function = agg_function

    def get_agg_function(self) -> Any:
        """The aggregate function, as given."""
        return self.agg_function
