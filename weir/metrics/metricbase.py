"""User metrics (PyFlink's ``pyflink.metrics.metricbase``): a function's ``open``
registers counters, gauges, meters and distributions in
``runtime_context.get_metrics_group()``, and the TaskExecutor running the task serves them
on its Prometheus endpoint (``/metrics``).

Naming: a metric is called ``weir_user_<group path>_<name>``, the group path being the
names given to :meth:`MetricGroup.add_group` joined by ``_``, and every character that
Prometheus does not allow replaced by ``_``. Each sample carries the labels ``job_id``,
``task`` (the task's name) and ``subtask_index``, then one label per key/value group
(``add_group(key, value)``: the key names the label, the value is its value, and only the
key is part of the metric's name). A task's metrics disappear from the endpoint when the
task ends, finished, failed or cancelled.

What a scrape shows:

* a counter: a gauge (it may go down, as Flink's Prometheus reporter shows counters);
* a gauge: what its function returns when the endpoint is scraped;
* a meter: ``<name>``, events per second over its time span, and ``<name>_events_total``,
  the events marked;
* a distribution: ``<name>_count`` and ``<name>_sum`` (a summary without quantiles), and
  once it saw a value, ``<name>_min`` and ``<name>_max``.

Metrics are updated by the task's thread (in the function's methods) and read by the
endpoint's thread without a lock: an update is a plain assignment, and a scrape sees the
value of the last one.

Example:
    >>> from weir.datastream.functions import MapFunction
    >>> class CountingMap(MapFunction):
    ...     def open(self, runtime_context):
    ...         group = runtime_context.get_metrics_group().add_group("parser")
    ...         self.records = group.counter("records")          # weir_user_parser_records
    ...         self.sizes = group.distribution("record_size")   # weir_user_parser_record_size
    ...     def map(self, value):
    ...         self.records.inc()
    ...         self.sizes.update(len(value))
    ...         return value
    >>> from weir.datastream.functions import RuntimeContext
    >>> fn = CountingMap()
    >>> fn.open(RuntimeContext("Map", 0, 1, 128, 0))  # outside a task: not exported
    >>> fn.map("abc"), fn.records.get_count()
    ('abc', 1)
"""

from __future__ import annotations

import logging
import numbers
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from weir.core.errors import InternalError
from weir.taskexecutor.user_metrics import MetricRegistry, MetricScope
from weir.unsupported import refusing

if TYPE_CHECKING:
    from weir.taskexecutor.user_metrics import MetricRows

__all__ = ["Counter", "Distribution", "Meter", "Metric", "MetricGroup"]

__unsupported__ = {
    "MetricGroupType": "it is PyFlink-internal; use RuntimeContext.get_metrics_group()",
    "GenericMetricGroup": "it is PyFlink-internal; use RuntimeContext.get_metrics_group()",
}
__getattr__ = refusing(__name__, __unsupported__)

log = logging.getLogger(__name__)

M = TypeVar("M", bound="Metric")

#: What every user metric's name starts with.
PREFIX = "weir_user"
#: Labels a key/value group cannot name (besides the task's own labels).
_RESERVED_LABELS = frozenset({"quantile", "le"})
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_]")
#: The clock of meters (seconds, monotonic); tests replace it.
_now: Callable[[], float] = time.monotonic


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name:
        msg = f"a {what} needs a non-empty string name, got {name!r}"
        raise ValueError(msg)
    return name


def _metric_part(text: str) -> str:
    """``text`` with every character Prometheus does not allow in a name made ``_``."""
    return _NOT_ALLOWED.sub("_", text)


def _label_name(key: str) -> str:
    """The Prometheus label for the key of a key/value group."""
    label = _NOT_ALLOWED.sub("_", key)
    if label[0].isdigit():
        label = "_" + label
    if label.startswith("__"):  # reserved for Prometheus' own labels
        label = "_" + label.lstrip("_")
    return label


