"""PyFlink's ``pyflink.datastream.formats.json``: Java JSON schemas, which weir does not
have; ``FileSource(path, format="json")`` reads JSON lines.

Example:
    >>> sorted(__unsupported__)
    ['JsonRowDeserializationSchema', 'JsonRowSerializationSchema']
"""

from __future__ import annotations

from weir.unsupported import SCHEMAS, refusing

__all__: list[str] = []

__unsupported__ = dict.fromkeys(["JsonRowDeserializationSchema", "JsonRowSerializationSchema"],
                                SCHEMAS)
__getattr__ = refusing(__name__, __unsupported__)
