"""PyFlink's state backend and restart strategy objects, for ``env.set_state_backend`` and
``env.set_restart_strategy``: each sets weir's configuration options
(``state.backend.type``, ``state.backend.incremental``, ``restart-strategy.*``).

Example:
    >>> from weir import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.set_state_backend(EmbeddedRocksDBStateBackend(True)).get_configuration().to_dict()[
    ...     "state.backend.type"]
    'rocksdb'
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from weir.core.config import Option
from weir.core.time import to_millis
from weir.jobmaster import options as jm_options


class StateBackend:
    """A state backend choice (``state.backend.type``)."""

    type_name = ""

    def options(self) -> dict[str, str]:
        return {"state.backend.type": self.type_name}


class HashMapStateBackend(StateBackend):
    """Keyed state in memory (``hashmap``)."""

    type_name = "hashmap"


class EmbeddedRocksDBStateBackend(StateBackend):
    """Keyed state in RocksDB (``rocksdb``), incremental checkpoints when asked."""

    type_name = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: bool | None = None) -> None:
        self.incremental = enable_incremental_checkpointing

    def options(self) -> dict[str, str]:
        options = super().options()
        if self.incremental is not None:
            options["state.backend.incremental"] = str(bool(self.incremental)).lower()
        return options

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self.incremental)


class MemoryStateBackend(HashMapStateBackend):
    """PyFlink's deprecated ``MemoryStateBackend``: state in memory (``hashmap``); the
    checkpoints go where ``state.checkpoints.dir`` says (weir keeps none in the JobMaster's
    memory)."""

    def __init__(self, checkpoint_path: str | None = None, savepoint_path: str | None = None,
                 max_state_size: int | None = None,
                 using_asynchronous_snapshots: bool | None = None) -> None:
        self.checkpoint_path = checkpoint_path

    def options(self) -> dict[str, str]:
        return _with_checkpoint_dir(super().options(), self.checkpoint_path)


class FsStateBackend(HashMapStateBackend):
    """PyFlink's deprecated ``FsStateBackend(checkpoint_directory_uri)``: state in memory
    (``hashmap``), checkpoints under ``checkpoint_directory_uri`` (``state.checkpoints.dir``).

    Example:
        >>> FsStateBackend("s3://bucket/ckpt").options()["state.checkpoints.dir"]
        's3://bucket/ckpt'
    """

    def __init__(self, checkpoint_directory_uri: str,
                 default_savepoint_directory_uri: str | None = None,
                 file_state_size_threshold: int | None = None,
                 write_buffer_size: int | None = None,
                 using_asynchronous_snapshots: bool | None = None) -> None:
        self.checkpoint_path = checkpoint_directory_uri

    def options(self) -> dict[str, str]:
        return _with_checkpoint_dir(super().options(), self.checkpoint_path)


class RocksDBStateBackend(EmbeddedRocksDBStateBackend):
    """PyFlink's deprecated ``RocksDBStateBackend(checkpoint_data_uri,
    enable_incremental_checkpointing)``: state in RocksDB, checkpoints under
    ``checkpoint_data_uri``."""

    def __init__(self, checkpoint_data_uri: str | None = None,
                 enable_incremental_checkpointing: bool | None = None,
                 checkpoint_stream_backend: Any = None) -> None:
        super().__init__(enable_incremental_checkpointing)
        self.checkpoint_path = checkpoint_data_uri

    def options(self) -> dict[str, str]:
        return _with_checkpoint_dir(super().options(), self.checkpoint_path)


def _with_checkpoint_dir(options: dict[str, str], path: str | None) -> dict[str, str]:
    return {**options, "state.checkpoints.dir": path} if path else options


def state_backend_named(name: str) -> StateBackend:
    """The backend object of a ``state.backend(.type)`` value, as Flink loads one from
    configuration (``jobmanager`` and ``filesystem`` are Flink's older names).

    >>> [type(state_backend_named(n)).__name__ for n in ("rocksdb", "jobmanager")]
    ['EmbeddedRocksDBStateBackend', 'MemoryStateBackend']
    """
    backends: dict[str, type[StateBackend]] = {
        "hashmap": HashMapStateBackend, "filesystem": HashMapStateBackend,
        "jobmanager": MemoryStateBackend, "rocksdb": EmbeddedRocksDBStateBackend}
    return backends.get(name.strip().lower(), HashMapStateBackend)()


class CheckpointStorage:
    """Where checkpoints are written (``state.checkpoints.dir``), for
    ``CheckpointConfig.set_checkpoint_storage``."""

    def __init__(self, checkpoint_path: str | None) -> None:
        self.checkpoint_path = checkpoint_path

    def options(self) -> dict[str, str]:
        return _with_checkpoint_dir({}, self.checkpoint_path)


class FileSystemCheckpointStorage(CheckpointStorage):
    """Checkpoints under a ``file://`` path or ``s3://bucket/prefix``.

    Example:
        >>> FileSystemCheckpointStorage("s3://bucket/ckpt").options()
        {'state.checkpoints.dir': 's3://bucket/ckpt'}
    """

    def __init__(self, checkpoint_path: str, file_state_size_threshold: int | None = None,
                 write_buffer_size: int = -1) -> None:
        super().__init__(checkpoint_path)


class JobManagerCheckpointStorage(CheckpointStorage):
    """PyFlink's in-JobManager-memory checkpoint storage. weir always writes checkpoints to
    files or S3 (so that a restarted JobMaster finds them): with a path this is
    :class:`FileSystemCheckpointStorage`; without one the cluster's
    ``state.checkpoints.dir`` applies."""

    def __init__(self, checkpoint_path: str | None = None,
                 max_state_size: int | None = None) -> None:
        super().__init__(checkpoint_path)


class RestartStrategyConfiguration:
    """A restart strategy's options (``restart-strategy.*``), as ``RestartStrategies``
    builds them. Two configurations are equal when they are of the same kind and set the
    same options, so ``env.get_restart_strategy() == RestartStrategies.no_restart()``
    holds after ``env.set_restart_strategy(RestartStrategies.no_restart())``.
    """

    def __init__(self, options: dict[str, str]) -> None:
        self._options = options

    def options(self) -> dict[str, str | None]:
        """The options to set: this strategy's, and None (unset) for every other
        ``restart-strategy.*`` key, so that a strategy replaces the one set before instead of
        leaving its settings behind."""
        return {**dict.fromkeys(_restart_keys()), **self._options}

    def get_description(self) -> str:
        """One line saying what a failed job does (as Flink's web interface shows it)."""
        return ", ".join(f"{key}={value}" for key, value in self._options.items())

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and \
            other._options == self._options  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, frozenset(self._options.items())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._options!r})"


