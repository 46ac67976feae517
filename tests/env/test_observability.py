"""Metrics, the Grafana dashboard against a real Prometheus, and the logs (the Dockerfile is
built and run in tests/env/test_container.py)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import orjson
import pytest

from gateway import version

from helpers.gateway_harness import ROOT, require_tool, running_gateway, scrape, series, wait_for
from helpers.http_client import rpc, user_message
from helpers.sse_reading import SSEStream
from helpers.tls_support import Certificates

pytestmark = pytest.mark.env

DASHBOARD = os.path.join(ROOT, "grafana", "dashboards", "murmur-gateway.json")
DATASOURCE = os.path.join(ROOT, "grafana", "provisioning", "datasources", "prometheus.yaml")
PROMETHEUS_YML = os.path.join(ROOT, "grafana", "prometheus.yml")
# INTERFACES.md "Metrics": the series every gateway serves from start-up.
REQUIRED = [
    "murgw_connections_open", "murgw_events_written_total", "murgw_events_delivered_total",
    "murgw_reader_lag_events_bucket", "murgw_events_lost_to_lag_total", "murgw_lagged_frames_total",
    "murgw_heartbeat_jitter_seconds_bucket", "murgw_replays_total", "murgw_ring_head_id",
    "murgw_ring_oldest_id", "murgw_upstream_connected",
]
GRAFANA_MACROS = {"$__rate_interval": "10s", "$__interval": "5s", "$__range": "1m"}


def panels() -> list[dict]:
    def walk(items):
        for panel in items:
            yield panel
            yield from walk(panel.get("panels", []))

    with open(DASHBOARD) as fh:
        return list(walk(json.load(fh)["panels"]))


def queries() -> list[tuple[str, str, str]]:
    """(panel title, the datasource its target names, its expression with Grafana's macros
    expanded) of every target."""
    out = []
    for panel in panels():
        for target in panel.get("targets", []):
            expr = target["expr"]
            for macro, value in GRAFANA_MACROS.items():
                expr = expr.replace(macro, value)
            out.append((panel["title"], target["datasource"]["uid"], expr))
    return out


def expressions() -> list[tuple[str, str]]:
    return [(title, expr) for title, _source, expr in queries()]


def test_every_series_exists_at_zero_from_start(tmp_path):
    with running_gateway(metrics=True, tmp_path=tmp_path) as gw:
        wait_for(lambda: len(gw.worker_pids()) == 2, what="both workers")
        samples = scrape(gw.metrics_port)
    for metric in REQUIRED:
        assert series(samples, metric), metric
    for endpoint in ("murmur.WatchSession", "SendStreamingMessage", "SubscribeToTask"):
        assert samples[f'murgw_connections_open{{endpoint="{endpoint}"}}'] == 0
        assert samples[f'murgw_events_lost_to_lag_total{{endpoint="{endpoint}"}}'] == 0
    assert samples["murgw_upstream_connected"] == 1
    assert samples['murgw_process_resident_memory_bytes{process="worker-1"}'] > 0
    assert samples[f'murgw_build_info{{python="{platform.python_version()}",version="{version()}"}}'] == 1


def test_the_exporter_answers_metrics_only_on_its_path(tmp_path):
    """/metrics is 200; any other path, /healthz included, is 404, so a health check pointed
    at the metrics port fails rather than lies."""
    with running_gateway(metrics=True, tmp_path=tmp_path) as gw:
        base = f"http://127.0.0.1:{gw.metrics_port}"
        answer = urllib.request.urlopen(base + "/metrics", timeout=5)
        assert answer.status == 200 and b"\nmurgw_build_info{" in answer.read()
        for path in ("/", "/healthz", "/readyz", "/metrics/", "/metricsx"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base + path, timeout=5)
            assert refused.value.code == 404, path
            assert b"/healthz on --bind" in refused.value.read()


def test_metrics_follow_real_traffic(tmp_path):
    with running_gateway(metrics=True, tmp_path=tmp_path) as gw:
        with SSEStream(gw.port, "murmur.WatchSession", {}) as watcher:
            rpc(gw.port, "SendMessage", user_message("/scenario burst n=20"))
            events = watcher.read_until(lambda e: e.id == 24)
            samples = wait_for(lambda: (s := scrape(gw.metrics_port))[
                'murgw_events_delivered_total{endpoint="murmur.WatchSession"}'] >= 24 and s,
                what="deliveries counted")
            assert samples['murgw_connections_open{endpoint="murmur.WatchSession"}'] == 1
        assert samples["murgw_events_written_total"] == samples["murgw_ring_head_id"] == 24
        assert samples['murgw_replays_total{outcome="none"}'] == 1  # the buffer was empty at open
        assert samples['murgw_reader_lag_events_count{endpoint="murmur.WatchSession"}'] >= 1
        assert len([e for e in events if e.id]) == 24
        closed = wait_for(lambda: (s := scrape(gw.metrics_port))[
            'murgw_connections_open{endpoint="murmur.WatchSession"}'] == 0 and s, what="close counted")
        assert closed['murgw_connections_total{endpoint="murmur.WatchSession"}'] == 1


def datasource_refs(node) -> list[dict]:
    """Every `datasource` object anywhere in the dashboard (panels, targets, variables)."""
    if isinstance(node, dict):
        found = [node["datasource"]] if isinstance(node.get("datasource"), dict) else []
        return found + [ref for value in node.values() for ref in datasource_refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in datasource_refs(value)]
    return []


def test_no_panel_names_a_fixed_datasource_uid():
    """A dashboard any Grafana imports: every panel, target and query variable reads from the
    `datasource` variable (a Prometheus), never from a uid of this repository's Grafana; the
    `__inputs` an exported dashboard carries let an import pick that Prometheus, and only the
    variable's default takes the pick, so a provisioned copy (where nothing is substituted) works too."""
    with open(DATASOURCE) as fh:
        provisioned_uid = re.search(r"uid:\s*(\S+)", fh.read()).group(1)
    with open(DASHBOARD) as fh:
        raw = fh.read()
    dashboard = json.loads(raw)
    assert provisioned_uid not in raw
    refs = datasource_refs(dashboard)
    assert len(refs) >= len(panels()) + sum(len(p["targets"]) for p in panels())
    assert all(ref == {"type": "prometheus", "uid": "${datasource}"} for ref in refs), refs
    variable = dashboard["templating"]["list"][0]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    assert [(i["name"], i["type"], i["pluginId"]) for i in dashboard["__inputs"]] == \
        [("DS_PROMETHEUS", "datasource", "prometheus")]
    assert raw.count("${DS_PROMETHEUS}") == 2 and variable["current"]["value"] == "${DS_PROMETHEUS}"


