"""Test support: the real gateway as a subprocess, and a raw-socket HTTP/SSE client.

Every helper more than one test file uses lives here (no test file imports another): the
gateway, HTTP and SSE clients, the metrics scrape, the background `Recorder` of a watch
stream, raw-bytes `exchange`, and gateway B in front of an upstream gateway A.

`running_gateway(...)` starts `python -m gateway` on an ephemeral port and always ends it by
PID (SIGTERM, then SIGKILL), even when the test fails. `Http` speaks HTTP/1.1 over a plain
socket with h11, so tests read the exact bytes the server wrote; `SSEStream` feeds them to
the project's own SSE parser and, independently, parses every event's result with the A2A
SDK's protobuf `StreamResponse`.
"""

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
import threading
import time
import urllib.request
from typing import Iterator, NamedTuple

import h11
import orjson
import pytest
from a2a.types import a2a_pb2
from google.protobuf import json_format

from gateway.protocol.parser import SSEEvent, SSEParser, read_stream_response
from gateway.protocol.uris import STREAM_URI

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT = 30.0
HEARTBEAT = 0.3
WATCH = "murmur.WatchSession"


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
        if not tmp_path:  # a log of our own making: gone with the gateway
            shutil.rmtree(stderr_dir, ignore_errors=True)
        # The segments are memfds and the control socket is abstract: nothing to remove,
        # unless a gateway made files in /dev/shm after all (session_memory, asserted in the
        # fault and lifeline tests, finds none); then they go here, so a failure leaves none.
        for path in glob.glob(f"/dev/shm/murgw-{proc.pid}-*"):
            with contextlib.suppress(OSError):
                os.unlink(path)


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


def start_refusal(*argv: str, env: dict | None = None) -> str:
    """`python -m gateway ARGV`, which must stop at start: exit 2 and one line on stderr, the
    line returned without its `mur-gateway: ` prefix."""
    result = subprocess.run([sys.executable, "-m", "gateway", *argv, "--metrics-bind", "off"],
                            cwd=ROOT, capture_output=True, text=True, timeout=30,
                            env={**os.environ, **(env or {})})
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
from gateway.cli import main
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
    from gateway import board, metrics
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


def headers_for(*, version: str | None = "1.0", last_event_id: str | None = None,
                activate: bool = False, token: str | None = None,
                content_type: str | None = "application/json", extra: list | None = None) -> list:
    headers = []
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    if version is not None:
        headers.append(("A2A-Version", version))
    if last_event_id is not None:
        headers.append(("Last-Event-ID", last_event_id))
    if activate:
        headers.append(("A2A-Extensions", STREAM_URI))
    if token is not None:
        headers.append(("Authorization", f"Bearer {token}"))
    return headers + list(extra or [])


def rpc_body(method: str, params: dict | None = None, rpc_id=1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}})


def user_message(text: str, **extra) -> dict:
    return {"message": {"messageId": f"msg-{time.monotonic_ns()}", "role": "ROLE_USER",
                        "parts": [{"text": text}], **extra}}


