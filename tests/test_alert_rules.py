"""grafana/alerts.yml: valid for promtool, unit-tested by grafana/alerts.test.yml so that
every alert both fires and stays silent, and written against series the gateway serves."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request

import yaml

from support import ROOT, require_tool, running_gateway

GRAFANA = os.path.join(ROOT, "grafana")
RULES = os.path.join(GRAFANA, "alerts.yml")
RULE_TESTS = os.path.join(GRAFANA, "alerts.test.yml")
REQUIRED = {"MurmurGatewayUpstreamDisconnected", "MurmurGatewayEventsLostToLag",
            "MurmurGatewayHeartbeatJitterHigh", "MurmurGatewayWorkerRestarted",
            "MurmurGatewayRequestsRefused"}


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


def test_rules_use_only_served_series(tmp_path):
    with running_gateway(metrics=True, tmp_path=tmp_path) as gw:
        text = urllib.request.urlopen(f"http://127.0.0.1:{gw.metrics_port}/metrics", timeout=5).read().decode()
    served = {re.sub(r"[{ ].*", "", line) for line in text.splitlines() if line and not line.startswith("#")}
    for rule in rules():
        for name in re.findall(r"murgw_[a-z_]+", rule["expr"]):
            assert name in served, f"{rule['alert']}: {name} is not served"
