"""The servers the bench compares, each started on loopback and stopped by pid: the gateway,
nginx + nchan (with the publisher that feeds it the gateway's load event bytes) and the naive
baseline; how each is pinned to CPUs and checked to be (loadtest/bench.py's docstring says
what each is and why). Storm, crowd and openings start theirs from here too. `ROOT` and
`PYTHON` are the checkout and interpreter a started gateway runs (loadtest/rows.py points them
at another checkout).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from gateway.bench_surface import process_tree, rpc_prefix
from loadtest import histogram, wire

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
NCHAN_MODULE = "/usr/lib/nginx/modules/ngx_nchan_module.so"
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listened on {port} within {timeout} s")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Stop a server we started and every process under it (by pid, never by name)."""
    family = process_tree(proc.pid)
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pid in family[1:]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- the servers ---

def pinned(cmd: list[str], cpus: str | None) -> list[str]:
    """`cmd` under `taskset -c cpus` (taskset execs it: the pid is the command's)."""
    return ["taskset", "-c", cpus, *cmd] if cpus else cmd


def cpu_list(text: str) -> set[int]:
    """The CPUs of a taskset list such as `0`, `0,2` or `0-3`."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def check_pinning(pid: int, cpus: str | None) -> None:
    """Every process of the server's tree (nginx workers, gateway workers) runs on `cpus`."""
    if not cpus:
        return
    wanted = cpu_list(cpus)
    for member in process_tree(pid):
        with contextlib.suppress(ProcessLookupError):
            if os.sched_getaffinity(member) != wanted:
                raise RuntimeError(f"process {member} of the server is not pinned to {cpus}")

@functools.cache
def gateway_has_option(option: str) -> bool:
    usage = subprocess.run([PYTHON, "-m", "gateway", "--help"], cwd=ROOT, capture_output=True, text=True)
    return option in usage.stdout


class ServerProcess:
    """A server started from `self.cmd` on `self.port`, stopped on exit."""

    def __enter__(self):
        self.proc = subprocess.Popen(pinned(self.cmd, self.args.server_cpus), cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc)
        return self

    def __exit__(self, *exc):
        stop(self.proc)


class Gateway(ServerProcess):
    name = "gateway"
    dialect = "murmur"

    def __init__(self, args, rate: float, workers: int):
        self.args = args
        self.port, self.metrics_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.cmd = [PYTHON, "-m", "gateway", "--bind", f"127.0.0.1:{self.port}", "--workers", str(workers),
                    "--metrics-bind", f"127.0.0.1:{self.metrics_port}", "--log-level", "warning",
                    "--heartbeat-interval", str(args.heartbeat_interval), "--sim-load", str(rate)]
        if rate:  # a size without a rate stops the start (it would do nothing)
            self.cmd += ["--sim-load-size", str(args.size)]
        if gateway_has_option("--max-connections"):  # measure throughput, not the admission limit
            self.cmd += ["--max-connections", str(args.large + args.idle)]
        self.cmd += shlex.split(args.gateway_args)  # after ours: argparse keeps the last value

    def heartbeat_jitter_p99_ms(self) -> float | None:
        """p99 of the gateway's own jitter histogram, estimated as Prometheus does (loadtest/histogram.py)."""
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        except OSError:
            return None
        buckets = {}
        for line in text.splitlines():
            if line.startswith("murgw_heartbeat_jitter_seconds_bucket"):
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                buckets[float(bound)] = float(line.rsplit(" ", 1)[1])
        p99 = histogram.quantile(buckets, 0.99)
        return None if p99 is None else round(p99 * 1000, 3)


def scratch_nginx(folder: str) -> dict[str, str]:
    """What keeps an nginx run by hand (no package's service, no root paths) in `folder`: its
    pid file, error log and the foreground (`scratch`, top level), no access log and its
    temporary files (`scratch_http`, inside `http`)."""
    temp = "".join(f"  {kind}_temp_path {folder}/{name};\n" for kind, name in (
        ("client_body", "body"), ("proxy", "proxy"), ("fastcgi", "fastcgi"), ("uwsgi", "uwsgi"), ("scgi", "scgi")))
    return {"scratch": f"pid {folder}/nginx.pid;\nerror_log {folder}/error.log error;\ndaemon off;\n",
            "scratch_http": "  access_log off;\n" + temp}


