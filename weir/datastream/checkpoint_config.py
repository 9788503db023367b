"""Checkpointing from a job program (PyFlink's ``pyflink.datastream.checkpoint_config``):
``env.enable_checkpointing`` and ``env.get_checkpoint_config()``.

Every setter writes the option of the same meaning into the job's configuration
(``execution.checkpointing.*``), so a program and ``-D``/``weir.yaml`` settings are one
thing; what the program sets wins.

Example:
    >>> from weir import (CheckpointingMode, Duration, ExternalizedCheckpointRetention,
    ...                   StreamExecutionEnvironment)
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> _ = env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    >>> config = env.get_checkpoint_config()
    >>> _ = (config.enable_unaligned_checkpoints()     # setters chain, as in PyFlink
    ...      .set_aligned_checkpoint_timeout(Duration.of_seconds(1))
    ...      .set_externalized_checkpoint_retention(
    ...          ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION))
    >>> config.get_checkpoint_interval(), config.is_unaligned_checkpoints_enabled()
    (1000, True)
    >>> env.get_configuration().to_dict()["execution.checkpointing.aligned-checkpoint-timeout"]
    '1000 ms'
"""

from __future__ import annotations

from typing import Any

from weir.checkpoint import options as checkpoint_options
from weir.core.config import Configuration
from weir.core.errors import InvalidJobError
from weir.core.time import Duration, to_millis
from weir.datastream.checkpoint_storage import CheckpointStorage
from weir.datastream.checkpointing_mode import CheckpointingMode
from weir.datastream.externalized_checkpoint_retention import ExternalizedCheckpointRetention

__all__ = ["CheckpointConfig", "ExternalizedCheckpointCleanup"]


#: PyFlink 1.x's name of the same enum.
ExternalizedCheckpointCleanup = ExternalizedCheckpointRetention


#: Flink's Integer.MAX_VALUE: as many failed checkpoints as there may be.
_TOLERATE_ALL = 2**31 - 1


