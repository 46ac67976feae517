"""Test support: the real gateway as a subprocess, and a raw-socket HTTP/SSE client.

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
import subprocess
import sys
import tempfile
import time
from typing import Iterator

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


@contextlib.contextmanager
def running_gateway(*args: str, workers: int = 2, heartbeat: float = HEARTBEAT, metrics: bool = False,
                    tmp_path=None, env: dict | None = None,
                    nofile: tuple[int, int] | None = None,
                    tls: ssl.SSLContext | None = None, ready: bool = True) -> Iterator[Gateway]:
    """A gateway on 127.0.0.1:0 with `args`; always stopped, and its children killed, at exit.
    `nofile`: the (soft, hard) RLIMIT_NOFILE it starts under; `tls`: the client context that
    verifies a gateway started with --certfile/--keyfile; `ready`: wait for /readyz (else only
    for /healthz: one whose upstream is out of reach serves, never ready)."""
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
        wait_ready(port, tls=tls, path="/readyz" if ready else "/healthz")
        children = gateway.children()
        yield gateway
    finally:
        children = children or Gateway(proc, 0, None, stderr_path).children()
        Gateway(proc, 0, None, stderr_path).stop()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not tmp_path:  # a log of our own making: gone with the gateway
            shutil.rmtree(stderr_dir, ignore_errors=True)
        # Nothing else to remove: the segments are memfds and the control socket is abstract.


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
           501: "Not Implemented", 503: "Service Unavailable"}


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
    """

    def __init__(self, port: int, method: str, params: dict | None = None, *, rpc_id=1,
                 rcvbuf: int | None = None, timeout: float = 10.0, tls: ssl.SSLContext | None = None,
                 **header_options):
        self.http = Http(port, rcvbuf=rcvbuf, timeout=timeout, tls=tls)
        self.http.send_request("GET", "/healthz")
        self.http.read_head()
        self.worker_pid = orjson.loads(self.http.read_body())["pid"]
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


def is_terminal_event(event: SSEEvent) -> bool:
    it = item(event)
    return it.kind == "statusUpdate" and it.body["status"]["state"] in (
        "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED")


def task_id_of(event: SSEEvent) -> str | None:
    it = item(event)
    return it.body.get("taskId") if it.kind in ("statusUpdate", "artifactUpdate") else None