class Http:
    """One HTTP/1.1 connection over a raw socket (TLS with `tls`), parsed with h11."""

    def __init__(self, port: int, *, rcvbuf: int | None = None, timeout: float = 10.0,
                 tls: ssl.SSLContext | None = None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.conn = h11.Connection(h11.CLIENT)
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.raw_headers: list[tuple[str, str]] = []

    def send_request(self, method: str, path: str, headers: list = (), body: bytes = b"") -> None:
        all_headers = [("Host", "127.0.0.1"), *headers]
        if method != "GET" or body:
            all_headers.append(("Content-Length", str(len(body))))
        self.sock.sendall(self.conn.send(h11.Request(method=method, target=path, headers=all_headers)))
        if body:
            self.sock.sendall(self.conn.send(h11.Data(data=body)))
        self.sock.sendall(self.conn.send(h11.EndOfMessage()))

    def _next_event(self):
        """The next h11 event; a connection cut mid-body raises ConnectionError."""
        try:
            return self._next_h11_event()
        except h11.RemoteProtocolError as exc:
            raise ConnectionError(str(exc)) from exc

    def _next_h11_event(self):
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = self.sock.recv(65536)
                self.conn.receive_data(data)
                continue
            return event

    def read_head(self) -> int:
        event = self._next_event()
        assert isinstance(event, h11.Response), event
        self.status = event.status_code
        self.raw_headers = [(k.decode(), v.decode()) for k, v in event.headers]
        self.headers = {k.lower(): v for k, v in self.raw_headers}
        return self.status

    def read_chunk(self) -> bytes | None:
        """The next body bytes; None at the end of the response."""
        event = self._next_event()
        if isinstance(event, h11.Data):
            return bytes(event.data)
        if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return None
        raise AssertionError(f"unexpected {event!r}")

    def read_body(self) -> bytes:
        chunks = []
        while (chunk := self.read_chunk()) is not None:
            chunks.append(chunk)
        return b"".join(chunks)

    def request(self, method: str, path: str, headers: list = (), body: bytes = b""):
        try:
            self.send_request(method, path, headers, body)
            status = self.read_head()
            return status, self.headers, self.read_body()
        finally:
            self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def rpc(port: int, method: str, params: dict | None = None, *, rpc_id=1, **header_options):
    """A non-streaming JSON-RPC call: (HTTP status, headers, decoded JSON body)."""
    status, headers, body = Http(port).request("POST", "/", headers_for(**header_options),
                                               rpc_body(method, params, rpc_id))
    return status, headers, orjson.loads(body) if body else None


def token_table(rules) -> str:
    """[[network.authentication.tokens]] entries for (name, token, scopes[, max_streams]) rules."""
    return "".join(f'[[network.authentication.tokens]]\nname = "{name}"\n'
                   f'sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
                   f'scopes = {orjson.dumps(scopes).decode()}\n'
                   + (f"max_streams = {more[0]}\n" if more else "")
                   for name, token, scopes, *more in rules)


# RFC 9110's reason phrases, written out here so the tests do not share the server's table.
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout", 413: "Content Too Large",
           429: "Too Many Requests", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
           501: "Not Implemented", 503: "Service Unavailable", 505: "HTTP Version Not Supported"}


def problem_detail(status: int, headers: dict, body: bytes | dict) -> str:
    """The `detail` of a door refusal, checked to be exactly the RFC 9457 problem details
    the door sends (gateway/worker/problem.py): content-type application/problem+json, type,
    title, status, detail."""
    assert headers["content-type"] == "application/problem+json", headers
    problem = orjson.loads(body) if isinstance(body, (bytes, str)) else body
    assert list(problem) == ["type", "title", "status", "detail"], problem
    assert problem["type"] == "about:blank" and problem["title"] == REASONS[status], problem
    assert problem["status"] == status and isinstance(problem["detail"], str) and problem["detail"], problem
    return problem["detail"]


def a2a_check(data: str) -> dict:
    """The event's JSON-RPC response; its result parsed by the A2A SDK as a StreamResponse."""
    response = orjson.loads(data)
    if "result" in response:
        json_format.Parse(orjson.dumps(response["result"]), a2a_pb2.StreamResponse(),
                          ignore_unknown_fields=False)
    return response


