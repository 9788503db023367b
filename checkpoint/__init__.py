"""Checkpoint storage (file:// and s3://) and, later, checkpoint coordination."""

from weir.checkpoint.storage import CheckpointStorage, StreamStateHandle, create_storage

__all__ = ["CheckpointStorage", "StreamStateHandle", "create_storage"]
