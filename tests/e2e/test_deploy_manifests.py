"""deploy/kubernetes/ agrees with the gateway itself.

The manifests are read as YAML and checked against the code, not against copies of its
numbers: every MUR_GATEWAY_* variable and flag they set is an option the gateway knows and
parses; the container ports are the ones the settings bind; the probe paths answer on a
real gateway; the memory request holds the shared memory a real supervisor allocates (memfds,
charged to the container) beside its processes; a real gateway writes no file, so the
read-only root needs no writable mount; the user is the Dockerfile's; the grace period
outlasts the supervisor's drain.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile

import pytest
import yaml

from gateway.config import options as config_module
from gateway.config import resolve as config_resolve
from gateway.supervisor import process as supervisor
from helpers.doc_figures import figure_bytes
from helpers.gateway_harness import (ROOT, dockerfile_user, running_gateway, session_memory, shm_bytes_per_gateway,
                             wait_for)
from helpers.http_client import Http, rpc

KUBE = os.path.join(ROOT, "deploy", "kubernetes")
UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "k": 10**3, "M": 10**6, "G": 10**9}
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
# docs/benchmarks.md's figures: private memory of a whole 2-worker gateway tree (30 min soak),
# and what one idle watcher costs all in (kernel socket memory is charged to the container
# too); the request is sized for WATCHERS idle watchers (deployment.yaml's header).
SOAK_WORKERS = 2
PROCESS_TREE_BYTES = figure_bytes("private memory of a 2-worker gateway's processes")
IDLE_WATCHER_BYTES, WATCHERS = figure_bytes("memory to plan per idle watcher, all in"), 8000


def documents() -> dict[str, dict]:
    """kind -> manifest, over every YAML file in deploy/kubernetes/."""
    docs = {}
    for path in sorted(glob.glob(os.path.join(KUBE, "*.yaml"))):
        with open(path) as fh:
            for doc in yaml.safe_load_all(fh):
                docs.setdefault(doc["kind"], doc)
    return docs


def quantity(text) -> int:
    number, unit = re.fullmatch(r"(\d+)([A-Za-z]*)", str(text)).groups()
    return int(number) * UNITS[unit]


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return documents()


@pytest.fixture(scope="module")
def pod(docs) -> dict:
    return docs["Deployment"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod) -> dict:
    (gateway,) = pod["containers"]
    return gateway


def plain_env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def secret_config(docs: dict, pod: dict, container: dict) -> tuple[str, str]:
    """(MUR_GATEWAY_CONFIG's path, the text the config Secret mounted there holds)."""
    path = plain_env(container)["MUR_GATEWAY_CONFIG"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == os.path.dirname(path)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert docs["Secret"]["metadata"]["name"] == volume["secret"]["secretName"]
    return path, docs["Secret"]["stringData"][os.path.basename(path)]


@pytest.fixture(scope="module")
def kit_env(docs, pod, container, tmp_path_factory) -> dict[str, str]:
    """The container's environment, its config file the Secret's text in a temporary copy."""
    _path, text = secret_config(docs, pod, container)
    copy = tmp_path_factory.mktemp("kit") / "gateway.toml"
    copy.write_text(text)
    return {**plain_env(container), "MUR_GATEWAY_CONFIG": str(copy)}


def test_kustomization_lists_files_that_exist(docs):
    with open(os.path.join(KUBE, "kustomization.yaml")) as fh:
        resources = yaml.safe_load(fh)["resources"]
    assert {"Deployment", "Service", "PodDisruptionBudget"} <= {
        yaml.safe_load(open(os.path.join(KUBE, name)))["kind"] for name in resources}


def test_every_setting_exists_and_parses(container, kit_env):
    known_env = {opt.env for opt in config_module.OPTIONS} | {"MUR_GATEWAY_CONFIG"}
    known_flags = {"--" + opt.name for opt in config_module.OPTIONS} | {"--config"}
    names = [e["name"] for e in container.get("env", [])]
    assert [n for n in names if n.startswith("MUR_GATEWAY_") and n not in known_env] == []
    args = list(container.get("args", [])) + list(container.get("command", []))
    assert [a for a in args if a.startswith("--") and a.split("=")[0] not in known_flags] == []
    loaded = config_resolve.load(args, kit_env)  # raises ConfigError on a bad value
    assert loaded.upstream is not None  # replicas run in upstream mode
    assert loaded.workers == quantity(container["resources"]["requests"]["cpu"])


def test_ports_match_what_the_gateway_binds_and_the_service_targets(docs, container, kit_env):
    loaded = config_resolve.load([], kit_env)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": loaded.bind[1], "metrics": loaded.metrics_bind[1]}
    assert loaded.bind[0] == loaded.metrics_bind[0] == "0.0.0.0"  # reachable from the pod network
    with open(os.path.join(ROOT, "Dockerfile")) as fh:
        exposed = {int(p) for line in fh if line.startswith("EXPOSE ") for p in line.split()[1:]}
    assert exposed == set(ports.values())
    service = docs["Service"]["spec"]
    assert {p["targetPort"] for p in service["ports"]} == set(ports)
    assert service.get("sessionAffinity", "None") == "None"
    template = docs["Deployment"]["spec"]["template"]["metadata"]
    assert template["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    assert template["annotations"]["prometheus.io/path"] == "/metrics"
    monitor = docs["ServiceMonitor"]["spec"]["endpoints"]
    assert [(e["port"], e["path"]) for e in monitor] == [("metrics", "/metrics")]
    labels = docs["Deployment"]["spec"]["selector"]["matchLabels"]
    for kind in ("Service", "PodDisruptionBudget", "ServiceMonitor"):
        spec = docs[kind]["spec"]
        assert (spec["selector"].get("matchLabels") or spec["selector"]) == labels, kind
    assert template["labels"].items() >= labels.items()


def test_probe_paths_answer_on_a_real_gateway(container, gateway):
    probes = {name: container[name]["httpGet"] for name in PROBES}
    assert probes["readinessProbe"]["path"] == "/readyz" and probes["livenessProbe"]["path"] == "/healthz"
    assert {p["port"] for p in probes.values()} == {"http"}
    for name, probe in probes.items():
        status, _, _ = Http(gateway.port).request("GET", probe["path"])
        assert status == 200, name


def test_memory_holds_the_segments_beside_the_processes_and_watchers(pod, container, kit_env):
    workers = config_resolve.load([], kit_env).workers
    assert workers == SOAK_WORKERS  # the process figure was measured with this many
    # the ring and counters are memfds: their pages are shmem, charged to the container
    needed = shm_bytes_per_gateway(workers) + PROCESS_TREE_BYTES + WATCHERS * IDLE_WATCHER_BYTES
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert quantity(requests["memory"]) >= needed
    assert quantity(limits["memory"]) >= quantity(requests["memory"])
    # nothing of the gateway is in /dev/shm, so no volume is mounted there
    assert "/dev/shm" not in {m["mountPath"] for m in container.get("volumeMounts", [])}


def test_read_only_root_needs_no_writable_mount(pod, container, gateway):
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # the one mount is the config Secret, read-only
    assert all(m["readOnly"] is True for m in container.get("volumeMounts", []))
    assert all(set(v) == {"name", "secret"} for v in pod.get("volumes", []))
    assert "TMPDIR" not in plain_env(container)
    # a real gateway, serving: its segments are memfds, its control socket is abstract
    assert session_memory(gateway.pid)  # held, and none of it a file:
    files = [d for d in ("/dev/shm", tempfile.gettempdir()) for n in os.listdir(d)
             if n.startswith(f"murgw-{gateway.pid}-")]
    assert files == []
    with open("/proc/net/unix") as fh:
        sockets = [line.split()[-1] for line in fh if f"murgw-{gateway.pid}-" in line]
    assert sockets and all(path.startswith("@") for path in sockets)


def test_user_is_the_dockerfiles_and_not_root(pod, container):
    uid, gid = dockerfile_user()
    security = pod["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (uid, gid)
    assert security["runAsNonRoot"] is True and uid != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_grace_period_outlasts_the_drain(docs, pod, container, kit_env):
    workers = config_resolve.load([], kit_env).workers
    pause = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep"
    # supervisor.drain: DRAIN_SECONDS for the workers, then up to 0.5 s for each of the
    # sequencer and the exporter, then a kill and up to 1 s for every process left
    drain = supervisor.DRAIN_SECONDS + 2 * 0.5 + (workers + 2) * 1.0
    assert pod["terminationGracePeriodSeconds"] > float(pause[1]) + drain
    deployment = docs["Deployment"]["spec"]
    assert deployment["replicas"] >= 2
    assert docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] < deployment["replicas"]


def test_kustomize_renders_the_kit():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (it renders the kustomization; the checks above need only YAML)")
    rendered = subprocess.run([kubectl, "kustomize", KUBE], capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(rendered.stdout))
    assert kinds == ["Deployment", "PodDisruptionBudget", "Secret", "Service"]


def test_the_config_secret_is_picked_up_by_a_reload(docs, pod, container, tmp_path):
    """The Secret is mounted whole where MUR_GATEWAY_CONFIG points (a subPath mount never
    sees an edit); its example, uncommented with a real digest, is a door the gateway starts
    with, and a new digest in it is a rotation a SIGHUP applies."""
    path, text = secret_config(docs, pod, container)
    assert not any("subPath" in m for m in container["volumeMounts"])
    example = re.sub(r"(?m)^# ?", "", text)

    def with_token(token: str) -> str:
        return example.replace("<the 64 hex digits of your token's sha256>",
                               hashlib.sha256(token.encode()).hexdigest())
    config = tmp_path / "gateway.toml"
    config.write_text(with_token("kit-token-old"))
    with running_gateway(tmp_path=tmp_path, metrics=True, env={"MUR_GATEWAY_CONFIG": str(config)}) as gw:
        assert rpc(gw.port, "ListTasks", {})[0] == 401
        assert rpc(gw.port, "ListTasks", {}, token="kit-token-old")[0] == 200
        config.write_text(with_token("kit-token-new"))
        os.kill(gw.pid, signal.SIGHUP)
        # every worker follows the reload on its own (within a quarter heartbeat): any of
        # them may answer the next request
        workers = next(r["workers"] for r in gw.logs() if r.get("event") == "listening")
        wait_for(lambda: len([r for r in gw.logs() if r.get("event") == "reloaded settings applied"]) == workers,
                 what="every worker applying the rotation")
        assert rpc(gw.port, "ListTasks", {}, token="kit-token-old")[0] == 401
        assert rpc(gw.port, "ListTasks", {}, token="kit-token-new")[0] == 200
        reloaded = next(r for r in gw.logs() if r.get("event") == "config reloaded")
        assert reloaded["tokens"] == 1 and "restart_needed" not in reloaded
