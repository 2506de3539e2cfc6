"""The dashboard and alert rules in deploy/ name only metrics the server really exports (and
bucket bounds its histograms really have); the rules pass Prometheus' own checker and their
unit tests when promtool is at hand (PROMTOOL, or on the PATH)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from globalstore.follow.delays import RecordDelays
from globalstore.read.protocols import IndexStatus, TtlStatus
from globalstore.server import ServedStore
from globalstore.status import Progress, State
from tests.unit.server.test_probes import ReportingStore, client_for, status

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
RULES = DEPLOY / "prometheus" / "globalstore-alerts.yml"
RULES_TEST = DEPLOY / "prometheus" / "globalstore-alerts-test.yml"
DASHBOARD = DEPLOY / "grafana" / "globalstore.json"
NAME = re.compile(r"\bglobalstore_[a-z0-9_]+")
LE = re.compile(r'le="([^"]+)"')


def _exported() -> tuple[set[str], set[str]]:
    """The sample names a server exports with every optional part in use, and the bucket
    bounds of its histograms."""
    delays = RecordDelays()
    delays.observe(0.2, 1)
    report = dataclasses.replace(
        status(State.RUNNING),
        progress=Progress("restore", 1, 2, 1, 1.0, 1.0, 1.0),
        record_delays=delays.snapshot(),
        undecodable=0,
        indexes={"i": IndexStatus(True, 1, 1, None)},
        ttl=TtlStatus(60.0, 1, True),
    )
    for client in client_for(ServedStore.of(ReportingStore(report))):  # type: ignore[arg-type]
        client.get("/v1/status")  # an HTTP request, so the request metrics have samples
        text = client.get("/metrics").text
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    return {s.name for s in samples}, {s.labels["le"] for s in samples if "le" in s.labels}


def _expressions() -> dict[str, str]:
    """Every PromQL expression of the rules and of the dashboard, by where it is."""
    rules = yaml.safe_load(RULES.read_text())
    found = {
        f"alert {rule['alert']}": rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
    }
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    return found


def test_every_expression_names_metrics_the_server_exports() -> None:
    names, bounds = _exported()
    expressions = _expressions()
    assert len(expressions) > 20
    for where, expr in expressions.items():
        named = set(NAME.findall(expr))
        assert named, f"{where} names no globalstore metric: {expr}"
        assert named <= names, f"{where} names {sorted(named - names)}, not exported"
        assert set(LE.findall(expr)) <= bounds, f"{where}: no such bucket bound"


@pytest.mark.skipif(
    not (os.environ.get("PROMTOOL") or shutil.which("promtool")), reason="promtool not found"
)
def test_promtool_checks_the_rules_and_their_tests_pass() -> None:
    promtool = os.environ.get("PROMTOOL") or shutil.which("promtool") or "promtool"
    for args in (["check", "rules", str(RULES)], ["test", "rules", str(RULES_TEST)]):
        done = subprocess.run([promtool, *args], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
