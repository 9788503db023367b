"""The checkpointing mode (PyFlink's ``pyflink.datastream.checkpointing_mode``).

Example:
    >>> CheckpointingMode("AT_LEAST_ONCE") is CheckpointingMode.AT_LEAST_ONCE
    True
"""

from __future__ import annotations

import enum

__all__ = ["CheckpointingMode"]


class CheckpointingMode(enum.Enum):
    """Exactly once (barriers aligned, or unaligned with in-flight data) or at least once
    (barriers never block an input)."""

    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"