class SSEStream:
    """An open stream: its head, then its events (heartbeats included), each A2A-checked.

    `worker_pid` is the pid of the worker serving it: the connection first asks `/healthz`
    (which names its worker), then sends the stream request on the same keep-alive connection.
    Where the gateway closes after the answer (keep-alive off: test_fallback.py), the stream
    goes on a connection of its own and its worker is not known (None).
    """

    def __init__(self, port: int, method: str, params: dict | None = None, *, rpc_id=1,
                 rcvbuf: int | None = None, timeout: float = 10.0, tls: ssl.SSLContext | None = None,
                 **header_options):
        self.http = Http(port, rcvbuf=rcvbuf, timeout=timeout, tls=tls)
        self.http.send_request("GET", "/healthz")
        self.http.read_head()
        self.worker_pid = orjson.loads(self.http.read_body())["pid"]
        if self.http.conn.their_state is h11.MUST_CLOSE:
            self.http.close()
            self.http, self.worker_pid = Http(port, rcvbuf=rcvbuf, timeout=timeout, tls=tls), None
        else:
            self.http.conn.start_next_cycle()
        self.http.send_request("POST", "/", headers_for(**header_options), rpc_body(method, params, rpc_id))
        self.status = self.http.read_head()
        self.headers = self.http.headers
        self.parser = SSEParser()
        self.raw = bytearray()
        self._pending: list[SSEEvent] = []
        self._unchecked: list[str] = []
        self.ended = False

    def next(self) -> SSEEvent | None:
        """The next SSE block (event or heartbeat); None when the response ended."""
        while not self._pending:
            chunk = self.http.read_chunk()
            if chunk is None:
                self.ended = True
                return None
            self.raw += chunk
            self._pending.extend(self.parser.feed(chunk))
        event = self._pending.pop(0)
        if event.data is not None:
            self._unchecked.append(event.data)
        return event

    def check_a2a(self) -> None:
        """Parse every event read so far with the A2A SDK (deferred so reading stays fast)."""
        for data in self._unchecked:
            a2a_check(data)
        self._unchecked.clear()

    def events(self, *, heartbeats: bool = False) -> Iterator[SSEEvent]:
        while (event := self.next()) is not None:
            if event.data is None and not heartbeats:
                continue
            yield event

    def read_until(self, predicate, *, limit: int = 100_000, within: float = 30.0) -> list[SSEEvent]:
        """Events (no heartbeats) up to and including the first that satisfies predicate.

        Heartbeats keep a socket timeout from firing, so the wait is bounded here instead."""
        seen = []
        deadline = time.monotonic() + within
        for event in self.events(heartbeats=True):
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching event within {within} s; saw {len(seen)}")
            if event.data is None:
                continue
            seen.append(event)
            if predicate(event) or len(seen) >= limit:
                return seen
        return seen

    def close(self) -> None:
        self.http.close()
        self.check_a2a()

    def __enter__(self) -> "SSEStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def item(event: SSEEvent):
    """(kind, body, frame) of an event's StreamResponse."""
    _, stream_item, error = read_stream_response(event.data)
    assert error is None, error
    return stream_item


def describe(event: SSEEvent) -> str:
    """A short, readable name for an event, for exact-order assertions."""
    it = item(event)
    if it.frame is not None:
        frame = it.frame
        if frame["frame"] == "text":
            return f"text{'!' if frame['final'] else ''}:{frame['text']}"
        return frame["frame"]
    if it.kind == "statusUpdate":
        status = it.body["status"]
        text = status.get("message", {}).get("parts", [{}])[0].get("text")
        word = status["state"].removeprefix("TASK_STATE_").lower()
        return f"{word}:{text}" if text else word
    return it.kind


# A task whose events come every 0.1 s for about two seconds (`/scenario slow`), against the
# test heartbeat of 0.3 s: heartbeats kept at open + k x interval fall between its events,
# where a cadence reset by each event would write none until 0.3 s after the last. A worker
# the box runs late delays events and heartbeats alike, so only one held back for most of
# those two seconds could push every heartbeat past the task's end.
CADENCE_TURNS = 20


def heartbeats_among_events(order: list[str]) -> int:
    """The heartbeats ("hb") read before the last task event ("event") of `order`."""
    last = len(order) - 1 - order[::-1].index("event")
    return order[:last].count("hb")


def is_terminal_event(event: SSEEvent) -> bool:
    it = item(event)
    return it.kind == "statusUpdate" and it.body["status"]["state"] in (
        "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED")


def task_id_of(event: SSEEvent) -> str | None:
    it = item(event)
    return it.body.get("taskId") if it.kind in ("statusUpdate", "artifactUpdate") else None


def unknown_like(task_id: str) -> str:
    """An id of the same shape that no task has."""
    return task_id[:-4] + ("0000" if not task_id.endswith("0000") else "1111")


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


def series(samples: dict, metric: str) -> dict[str, float]:
    return {k: v for k, v in samples.items() if k == metric or k.startswith(metric + "{")}


# --- watch streams ---

def send(port: int, text: str) -> str:
    """SendMessage with `text`; the new task's id."""
    status, _, body = rpc(port, "SendMessage", user_message(text))
    assert status == 200, body
    return body["result"]["task"]["id"]


