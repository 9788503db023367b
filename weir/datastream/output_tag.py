"""Side outputs' names (PyFlink's ``pyflink.datastream.output_tag``).

Example:
    >>> OutputTag("late").tag_id
    'late'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from weir.core.types import TypeInformation

__all__ = ["OutputTag"]


class OutputTag:
    """Names a side output (PyFlink's OutputTag): a process function emits to it with
    ``yield tag, value`` (or ``ctx.output(tag, value)``), and ``get_side_output(tag)``
    on its stream reads it.

    Example:
        >>> errors = OutputTag("errors")
        >>> errors == OutputTag("errors"), errors.tag_id
        (True, 'errors')
    """

    def __init__(self, tag_id: str, type_info: TypeInformation | None = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            msg = f"an OutputTag needs a non-empty string id, got {tag_id!r}"
            raise ValueError(msg)
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"
