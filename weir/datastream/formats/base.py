"""PyFlink's ``pyflink.datastream.formats.base``: Java input formats, which weir does not
have.

Example:
    >>> sorted(__unsupported__)
    ['InputFormat']
"""

from __future__ import annotations

from weir.unsupported import FILES, refusing

__all__: list[str] = []

__unsupported__ = {"InputFormat": FILES}
__getattr__ = refusing(__name__, __unsupported__)