class CheckpointConfig:
    """The checkpoint settings of one environment's jobs (a view on its configuration).

    Setters return the config, so that calls chain as in PyFlink. The ``DEFAULT_*``
    constants are PyFlink's names for the defaults of weir's options (the same values as
    Flink's).
    """

    #: The checkpointing mode until one is set: exactly once.
    DEFAULT_MODE = CheckpointingMode(checkpoint_options.CHECKPOINTING_MODE.default_value())
    #: Milliseconds a checkpoint may take until it expires (10 minutes).
    DEFAULT_TIMEOUT = round(checkpoint_options.CHECKPOINTING_TIMEOUT.default_value() * 1000)
    #: Least milliseconds between one checkpoint's end and the next's trigger (none).
    DEFAULT_MIN_PAUSE_BETWEEN_CHECKPOINTS = round(
        checkpoint_options.MIN_PAUSE.default_value() * 1000)
    #: Checkpoints that may be in progress at once (one).
    DEFAULT_MAX_CONCURRENT_CHECKPOINTS = \
        checkpoint_options.MAX_CONCURRENT_CHECKPOINTS.default_value()

    def __init__(self, configuration: Configuration) -> None:
        self._config = configuration
        #: Settings weir accepts without an option of its own, for their getters.
        self._accepted: dict[str, bool] = {}

    def _set(self, option: Any, value: Any) -> None:
        self._config.set_raw(option.key, value)

    # -- interval and mode --------------------------------------------------------------

    def is_checkpointing_enabled(self) -> bool:
        return self._config.get(checkpoint_options.CHECKPOINTING_INTERVAL) is not None

    def set_checkpoint_interval(self, checkpoint_interval: int | Duration) -> CheckpointConfig:
        """Trigger a checkpoint every ``checkpoint_interval`` (milliseconds or Duration)."""
        interval = to_millis(checkpoint_interval)
        if interval <= 0:
            msg = f"the checkpoint interval must be positive, got {interval} ms"
            raise ValueError(msg)
        self._set(checkpoint_options.CHECKPOINTING_INTERVAL, f"{interval} ms")
        return self

    def get_checkpoint_interval(self) -> int:
        """The interval in milliseconds; -1 when checkpointing is off."""
        interval = self._config.get(checkpoint_options.CHECKPOINTING_INTERVAL)
        return -1 if interval is None else round(interval * 1000)

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode | str
                               ) -> CheckpointConfig:
        """EXACTLY_ONCE or AT_LEAST_ONCE (a CheckpointingMode or its name)."""
        mode = checkpointing_mode.value if isinstance(checkpointing_mode, CheckpointingMode) \
            else str(checkpointing_mode).upper()
        self._set(checkpoint_options.CHECKPOINTING_MODE, CheckpointingMode(mode).value)
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return CheckpointingMode(self._config.get(checkpoint_options.CHECKPOINTING_MODE))

    # -- timing ---------------------------------------------------------------------------

    def set_checkpoint_timeout(self, checkpoint_timeout: int | Duration) -> CheckpointConfig:
        self._set(checkpoint_options.CHECKPOINTING_TIMEOUT, f"{to_millis(checkpoint_timeout)} ms")
        return self

    def get_checkpoint_timeout(self) -> int:
        return round(self._config.get(checkpoint_options.CHECKPOINTING_TIMEOUT) * 1000)

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int | Duration
                                          ) -> CheckpointConfig:
        self._set(checkpoint_options.MIN_PAUSE, f"{to_millis(min_pause_between_checkpoints)} ms")
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return round(self._config.get(checkpoint_options.MIN_PAUSE) * 1000)

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int
                                       ) -> CheckpointConfig:
        self._set(checkpoint_options.MAX_CONCURRENT_CHECKPOINTS, max_concurrent_checkpoints)
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return int(self._config.get(checkpoint_options.MAX_CONCURRENT_CHECKPOINTS))

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int
                                                ) -> CheckpointConfig:
        self._set(checkpoint_options.TOLERABLE_FAILED_CHECKPOINTS,
                  tolerable_checkpoint_failure_number)
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return int(self._config.get(checkpoint_options.TOLERABLE_FAILED_CHECKPOINTS))

    def set_fail_on_checkpointing_errors(self, fail_on_checkpointing_errors: bool
                                         ) -> CheckpointConfig:
        """Deprecated in Flink for the tolerable failure number, which it sets: True is 0
        (the first failed checkpoint fails the job), False tolerates every failure."""
        return self.set_tolerable_checkpoint_failure_number(
            0 if fail_on_checkpointing_errors else _TOLERATE_ALL)

    def is_fail_on_checkpointing_errors(self) -> bool:
        return self.get_tolerable_checkpoint_failure_number() == 0

    def set_prefer_checkpoint_for_recovery(self, prefer_checkpoint_for_recovery: bool
                                           ) -> CheckpointConfig:
        """Deprecated in Flink; accepted and kept. weir recovers from the latest completed
        checkpoint; a savepoint is restored only when a job is started from it."""
        self._accepted["prefer_checkpoint"] = bool(
            prefer_checkpoint_for_recovery)
        return self

    def is_prefer_checkpoint_for_recovery(self) -> bool:
        return bool(self._accepted.get("prefer_checkpoint", False))

    # -- unaligned --------------------------------------------------------------------------

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> CheckpointConfig:
        self._set(checkpoint_options.UNALIGNED, "true" if enabled else "false")
        return self

    def disable_unaligned_checkpoints(self) -> CheckpointConfig:
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return bool(self._config.get(checkpoint_options.UNALIGNED))

    def set_aligned_checkpoint_timeout(self, alignment_timeout: int | Duration
                                       ) -> CheckpointConfig:
        """With unaligned checkpoints on: start aligned, switch to unaligned once a
        checkpoint has run this long (0: unaligned from the start)."""
        self._set(checkpoint_options.ALIGNED_CHECKPOINT_TIMEOUT,
                  f"{to_millis(alignment_timeout)} ms")
        return self

    def get_aligned_checkpoint_timeout(self) -> Duration:
        return Duration.of_millis(
            round(self._config.get(checkpoint_options.ALIGNED_CHECKPOINT_TIMEOUT) * 1000))

    def set_alignment_timeout(self, alignment_timeout: int | Duration) -> CheckpointConfig:
        """PyFlink 1.x's name of :meth:`set_aligned_checkpoint_timeout`."""
        return self.set_aligned_checkpoint_timeout(alignment_timeout)

    def get_alignment_timeout(self) -> Duration:
        """PyFlink 1.x's name of :meth:`get_aligned_checkpoint_timeout`."""
        return self.get_aligned_checkpoint_timeout()

    def set_force_unaligned_checkpoints(self, force_unaligned_checkpoints: bool = True
                                        ) -> CheckpointConfig:
        """Accepted and kept, without effect: Flink forces unaligned checkpoints past
        iteration feedback edges and custom partitioners, and weir has neither, so with
        unaligned checkpoints on every exchange takes them already."""
        self._accepted["force_unaligned"] = bool(force_unaligned_checkpoints)
        return self

    def is_force_unaligned_checkpoints(self) -> bool:
        return bool(self._accepted.get("force_unaligned", False))

    # -- retention and storage --------------------------------------------------------------

    def set_externalized_checkpoint_retention(
            self, retention_mode: ExternalizedCheckpointRetention | str) -> CheckpointConfig:
        value = retention_mode.value \
            if isinstance(retention_mode, ExternalizedCheckpointRetention) else str(retention_mode)
        self._set(checkpoint_options.EXTERNALIZED_RETENTION, value)
        return self

    def set_externalized_checkpoint_cleanup(
            self, cleanup_mode: ExternalizedCheckpointRetention | str) -> CheckpointConfig:
        """PyFlink 1.x's name of ``set_externalized_checkpoint_retention``."""
        return self.set_externalized_checkpoint_retention(cleanup_mode)

    def get_externalized_checkpoint_retention(self) -> ExternalizedCheckpointRetention:
        return ExternalizedCheckpointRetention(
            self._config.get(checkpoint_options.EXTERNALIZED_RETENTION))

    def is_externalized_checkpoints_enabled(self) -> bool:
        return self.get_externalized_checkpoint_retention() is not \
            ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS

    def enable_externalized_checkpoints(
            self, cleanup_mode: ExternalizedCheckpointRetention | str) -> CheckpointConfig:
        """PyFlink 1.x's way to retain checkpoints when the job ends: as
        :meth:`set_externalized_checkpoint_retention` (``RETAIN_ON_CANCELLATION`` or
        ``DELETE_ON_CANCELLATION``)."""
        return self.set_externalized_checkpoint_retention(cleanup_mode)

    def get_externalized_checkpoint_cleanup(self) -> ExternalizedCheckpointRetention | None:
        """The retention set (PyFlink 1.x's name); None when checkpoints are not retained.

        Example:
            >>> config = CheckpointConfig(Configuration())
            >>> config.get_externalized_checkpoint_cleanup() is None
            True
            >>> config.enable_externalized_checkpoints(
            ...     ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
            ... ).get_externalized_checkpoint_cleanup().name
            'RETAIN_ON_CANCELLATION'
        """
        retention = self.get_externalized_checkpoint_retention()
        return None if retention is ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS \
            else retention

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> CheckpointConfig:
        """Where checkpoints go: a ``file://`` path or ``s3://bucket/prefix``."""
        self._set(checkpoint_options.CHECKPOINTS_DIR, checkpoint_path)
        return self

    def set_checkpoint_storage(self, storage: CheckpointStorage) -> CheckpointConfig:
        """A :class:`~weir.datastream.checkpoint_storage.FileSystemCheckpointStorage` (or
        JobManagerCheckpointStorage with a path): where checkpoints go."""
        if not isinstance(storage, CheckpointStorage):
            msg = ("set_checkpoint_storage takes a FileSystemCheckpointStorage(path), got "
                   f"{type(storage).__name__}")
            raise InvalidJobError(msg)
        if storage.checkpoint_path:
            self.set_checkpoint_storage_dir(storage.checkpoint_path)
        self._storage = storage
        return self

    def get_checkpoint_storage(self) -> CheckpointStorage | None:
        return getattr(self, "_storage", None)

    def get_checkpoint_storage_dir(self) -> str | None:
        return self._config.get(checkpoint_options.CHECKPOINTS_DIR)
