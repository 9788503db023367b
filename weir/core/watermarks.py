"""Watermarks on the wire: the bounds of event time and the in-band event encoding.

A watermark ``w`` says that no record with timestamp ``<= w`` is expected any more. The
strategies that generate watermarks are user API (``weir.watermarks``); this module is what
the runtime needs to carry and compare them.

Example:
    >>> decode_watermark(encode_watermark(1_700_000_000_000))
    1700000000000
    >>> MIN_WATERMARK < 0 < MAX_WATERMARK
    True
"""

from __future__ import annotations

import struct

#: The smallest watermark: event time has not started.
MIN_WATERMARK = -(1 << 63)
#: The end of event time: every timer fires (sent when an input ends).
MAX_WATERMARK = (1 << 63) - 1
#: Marks a record without a timestamp inside a batch that otherwise has them.
NO_TIMESTAMP = MIN_WATERMARK

_WATERMARK = struct.Struct(">q")


def encode_watermark(watermark: int) -> bytes:
    """The payload of a watermark event: 8 bytes, big-endian, signed."""
    return _WATERMARK.pack(watermark)


def decode_watermark(payload: bytes) -> int:
    """The watermark carried by an event payload."""
    return int(_WATERMARK.unpack(payload)[0])