class MetricGroup:
    """A named container of metrics and of further groups (PyFlink's ``MetricGroup``).

    Get the task's group from ``runtime_context.get_metrics_group()`` in a function's
    ``open``; ``MetricGroup(scope)`` makes a group over a scope of a
    :class:`~weir.taskexecutor.user_metrics.MetricRegistry` (tests), and ``MetricGroup()``
    one whose metrics nothing exports.

    Registering a metric of a name the group already has returns that metric (a gauge:
    its new function replaces the old one), as PyFlink does; the same name for another
    kind of metric raises ValueError.

    Example:
        >>> group = MetricGroup().add_group("shard", 3)
        >>> group.get_metric_identifier("lag"), group.get_all_variables()["shard"]
        ('weir_user_shard_lag', '3')
        >>> hits = group.counter("hits")
        >>> hits.inc(2); hits.dec(); hits.get_count()
        1
        >>> group.counter("hits") is hits
        True
    """

    def __init__(self, scope: MetricScope | None = None) -> None:
        self._scope = scope if scope is not None else MetricRegistry().scope(
            job_id="", task="", subtask_index="0")
        #: The group names (made legal), and the labels of the key/value groups on the way.
        self._path: tuple[str, ...] = ()
        self._variables: tuple[tuple[str, str], ...] = ()
        self._groups: dict[tuple[str, str | None], MetricGroup] = {}

    def add_group(self, name: str, extra: str | None = None) -> MetricGroup:
        """A subgroup named ``name``; with ``extra``, a key/value pair: the group whose
        metrics carry the label ``name`` (made a legal label name) with the value
        ``extra``, and whose metric names include ``name`` but not ``extra``.

        Example:
            >>> MetricGroup().add_group("io").add_group("partition", "7") \\
            ...     .get_metric_identifier("bytes")
            'weir_user_io_partition_bytes'
        """
        _check_name(name, "metric group")
        value = None if extra is None else str(extra)
        group = self._groups.get((name, value))
        if group is not None:
            return group
        variables = self._variables
        if value is not None:
            label = _label_name(name)
            if label in self._scope.labels or label in _RESERVED_LABELS:
                msg = (f"add_group({name!r}, {extra!r}): the label {label!r} is reserved; "
                       "choose another key")
                raise ValueError(msg)
            variables = (*((k, v) for k, v in variables if k != label), (label, value))
        group = MetricGroup(self._scope)
        group._path = (*self._path, _metric_part(name))
        group._variables = variables
        self._groups[(name, value)] = group
        return group

    def counter(self, name: str) -> Counter:
        """Register a :class:`Counter` named ``name`` (or get the one registered)."""
        return self._register(name, "counter", Counter())

    def gauge(self, name: str, obj: Callable[[], int | float]) -> None:
        """Register a gauge: ``obj()`` (an int or float) is read whenever the endpoint is
        scraped, on the endpoint's thread; a call that raises, or returns something else,
        leaves the gauge out of that scrape.

        Example:
            >>> queue = [1, 2]
            >>> MetricGroup().gauge("queue_length", lambda: len(queue))
        """
        if not callable(obj):
            msg = f"gauge({name!r}, obj) needs a function returning a number, got {obj!r}"
            raise TypeError(msg)
        self._register(name, "gauge", _Gauge(obj), replace=True)

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        """Register a :class:`Meter` named ``name`` whose rate is measured over the last
        ``time_span_in_seconds`` (or get the one registered, whatever its span)."""
        return self._register(name, "meter", Meter(time_span_in_seconds))

    def distribution(self, name: str) -> Distribution:
        """Register a :class:`Distribution` named ``name`` (or get the one registered)."""
        return self._register(name, "distribution", Distribution())

    def get_metric_identifier(self, metric_name: str) -> str:
        """The Prometheus name of the metric ``metric_name`` of this group."""
        _check_name(metric_name, "metric")
        return "_".join((PREFIX, *self._path, _metric_part(metric_name)))

    def get_all_variables(self) -> dict[str, str]:
        """The labels of this group's metrics: the task's and its key/value groups'."""
        return {**self._scope.labels, **dict(self._variables)}

    def _register(self, name: str, kind: str, metric: M, replace: bool = False) -> M:
        """Register ``metric`` as ``name`` of this group, or get the metric registered
        there: one of the same class, as a name stands for one ``kind`` of metric."""
        registered = self._scope.register(self.get_metric_identifier(name), self._variables,
                                          kind, metric, replace)
        if not isinstance(registered, type(metric)):
            msg = (f"the {kind} {name} is registered as a {type(registered).__name__}, not a "
                   f"{type(metric).__name__}")
            raise InternalError(msg)
        return registered


class Metric:
    """Base of the user metrics."""

    __slots__ = ()

    def samples(self, name: str) -> MetricRows:
        """What a scrape shows of this metric exported as ``name``: ``(family, type,
        sample, value)`` rows, ``type`` a Prometheus metric type.

        Called by the TaskExecutor's metric registry on the thread serving ``/metrics``,
        while the task's thread updates the metric: it reads the values the metric holds
        at that moment, never blocks an update, and raises nothing but what a broken
        metric raises (the registry then leaves it out of that scrape).

        Example:
            >>> counter = Counter()
            >>> counter.inc(3)
            >>> list(counter.samples("weir_user_hits"))
            [('weir_user_hits', 'gauge', 'weir_user_hits', 3)]
        """
        raise NotImplementedError


