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


class MapAccess:
    """Mixin: PyFlink's dict-style access to a map-like state with ``get``, ``put``,
    ``remove`` and ``contains``: ``state[key]`` (None when absent, as ``get``),
    ``state[key] = value``, ``del state[key]`` and ``key in state``.

    Example:
        >>> class Box(MapAccess):
        ...     def __init__(self): self.d = {}
        ...     def get(self, k): return self.d.get(k)
        ...     def put(self, k, v): self.d[k] = v
        ...     def remove(self, k): self.d.pop(k, None)
        ...     def contains(self, k): return k in self.d
        >>> box = Box(); box["a"] = 1
        >>> box["a"], "a" in box, box["b"]
        (1, True, None)
    """

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)  # type: ignore[attr-defined]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)  # type: ignore[attr-defined]

    def __delitem__(self, key: Any) -> None:
        self.remove(key)  # type: ignore[attr-defined]

    def __contains__(self, key: Any) -> bool:
        return bool(self.contains(key))  # type: ignore[attr-defined]
