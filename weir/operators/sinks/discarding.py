"""The discarding sink's operator: it drops every record (benchmarks, and jobs run for
their side effects).

Example:
    >>> DiscardingSinkOperator("Discard").process(None)
"""

from __future__ import annotations

from weir.core.records import Elements
from weir.taskexecutor.operator import StreamOperator


class DiscardingSinkOperator(StreamOperator):
    """Drops everything (benchmarks)."""

    def process(self, elements: Elements, input_index: int = 0) -> None:
        return
