"""Rows (PyFlink's ``pyflink.common.types``): :class:`Row` and :class:`RowKind`, defined in
:mod:`weir.core.row`, where the runtime encodes them.

Example:
    >>> Row(user="u1", clicks=2).clicks
    2
"""

from __future__ import annotations

from weir.core.row import Row, RowKind

__all__ = ["Row", "RowKind"]
