"""contrib/grafana/superinfer.json: valid, and every metric it queries is exported by a running daemon."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonProc

DASHBOARD = Path(__file__).resolve().parents[2] / "contrib" / "grafana" / "superinfer.json"
METRIC = re.compile(r"\bsuperinfer_[a-z0-9_]+\b")

pytestmark = pytest.mark.timeout(120)


def queries(node: Any) -> list[str]:
    """Every PromQL string of the dashboard: panel targets, annotations, template variables."""
    out: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                out.append(value)
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                out.append(value["query"])
            else:
                out += queries(value)
    elif isinstance(node, list):
        for v in node:
            out += queries(v)
    return out


def exported(text: str) -> set[str]:
    """Names a Prometheus scrape of ``text`` can be queried by: samples, and declared families (a labelled
    counter with no child yet has only its ``# TYPE`` line) with their histogram series."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            if kind == "histogram":
                names |= {name + "_bucket", name + "_count", name + "_sum"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_dashboard_is_valid_grafana_json() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["title"] == "superinfer" and dash["uid"] and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for topic in ("slo attainment", "ttft", "queues", "kv", "transfer", "scheduler parameters", "tuner"):
        assert topic in titles, topic
    names = {m for q in queries(dash) for m in METRIC.findall(q)}
    assert len(names) > 25  # the extraction finds the metrics (so the next test can fail)


def test_every_queried_metric_is_exported_by_a_running_daemon(daemon: DaemonProc) -> None:
    dash = json.loads(DASHBOARD.read_text())
    wanted = {m for q in queries(dash) for m in METRIC.findall(q)}
    text = daemon.get("/metrics").text
    have = exported(text)
    missing = sorted(wanted - have)
    if daemon.get("/v1/tuner").status_code == 404:  # a daemon without the tuner cannot export its metrics
        missing = [m for m in missing if not m.startswith("superinfer_tuner_")]
    else:
        assert any(m.startswith("superinfer_tuner_") for m in wanted)
    assert not missing, f"queried by {DASHBOARD.name} but not in the daemon's /metrics: {missing}"


def test_the_exported_name_parser_can_fail() -> None:
    text = "# TYPE superinfer_x_seconds histogram\nsuperinfer_y_total 1\n"
    assert exported(text) == {"superinfer_x_seconds", "superinfer_x_seconds_bucket", "superinfer_x_seconds_count",
                              "superinfer_x_seconds_sum", "superinfer_y_total"}
    assert "superinfer_z" not in exported(text)
