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

from typing import Any

from weir.core.time import to_millis


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
    """A restart strategy's options (``restart-strategy.*``)."""

    def __init__(self, options: dict[str, str]) -> None:
        self._options = options

    def options(self) -> dict[str, str]:
        return dict(self._options)


def _ms(value: Any) -> str:
    return f"{to_millis(value)} ms"


class RestartStrategies:
    """PyFlink's restart strategy builders."""

    @staticmethod
    def no_restart() -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration({"restart-strategy.type": "none"})

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts: Any
                            ) -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration({
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": str(restart_attempts),
            "restart-strategy.fixed-delay.delay": _ms(delay_between_attempts)})

    @staticmethod
    def failure_rate_restart(failure_rate: int, failure_interval: Any,
                             delay_interval: Any) -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration({
            "restart-strategy.type": "failure-rate",
            "restart-strategy.failure-rate.max-failures-per-interval": str(failure_rate),
            "restart-strategy.failure-rate.failure-rate-interval": _ms(failure_interval),
            "restart-strategy.failure-rate.delay": _ms(delay_interval)})

    @staticmethod
    def exponential_delay_restart(initial_backoff: Any, max_backoff: Any,
                                  backoff_multiplier: float, reset_backoff_threshold: Any = None,
                                  jitter_factor: float | None = None
                                  ) -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration({
            "restart-strategy.type": "exponential-delay",
            "restart-strategy.exponential-delay.initial-backoff": _ms(initial_backoff),
            "restart-strategy.exponential-delay.max-backoff": _ms(max_backoff),
            "restart-strategy.exponential-delay.backoff-multiplier": str(backoff_multiplier)})