def task_events(stream: SSEStream, task_id: str) -> list:
    """This task's events on a watch stream, up to and including its terminal status."""
    out = []
    for event in stream.events():
        if task_id_of(event) == task_id:
            out.append(event)
            if is_terminal_event(event):
                return out
    raise AssertionError("stream ended before the task did")


def watch(port: int, **kw) -> SSEStream:
    """A watch stream whose 200 head and connection-ack have been read."""
    stream = SSEStream(port, WATCH, {}, **kw)
    assert stream.status == 200
    first = stream.next()
    assert item(first).frame["frame"] == "connection-ack"
    return stream


def reset(stream: SSEStream) -> None:
    """Close the connection with a reset (SO_LINGER 0): the client is gone, not half-closed."""
    stream.http.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.http.close()


class Recorder(threading.Thread):
    """Reads one watch stream in the background: (monotonic time, id or 'hb' or frame name)."""

    def __init__(self, stream: SSEStream):
        super().__init__(daemon=True)
        self.stream = stream
        self.seen: list[tuple[float, object]] = []
        self.lost = False
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                event = self.stream.next()
                if event is None:
                    self.lost = True
                    return
                now = time.monotonic()
                if event.data is None:
                    self.seen.append((now, "hb"))
                elif event.id is not None:
                    self.seen.append((now, event.id))
                else:
                    frame = item(event).frame
                    self.seen.append((now, (frame["frame"], frame.get("missed", frame.get("firstAvailableId")))))
        except OSError:
            self.lost = True

    def ids(self) -> list[int]:
        return [what for _, what in self.seen if isinstance(what, int)]

    def missed(self) -> int:
        return sum(what[1] for _, what in self.seen if isinstance(what, tuple) and what[0] == "lagged")


def ids_explained(recorder: Recorder, first: int = 1) -> None:
    """Strictly ascending ids from `first` (or a gap's firstAvailableId) whose holes are all
    accounted for by lagged frames."""
    gaps = [what[1] for _, what in recorder.seen if isinstance(what, tuple) and what[0] == "gap"]
    first = gaps[0] if gaps else first
    ids = recorder.ids()
    assert ids == sorted(set(ids))
    holes = ids[0] - first + sum(b - a - 1 for a, b in zip(ids, ids[1:]))
    assert holes == recorder.missed(), (holes, recorder.missed())


def start_watchers(port: int, n: int, *, spread_over: set[int] = frozenset(), **kw) -> list[Recorder]:
    """n watchers, and more (up to 4n) until every worker pid in `spread_over` serves one."""
    recorders = []
    while len(recorders) < n or (not spread_over <= {r.stream.worker_pid for r in recorders}
                                 and len(recorders) < 4 * n):
        stream = SSEStream(port, WATCH, {}, timeout=30, **kw)
        recorder = Recorder(stream)
        recorder.start()
        recorders.append(recorder)
    return recorders


def resume(port: int, lost: list[Recorder]) -> list[Recorder]:
    """Reconnect each lost watcher with the last id it saw: the replay is to fill the hole."""
    resumed = []
    for r in lost:
        again = Recorder(SSEStream(port, WATCH, {}, last_event_id=str(r.ids()[-1]), timeout=30))
        again.seen = list(r.seen)
        again.start()
        resumed.append(again)
    return resumed


def assert_gapless_to(target: int, recorders: list[Recorder]) -> None:
    """Every recorder reaches `target` with each id from its first one, once: nothing lost,
    nothing repeated."""
    wait_for(lambda: all(r.ids() and r.ids()[-1] >= target for r in recorders),
             timeout=20, what="every watcher past the same id")
    for r in recorders:
        ids = [i for i in r.ids() if i <= target]
        assert ids == list(range(ids[0], target + 1))


def stop_all(recorders: list[Recorder]) -> None:
    for recorder in recorders:
        recorder.stop.set()
        recorder.stream.http.close()
    for recorder in recorders:
        recorder.join(5)


# --- raw bytes: one request, the answer as a client that refuses malformed HTTP reads it ---

class Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes  # b"" for a stream, whose head is all that is read


class Malformed(AssertionError):
    """The server wrote bytes that are not one well-formed HTTP/1.1 response."""


