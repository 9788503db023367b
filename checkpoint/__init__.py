"""Checkpoint storage (file:// and s3://) and, later, checkpoint coordination."""

from weir.checkpoint.storage import CheckpointStorageAccess, StreamStateHandle, create_storage

__all__ = ["CheckpointStorageAccess", "StreamStateHandle", "create_storage"]
