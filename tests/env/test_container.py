"""The container image: built from the repository's Dockerfile and run as operators run it.

The runtime is podman (Debian's podman, runc, mmdebstrap; .ci/run installs them), run with
runc and cgroupfs because crun refuses this kind of box's hybrid cgroups. No registry for
base images is reachable here, so the test builds its own stand-in for the Dockerfile's
`python:3.11-slim` (a minimal Debian bookworm with python3) once, with mmdebstrap, and keeps
it in podman's store; the Dockerfile itself is built unchanged. `--format docker` keeps the
HEALTHCHECK, which the OCI format drops. Every container is removed at the end of its test.
Skipped where podman is absent, except in CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import resource
import socket
import subprocess
import sys
import tempfile
import urllib.request
import uuid

import orjson
import pytest

from helpers.gateway_harness import (ROOT, dockerfile_user, gone, require_tool, running_gateway,
                             shm_bytes_per_gateway, wait_for, wait_ready)
from helpers.http_client import rpc, user_message
from helpers.sse_reading import SSEStream, is_terminal_event, item, task_id_of

pytestmark = pytest.mark.env

BASE = "docker.io/library/python:3.11-slim"
IMAGE = "localhost/murmur-gateway:test"
RUNTIME = ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]
GRACE_SECONDS = 10
BUILD_TIMEOUT = 600
DEBIAN_MIRROR = "http://deb.debian.org/debian"


def podman(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([require_tool("podman", "podman"), *RUNTIME, *args],
                            capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"podman {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (the stand-in base is built from it)."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as fh:
            for line in fh:
                if line.startswith("URIs:") and line.split()[1].rstrip("/").endswith("/debian"):
                    return line.split()[1]
    with contextlib.suppress(OSError), open("/etc/apt/sources.list") as fh:
        for line in fh:
            words = line.split()
            if words[:1] == ["deb"] and words[1].rstrip("/").endswith("/debian"):
                return words[1]
    return DEBIAN_MIRROR


def ensure_base() -> None:
    """The stand-in base image, built once (about 45 s) and then found in podman's store."""
    if podman("image", "exists", BASE, check=False).returncode == 0:
        return
    mmdebstrap = require_tool("mmdebstrap", "mmdebstrap")
    with tempfile.TemporaryDirectory(prefix="murgw-base-") as tmp:
        rootfs = os.path.join(tmp, "rootfs.tar")
        subprocess.run([mmdebstrap, "--variant=minbase", "--quiet",
                        "--include=python3,python3-venv,python-is-python3,ca-certificates",
                        "bookworm", rootfs, debian_mirror()], check=True, timeout=BUILD_TIMEOUT)
        podman("import", rootfs, BASE, timeout=BUILD_TIMEOUT)


def ulimits() -> list[str]:
    """This box's hard limits: the runtime's defaults for open files and processes exceed
    them, and runc then fails to start the container."""
    flags = []
    for name, limit, cap in (("nofile", resource.RLIMIT_NOFILE, 65536), ("nproc", resource.RLIMIT_NPROC, 4096)):
        hard = resource.getrlimit(limit)[1]
        value = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
        flags.append(f"--ulimit={name}={value}:{value}")
    return flags


