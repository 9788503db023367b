"""weir: a distributed stream-processing engine built around fault tolerance.

Everything a job program needs is importable from here: the names of the API's modules
listed in :data:`API_MODULES` (each one's ``__all__``), as ``from weir import X`` or under
PyFlink's paths (``from weir.datastream.functions import MapFunction``), the same object
either way. Names are loaded on first use (PEP 562), so that importing one module of the
package — ``weir.core.time`` from ``state/``, say — does not load the whole API, which
itself depends on ``state/``.

Example:
    >>> from weir import StreamExecutionEnvironment, Row, Types
    >>> Row(user="u1", clicks=2).clicks
    2
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from weir import unsupported as _unsupported

__version__ = "0.1.0"

#: The modules whose names ``weir`` has, the first one's where two have a name.
API_MODULES = ("weir.common", "weir.datastream", "weir.datastream.state",
               "weir.datastream.connectors", "weir.metrics")

# PyFlink's metric classes stay in weir.metrics: ``from weir import *`` must not shadow
# collections.Counter, say.
__getattr__, __dir__ = _unsupported.lazy_names(
    __name__, API_MODULES, hidden={"Counter", "Distribution", "Meter", "Metric"},
    refuse_unsupported=False)

# PyFlink's packages weir has no part of: their modules import, and each of their names
# is refused in one line saying what to use instead.
_unsupported.refuse_modules({
    "weir.table": _unsupported.missing_package(
        "Table API or SQL", "write the job with the DataStream API (weir.datastream); Spark "
                            "SQL can prepare its input (from_spark)"),
    "weir.java_gateway": _unsupported.missing_package(
        "Java gateway (Py4J)", "it runs no JVM: use Python only"),
}, packages=True)

if _TYPE_CHECKING:  # the names, for type checkers
    from weir.common import *  # noqa: F403
    from weir.datastream import *  # noqa: F403
    from weir.datastream.connectors import *  # noqa: F403
    from weir.datastream.state import *  # noqa: F403
    from weir.metrics import MetricGroup as MetricGroup
