"""The user metrics of a TaskExecutor's tasks (``RuntimeContext.get_metrics_group()``,
:mod:`weir.metrics`): one :class:`MetricRegistry` per TaskExecutor, served on its
/metrics endpoint, and one :class:`MetricScope` per task, closed when the task ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from weir.core.metric_names import label_value

log = logging.getLogger(__name__)

#: What a registered metric reads at scrape time: ``(family, type, sample, value)`` rows,
#: ``type`` a Prometheus metric type ("gauge", "counter" or "summary").
MetricRows = Iterable[tuple[str, str, str, float]]


class ExportedMetric(Protocol):
    """A user metric (``weir.metrics.Metric``) as the registry reads it."""

    def samples(self, name: str) -> MetricRows:
        """The rows a scrape shows of the metric exported as ``name``. Called on the
        scraping thread while the task thread updates the metric, so it reads, never locks
        out the updates; what it raises leaves the metric out of that scrape."""
        ...


@dataclass
class _Registration:
    owner: MetricScope
    kind: str
    metric: ExportedMetric


class MetricRegistry(Collector):
    """The user metrics of the tasks of one TaskExecutor, served on its /metrics endpoint.

    Each task registers its metrics in a :class:`MetricScope` of its own, whose labels (job,
    task, subtask) every metric of the task carries; the scope is closed when the task ends,
    which unregisters them. A scrape reads every metric through this one collector, so that
    the samples of equally named metrics of several tasks form one metric family.

    Registering and closing (task start and end, rare) take a lock; updating a metric takes
    none, and a scrape reads the values metrics hold at that moment.

    Example:
        >>> registry = MetricRegistry()
        >>> scope = registry.scope(job_id="j1", task="Map", subtask_index="0")
        >>> class Fixed:
        ...     def samples(self, name):
        ...         return [(name, "gauge", name, 7.0)]
        >>> _ = scope.register("weir_user_seven", (), "gauge", Fixed())
        >>> [(s.name, s.labels, s.value) for f in registry.collect() for s in f.samples]
        [('weir_user_seven', {'job_id': 'j1', 'task': 'Map', 'subtask_index': '0'}, 7.0)]
        >>> scope.close()
        >>> list(registry.collect())
        []
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (name, every label as (name, value)) -> what is registered there.
        self._entries: dict[tuple[str, tuple[tuple[str, str], ...]], _Registration] = {}
        #: Metric name -> (kind, registrations): a name stands for one kind of metric.
        self._kinds: dict[str, tuple[str, int]] = {}
        self._failed: set[str] = set()

    def scope(self, **labels: str) -> MetricScope:
        """A new scope whose metrics carry ``labels`` (one task's job, name and subtask)."""
        return MetricScope(self, labels)

    def _register(self, owner: MetricScope, name: str, labels: tuple[tuple[str, str], ...],
                  kind: str, metric: ExportedMetric, replace: bool) -> ExportedMetric:
        key = (name, labels)
        with self._lock:
            if owner.closed:
                return metric
            current = self._entries.get(key)
            if current is not None and current.owner is owner:
                if current.kind != kind:
                    msg = (f"the metric {name} with labels {dict(labels)} is already a "
                           f"{current.kind}; it cannot also be a {kind}")
                    raise ValueError(msg)
                if replace:
                    current.metric = metric
                return current.metric
            if current is not None:
                # Left by an earlier attempt of the task, not closed yet: the new one wins.
                self._release(name)
                try:
                    self._claim(name, kind)
                except ValueError:
                    self._claim(name, current.kind)
                    raise
            else:
                self._claim(name, kind)
            self._entries[key] = _Registration(owner, kind, metric)
            owner._keys.append(key)
            return metric

    def _claim(self, name: str, kind: str) -> None:
        used = self._kinds.get(name)
        if used is not None and used[0] != kind:
            msg = (f"the metric name {name} is already used for a {used[0]} on this "
                   f"TaskExecutor; it cannot also name a {kind}")
            raise ValueError(msg)
        self._kinds[name] = (kind, (used[1] if used else 0) + 1)

    def _release(self, name: str) -> None:
        kind, count = self._kinds[name]
        if count > 1:
            self._kinds[name] = (kind, count - 1)
        else:
            del self._kinds[name]

    def _close(self, owner: MetricScope) -> None:
        with self._lock:
            owner.closed = True
            for key in owner._keys:
                current = self._entries.get(key)
                if current is not None and current.owner is owner:
                    del self._entries[key]
                    self._release(key[0])
            owner._keys.clear()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            entries = list(self._entries.items())
        families: dict[str, Metric] = {}
        for (name, labels), entry in entries:
            try:
                rows = list(entry.metric.samples(name))
            except Exception as err:  # a user's metric must not break the endpoint
                if name not in self._failed:
                    self._failed.add(name)
                    log.warning("cannot read the user metric %s: %s", name, err)
                continue
            values = {key: label_value(value) for key, value in labels}
            for family_name, kind, sample, value in rows:
                family = families.get(family_name)
                if family is None:
                    family = families[family_name] = Metric(
                        family_name, "User metric (RuntimeContext.get_metrics_group()).", kind)
                elif family.type != kind:
                    continue  # two metrics whose derived names meet: the first one shows
                family.add_sample(sample, values, value)
        return list(families.values())


class MetricScope:
    """The user metrics of one task in a :class:`MetricRegistry` (see there)."""

    def __init__(self, registry: MetricRegistry, labels: dict[str, str]) -> None:
        self._registry = registry
        #: The labels every metric of the scope carries, first.
        self.labels = dict(labels)
        self._keys: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        self.closed = False

    def register(self, name: str, labels: tuple[tuple[str, str], ...], kind: str,
                 metric: ExportedMetric, replace: bool = False) -> ExportedMetric:
        """Export ``metric`` as ``name`` with the scope's labels and then ``labels``, and
        return it; or the metric of this scope already registered there (``replace``:
        put ``metric`` in its place). Raises ValueError if ``name`` is a metric of
        another ``kind`` on this TaskExecutor. After :meth:`close`, nothing is exported."""
        return self._registry._register(self, name, (*self.labels.items(), *labels), kind,
                                        metric, replace)

    def close(self) -> None:
        """Unregister every metric of the scope (the task ended)."""
        self._registry._close(self)
