"""A job's configuration (PyFlink's ``pyflink.common.configuration``), defined in
:mod:`weir.core.config` with the options every process reads.

Example:
    >>> Configuration().set_integer("parallelism.default", 4).get_integer(
    ...     "parallelism.default", 1)
    4
"""

from __future__ import annotations

from weir.core.config import Configuration

__all__ = ["Configuration"]