class Counter(Metric):
    """A count that goes up and down (PyFlink's ``Counter``).

    Example:
        >>> c = MetricGroup().counter("retries")
        >>> c.inc(); c.inc(5); c.dec(2); c.get_count()
        4
    """

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count: int | float = 0

    def inc(self, n: int = 1) -> None:
        """Add ``n``."""
        self._count += n

    def dec(self, n: int = 1) -> None:
        """Subtract ``n``."""
        self._count -= n

    def get_count(self) -> int | float:
        return self._count

    def samples(self, name: str) -> MetricRows:
        return ((name, "gauge", name, self._count),)


class _Gauge(Metric):
    """A function read at scrape time (``MetricGroup.gauge``)."""

    __slots__ = ("_read", "_warned")

    def __init__(self, read: Callable[[], object]) -> None:
        self._read = read
        self._warned = False

    def samples(self, name: str) -> MetricRows:
        try:
            value = self._read()
        except Exception as err:  # the user's function: leave the gauge out of this scrape
            self._warn(name, f"its function raised {type(err).__name__}: {err}")
            return ()
        if not isinstance(value, numbers.Real):
            self._warn(name, f"its function returned {value!r}, not a number")
            return ()
        return ((name, "gauge", name, float(value)),)

    def _warn(self, name: str, problem: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("the gauge %s is left out of the metrics: %s", name, problem)


class Meter(Metric):
    """Counts events and measures their rate (PyFlink's ``Meter``): events per second over
    the last ``time_span_in_seconds``.

    The rate is measured by its reads (each scrape of the endpoint, or :meth:`get_rate`):
    over the span before the read when an earlier read is that old, else since the oldest
    read (or the meter's creation).

    Example:
        >>> m = MetricGroup().meter("requests", time_span_in_seconds=30)
        >>> m.mark_event(); m.mark_event(4); m.get_count()
        5
    """

    __slots__ = ("_clock", "_count", "_history", "_lock", "_span")

    def __init__(self, time_span_in_seconds: int = 60,
                 clock: Callable[[], float] | None = None) -> None:
        if not isinstance(time_span_in_seconds, numbers.Real) or time_span_in_seconds <= 0:
            msg = f"a meter's time span must be positive seconds, got {time_span_in_seconds!r}"
            raise ValueError(msg)
        self._count: int | float = 0
        self._span: float = float(time_span_in_seconds)
        self._clock: Callable[[], float] = clock or _now
        #: Guards the history, which only reads touch (never mark_event).
        self._lock: threading.Lock = threading.Lock()
        self._history: deque[tuple[float, int | float]] = deque([(self._clock(), 0)])

    def mark_event(self, value: int = 1) -> None:
        """Mark ``value`` events."""
        self._count += value

    def get_count(self) -> int | float:
        """The events marked so far."""
        return self._count

    def get_rate(self) -> float:
        """Events per second over the time span (see the class)."""
        with self._lock:
            now, count = self._clock(), self._count
            history = self._history
            # At most about 60 samples per span, however often the meter is read.
            if now - history[-1][0] >= self._span / 60:
                history.append((now, count))
            while len(history) > 1 and history[1][0] <= now - self._span:
                history.popleft()
            start, base = history[0]
        return (count - base) / (now - start) if now > start else 0.0

    def samples(self, name: str) -> MetricRows:
        count = self._count
        return ((name, "gauge", name, self.get_rate()),
                (f"{name}_events", "counter", f"{name}_events_total", count))


class Distribution(Metric):
    """Statistics of the values it is given (PyFlink's ``Distribution``): exported as
    their count, sum, minimum and maximum.

    Example:
        >>> d = MetricGroup().distribution("batch_size")
        >>> for n in (3, 9, 6):
        ...     d.update(n)
    """

    __slots__ = ("_state",)

    def __init__(self) -> None:
        #: (count, sum, min, max), replaced as a whole: a scrape never sees half an update.
        self._state: tuple[int, float, float | None, float | None] = (0, 0, None, None)

    def update(self, value: int) -> None:
        """Add ``value`` to the distribution."""
        count, total, low, high = self._state
        self._state = (count + 1, total + value,
                       value if low is None or value < low else low,
                       value if high is None or value > high else high)

    def samples(self, name: str) -> MetricRows:
        count, total, low, high = self._state
        rows: list[tuple[str, str, str, float]] = [
            (name, "summary", f"{name}_count", count), (name, "summary", f"{name}_sum", total)]
        if low is not None and high is not None:  # once it saw a value
            rows += [(f"{name}_min", "gauge", f"{name}_min", low),
                     (f"{name}_max", "gauge", f"{name}_max", high)]
        return rows


def task_metric_group(scope: MetricScope | None, task_name: str,
                      subtask_index: int) -> MetricGroup:
    """The root group of a task's functions: over the task's ``scope``, or (None: outside
    a task) over a scope of its own, labelled with ``task_name`` and ``subtask_index``,
    that nothing exports."""
    if scope is None:
        scope = MetricRegistry().scope(job_id="", task=task_name,
                                       subtask_index=str(subtask_index))
    return MetricGroup(scope)
