"""What happens to retained checkpoints when a job ends (PyFlink's
``pyflink.datastream.externalized_checkpoint_retention``).

Example:
    >>> ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION.value
    'RETAIN_ON_CANCELLATION'
"""

from __future__ import annotations

import enum

__all__ = ["ExternalizedCheckpointRetention"]


class ExternalizedCheckpointRetention(enum.Enum):
    """What happens to retained checkpoints when the job ends (it finishing deletes them
    in every case)."""

    DELETE_ON_CANCELLATION = "DELETE_ON_CANCELLATION"
    RETAIN_ON_CANCELLATION = "RETAIN_ON_CANCELLATION"
    NO_EXTERNALIZED_CHECKPOINTS = "NO_EXTERNALIZED_CHECKPOINTS"
