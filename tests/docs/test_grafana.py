"""The Grafana dashboard in docs/grafana/shmq.json: a dashboard Grafana imports, whose every
PromQL expression names only metrics `shmq exporter` serves (default names)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from shmq.monitor.prometheus import down_families, families, namesrv_families
from tests.monitor.snapshots import group, snapshot, topic

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "shmq.json"
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
# what Grafana fills in before the query goes to Prometheus
GRAFANA_VARIABLES = {"$broker": ".*", "$__rate_interval": "1m"}


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def exprs(dashboard: dict[str, Any]) -> list[str]:
    """Every panel query's PromQL as Prometheus receives it (Grafana's variables filled in)."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            e = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                e = e.replace(name, value)
            out.append(e)
    return out


def metric_names(promql: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label
    matchers, ranges and grouping clauses are taken out, other than functions and keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)
    e = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", e))
    return names - KEYWORDS


def served() -> set[str]:
    """Every metric name `shmq exporter` serves with its default names."""
    orders = topic("Orders", [10, 10])
    snap = snapshot(1, [orders], [group("cg", {"Orders": orders}, {("Orders", 0): 5})])
    every = families(snap) + down_families("b1") + namesrv_families("ns", True, 1)
    return {f.name for f in every}


def test_every_query_names_only_served_metrics() -> None:
    known, used = served(), set()
    for e in exprs(load()):
        names = metric_names(e)
        assert names, e
        assert names <= known, (e, names - known)
        used |= names
    # the panels the dashboard is for
    for name in (
        "shmq_broker_messages_in_total",
        "shmq_group_lag",
        "shmq_flush_lag_bytes",
        "shmq_group_pop_inflight_messages",
    ):
        assert name in used, name


def test_the_broker_variable_lists_served_brokers() -> None:
    (var,) = [v for v in load()["templating"]["list"] if v["name"] == "broker"]
    m = re.fullmatch(r"label_values\((\w+), broker\)", var["definition"])
    assert m and m.group(1) in served()


def test_panels_fit_the_grid_and_have_unique_ids() -> None:
    panels = load()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        assert p["targets"] and all(t["refId"] for t in p["targets"]), p["title"]


def test_metric_names_reads_promql() -> None:
    e = 'sum by (group, topic) (rate(shmq_x_total{topic!~"a|b"}[1m])) / on (broker) shmq_y and bogus_z'
    assert metric_names(e) == {"shmq_x_total", "shmq_y", "bogus_z"}