@pytest.fixture(scope="module")
def image() -> str:
    require_tool("podman", "podman")
    require_tool("runc", "runc")
    ensure_base()
    podman("build", "--format", "docker", "--network", "host", "-v", "/etc/ssl/certs:/etc/ssl/certs:ro",
           "-t", IMAGE, ROOT, timeout=BUILD_TIMEOUT)
    return IMAGE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Container:
    def __init__(self, name: str, port: int, metrics_port: int):
        self.name, self.port, self.metrics_port = name, port, metrics_port

    def metric(self, name: str) -> float:
        """One unlabelled sample from the container's /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        (value,) = [line.split()[1] for line in text.splitlines() if line.startswith(name + " ")]
        return float(value)

    def memfds(self) -> set[str]:
        """The gateway's memfds (``/memfd:murgw-…``) that some process in the container holds open."""
        out = self.exec("sh", "-c", "for f in /proc/[0-9]*/fd/*; do readlink $f; done 2>/dev/null", check=False).stdout
        return {line.split()[0] for line in out.splitlines() if line.startswith("/memfd:murgw-")}

    def exec(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        return podman("exec", self.name, *command, check=check)

    def inspect(self, template: str) -> str:
        return podman("inspect", "--format", template, self.name).stdout.strip()

    def logs(self) -> str:
        result = podman("logs", self.name)
        return result.stdout + result.stderr

    def processes(self) -> dict[int, tuple[str, str]]:
        """pid -> (command, state) of every process in the container, from its /proc."""
        out = self.exec("sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null", check=False).stdout
        procs = {}
        for line in out.splitlines():
            head, _, rest = line.rpartition(")")
            pid, _, comm = head.partition(" (")
            procs[int(pid)] = (comm, rest.split()[0])
        return procs

    def host_pids(self) -> list[int]:
        return [int(pid) for pid in podman("top", self.name, "hpid").stdout.split()[1:]]


@contextlib.contextmanager
def running_container(image: str, *run_args: str, workers: int = 2, gateway_args: tuple[str, ...] = ()):
    """The image started detached on the host's network, as docs/deploy.md's command does, with
    ports of its own, and the runtime's default /dev/shm (the gateway's segments are memfds,
    not files there); ready when /readyz answers 200; removed (killed) at exit."""
    port, metrics_port = free_port(), free_port()
    name = f"murgw-test-{uuid.uuid4().hex[:8]}"
    try:
        podman("run", "--detach", "--name", name, "--network", "host", *ulimits(),
               "-e", f"MUR_GATEWAY_BIND=127.0.0.1:{port}", "-e", f"MUR_GATEWAY_METRICS_BIND=127.0.0.1:{metrics_port}",
               "-e", f"MUR_GATEWAY_WORKERS={workers}", "-e", "MUR_GATEWAY_HEARTBEAT_INTERVAL=0.5",
               *run_args, image, *gateway_args)
        container = Container(name, port, metrics_port)
        try:
            wait_ready(port)
        except RuntimeError:
            raise AssertionError(f"the container never became ready:\n{container.logs()}") from None
        yield container
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


def watch(port: int) -> SSEStream:
    stream = SSEStream(port, "murmur.WatchSession", {}, last_event_id=str(2**40))
    assert stream.status == 200
    assert item(stream.next()).frame["frame"] == "connection-ack"
    return stream


def task_runs_to_completion(port: int) -> None:
    """A WatchSession's connection-ack, then a task sent with SendMessage seen to completed."""
    with watch(port) as stream:
        status, _, body = rpc(port, "SendMessage", user_message("hello from a container"))
        assert status == 200, body
        task_id = body["result"]["task"]["id"]
        events = stream.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))
        assert item(events[-1]).body["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.fixture(scope="module")
def served(image):
    with running_container(image) as container:
        yield container


def test_image_holds_the_gateway_and_nothing_of_tests(image):
    config = podman("image", "inspect", "--format",
                    "{{.Config.User}}|{{.Config.Entrypoint}}|{{.Config.Healthcheck.Test}}|{{.Size}}", image).stdout
    user, entrypoint, healthcheck, size = config.strip().split("|")
    assert user == "{:d}:{:d}".format(*dockerfile_user())
    assert entrypoint == "[tini -- mur-gateway]"
    assert "gateway.commands.healthcheck" in healthcheck  # kept: built in docker format
    print(f"image {image}: {int(size) / 1e6:.1f} MB")
    ours = sorted({"loadtest", "RESULTS.md", ".ci", ".dockerignore"}
                  | {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True)
                     if os.path.basename(p) != "__init__.py"})  # a package marker is every package's
    names = " -o ".join(f"-name '{name}'" for name in ours)
    found = podman("run", "--rm", "--user", "0", *ulimits(), "--entrypoint", "sh", image, "-c",
                   f"find / -xdev \\( {names} \\) -print").stdout
    assert found.split() == []
    # no pip at run time; `sleep` is there for deploy/kubernetes/'s preStop pause
    assert podman("run", "--rm", *ulimits(), "--entrypoint", "sh", image, "-c",
                  "command -v pip || echo none; command -v sleep").stdout.split() == ["none", "/usr/bin/sleep"]


def test_container_serves_the_embedded_capsule(served):
    status, _, body = rpc(served.port, "GetTask", {"id": "tsk:missing"})
    assert status == 200 and body["error"]["code"] == -32001
    with urllib.request.urlopen(f"http://127.0.0.1:{served.port}/readyz", timeout=5) as answer:
        assert answer.status == 200
    task_runs_to_completion(served.port)
    assert served.metric("murgw_events_written_total") > 0


def test_every_process_runs_as_the_dockerfiles_user(served):
    uid, gid = dockerfile_user()
    assert served.exec("id", "-u").stdout.strip() == str(uid)
    statuses = served.exec("sh", "-c", "grep -h '^[UG]id:' /proc/[0-9]*/status").stdout.split("\n")
    ids = {tuple(line.split()[1:]) for line in statuses if line}
    assert ids == {(str(uid),) * 4, (str(gid),) * 4}