def exchange(port: int, data: bytes, *, method: str = "POST", half_close: bool = False,
             timeout: float = 10.0) -> Answer | None:
    """Send `data` on a new connection; the answer, or None when the server closed without one.

    `method` tells h11 how the response is framed (HEAD has no body). `half_close` shuts the
    write side after sending, as a client that truncates its request does.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        conn = h11.Connection(h11.CLIENT)
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "fuzz")]))
        conn.send(h11.EndOfMessage())
        status, headers, body, received = None, {}, bytearray(), 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if received == 0:
                    return None
                raise Malformed(f"{exc}: {bytes(body[:200])!r}") from exc
            if event is h11.NEED_DATA:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                received += len(chunk)
                conn.receive_data(chunk)
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = {k.decode().lower(): v.decode() for k, v in event.headers}
                if headers.get("content-type") == "text/event-stream":
                    return Answer(status, headers, b"")
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return Answer(status, headers, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                if status is not None:
                    raise Malformed("the connection closed in the middle of a response")
                return None


def head(method: str, target: str, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers)]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def refusal(answer: Answer | None, status: int) -> str:
    """The problem `detail` of an answer that must be that door refusal."""
    assert answer is not None and answer.status == status, answer
    return problem_detail(status, answer.headers, answer.body)



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

@contextlib.contextmanager
def watching_b_after_a_burst(tmp_path, n: int):
    """(A, B in front of it, a watcher on B that has read a burst of `n` to its end, the last
    id it read): the start of every restart-of-A test."""
    with running_gateway(tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        rpc(b.port, "SendMessage", user_message(f"/scenario burst n={n}"))
        with SSEStream(b.port, WATCH, {}) as watcher:
            yield a, b, watcher, watcher.read_until(is_terminal_event)[-1].id


# --- full-replay storms (test_reconnect_storm.py, test_stall.py) ---

STORM_WATCHERS = 300  # a storm in the suite: a few hundred full replays


def full_ring(port: int, frames: int = 700) -> int:
    """Run a burst task of `frames` to its end; the newest id (its terminal status)."""
    status, _, answer = rpc(port, "SendMessage", user_message(f"/scenario burst n={frames}"))
    assert status == 200, answer
    task_id = answer["result"]["task"]["id"]
    with SSEStream(port, WATCH, last_event_id="0", timeout=30) as probe:
        seen = probe.read_until(lambda e: e.id is not None and task_id_of(e) == task_id and is_terminal_event(e))
    return seen[-1].id


def frame_of(data: str) -> dict | None:
    """The murmur frame a taskless carrier holds (gap, lagged, ...), or None."""
    return orjson.loads(data)["result"].get("message", {}).get("metadata", {}).get(STREAM_URI)


def read_replay(conn: Http, newest: int) -> tuple[list[int], list[str]]:
    """The ids a stream writes up to `newest`, and its unnumbered events' data."""
    parser, ids, unnumbered = SSEParser(), [], []
    while not ids or ids[-1] < newest:
        chunk = conn.read_chunk()
        assert chunk is not None, f"the stream ended after {ids[-1:]}"
        for event in parser.feed(chunk):
            if event.id is not None:
                ids.append(event.id)
            elif event.data is not None:
                unnumbered.append(event.data)
    return ids, unnumbered


# --- raw HTTP/1.x exchanges read to the close (test_http_framing.py, test_carried.py) ---

RAW_READ_TIMEOUT = 20.0  # a server that hangs fails the test here


def post(method: str, params: dict, version: str = "1.1", headers: bytes = b"") -> bytes:
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return (f"POST / HTTP/{version}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n").encode() + headers + b"\r\n" + body


def until_close(port: int, request: bytes, *, half_close: bool = False) -> bytes:
    """Every byte the server writes for `request`, up to its close (a hang fails the test)."""
    with socket.create_connection(("127.0.0.1", port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def dechunk(body: bytes) -> bytes:
    """A chunked body's bytes; it must end with the terminating chunk and nothing after."""
    out = b""
    while True:
        size_line, sep, body = body.partition(b"\r\n")
        assert sep, "a chunk's size line is cut off"
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", body  # the terminating chunk, no trailers, then the close
            return out
        assert body[size:size + 2] == b"\r\n"
        out, body = out + body[:size], body[size + 2:]