def _restart_keys() -> list[str]:
    """Every ``restart-strategy.*`` option key (the JobMaster declares them)."""
    return [value.key for value in vars(jm_options).values()
            if isinstance(value, Option) and value.key.startswith("restart-strategy.")]


def _ms(value: Any) -> str:
    return f"{to_millis(value)} ms"


def _span(option: Option[Any], options: dict[str, str]) -> timedelta:
    """The duration ``options`` set for ``option`` (else its default), as PyFlink's getters
    give durations."""
    seconds = option.parse(options[option.key]) if option.key in options \
        else option.default_value()
    return timedelta(seconds=float(seconds))


class RestartStrategies:
    """PyFlink's restart strategy builders, and its configuration classes.

    Example:
        >>> strategy = RestartStrategies.fixed_delay_restart(3, 10_000)
        >>> strategy.get_restart_attempts(), strategy.get_delay_between_attempts_interval()
        (3, datetime.timedelta(seconds=10))
        >>> strategy == RestartStrategies.FixedDelayRestartStrategyConfiguration(3, 10_000)
        True
    """

    class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
        """A failed job fails for good (``restart-strategy.type: none``)."""

        def __init__(self) -> None:
            super().__init__({jm_options.RESTART_STRATEGY.key: "none"})

        def get_description(self) -> str:
            return "no restart: a failure fails the job"

    class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart up to ``restart_attempts`` times, ``delay_between_attempts_interval``
        (milliseconds, a timedelta or a Duration) after each failure."""

        def __init__(self, restart_attempts: int, delay_between_attempts_interval: Any) -> None:
            super().__init__({
                jm_options.RESTART_STRATEGY.key: "fixed-delay",
                jm_options.FIXED_DELAY_ATTEMPTS.key: str(int(restart_attempts)),
                jm_options.FIXED_DELAY_DELAY.key: _ms(delay_between_attempts_interval)})

        def get_restart_attempts(self) -> int:
            return int(self._options[jm_options.FIXED_DELAY_ATTEMPTS.key])

        def get_delay_between_attempts_interval(self) -> timedelta:
            return _span(jm_options.FIXED_DELAY_DELAY, self._options)

        def get_description(self) -> str:
            return (f"fixed delay: up to {self.get_restart_attempts()} restarts, "
                    f"{self._options[jm_options.FIXED_DELAY_DELAY.key]} after each failure")

    class FailureRateRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart ``delay_between_attempts_interval`` after a failure, unless more than
        ``max_failure_rate`` failures happened within ``failure_interval``."""

        def __init__(self, max_failure_rate: int, failure_interval: Any,
                     delay_between_attempts_interval: Any) -> None:
            super().__init__({
                jm_options.RESTART_STRATEGY.key: "failure-rate",
                jm_options.FAILURE_RATE_MAX_FAILURES.key: str(int(max_failure_rate)),
                jm_options.FAILURE_RATE_INTERVAL.key: _ms(failure_interval),
                jm_options.FAILURE_RATE_DELAY.key: _ms(delay_between_attempts_interval)})

        def get_max_failure_rate(self) -> int:
            return int(self._options[jm_options.FAILURE_RATE_MAX_FAILURES.key])

        def get_failure_interval(self) -> timedelta:
            return _span(jm_options.FAILURE_RATE_INTERVAL, self._options)

        def get_delay_between_attempts_interval(self) -> timedelta:
            return _span(jm_options.FAILURE_RATE_DELAY, self._options)

        def get_description(self) -> str:
            return (f"failure rate: restart unless more than {self.get_max_failure_rate()} "
                    f"failures within {self._options[jm_options.FAILURE_RATE_INTERVAL.key]}, "
                    f"{self._options[jm_options.FAILURE_RATE_DELAY.key]} after each failure")

    class ExponentialDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart after a delay that starts at ``initial_backoff`` and grows by
        ``backoff_multiplier`` up to ``max_backoff``; it starts over once the job ran
        ``reset_backoff_threshold`` without failing, and varies randomly by up to
        ``jitter_factor`` (the options' defaults where None)."""

        def __init__(self, initial_backoff: Any, max_backoff: Any, backoff_multiplier: float,
                     reset_backoff_threshold: Any = None,
                     jitter_factor: float | None = None) -> None:
            options = {
                jm_options.RESTART_STRATEGY.key: "exponential-delay",
                jm_options.EXPONENTIAL_INITIAL_BACKOFF.key: _ms(initial_backoff),
                jm_options.EXPONENTIAL_MAX_BACKOFF.key: _ms(max_backoff),
                jm_options.EXPONENTIAL_MULTIPLIER.key: str(float(backoff_multiplier))}
            if reset_backoff_threshold is not None:
                options[jm_options.EXPONENTIAL_RESET_THRESHOLD.key] = \
                    _ms(reset_backoff_threshold)
            if jitter_factor is not None:
                options[jm_options.EXPONENTIAL_JITTER.key] = str(float(jitter_factor))
            super().__init__(options)

        def get_initial_backoff(self) -> timedelta:
            return _span(jm_options.EXPONENTIAL_INITIAL_BACKOFF, self._options)

        def get_max_backoff(self) -> timedelta:
            return _span(jm_options.EXPONENTIAL_MAX_BACKOFF, self._options)

        def get_backoff_multiplier(self) -> float:
            return float(self._options[jm_options.EXPONENTIAL_MULTIPLIER.key])

        def get_reset_backoff_threshold(self) -> timedelta:
            return _span(jm_options.EXPONENTIAL_RESET_THRESHOLD, self._options)

        def get_jitter_factor(self) -> float:
            jitter = self._options.get(jm_options.EXPONENTIAL_JITTER.key)
            return float(jitter) if jitter is not None \
                else float(jm_options.EXPONENTIAL_JITTER.default_value())

        def get_description(self) -> str:
            return (f"exponential delay: from {self.get_initial_backoff()} up to "
                    f"{self.get_max_backoff()}, times {self.get_backoff_multiplier()} after "
                    f"each failure")

    class FallbackRestartStrategyConfiguration(RestartStrategyConfiguration):
        """The cluster's restart strategy: the job sets no ``restart-strategy.*`` option of
        its own (and unsets any set before), so the cluster's configuration decides."""

        def __init__(self) -> None:
            super().__init__({})

        def get_description(self) -> str:
            return "the cluster's restart strategy"

    @staticmethod
    def no_restart() -> RestartStrategies.NoRestartStrategyConfiguration:
        return RestartStrategies.NoRestartStrategyConfiguration()

    @staticmethod
    def fall_back_restart() -> RestartStrategies.FallbackRestartStrategyConfiguration:
        """Use the restart strategy the cluster is configured with (set nothing job-wide)."""
        return RestartStrategies.FallbackRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts: Any
                            ) -> RestartStrategies.FixedDelayRestartStrategyConfiguration:
        return RestartStrategies.FixedDelayRestartStrategyConfiguration(
            restart_attempts, delay_between_attempts)

    @staticmethod
    def failure_rate_restart(failure_rate: int, failure_interval: Any, delay_interval: Any
                             ) -> RestartStrategies.FailureRateRestartStrategyConfiguration:
        return RestartStrategies.FailureRateRestartStrategyConfiguration(
            failure_rate, failure_interval, delay_interval)

    @staticmethod
    def exponential_delay_restart(
            initial_backoff: Any, max_backoff: Any, backoff_multiplier: float,
            reset_backoff_threshold: Any = None, jitter_factor: float | None = None
    ) -> RestartStrategies.ExponentialDelayRestartStrategyConfiguration:
        return RestartStrategies.ExponentialDelayRestartStrategyConfiguration(
            initial_backoff, max_backoff, backoff_multiplier, reset_backoff_threshold,
            jitter_factor)
