"""Type parameters on classes, written as PyFlink code writes them.

PyFlink declares its functions, windows, triggers and state classes generic, so programs
annotate and subclass them with parameters (``ProcessWindowFunction[IN, OUT, KEY, W]``,
``ValueState[int]``). In weir the parameters document the program and change nothing.

Example:
    >>> class Box(TypeParameters):
    ...     pass
    >>> Box[int] is Box
    True
"""

from __future__ import annotations

from typing import Any


class TypeParameters:
    """Mixin: ``Cls[params]`` is ``Cls`` itself."""

    def __class_getitem__(cls, params: Any) -> type:
        return cls
