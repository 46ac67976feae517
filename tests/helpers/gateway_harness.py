"""The real gateway as a subprocess for the tests: started on an ephemeral port, always ended
by PID (SIGTERM, then SIGKILL) with every child it has, even when the test fails, and held to
one JSON object a line on stderr (`not_json`); a start that must be refused, --check and
--print-config under an audit hook that forbids binding and spawning; the conditions a test
waits on instead of sleeping, the processes and memory a gateway leaves, its metrics scrape,
and gateway B in front of an upstream gateway A."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import resource
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Iterator

import orjson
import pytest

from helpers.http_client import Http


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The C load reader's build script, beside the checkout where the developers' tooling is (build
# tooling only: the load kit's tests build it into a temporary folder, or skip without it).
CSSE_BUILD = os.path.join(os.path.dirname(ROOT), "shared", "tools", "csse", "build.sh")
START_TIMEOUT = 30.0
HEARTBEAT = 0.3


class Gateway:
    def __init__(self, proc: subprocess.Popen, port: int, metrics_port: int | None, stderr_path: str):
        self.proc, self.port, self.metrics_port, self.stderr_path = proc, port, metrics_port, stderr_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def logs(self) -> list[dict]:
        """The JSON log lines every process wrote to stderr."""
        out = []
        for line in self.stderr().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                out.append(orjson.loads(line))
        return out

    def worker_pids(self) -> dict[int, int]:
        """Worker slot -> pid of the process serving it now (from the workers' own logs)."""
        return {rec["worker"]: rec["pid"] for rec in self.logs() if rec.get("event") == "worker serving"}

    def children(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split()]

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class GatewayOptions:
    """What the `gateway` fixture (conftest.py) starts: `running_gateway`'s flags and keywords."""

    def __init__(self, *args: str, **options):
        self.args, self.options = args, options


@contextlib.contextmanager
def running_gateway(*args: str, workers: int = 2, heartbeat: float = HEARTBEAT, metrics: bool = False,
                    tmp_path=None, env: dict | None = None,
                    nofile: tuple[int, int] | None = None,
                    tls: ssl.SSLContext | None = None, ready: bool | None = True) -> Iterator[Gateway]:
    """A gateway on 127.0.0.1:0 with `args`; always stopped, and its children killed, at exit.
    `nofile`: the (soft, hard) RLIMIT_NOFILE it starts under; `tls`: the client context that
    verifies a gateway started with --certfile/--keyfile; `ready`: wait for /readyz (else only
    for /healthz: one whose upstream is out of reach serves, never ready; None: for neither,
    only its address: one whose workers cannot serve)."""
    stderr_dir = str(tmp_path) if tmp_path else tempfile.mkdtemp(prefix="murgw-test-")
    stderr_path = os.path.join(stderr_dir, f"gateway-{time.monotonic_ns()}.err")
    cmd = [sys.executable, "-m", "gateway", "--bind", "127.0.0.1:0", "--workers", str(workers),
           "--heartbeat-interval", str(heartbeat),
           "--metrics-bind", "127.0.0.1:0" if metrics else "off", *args]
    with open(stderr_path, "wb") as err:
        limits = None if nofile is None else (
            lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile))
        # Unbuffered: _read_addresses selects on the pipe, so no line may wait in a buffer.
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, bufsize=0,
                                env={**os.environ, **(env or {})}, preexec_fn=limits)
    children: list[int] = []
    try:
        port, metrics_port = _read_addresses(proc, metrics)
        gateway = Gateway(proc, port, metrics_port, stderr_path)
        if ready is not None:
            wait_ready(port, tls=tls, path="/readyz" if ready else "/healthz")
            if workers > 1:  # one worker answered readiness: the others may still be starting,
                # and until they serve, the first takes every connection (their logs say when)
                wait_for(lambda: len(gateway.worker_pids()) == workers, START_TIMEOUT, "every worker serving")
        children = gateway.children()
        yield gateway
    finally:
        # Those it started with and those it has now (a test may have had a worker replaced).
        ended = Gateway(proc, 0, None, stderr_path)
        children = {*children, *ended.children()}
        ended.stop()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with open(stderr_path, "rb") as fh:
            written = fh.read()
        if not tmp_path:  # a log of our own making: gone with the gateway
            shutil.rmtree(stderr_dir, ignore_errors=True)
        # The segments are memfds and the control socket is abstract: nothing to remove,
        # unless a gateway made files in /dev/shm after all (session_memory, asserted in the
        # fault and lifeline tests, finds none); then they go here, so a failure leaves none.
        for path in glob.glob(f"/dev/shm/murgw-{proc.pid}-*"):
            with contextlib.suppress(OSError):
                os.unlink(path)
    # reached only when the test passed: a failing test's own error is not hidden by this one
    assert not (lines := not_json(written)), f"the gateway wrote lines to stderr that are not JSON objects: {lines}"


