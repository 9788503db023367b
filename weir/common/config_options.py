"""PyFlink's ``pyflink.common.config_options``: weir's options are set by key
(``Configuration().set_string(key, value)``); the typed options are weir's own
(:mod:`weir.core.options` and each subsystem's ``options`` module).

Example:
    >>> sorted(__unsupported__)
    ['ConfigOption', 'ConfigOptions']
"""

from __future__ import annotations

from weir.unsupported import refusing

_BY_KEY = "set options by key: Configuration().set_string(key, value)"

__all__: list[str] = []

__unsupported__ = {"ConfigOptions": _BY_KEY, "ConfigOption": _BY_KEY}
__getattr__ = refusing(__name__, __unsupported__)
