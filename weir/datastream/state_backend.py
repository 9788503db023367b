"""PyFlink's state backend objects (``pyflink.datastream.state_backend``), for
``env.set_state_backend``: each sets weir's configuration options (``state.backend.type``,
``state.backend.incremental``, and ``state.checkpoints.dir`` for the deprecated ones that
take a checkpoint path).

Example:
    >>> from weir.datastream.stream_execution_environment import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.set_state_backend(EmbeddedRocksDBStateBackend(True)).get_configuration().to_dict()[
    ...     "state.backend.type"]
    'rocksdb'
"""

from __future__ import annotations

from typing import Any

from weir.datastream.checkpoint_storage import with_checkpoint_dir
from weir.unsupported import refusing

__all__ = ["EmbeddedRocksDBStateBackend", "FsStateBackend", "HashMapStateBackend",
           "MemoryStateBackend", "RocksDBStateBackend", "StateBackend"]

__unsupported__ = {
    "CustomStateBackend": "state backends are hashmap and rocksdb (HashMapStateBackend, "
                          "EmbeddedRocksDBStateBackend)",
    "PredefinedOptions": "RocksDB is tuned through state.backend.rocksdb.* options",
}
__getattr__ = refusing(__name__, __unsupported__)


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
        return with_checkpoint_dir(super().options(), self.checkpoint_path)


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
        return with_checkpoint_dir(super().options(), self.checkpoint_path)


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
        return with_checkpoint_dir(super().options(), self.checkpoint_path)


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