def not_json(stderr: bytes) -> list[bytes]:
    """The lines of a gateway's stderr that are not one JSON object each (SECURITY.md, logs).

    Every gateway `running_gateway` starts is held to it once the test passes, whatever the
    test looked at. The one plain form a gateway writes is a start refusal (`mur-gateway:
    …`, exit 2, before logging is set up: gateway/config/check.py), and such a gateway never
    prints its address: `running_gateway` raises before its test runs, and `refused_start`
    (below) reads that line, so no exception is made here."""
    bad = []
    for line in stderr.splitlines():
        try:
            if isinstance(orjson.loads(line), dict):
                continue
        except orjson.JSONDecodeError:
            pass
        bad.append(line)
    return bad


def _read_addresses(proc: subprocess.Popen, metrics: bool) -> tuple[int, int | None]:
    port = metrics_port = None
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and (port is None or (metrics and metrics_port is None)):
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if not ready:
            if proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {proc.returncode} before listening")
            continue
        line = proc.stdout.readline().decode()
        if match := re.match(r"listening on https?://[^:]+:(\d+)", line):
            port = int(match.group(1))
        elif match := re.match(r"metrics on http://[^:]+:(\d+)/metrics", line):
            metrics_port = int(match.group(1))
    if port is None:
        raise RuntimeError("gateway did not print its address")
    return port, metrics_port


