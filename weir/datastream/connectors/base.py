"""The source and sink contracts (PyFlink's ``pyflink.datastream.connectors.base``): a
:class:`Source` (FLIP-27: a split enumerator on the JobMaster, readers in the tasks; defined
in :mod:`weir.core.source`, which the runtime drives), a source that needs work on the
client before submission (:class:`PreparedSource`), and a :class:`Sink`, which creates the
operator that writes a stream somewhere.

Example:
    >>> DiscardingSink().create_operator("Discard").name
    'Discard'
"""

from __future__ import annotations

from collections.abc import Callable

from weir.core.config import Configuration
from weir.core.source import Source, SourceReader, SplitAssignment, SplitEnumerator
from weir.operators.sinks.discarding import DiscardingSinkOperator
from weir.taskexecutor.operator import StreamOperator
from weir.unsupported import INTERNAL, refusing

__all__ = ["DiscardingSink", "Sink", "Source", "SourceReader", "SplitAssignment",
           "SplitEnumerator"]

#: Why a delivery guarantee is not chosen per sink.
DELIVERY = "it configures Java sinks; weir's FileSink is exactly once"

__unsupported__ = {
    "StreamTransformer": INTERNAL,
    "SupportsPreprocessing": INTERNAL,
    "DeliveryGuarantee": DELIVERY,
}
__getattr__ = refusing(__name__, __unsupported__)


class PreparedSource:
    """A source that needs work on the client before submission (e.g. running Spark).

    ``prepare`` returns the Source to ship and a cleanup to run when the job ends.
    """

    name = "Prepared Source"
    fixed_parallelism: int | None = None
    #: Not runnable before ``prepare`` (a JobMaster refuses to start it unprepared).
    needs_preparation = True

    def prepare(self, configuration: Configuration) -> tuple[Source, Callable[[], None]]:
        raise NotImplementedError


class Sink:
    """Creates the operator that writes a stream somewhere."""

    name = "Sink"

    def create_operator(self, name: str) -> StreamOperator:
        raise NotImplementedError


class DiscardingSink(Sink):
    """Drops every record (for benchmarks)."""

    name = "Discard"

    def create_operator(self, name: str) -> StreamOperator:
        return DiscardingSinkOperator(name)