def test_dashboard_uses_served_metrics(tmp_path):
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids))
    certs = Certificates(tmp_path)  # with TLS on, so the certificate's expiry is served too
    with running_gateway(*certs.args, metrics=True, tmp_path=tmp_path, tls=certs.client_context()) as gw:
        served = {re.sub(r"\{.*", "", name) for name in scrape(gw.metrics_port)}
    for panel in panels():
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name in re.findall(r"murgw_[a-z_]+", target["expr"]):
                assert name in served, f"{panel['title']}: {name} is not served"


def test_promtool_accepts_the_shipped_config():
    result = subprocess.run([require_tool("promtool", "prometheus"), "check", "config", PROMETHEUS_YML],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def query(port: int, expr: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    return orjson.loads(urllib.request.urlopen(url, timeout=5).read())


TLS_ONLY = "murgw_tls_certificate_expiry_timestamp_seconds"


FILTER = '{job=~"$job",instance=~"$instance"'  # every selector of the dashboard begins so
COUNTER = re.compile(r"murgw_\w+(?:_total|_bucket)\b")


def test_every_query_is_filtered_on_the_job_and_instance_variables():
    """A fleet's dashboard: `job` and `instance` are multi-value variables with All, read from
    murgw_build_info, and every selector of every query carries both."""
    with open(DASHBOARD) as fh:
        variables = {v["name"]: v for v in json.load(fh)["templating"]["list"]}
    assert list(variables) == ["datasource", "job", "instance"]
    del variables["datasource"]  # test_no_panel_names_a_fixed_datasource_uid
    for var in variables.values():
        assert var["type"] == "query" and var["multi"] and var["includeAll"], var["name"]
        assert var["query"]["query"].startswith("label_values(murgw_build_info"), var["name"]
    assert variables["instance"]["query"]["query"] == 'label_values(murgw_build_info{job=~"$job"}, instance)'
    for title, expr in expressions():
        selectors = re.findall(rf"murgw_\w+(.{{0,{len(FILTER)}}})", expr)
        assert selectors and all(rest == FILTER for rest in selectors), (title, expr)


def test_counters_are_rates_or_increases_and_no_bucket_bound_is_called_a_maximum():
    for panel in panels():
        for target in panel["targets"]:
            expr = target["expr"]
            for name in COUNTER.findall(expr):
                wrapped = re.findall(rf"\b(?:rate|increase)\({name}\{{[^}}]*\}}\[", expr)
                assert len(wrapped) == expr.count(name + "{"), (panel["title"], expr)
            if re.search(r"histogram_quantile\(\s*1\s*,", expr):
                words = (panel["title"] + " " + target["legendFormat"]).lower()
                assert "max" not in words and "bucket" in words, (panel["title"], target["legendFormat"])


def grafana_regex(values: list[str]) -> str:
    """A multi-value variable as Grafana writes it into a regex matcher: (a|b), escaped."""
    return "(" + "|".join(re.escape(v).replace("\\", "\\\\") for v in values) + ")"


def substituted(expr: str, job: str, instances: list[str]) -> str:
    return expr.replace("$job", grafana_regex([job])).replace("$instance", grafana_regex(instances))


def answer(port: int, expr: str) -> list[dict]:
    result = query(port, expr)
    assert result["status"] == "success", (expr, result)
    return result["data"]["result"]


def instances_in(result: list[dict]) -> set[str]:
    return {series["metric"].get("instance") for series in result}


def watched_gateway(stack: contextlib.ExitStack, logs) -> tuple:
    """A gateway with a load task, two watchers that read, one that never does (so events
    are lost to lag), and a burst of 3,000 events under way; its log in the folder `logs`."""
    logs.mkdir()
    gw = stack.enter_context(running_gateway("--sim-load", "100", metrics=True, tmp_path=logs))
    readers = [SSEStream(gw.port, "murmur.WatchSession", {}) for _ in range(2)]
    stalled = SSEStream(gw.port, "murmur.WatchSession", {}, rcvbuf=4096)
    for stream in (*readers, stalled):
        stack.callback(stream.http.close)
    for reader in readers:
        reader.next()
    rpc(gw.port, "SendMessage", user_message("/scenario burst n=3000"))
    return gw, readers


def serving_address_relabel(gateways) -> str:
    """grafana/prometheus.yml's relabel, for these gateways' ports: `instance` is the address
    each serves on (--bind), as its logs and `ps` name it, not its metrics port."""
    return "".join(f"      - {{source_labels: [__address__], regex: '127\\.0\\.0\\.1:{gw.metrics_port}', "
                   f"target_label: instance, replacement: '127.0.0.1:{gw.port}'}}\n" for gw, _ in gateways)


def test_every_panel_returns_each_instance_s_data_from_a_real_prometheus(tmp_path):
    """Two gateways scraped as one job, each `instance` its serving address: each query, sent
    to the Prometheus the `datasource` variable picks, with the variables substituted as Grafana
    does, answers series for both instances (per instance where it keeps the label: every
    quantile and restart count does), for each one alone, and nothing for an instance or a job
    that is not there, so the filter is real."""
    prometheus = require_tool("prometheus", "prometheus")
    job = "murmur-gateway"
    with contextlib.ExitStack() as stack:
        gateways = [watched_gateway(stack, tmp_path / name) for name in ("a", "b")]
        scraped = [f"127.0.0.1:{gw.metrics_port}" for gw, _ in gateways]
        targets = [f"127.0.0.1:{gw.port}" for gw, _ in gateways]  # the instances, once relabelled
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"scrape_configs:\n  - job_name: {job}\n"
            f"    static_configs: [{{targets: {scraped!r}}}]\n"
            f"    relabel_configs:\n{serving_address_relabel(gateways)}")
        port = free_port()
        sources = {"${datasource}": port}  # the variable's one choice here: this Prometheus
        proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack.callback(proc.wait, 10)
        stack.callback(proc.terminate)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # keep the readers reading while samples accrue
            for _, readers in gateways:
                for reader in readers:
                    reader.next()
            try:
                up = query(port, "count_over_time(up[1m])")["data"]["result"]
            except OSError:
                continue
            if len(up) == 2 and all(float(series["value"][1]) >= 8 for series in up):
                break
        assert instances_in(answer(port, f'murgw_build_info{{job="{job}"}}')) == set(targets)
        empty = []
        for title, source, expr in queries():
            prom = sources[source]  # a target naming any other datasource fails here
            both = answer(prom, substituted(expr, job, targets))
            if not both and TLS_ONLY in expr:  # served with TLS on only (checked served above)
                continue
            if not both:
                empty.append(title)
                continue
            if "instance" in both[0]["metric"] or "histogram_quantile" in expr or "restarts" in expr:
                assert instances_in(both) == set(targets), (title, expr, both)
            for alone in targets:
                result = answer(prom, substituted(expr, job, [alone]))
                assert result and instances_in(result) <= {alone, None}, (title, expr, alone, result)
            assert answer(prom, substituted(expr, job, ["127.0.0.1:1"])) == [], (title, expr)
            assert answer(prom, substituted(expr, "another-job", targets)) == [], (title, expr)
        assert not empty, f"panels with no data: {empty}"
        lost = answer(port, f'sum by (instance) (murgw_events_lost_to_lag_total{{job="{job}"}})')
        assert {s["metric"]["instance"] for s in lost if float(s["value"][1]) > 0} == set(targets), \
            "a stalled watcher was never lagged"


def test_every_process_logs_json_lines(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gw:
        wait_for(lambda: len(gw.worker_pids()) == 2, what="both workers")
    lines = [line for line in gw.stderr().splitlines() if line.strip()]
    records = [orjson.loads(line) for line in lines]
    assert {r["role"] for r in records} >= {"supervisor", "sequencer", "worker"}
    assert all({"ts", "level", "role", "pid", "event"} <= r.keys() for r in records)