def refused_start(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m gateway ARGV`, meant to stop at start on its configuration (what it answered)."""
    return subprocess.run([sys.executable, "-m", "gateway", *argv, "--metrics-bind", "off"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})


def start_refusal(*argv: str, env: dict | None = None) -> str:
    """`python -m gateway ARGV`, which must stop at start: exit 2 and one line on stderr, the
    line returned without its `mur-gateway: ` prefix."""
    result = refused_start(*argv, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mur-gateway: "), result.stderr
    return lines[0][len("mur-gateway: "):]


# `mur-gateway` whose audit hook stops it at any bind or new process (sys.addaudithook): what
# --check and --print-config answer, from a process that can have bound nothing, started nothing.
BIND_NOTHING_START_NOTHING = """
import sys
FORBIDDEN = ("socket.bind", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec",
             "os.system", "subprocess.Popen")
def refuse(event, args):
    if event in FORBIDDEN:
        raise SystemExit(f"forbidden: {event} {args!r}")
sys.addaudithook(refuse)
from gateway.commands.cli import main
sys.exit(main(sys.argv[1:]))
"""


def judged(*argv: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`mur-gateway ARGV` (with --check or --print-config) under BIND_NOTHING_START_NOTHING."""
    return subprocess.run([sys.executable, "-c", BIND_NOTHING_START_NOTHING, *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, input=stdin,
                          env={**os.environ, **(env or {})})


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def rss_kib(pid: int) -> int:
    """A process's resident memory now (VmRSS), KiB."""
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def gone(pid: int) -> bool:
    """The process has exited (absent, or a zombie awaiting its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def stopped(pid: int) -> bool:
    """The kernel has stopped the process (state T, or t under a tracer): a SIGSTOP took effect."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def session_memory(supervisor: int) -> list[str]:
    """What is left of a session's shared memory: its files in /dev/shm (if any were made),
    and every process on the machine that maps or holds one of its memfds (while one does,
    the segment's memory is still allocated). Empty once the session is truly gone."""
    tag = f"/memfd:murgw-{supervisor}-"
    left = glob.glob(f"/dev/shm/murgw-{supervisor}-*")
    for proc in glob.glob("/proc/[0-9]*"):
        with contextlib.suppress(OSError):
            with open(f"{proc}/maps") as fh:
                mapped = tag in fh.read()
            if mapped or any(os.readlink(f"{proc}/fd/{fd}").startswith(tag)
                             for fd in os.listdir(f"{proc}/fd")):
                left.append(f"{proc} holds {tag}*")
    return left


def require_tool(name: str, package: str) -> str:
    """The path of a tool a test needs: skipped where it is absent, but a failure in CI
    (CI=true), where .ci/run installs the Debian `package` that holds it."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed; .ci/run installs Debian's {package} package")
        pytest.skip(f"{name} not installed (Debian package {package}); CI installs it")
    return path


def dockerfile_user() -> tuple[int, int]:
    """The numeric uid and gid of the Dockerfile's last USER line."""
    with open(os.path.join(ROOT, "Dockerfile")) as fh:
        users = [line.split()[1] for line in fh if line.startswith("USER ")]
    uid, _, gid = users[-1].partition(":")
    return int(uid), int(gid or uid)


def shm_bytes_per_gateway(workers: int) -> int:
    """The shared memory a gateway with `workers` workers allocates: its ring and counter
    memfds, created as the supervisor creates them, measured (fstat of each memfd) and
    closed. They have no path; their pages are shmem, counted in the container's memory."""
    from gateway.common import board
    from gateway.common import metrics
    from shm import Ring

    base = f"murgw-{os.getpid()}-size{time.monotonic_ns() % 1_000_000}"
    ring = Ring.create(base + "-ring", control_words=board.CONTROL_WORDS, anonymous=True)
    blocks = metrics.create_blocks(base + "-metrics", workers)
    try:
        return sum(os.fstat(segment.handle.fd).st_size for segment in (ring, blocks))
    finally:
        ring.close()
        blocks.close()


def wait_ready(port: int, timeout: float = START_TIMEOUT, tls: ssl.SSLContext | None = None,
               path: str = "/readyz") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            status, _, _ = Http(port, tls=tls).request("GET", path)
            if status == 200:
                return
        time.sleep(0.05)
    raise RuntimeError("gateway never became ready")


def token_table(rules) -> str:
    """[[network.authentication.tokens]] entries for (name, token, scopes[, max_streams]) rules."""
    return "".join(f'[[network.authentication.tokens]]\nname = "{name}"\n'
                   f'sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
                   f'scopes = {orjson.dumps(scopes).decode()}\n'
                   + (f"max_streams = {more[0]}\n" if more else "")
                   for name, token, scopes, *more in rules)


# --- metrics ---

def scrape(port: int) -> dict[str, float]:
    """Every sample the exporter on `port` serves: series (with labels) -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


class Tally:
    """A worker's counters kept in a dict, for the parts tests drive in-process (a worker's
    are its shared-memory block, gateway/common/metrics.py)."""

    def __init__(self):
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, name: str, n: int = 1, label: str = "") -> None:
        self.counts[(name, label)] = self.counts.get((name, label), 0) + n

    def sub(self, name: str, n: int = 1, label: str = "") -> None:
        self.add(name, -n, label)


def series(samples: dict, metric: str) -> dict[str, float]:
    return {k: v for k, v in samples.items() if k == metric or k.startswith(metric + "{")}


# --- upstream mode: gateway B in front of gateway A ---

def upstream_ready(port: int) -> bool:
    """B's /readyz answers 200: its upstream link is up."""
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200
    except OSError:
        return False


@contextlib.contextmanager
def front_of(upstream, tmp_path, *args, **kw):
    """Gateway B with `upstream` (gateway A) as its upstream, once its link is up."""
    with running_gateway("--upstream", f"http://127.0.0.1:{upstream.port}", *args, tmp_path=tmp_path, **kw) as gw:
        wait_for(lambda: upstream_ready(gw.port), what="the upstream link")
        yield gw


def serving_pid(sock: socket.socket) -> int | None:
    """The pid of the process that holds the server's end of `sock`'s TCP connection (a
    gateway worker), read from /proc: the kernel's table of TCP sockets names the server end's
    inode, and that process's descriptors name the inode. None when no process holds it (not
    accepted yet, or gone)."""
    client, server = sock.getsockname()[:2], sock.getpeername()[:2]
    table = "/proc/net/tcp6" if sock.family == socket.AF_INET6 else "/proc/net/tcp"
    local, remote = _proc_address(*server, sock.family), _proc_address(*client, sock.family)
    with open(table) as lines:
        inodes = [fields[9] for fields in (line.split() for line in lines)
                  if fields[1] == local and fields[2] == remote]
    if not inodes:
        return None
    target = f"socket:[{inodes[0]}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if not cmdline.read().startswith(b"murgw: worker"):
                    continue  # the process title every worker sets
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return int(pid)
        except OSError:
            continue  # gone meanwhile
    return None


def _proc_address(host: str, port: int, family: int) -> str:
    """`host:port` as /proc/net/tcp prints it: the address's 32-bit words in host order, hex."""
    packed = socket.inet_pton(family, host)
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"
