"""User metrics (PyFlink's ``pyflink.metrics``): the metric group a function's runtime
context gives, and the metrics registered in it (:mod:`weir.metrics.metricbase`).

Example:
    >>> from weir.datastream.functions import RuntimeContext
    >>> group = RuntimeContext("Map", 0, 1, 128, 0).get_metrics_group()
    >>> isinstance(group, MetricGroup), isinstance(group.counter("seen"), Counter)
    (True, True)
"""

from __future__ import annotations

from weir.metrics import metricbase as _metricbase
from weir.metrics.metricbase import Counter, Distribution, Meter, Metric, MetricGroup
from weir.unsupported import refusing

__all__ = ["Counter", "Distribution", "Meter", "Metric", "MetricGroup"]

__unsupported__ = _metricbase.__unsupported__
__getattr__ = refusing(__name__, __unsupported__)
