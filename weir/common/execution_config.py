"""``env.get_config()``: the execution settings of PyFlink's ``ExecutionConfig``
(``pyflink.common.execution_config``). A setting weir has an option for writes it
(``pipeline.auto-watermark-interval``, ``task.cancellation.timeout``, ...), so a program
may use either; the others are accepted and kept, without effect (see
:class:`ExecutionConfig`).

Example:
    >>> from weir.datastream.stream_execution_environment import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.get_config().set_auto_watermark_interval(50).get_auto_watermark_interval()
    50
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from weir.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from weir.core import options
from weir.unsupported import DATASET, refuse

if TYPE_CHECKING:
    from weir.core.config import Configuration

__all__ = ["ExecutionConfig"]

#: PyFlink's methods weir has no such thing for -> why.
_UNSUPPORTED_METHODS = {
    "set_execution_mode": DATASET, "get_execution_mode": DATASET,
    "set_default_input_dependency_constraint": DATASET,
    "get_default_input_dependency_constraint": DATASET,
}


class Environment(Protocol):
    """What an :class:`ExecutionConfig` reads and sets of the environment it belongs to (a
    ``StreamExecutionEnvironment``)."""

    def get_configuration(self) -> Configuration: ...

    def set_parallelism(self, parallelism: int) -> object: ...

    def get_parallelism(self) -> int: ...

    def set_max_parallelism(self, max_parallelism: int) -> object: ...

    def get_max_parallelism(self) -> int: ...

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration
                             ) -> object: ...

    def get_restart_strategy(self) -> RestartStrategyConfiguration | None: ...


class ExecutionConfig:
    """``env.get_config()``: a view on the environment and its configuration.

    Settings with a weir option write it (``pipeline.auto-watermark-interval``,
    ``task.cancellation.timeout``, ...). Settings Flink has and weir has no use for are
    accepted and kept with the environment, so that their getters give back what was set
    (each setter's docstring says why it changes nothing). Two configs are equal when
    their environments' settings are.

    Example:
        >>> from weir.datastream.stream_execution_environment import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> _ = env.get_config().disable_closure_cleaner().set_task_cancellation_timeout(5000)
        >>> env.get_config().is_closure_cleaner_enabled()
        False
        >>> env.get_configuration().to_dict()["task.cancellation.timeout"]
        '5000 ms'
    """

    #: PyFlink's methods this class refuses, with why (read by ``weir.docgen``).
    __unsupported__ = _UNSUPPORTED_METHODS

    #: The parallelism value meaning "the environment's default" (as Flink's).
    PARALLELISM_DEFAULT = -1
    #: The parallelism value meaning "unknown or not set" (as Flink's).
    PARALLELISM_UNKNOWN = -2

    def __init__(self, env: Environment) -> None:
        self._env = env
        #: Settings weir accepts without an option of its own, for their getters.
        self._accepted: dict[str, Any] = {}

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("_"):
            raise AttributeError(name)
        refuse(type(self).__name__, name, self.__unsupported__)

    def _setting(self, name: str) -> Any:
        return self._accepted.get(name, _DEFAULTS[name])

    def _set(self, name: str, value: Any) -> ExecutionConfig:
        self._accepted[name] = value
        return self

    # -- watermarks, parallelism ---------------------------------------------------------

    def set_auto_watermark_interval(self, interval: int) -> ExecutionConfig:
        """Milliseconds between the watermarks ``assign_timestamps_and_watermarks`` emits
        (``pipeline.auto-watermark-interval``); 0, as in Flink, turns periodic watermarks
        off: only the end of input's final watermark advances event time."""
        interval = int(interval)
        if interval < 0:
            msg = f"the auto-watermark interval cannot be negative, got {interval} ms"
            raise ValueError(msg)
        self._env.get_configuration().set_raw(options.AUTO_WATERMARK_INTERVAL.key,
                                              f"{interval} ms")
        return self

    def get_auto_watermark_interval(self) -> int:
        """The interval in milliseconds; 0 when periodic watermarks are off."""
        seconds = self._env.get_configuration().get(options.AUTO_WATERMARK_INTERVAL)
        return round(float(seconds) * 1000)

    def set_parallelism(self, parallelism: int) -> ExecutionConfig:
        self._env.set_parallelism(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._env.get_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> ExecutionConfig:
        self._env.set_max_parallelism(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._env.get_max_parallelism()

    # -- restarts, cancellation ------------------------------------------------------------

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration
                             ) -> ExecutionConfig:
        """As ``env.set_restart_strategy``: a ``RestartStrategies.*`` configuration
        (``restart-strategy.*``)."""
        self._env.set_restart_strategy(restart_strategy_configuration)
        return self

    def get_restart_strategy(self) -> RestartStrategyConfiguration:
        """The restart strategy set for the environment's jobs; the fall-back one (the
        cluster's strategy) when none was set, as in Flink."""
        strategy = self._env.get_restart_strategy()
        return strategy if strategy is not None else RestartStrategies.fall_back_restart()

    def set_task_cancellation_timeout(self, timeout: int) -> ExecutionConfig:
        """Milliseconds a cancelled task may take to stop before it counts as stuck
        (``task.cancellation.timeout``). weir needs a positive timeout: Flink's 0 (never
        time out) is refused."""
        timeout = int(timeout)
        if timeout <= 0:
            msg = (f"the task cancellation timeout must be positive in weir, got {timeout} ms "
                   "(0, Flink's 'no timeout', is not supported)")
            raise ValueError(msg)
        self._env.get_configuration().set_raw(options.CANCELLATION_TIMEOUT.key, f"{timeout} ms")
        return self

    def get_task_cancellation_timeout(self) -> int:
        """The task cancellation timeout in milliseconds; -1 (the cluster's default
        applies) when the job sets none, as in PyFlink."""
        config = self._env.get_configuration()
        if not config.contains(options.CANCELLATION_TIMEOUT):
            return -1
        return round(config.get(options.CANCELLATION_TIMEOUT) * 1000)

    def set_task_cancellation_interval(self, interval: int) -> ExecutionConfig:
        """Accepted and kept: Flink repeats a cancellation every ``interval`` milliseconds
        until the task stops; a weir task is told once and checks between records."""
        return self._set("task_cancellation_interval", int(interval))

    def get_task_cancellation_interval(self) -> int:
        """The interval set, in milliseconds; -1 (the cluster's default) until set."""
        return int(self._setting("task_cancellation_interval"))

    # -- settings weir accepts without effect -------------------------------------------------

    def enable_object_reuse(self) -> ExecutionConfig:
        """Accepted and kept; records cross operators as Python objects or Arrow batches
        anyway, and a function never gets an object another one may still change."""
        return self._set("object_reuse", True)

    def disable_object_reuse(self) -> ExecutionConfig:
        return self._set("object_reuse", False)

    def is_object_reuse_enabled(self) -> bool:
        return bool(self._setting("object_reuse"))

    def enable_closure_cleaner(self) -> ExecutionConfig:
        """Accepted and kept: functions travel to the TaskExecutors by value (cloudpickle),
        which pickles what they use, so there is no closure to clean."""
        return self._set("closure_cleaner", True)

    def disable_closure_cleaner(self) -> ExecutionConfig:
        return self._set("closure_cleaner", False)

    def is_closure_cleaner_enabled(self) -> bool:
        return bool(self._setting("closure_cleaner"))

    def disable_auto_type_registration(self) -> ExecutionConfig:
        """Accepted and kept: weir registers no types with serializers (records travel as
        Arrow columns or pickles)."""
        return self._set("auto_type_registration", False)

    def is_auto_type_registration_disabled(self) -> bool:
        return not self._setting("auto_type_registration")

    def enable_auto_generated_uids(self) -> ExecutionConfig:
        """Accepted and kept: weir derives a stable uid from every operator's position and
        name either way (an operator's ``uid()`` wins), and disabling this does not make a
        missing ``uid()`` an error as it does in Flink."""
        return self._set("auto_generated_uids", True)

    def disable_auto_generated_uids(self) -> ExecutionConfig:
        return self._set("auto_generated_uids", False)

    def has_auto_generated_uids_enabled(self) -> bool:
        return bool(self._setting("auto_generated_uids"))

    def set_latency_tracking_interval(self, interval: int) -> ExecutionConfig:
        """Accepted and kept: weir has no latency markers (the task metrics show busy and
        backpressured time instead)."""
        return self._set("latency_tracking_interval", int(interval))

    def get_latency_tracking_interval(self) -> int:
        """The interval set, in milliseconds (0, Flink's "off", until set)."""
        return int(self._setting("latency_tracking_interval"))

    def set_use_snapshot_compression(self, use_snapshot_compression: bool) -> ExecutionConfig:
        """Accepted and kept: weir writes keyed state snapshots uncompressed."""
        return self._set("snapshot_compression", bool(use_snapshot_compression))

    def is_use_snapshot_compression(self) -> bool:
        return bool(self._setting("snapshot_compression"))

    # -- serializers: records are Arrow columns or pickles ----------------------------------

    def add_default_kryo_serializer(self, type_class_name: Any, serializer_class_name: Any
                                    ) -> ExecutionConfig:
        """Accepted with a warning, without effect (as every Kryo, POJO and Avro setting):
        records travel as Arrow columns or pickles. The getters list what was registered."""
        warn_no_serializers("add_default_kryo_serializer")
        return self._add("default_kryo_serializers",
                         (_class_name(type_class_name), _class_name(serializer_class_name)))

    def register_type_with_kryo_serializer(self, type_class_name: Any,
                                           serializer_class_name: Any) -> ExecutionConfig:
        warn_no_serializers("register_type_with_kryo_serializer")
        return self._add("kryo_type_serializers",
                         (_class_name(type_class_name), _class_name(serializer_class_name)))

    def register_pojo_type(self, type_class_name: Any) -> ExecutionConfig:
        warn_no_serializers("register_pojo_type")
        return self._add("pojo_types", _class_name(type_class_name))

    def register_kryo_type(self, type_class_name: Any) -> ExecutionConfig:
        warn_no_serializers("register_kryo_type")
        return self._add("kryo_types", _class_name(type_class_name))

    def _add(self, name: str, entry: Any) -> ExecutionConfig:
        entries = self._setting(name)
        return self._set(name, entries if entry in entries else (*entries, entry))

    def get_default_kryo_serializer_classes(self) -> dict[str, str]:
        return dict(self._setting("default_kryo_serializers"))

    def get_registered_types_with_kryo_serializer_classes(self) -> dict[str, str]:
        return dict(self._setting("kryo_type_serializers"))

    def get_registered_pojo_types(self) -> list[str]:
        return list(self._setting("pojo_types"))

    def get_registered_kryo_types(self) -> list[str]:
        return list(self._setting("kryo_types"))

    def enable_force_kryo(self) -> ExecutionConfig:
        warn_no_serializers("enable_force_kryo")
        return self._set("force_kryo", True)

    def disable_force_kryo(self) -> ExecutionConfig:
        warn_no_serializers("disable_force_kryo")
        return self._set("force_kryo", False)

    def is_force_kryo_enabled(self) -> bool:
        return bool(self._setting("force_kryo"))

    def enable_force_avro(self) -> ExecutionConfig:
        warn_no_serializers("enable_force_avro")
        return self._set("force_avro", True)

    def disable_force_avro(self) -> ExecutionConfig:
        warn_no_serializers("disable_force_avro")
        return self._set("force_avro", False)

    def is_force_avro_enabled(self) -> bool:
        return bool(self._setting("force_avro"))

    def enable_generic_types(self) -> ExecutionConfig:
        warn_no_serializers("enable_generic_types")
        return self._set("generic_types_disabled", False)

    def disable_generic_types(self) -> ExecutionConfig:
        warn_no_serializers("disable_generic_types")
        return self._set("generic_types_disabled", True)

    def has_generic_types_disabled(self) -> bool:
        return bool(self._setting("generic_types_disabled"))

    # -- job parameters -----------------------------------------------------------------------

    def set_global_job_parameters(self, global_job_parameters_dict: Mapping[str, Any]
                                  ) -> ExecutionConfig:
        """Parameters every user function reads at run time with
        ``runtime_context.get_job_parameter(key, default_value)``. As in PyFlink, values
        that are not strings are stored as ``str(value)``, and the dict replaces any
        parameters set before (``pipeline.global-job-parameters``).

        Example:
            >>> from weir.datastream.stream_execution_environment import StreamExecutionEnvironment
            >>> config = StreamExecutionEnvironment.get_execution_environment().get_config()
            >>> config.set_global_job_parameters({"threshold": 5}).get_global_job_parameters()
            {'threshold': '5'}
        """
        parameters = {str(key): value if isinstance(value, str) else str(value)
                      for key, value in global_job_parameters_dict.items()}
        self._env.get_configuration().set_raw(options.GLOBAL_JOB_PARAMETERS.key,
                                              json.dumps(parameters, sort_keys=True))
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        """The job's global parameters (empty when none were set)."""
        return options.job_parameters(self._env.get_configuration())

    # -- equality -----------------------------------------------------------------------------

    def _state(self) -> tuple[Any, ...]:
        env = self._env
        settings = {**_DEFAULTS, **self._accepted}
        return (frozenset(env.get_configuration().to_dict().items()), env.get_parallelism(),
                env.get_max_parallelism(), tuple(sorted(settings.items())))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExecutionConfig):
            return NotImplemented
        return self._state() == other._state()

    def __hash__(self) -> int:
        return hash(self._state())


#: What the settings weir keeps without an option are until set: Flink's defaults.
_DEFAULTS: dict[str, Any] = {
    "object_reuse": False, "closure_cleaner": True, "auto_generated_uids": True,
    "auto_type_registration": True,
    "task_cancellation_interval": -1, "latency_tracking_interval": 0,
    "snapshot_compression": False, "force_kryo": False, "force_avro": False,
    "generic_types_disabled": False, "kryo_types": (), "pojo_types": (),
    "default_kryo_serializers": (), "kryo_type_serializers": (),
}

def warn_no_serializers(method: str, stacklevel: int = 3) -> None:
    """Say that a serializer setting changes nothing in weir."""
    warnings.warn(f"{method} has no effect: weir records travel as Arrow columns or pickles, "
                  "not through Kryo, POJO or Avro serializers", UserWarning,
                  stacklevel=stacklevel)


def _class_name(type_class: Any) -> str:
    """A class's full name: PyFlink passes Java class names; a Python class is named so."""
    if isinstance(type_class, str):
        return type_class
    return f"{type_class.__module__}.{type_class.__qualname__}"
