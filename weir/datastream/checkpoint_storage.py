"""Where checkpoints are written (PyFlink's ``pyflink.datastream.checkpoint_storage``), for
``CheckpointConfig.set_checkpoint_storage``: each sets ``state.checkpoints.dir``.

Example:
    >>> JobManagerCheckpointStorage().options()
    {}
"""

from __future__ import annotations

from weir.unsupported import refusing

__all__ = ["CheckpointStorage", "FileSystemCheckpointStorage", "JobManagerCheckpointStorage"]

__unsupported__ = {
    "CustomCheckpointStorage": "checkpoints go to file:// or s3:// "
                               "(FileSystemCheckpointStorage)",
}
__getattr__ = refusing(__name__, __unsupported__)


class CheckpointStorage:
    """Where checkpoints are written (``state.checkpoints.dir``), for
    ``CheckpointConfig.set_checkpoint_storage``."""

    def __init__(self, checkpoint_path: str | None) -> None:
        self.checkpoint_path = checkpoint_path

    def options(self) -> dict[str, str]:
        return with_checkpoint_dir({}, self.checkpoint_path)


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


def with_checkpoint_dir(options: dict[str, str], path: str | None) -> dict[str, str]:
    """``options`` with ``state.checkpoints.dir`` set to ``path``, if one is given."""
    return {**options, "state.checkpoints.dir": path} if path else options