def test_healthcheck_passes(served):
    result = podman("healthcheck", "run", served.name, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert served.inspect("{{.State.Health.Status}}") == "healthy"


def test_pid_1_reaps_orphans_and_a_killed_worker_is_replaced(served):
    procs = served.processes()
    assert procs[1][0] == "tini"
    served.exec("sh", "-c", "sleep 0.1 & exit 0")  # the sleep is orphaned to PID 1
    serving = [line for line in served.logs().splitlines() if '"worker serving"' in line]
    worker = orjson.loads(serving[-1])["pid"]
    served.exec("sh", "-c", f"kill -KILL {worker}")
    wait_for(lambda: served.logs().count('"worker serving"') > len(serving), what="the worker's replacement")
    wait_for(lambda: not any(comm == "sleep" or pid == worker for pid, (comm, _) in served.processes().items()),
             what="the orphan and the killed worker to be reaped")
    assert [p for p, (_, state) in served.processes().items() if state == "Z"] == []
    wait_ready(served.port)


def test_read_only_root_without_any_tmpfs_still_serves(image):
    # --read-only-tmpfs=false: no tmpfs podman adds on its own (its --read-only alone mounts
    # /tmp, /var/tmp and /run; docker's adds none). The gateway writes no file anywhere: its
    # ring and counters are memfds, its control socket is abstract.
    with running_container(image, "--read-only", "--read-only-tmpfs=false") as container:
        refused = container.exec("sh", "-c", "touch /opt/venv/x /tmp/x", check=False)
        assert refused.returncode != 0 and refused.stderr.count("Read-only file system") == 2
        mounts = [line.split()[1] for line in container.exec("cat", "/proc/mounts").stdout.splitlines()]
        assert "/tmp" not in mounts
        task_runs_to_completion(container.port)
        assert "murgw-" not in container.exec("sh", "-c", "ls -a /tmp /dev/shm").stdout
        assert {name.rsplit("-", 1)[1] for name in container.memfds()} == {"ring", "metrics"}


def test_a_small_dev_shm_holds_the_load_that_once_ended_in_sigbus(image):
    # 1,000 events a second of 9 KB: with the ring a file in a 64 MiB /dev/shm, the first
    # pass through the arena ran out of pages and SIGBUS killed the gateway. A memfd is not
    # in /dev/shm: a 1 MiB one holds nothing of the gateway while the ring wraps, twice over.
    size = 9000
    with running_container(image, "--shm-size=1m",
                           gateway_args=("--sim-load", "1000", "--sim-load-size", str(size))) as container:
        ring = shm_bytes_per_gateway(workers=2)
        wait_for(lambda: container.metric("murgw_events_written_total") * size > 2 * ring,
                 timeout=120, what="two passes of load through the ring")
        assert container.inspect("{{.State.Status}}") == "running"
        assert container.metric("murgw_worker_restarts_total") == 0
        assert container.exec("df", "--output=used", "/dev/shm").stdout.split()[1] == "0"
        wait_ready(container.port)


def test_podman_stop_drains_within_grace_and_exits_0(image):
    with running_container(image) as container:
        stream = watch(container.port)
        podman("stop", "--time", str(GRACE_SECONDS), container.name, timeout=GRACE_SECONDS + 30)
        assert container.inspect("{{.State.ExitCode}}") == "0"  # 137 had the grace run out
        assert stream.read_until(lambda e: False) == [] and stream.ended  # the drain ended it
        stream.close()
        assert '"event":"stopped"' in container.logs().replace(" ", "")  # SIGTERM reached the supervisor


def test_podman_kill_leaves_nothing_running(image):
    with running_container(image) as container:
        pids = container.host_pids()
        assert len(pids) >= 6  # tini, supervisor, sequencer, exporter, 2 workers
        podman("kill", container.name)
        wait_for(lambda: container.inspect("{{.State.Status}}") in ("exited", "stopped"), what="the container's end")
        assert container.inspect("{{.State.ExitCode}}") == "137"
        wait_for(lambda: all(gone(pid) for pid in pids), what="every process of the container to end")


def test_healthcheck_follows_the_bind_it_is_given(tmp_path):
    """gateway/commands/healthcheck.py on its own, against a gateway on this machine: ready is 0,
    nothing listening is 1 with one line saying why."""
    def check(port: int) -> subprocess.CompletedProcess:
        env = {**os.environ, "MUR_GATEWAY_BIND": f"0.0.0.0:{port}"}
        env.pop("MUR_GATEWAY_CONFIG", None)
        return subprocess.run([sys.executable, "-m", "gateway.commands.healthcheck"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=30)

    with running_gateway(tmp_path=tmp_path) as gw:
        assert check(gw.port).returncode == 0
    closed = free_port()
    result = check(closed)
    assert result.returncode == 1 and result.stderr.startswith("healthcheck: ") and result.stderr.count("\n") == 1
