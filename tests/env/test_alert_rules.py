"""grafana/alerts.yml: valid for promtool, unit-tested by grafana/alerts.test.yml so that
every alert both fires and stays silent, written against series the gateway serves, and
each with a `runbook_url` naming its section of docs/runbook.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request

import pytest
import yaml

from helpers.gateway_harness import ROOT, require_tool, running_gateway
from helpers.tls_support import Certificates

pytestmark = pytest.mark.env

GRAFANA = os.path.join(ROOT, "grafana")
RULES = os.path.join(GRAFANA, "alerts.yml")
RULE_TESTS = os.path.join(GRAFANA, "alerts.test.yml")
REQUIRED = {"MurmurGatewayUpstreamDisconnected", "MurmurGatewayEventsLostToLag",
            "MurmurGatewayHeartbeatJitterHigh", "MurmurGatewayWorkerRestarted",
            "MurmurGatewayRequestsRefused", "MurmurGatewayReconnectStorm",
            "MurmurGatewayTLSCertificateExpiring", "MurmurGatewayRequestsLimited",
            "MurmurGatewayDown", "MurmurGatewayAbsent", "MurmurGatewayConfigReloadRejected",
            "MurmurGatewayConnectionsNearLimit", "MurmurGatewayDescriptorsNearLimit",
            "MurmurGatewayTokensRefused"}
RUNBOOK = os.path.join(ROOT, "docs", "runbook.md")


def rules() -> list[dict]:
    with open(RULES) as fh:
        return [rule for group in yaml.safe_load(fh)["groups"] for rule in group["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require_tool("promtool", "prometheus"), *args], cwd=GRAFANA,
                          capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules():
    result = promtool("check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass():
    result = promtool("test", "rules", RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_silent():
    with open(RULE_TESTS) as fh:
        cases = [case for test in yaml.safe_load(fh)["tests"] for case in test["alert_rule_test"]]
    names = {rule["alert"] for rule in rules()}
    assert REQUIRED <= names
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == names
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == names


def test_every_alert_has_its_runbook_section():
    with open(RUNBOOK) as fh:
        headings = {line[3:].strip() for line in fh if line.startswith("## ")}
    for rule in rules():
        assert rule["annotations"]["runbook_url"] == f"docs/runbook.md#{rule['alert'].lower()}"
        assert rule["alert"] in headings, f"docs/runbook.md has no section {rule['alert']}"
    assert headings == {rule["alert"] for rule in rules()}  # and no section without its alert


def test_rules_use_only_served_series(tmp_path):
    certs = Certificates(tmp_path)  # with TLS on, so the certificate's expiry is served too
    with running_gateway(*certs.args, metrics=True, tmp_path=tmp_path, tls=certs.client_context()) as gw:
        text = urllib.request.urlopen(f"http://127.0.0.1:{gw.metrics_port}/metrics", timeout=5).read().decode()
    served = {re.sub(r"[{ ].*", "", line) for line in text.splitlines() if line and not line.startswith("#")}
    expiry = re.search(r"^murgw_tls_certificate_expiry_timestamp_seconds (\S+)$", text, re.M)
    assert expiry and float(expiry.group(1)) > time.time() + 14 * 86400  # trustme's: far off
    for rule in rules():
        for name in re.findall(r"murgw_[a-z_]+", rule["expr"]):
            assert name in served, f"{rule['alert']}: {name} is not served"


def test_every_panel_the_runbook_names_is_a_panel_of_the_dashboard():
    with open(os.path.join(GRAFANA, "dashboards", "murmur-gateway.json")) as fh:
        titles = {panel["title"] for panel in json.load(fh)["panels"]}
    with open(RUNBOOK) as fh:
        looks = [p for p in fh.read().split("\n\n") if p.startswith("**Look first.** Panel")]
    named = [" ".join(name.split()) for p in looks for name in re.findall(r"(?<!\*)\*([^*]+)\*(?!\*)", p)
             if not name.startswith("MurmurGateway")]
    assert named and set(named) <= titles, set(named) - titles
