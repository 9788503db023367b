"""How records become bytes (PyFlink's ``pyflink.common.serialization``): weir has one
such thing, the :class:`Encoder` of a row-format file sink; records travel between tasks
as Arrow columns or pickles, so there are no serialization schemas.

Example:
    >>> Encoder.simple_string_encoder().encode(("a", 1))
    "('a', 1)"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from weir.core.errors import InvalidJobError
from weir.unsupported import FILES, SCHEMAS, refusing

__all__ = ["Encoder"]

__unsupported__ = {
    "SerializationSchema": SCHEMAS,
    "DeserializationSchema": SCHEMAS,
    "SimpleStringSchema": SCHEMAS,
    "BulkWriterFactory": FILES,
}
__getattr__ = refusing(__name__, __unsupported__)


class Encoder:
    """How a row-format file sink turns a record into a line (PyFlink's ``Encoder``).

    Example:
        >>> Encoder.simple_string_encoder().encode(("a", 1))
        "('a', 1)"
    """

    def __init__(self, encode: Callable[[Any], str] = str) -> None:
        self.encode = encode

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        """One line per record: ``str(record)`` (PyFlink writes Java's ``toString()``),
        UTF-8 encoded."""
        if charset_name.upper().replace("-", "") != "UTF8":
            msg = f"weir's file sink writes UTF-8 text only, got charset {charset_name!r}"
            raise InvalidJobError(msg)
        return Encoder()