class Nchan:
    name = "nchan"
    dialect = "nchan"
    CONF = """load_module {module};
worker_processes {workers};
worker_rlimit_nofile {nofile};
{scratch}events {{ worker_connections {nofile}; multi_accept on; }}
http {{
{scratch_http}  nchan_shared_memory_size 256M;
  server {{
    listen 127.0.0.1:{port} backlog=4096{reuseport};
    location = /nchan_status {{ nchan_stub_status; }}
    location = /pub {{
      nchan_publisher http;
      nchan_channel_id load;
      nchan_message_buffer_length 512;
      nchan_message_timeout 1h;
    }}
    location = /sub {{
      nchan_subscriber eventsource;
      nchan_channel_id load;
      nchan_subscriber_first_message newest;
      nchan_eventsource_ping_interval {heartbeat};
      nchan_eventsource_ping_comment heartbeat;
    }}
    location = /replay {{
      nchan_subscriber eventsource;
      nchan_channel_id load;
      nchan_subscriber_first_message oldest;
      nchan_eventsource_ping_interval {heartbeat};
      nchan_eventsource_ping_comment heartbeat;
    }}
  }}
}}
"""

    def __init__(self, args, rate: float, workers: int, prefill: int = 0):
        ensure_nchan()
        self.args, self.prefill = args, prefill
        self.port, self.rate, self.size = free_port(), rate, args.size
        self.metrics_port = None
        self.url = f"http://127.0.0.1:{self.port}/sub"
        self.dir = tempfile.mkdtemp(prefix="bench-nchan-")
        with open(os.path.join(self.dir, "nginx.conf"), "w") as fh:
            fh.write(self.CONF.format(module=NCHAN_MODULE, workers=workers, port=self.port, **scratch_nginx(self.dir),
                                      reuseport=" reuseport" if workers > 1 else "",
                                      nofile=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                                      heartbeat=max(1, round(args.heartbeat_interval))))
        self.publisher: Publisher | None = None

    def __enter__(self):
        nginx = ["nginx", "-c", os.path.join(self.dir, "nginx.conf"), "-p", self.dir]
        self.proc = subprocess.Popen(pinned(nginx, self.args.server_cpus),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc)
        if self.rate > 0 or self.prefill:
            self.publisher = Publisher(self.port, self.rate, self.size)
            self.publisher.prefill(self.prefill)
        if self.rate > 0:
            self.publisher.start()
        return self

    def __exit__(self, *exc):
        if self.publisher is not None:
            self.publisher.stop() if self.publisher.is_alive() else self.publisher.conn.close()
        stop(self.proc, signal.SIGQUIT)
        shutil.rmtree(self.dir, ignore_errors=True)


class Publisher(threading.Thread):
    """POSTs the load event to nchan's publisher location at `rate` a second, keep-alive,
    numbered from 1 on; `prefill` messages are posted at once before it (the buffer a
    replaying subscriber is handed)."""

    def __init__(self, port: int, rate: float, size: int):
        super().__init__(daemon=True)
        self.port, self.rate, self.size = port, rate, size
        self.stopping = threading.Event()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        self.sent = 0

    def post(self) -> None:
        self.sent += 1
        body = rpc_prefix(b"1") + wire.load_result(self.size, seq=self.sent) + b"}"
        self.conn.request("POST", "/pub", body, {"Content-Type": "application/json"})
        self.conn.getresponse().read()

    def prefill(self, count: int) -> None:
        for _ in range(count):
            self.post()

    def run(self) -> None:
        started, first = time.monotonic(), self.sent
        while not self.stopping.is_set():
            due = int((time.monotonic() - started) * self.rate) - (self.sent - first)
            for _ in range(max(0, due)):
                self.post()
            self.stopping.wait(min(0.01, 1.0 / self.rate))
        self.conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(15)


class Naive(ServerProcess):
    name = "naive"
    dialect = "murmur"

    def __init__(self, args, rate: float, workers: int):
        self.args = args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.metrics_port = None
        self.cmd = [PYTHON, "-m", "loadtest.naive", "--port", str(self.port), "--rate", str(rate),
                    "--size", str(args.size), "--heartbeat-interval", str(args.heartbeat_interval)]



SERVERS = {"gateway": Gateway, "nchan": Nchan, "naive": Naive}


def ensure_nchan() -> None:
    if shutil.which("nginx") and os.path.exists(NCHAN_MODULE):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "nginx", "libnginx-mod-nchan"], check=True, env=env)


def ensure_uvicorn() -> None:
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        subprocess.run([PYTHON, "-m", "pip", "install", "-q", "uvicorn", "httptools"], check=True)
