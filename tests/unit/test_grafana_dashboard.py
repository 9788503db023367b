"""The Grafana dashboard (deploy/grafana/weir-dashboard.json) queries only what weir exports.

A dashboard over renamed or invented metrics shows empty panels and no error, so every
PromQL expression in it is checked against the one declaration the daemons export from
(weir/core/metric_names.py): metric names, and the labels each selector and grouping uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from weir.core.metric_names import BY_DAEMON

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "weir-dashboard.json"
PROMETHEUS_CONFIG = REPO / "deploy" / "grafana" / "prometheus.yml"

#: Metric name -> the labels the daemons export it with.
REGISTRY: dict[str, frozenset[str]] = {spec.name: frozenset(spec.labels)
                                       for _, specs in BY_DAEMON for spec in specs}
#: Labels Prometheus attaches to every sample of a scrape target (the TaskExecutor or
#: JobMaster is the target, so `instance` names it).
TARGET_LABELS = frozenset({"instance", "job"})
#: PromQL functions and aggregations the dashboard may call, and its keywords.
FUNCTIONS = frozenset({"sum", "min", "max", "avg", "count", "topk", "bottomk", "rate",
                       "irate", "increase", "delta", "deriv", "time", "label_values",
                       "abs", "clamp_min", "clamp_max", "avg_over_time", "max_over_time",
                       "min_over_time", "histogram_quantile", "vector", "scalar"})
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and",
                      "or", "unless", "bool", "offset"})
#: The dashboard's own datasource input, which the import dialog (or the datasource
#: variable of the same name, when provisioned from a file) fills in.
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^{}]*)\}")
_MATCHER = re.compile(r'^\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*$')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENTIFIER = re.compile(r"(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?")


def check_promql(expr: str) -> list[str]:
    """The problems of one PromQL expression: unknown metrics or functions, labels a
    metric lacks (in a selector, or in a grouping over the metrics of the expression)."""
    problems: list[str] = []
    used_metrics: set[str] = set()
    text = _RANGE.sub(" ", expr)
    # Selectors first: their matchers hold strings, which must not be read as names.
    for match in _SELECTOR.finditer(text):
        metric, body = match.group(1), match.group(2)
        allowed = REGISTRY.get(metric or "", frozenset()) | TARGET_LABELS
        for matcher in filter(str.strip, _split_matchers(body)):
            parsed = _MATCHER.match(matcher)
            if parsed is None:
                problems.append(f"cannot read the label matcher {matcher!r}")
            elif metric in REGISTRY and parsed.group(1) not in allowed:
                problems.append(f"label {parsed.group(1)!r} is not a label of {metric}")
    text = _SELECTOR.sub(lambda m: f" {m.group(1) or ''} ", text)
    text = _STRING.sub(" ", text)
    groupings = [(g.group(1), [n.strip() for n in g.group(2).split(",") if n.strip()])
                 for g in _GROUPING.finditer(text)]
    text = _GROUPING.sub(" ", text)
    for name, call in _IDENTIFIER.findall(text):
        if call:
            if name not in FUNCTIONS:
                problems.append(f"unknown PromQL function {name!r}")
        elif name in KEYWORDS:
            continue
        elif name in REGISTRY:
            used_metrics.add(name)
        else:
            problems.append(f"unknown metric {name!r}")
    labels_in_scope = TARGET_LABELS.union(*(REGISTRY[m] for m in used_metrics))
    for _, names in groupings:
        problems.extend(f"grouping label {n!r} is not a label of {sorted(used_metrics)}"
                        for n in names if n not in labels_in_scope)
    return problems


def _split_matchers(body: str) -> Iterator[str]:
    """The comma-separated matchers of a selector body, commas inside strings kept."""
    start, quoted, escaped = 0, False, False
    for i, char in enumerate(body):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            yield body[start:i]
            start = i + 1
    yield body[start:]


def _label_values_query(query: str) -> str:
    """A ``label_values(selector, label)`` variable query as PromQL plus its label check."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_]\w*)\s*\)\s*", query)
    assert match, f"variable query {query!r} is not label_values(selector, label)"
    selector, label = match.groups()
    return f"sum by ({label}) ({selector})"


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = list(dashboard["panels"])
    for panel in dashboard["panels"]:
        panels.extend(panel.get("panels", []))  # the panels of collapsed rows
    return panels


def _panel_expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel query."""
    return [(f"panel {p['id']} {p['title']!r}", t["expr"])
            for p in _panels(dashboard) for t in p.get("targets", [])]


def _expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel query and every variable query."""
    found = _panel_expressions(dashboard)
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found.append((f"variable {var['name']}", _label_values_query(query)))
    return found


def test_dashboard_is_a_current_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] >= 39
    assert dashboard["uid"] and dashboard["title"]
    assert _expressions(dashboard), "a dashboard without queries"


def test_every_query_uses_exported_metrics_with_their_labels(dashboard: dict[str, Any]) -> None:
    problems = [f"{where}: {problem}" for where, expr in _expressions(dashboard)
                for problem in check_promql(expr)]
    assert not problems, "\n".join(problems)


def test_the_check_reads_selectors_groupings_and_functions() -> None:
    assert check_promql('sum by (task_name) (rate(weir_task_numRecordsIn{job_id=~"$job_id", '
                        'instance=~"$taskexecutor"}[$__rate_interval]))') == []
    assert check_promql('time() * 1000 - (weir_job_lastCheckpointRestoreTimestamp > 0)') == []
    assert check_promql('weir_task_numRecordsIn{job_name="x"}') == [
        "label 'job_name' is not a label of weir_task_numRecordsIn"]
    assert check_promql('predict_linear(weir_job_uptime[5m], 60)') == [
        "unknown PromQL function 'predict_linear'"]


def test_the_check_refuses_an_unknown_metric_and_a_foreign_label(
        dashboard: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(dashboard))
    target = next(t for p in _panels(broken) for t in p.get("targets", []))
    target["expr"] = 'rate(weir_task_numRecordsInn{job_id=~"$job_id"}[1m]) + up'
    problems = {p for _, expr in _expressions(broken) for p in check_promql(expr)}
    assert {"unknown metric 'weir_task_numRecordsInn'", "unknown metric 'up'"} <= problems
    assert check_promql('sum by (job_name) (weir_task_busyTimeMsPerSecond)') == [
        "grouping label 'job_name' is not a label of ['weir_task_busyTimeMsPerSecond']"]


def test_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_the_datasource_is_the_import_input_not_a_fixed_uid(dashboard: dict[str, Any]) -> None:
    assert [(i["name"], i["type"], i["pluginId"]) for i in dashboard["__inputs"]] == [
        ("DS_PROMETHEUS", "datasource", "prometheus")]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE, var["name"]


def test_every_templating_variable_is_used(dashboard: dict[str, Any]) -> None:
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert {"job_id", "taskexecutor"} <= set(variables)
    text = json.dumps([dashboard["panels"]] + [v.get("query") for v in
                                               dashboard["templating"]["list"]])
    unused = [name for name in variables
              if f"${name}" not in text and f"${{{name}}}" not in text]
    assert not unused, f"templating variables no query uses: {unused}"
    # The TaskExecutor picker filters the per-task panels, the job picker every job panel.
    exprs = [expr for _, expr in _panel_expressions(dashboard)]
    assert all('job_id=~"$job_id"' in e for e in exprs if "weir_job_" in e)
    assert all('instance=~"$taskexecutor"' in e for e in exprs if "weir_task_" in e)


def test_prometheus_example_scrapes_both_daemons() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {"weir-jobmaster", "weir-taskexecutor"} <= set(jobs)
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in jobs.values())
