"""`mur watch` end to end: the real command against the real gateway, and a fake server.

Each test runs `python -m gateway.watch.client watch ADDRESS` as a subprocess, drives the gateway
with JSON-RPC calls, and asserts the exact stdout, stderr and exit status the spec's table
"What `mur watch` implements" gives. The fake server writes what no real capsule writes
yet (unknown members, frames and keys) and the refusals the gateway never answers to mur.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import jwt
import orjson
import pytest

from gateway.protocol import events
from gateway.protocol.uris import STREAM_URI
from helpers.gateway_harness import ROOT, running_gateway, token_table, wait_for
from helpers.http_client import rpc, user_message
from helpers.jwt_tokens import KeyPair, jwt_table
from helpers.sse_reading import SSEStream, is_terminal_event

WAIT = 30.0
HINT = "the capsule may still be running; run mur watch again to reattach\n"
DEFAULT_TASK_OUTPUT = (
    "{label} [working] inference turn 1\n"
    "Let me look at that.\n"
    "{label} [artifact] bash exit 0\n"
    "  <untrusted-content source=tool:bash>\n"
    "  Exit code: 0\n"
    "  Stdout:\n"
    "  hello\n"
    "\n"
    "  </untrusted-content>\n"
    "{label} [working] inference turn 2\n"
    "Done: hello\n"
    "{label} [completed]\n"
    "  Done: hello\n"
)


class Mur:
    """`mur watch` as a subprocess whose stdout and stderr are read as they arrive."""

    def __init__(self, address: str, *args: str, env: dict | None = None):
        self.address = address
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway.watch.client", "watch", address, *args], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **(env or {})})
        self.out_fd, self.err_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        self.buffers = {self.out_fd: bytearray(), self.err_fd: bytearray()}
        self.open_fds = set(self.buffers)

    @property
    def stdout(self) -> str:
        return self.buffers[self.out_fd].decode()

    @property
    def stderr(self) -> str:
        return self.buffers[self.err_fd].decode()

    def _pump(self, deadline: float) -> None:
        ready, _, _ = select.select(list(self.open_fds), [], [], max(0.0, deadline - time.monotonic()))
        for fd in ready:
            data = os.read(fd, 65536)
            if data:
                self.buffers[fd] += data
            else:
                self.open_fds.discard(fd)

    def read_until(self, needle: str, *, stderr: bool = False) -> None:
        deadline = time.monotonic() + WAIT
        while needle not in (self.stderr if stderr else self.stdout):
            if not self.open_fds or time.monotonic() > deadline:
                raise AssertionError(f"never printed {needle!r}; stdout {self.stdout!r}, stderr {self.stderr!r}")
            self._pump(deadline)

    def finish(self) -> int:
        deadline = time.monotonic() + WAIT
        while self.open_fds and time.monotonic() < deadline:
            self._pump(deadline)
        return self.proc.wait(max(0.1, deadline - time.monotonic()))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@contextlib.contextmanager
def mur_watch(address: str, *args: str, env: dict | None = None):
    mur = Mur(address, *args, env=env)
    try:
        yield mur
    finally:
        mur.kill()


def address_of(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def start_task(port: int, text: str, **message_extra) -> dict:
    _, _, body = rpc(port, "SendMessage", user_message(text, **message_extra))
    return body["result"]["task"]


def wait_until_ended(port: int, task_id: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        _, _, body = rpc(port, "GetTask", {"id": task_id})
        if body["result"]["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED"):
            return
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} never ended")


def tail(identifier: str) -> str:
    return identifier[-6:]


def stop_session(port: int) -> None:
    status, _, body = rpc(port, "murmur.StopSession", {})
    assert status == 200 and "error" not in body, body


def write_config(tmp_path, text: str) -> str:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return str(path)


# --- against the real gateway ---


def test_default_scenario_prints_exactly_and_capsule_closed_exits_zero(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gateway, mur_watch(address_of(gateway.port)) as mur:
        label = "tsk:" + tail(start_task(gateway.port, "hello")["id"])
        mur.read_until(f"{label} [completed]\n  Done: hello\n")
        stop_session(gateway.port)
        assert mur.finish() == 0
    assert mur.stdout == DEFAULT_TASK_OUTPUT.format(label=label)
    assert mur.stderr == "[murmur] capsule closed\n"


def test_interleaved_tasks_are_labelled_by_task_in_stateless_mode(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gateway, mur_watch(address_of(gateway.port)) as mur:
        labels = ["tsk:" + tail(start_task(gateway.port, "/scenario slow turns=2 delay=0.2")["id"]) for _ in range(2)]
        for label in labels:
            mur.read_until(f"{label} [completed]\n  turn 2 done\n")
        stop_session(gateway.port)
        assert mur.finish() == 0
    for label in labels:
        mine = [line for line in mur.stdout.splitlines() if line.startswith(f"{label} [")]
        assert mine == [f"{label} [working] inference turn 1", f"{label} [working] inference turn 2",
                        f"{label} [completed]"]
    status_lines = [line for line in mur.stdout.splitlines() if re.match(r"\S+ \[[a-z-]+\]( |$)", line)]
    assert len(status_lines) == 6  # every status line carries one of the two labels, first


def test_threaded_mode_labels_a_conversation_by_its_context(tmp_path):
    config = write_config(tmp_path, '[lifecycle]\nconversation = "threaded"\n')
    with running_gateway("--config", config, tmp_path=tmp_path) as gateway, \
            mur_watch(address_of(gateway.port)) as mur:
        first = start_task(gateway.port, "hello")
        label = "ctx:" + tail(first["contextId"])
        mur.read_until(f"{label} [completed]\n  Done: hello\n")
        start_task(gateway.port, "hello", contextId=first["contextId"])
        mur.read_until(DEFAULT_TASK_OUTPUT.format(label=label) * 2)
        stop_session(gateway.port)
        assert mur.finish() == 0
    assert mur.stdout == DEFAULT_TASK_OUTPUT.format(label=label) * 2


def test_a_burst_past_the_replay_buffer_before_attaching_warns_of_the_gap(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gateway:
        task_id = start_task(gateway.port, "/scenario burst n=700")["id"]
        wait_until_ended(gateway.port, task_id)
        with SSEStream(gateway.port, "murmur.WatchSession", last_event_id="0") as raw:
            ack, gap = raw.read_until(lambda event: False, limit=2)
        first_available = orjson.loads(gap.data)["result"]["message"]["metadata"][STREAM_URI]["firstAvailableId"]
        assert first_available > 1
        with mur_watch(address_of(gateway.port)) as mur:
            mur.read_until(f"tsk:{tail(task_id)} [completed]\n  burst of 700 frames\n")
            stop_session(gateway.port)
            assert mur.finish() == 0
    assert mur.stderr == (f"[murmur] warning: replay gap: earlier events are gone; the oldest buffered event is "
                          f"id {first_available}\n[murmur] capsule closed\n")
    # the replay starts mid-burst, its status line gone, so the text says whose it is
    assert mur.stdout.startswith(f"tsk:{tail(task_id)} burst {first_available - 1} ")


def test_a_paused_watcher_is_warned_it_lagged(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gateway, mur_watch(address_of(gateway.port)) as mur:
        label = "tsk:" + tail(start_task(gateway.port, "hello")["id"])
        mur.read_until(f"{label} [completed]\n  Done: hello\n")
        mur.proc.send_signal(signal.SIGSTOP)
        try:
            wait_until_ended(gateway.port, start_task(gateway.port, "/scenario burst n=60000")["id"])
        finally:
            mur.proc.send_signal(signal.SIGCONT)
        mur.read_until("[murmur] warning: lagged: this watcher fell behind and missed ", stderr=True)
        stop_session(gateway.port)
        assert mur.finish() == 0
    warnings = mur.stderr.splitlines()
    assert warnings[-1] == "[murmur] capsule closed"
    assert all(line.startswith("[murmur] warning: lagged: ") for line in warnings[:-1])


def test_a_killed_gateway_is_a_lost_connection_naming_the_last_event_id(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gateway, mur_watch(address_of(gateway.port)) as mur:
        label = "tsk:" + tail(start_task(gateway.port, "hello")["id"])
        mur.read_until(f"{label} [completed]\n  Done: hello\n")
        with SSEStream(gateway.port, "murmur.WatchSession", last_event_id="0") as raw:
            last_id = raw.read_until(is_terminal_event)[-1].id
        for pid in [gateway.pid, *gateway.children()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert mur.finish() == 1
    assert mur.stdout == DEFAULT_TASK_OUTPUT.format(label=label)
    assert mur.stderr == f"E-IO-003: connection to {mur.address} lost after event id {last_id}\n{HINT}"


def _token_config(tmp_path, token: str, scopes: str) -> str:
    digest = hashlib.sha256(token.encode()).hexdigest()
    return write_config(tmp_path, f'[[network.authentication.tokens]]\nname = "t"\nsha256 = "{digest}"\n'
                                  f"scopes = {scopes}\n")


@pytest.mark.parametrize("args, refusal", [
    ((), "HTTP 401 Unauthorized: this door requires Authorization: Bearer <token>"),
    (("--token", "wrong"), "HTTP 401 Unauthorized: the bearer token is not valid for this door"),
    (("--token", "narrow"), "HTTP 403 Forbidden: the token does not hold the murmur.WatchSession scope"),
])
def test_a_refused_request_is_one_line_and_a_non_zero_exit(tmp_path, args, refusal):
    config = _token_config(tmp_path, "narrow", '["GetTask"]')
    with running_gateway("--config", config, tmp_path=tmp_path) as gateway, \
            mur_watch(address_of(gateway.port), *args) as mur:
        assert mur.finish() == 2
    assert mur.stdout == ""
    assert mur.stderr == f"mur watch: {mur.address} refused the request: {refusal}\n"


def test_the_token_is_sent_as_a_bearer_authorization(tmp_path):
    config = _token_config(tmp_path, "watcher", '["murmur.WatchSession", "murmur.StopSession"]')
    with running_gateway("--config", config, tmp_path=tmp_path) as gateway, \
            mur_watch(address_of(gateway.port), "--token", "watcher") as mur:
        stop_session_with_token(gateway.port, "watcher")
        assert mur.finish() == 0
    assert mur.stderr == "[murmur] capsule closed\n"


@pytest.mark.parametrize("source", ["--token-file", "MUR_TOKEN"])
def test_the_token_from_a_file_or_the_environment_never_shows_on_the_command_line(tmp_path, source):
    config = _token_config(tmp_path, "secret-watcher-7q", '["murmur.WatchSession", "murmur.StopSession"]')
    token_file = tmp_path / "token"
    token_file.write_text("secret-watcher-7q\n")
    args, env = ((("--token-file", str(token_file)), {}) if source == "--token-file"
                 else ((), {"MUR_TOKEN": "secret-watcher-7q"}))
    with running_gateway("--config", config, tmp_path=tmp_path) as gateway, \
            mur_watch(address_of(gateway.port), *args, env=env) as mur:
        wait_for(lambda: any(r.get("event") == "stream open" and r.get("caller") == "t" for r in gateway.logs()),
                 what="mur watch's stream opened under its token")
        with open(f"/proc/{mur.proc.pid}/cmdline", "rb") as fh:
            assert b"secret-watcher-7q" not in fh.read()
        stop_session_with_token(gateway.port, "secret-watcher-7q")
        assert mur.finish() == 0
    assert mur.stderr == "[murmur] capsule closed\n"


@pytest.mark.parametrize("content, problem", [("", "the file's first line holds no token"),
                                              (None, "No such file or directory")])
def test_a_token_file_without_a_token_is_one_line_exit_2(tmp_path, content, problem):
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    with mur_watch("http://127.0.0.1:9", "--token-file", str(token_file)) as mur:
        assert mur.finish() == 2
    assert mur.stderr == f"mur watch: --token-file {token_file}: {problem}\n"


def stop_session_with_token(port: int, token: str) -> None:
    status, _, body = rpc(port, "murmur.StopSession", {}, token=token)
    assert status == 200 and "error" not in body, body


def test_a_refused_connection_is_one_line_and_a_non_zero_exit():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with mur_watch(address_of(port)) as mur:
        assert mur.finish() == 2
    assert mur.stderr.startswith(f"mur watch: cannot connect to {mur.address}: ")
    assert mur.stderr.count("\n") == 1 and "Traceback" not in mur.stderr


# --- against a fake server ---


class FakeServer:
    """Answers one request with `response` bytes, then holds the connection until `release`."""

    def __init__(self, response: bytes, *, hold: bool = False):
        self.response, self.hold = response, hold
        self.request = b""
        self.released = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while b"\r\n\r\n" not in self.request:
                self.request += conn.recv(65536)
            head, _, body = self.request.partition(b"\r\n\r\n")
            length = int(self.header(b"content-length") or 0)
            while len(body) < length:
                body += conn.recv(65536)
            self.request = head + b"\r\n\r\n" + body
            conn.sendall(self.response)
            if self.hold:
                self.released.wait(WAIT)

    def header(self, name: bytes) -> str | None:
        for line in self.request.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name:
                return value.strip().decode()
        return None

    def close(self) -> None:
        self.released.set()
        self.thread.join(WAIT)
        self.listener.close()


@contextlib.contextmanager
def fake_server(response: bytes, *, hold: bool = False):
    server = FakeServer(response, hold=hold)
    try:
        yield server
    finally:
        server.close()


def sse(result: dict | str, event_id: int | None = None) -> bytes:
    data = result if isinstance(result, str) else orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).decode()
    return (f"id: {event_id}\n" if event_id is not None else "").encode() + f"data: {data}\n\n".encode()


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces if piece)


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
               b"transfer-encoding: chunked\r\n\r\n")
TASK, CTX = "tsk_0199c4e2f1b7712a9d3e4f5061728394", "ctx_0199c4e2f1b7712a9d3e4f50617283a1"


def working(text: str, **extra) -> dict:
    update = events.status_update(TASK, CTX, events.task_status("TASK_STATE_WORKING", "2026-10-13T09:00:00.123Z", text,
                                                                task_id=TASK, context_id=CTX))
    update["statusUpdate"].update(extra)
    return update


def test_unknown_members_frames_keys_and_comments_are_ignored_cleanly():
    ack = events.taskless_frame_event({**events.connection_ack_frame("stateless"), "futureKey": {"a": [1]}})
    unknown_frame = events.task_frame_event(TASK, CTX, {"frame": "hologram", "text": "not shown"})
    text = events.task_frame_event(TASK, CTX, {**events.text_frame("shown\n", False), "tone": "calm"})
    body = chunked(
        sse(ack), b": a comment the capsule added\n\n", sse({"futureMember": {"x": 1}}, 1), sse(unknown_frame, 2),
        sse(working("inference turn 1", futureKey=True), 3), b"event: novel\nretry: 5\n", sse(text, 4),
        sse(events.taskless_frame_event({"frame": "future-connection-frame"})), b":heartbeat\n\n",
        sse(events.taskless_frame_event(events.capsule_closed_frame())),
    )
    with fake_server(STREAM_HEAD + body, hold=True) as server, mur_watch(f"127.0.0.1:{server.port}",
                                                                           "--token", "s3cret") as mur:
        assert mur.finish() == 0
    assert mur.stdout == f"tsk:{tail(TASK)} [working] inference turn 1\nshown\n"
    assert mur.stderr == "[murmur] capsule closed\n"
    assert server.request.startswith(b"POST / HTTP/1.1\r\n")
    assert (server.header(b"a2a-version"), server.header(b"last-event-id")) == ("1.0", "0")
    assert server.header(b"authorization") == "Bearer s3cret"
    assert orjson.loads(server.request.partition(b"\r\n\r\n")[2])["method"] == "murmur.WatchSession"


def test_a_stream_cut_before_any_numbered_event_is_lost_before_any_event():
    ack = events.taskless_frame_event(events.connection_ack_frame("stateless"))
    with fake_server(STREAM_HEAD + chunked(sse(ack)) + b"5\r\nid: 1") as server, \
            mur_watch(f"http://127.0.0.1:{server.port}") as mur:
        assert mur.finish() == 1  # the connection closed mid-chunk: lost, not ended
    assert mur.stderr == f"E-IO-003: connection to {mur.address} lost before any event\n{HINT}"


def test_a_stream_a_server_ended_then_answering_nothing_is_worded_as_a_drain():
    """The body's last chunk came, without capsule-closed, and /readyz got no answer (the
    fake server takes one connection): what a draining gateway looks like."""
    ack = events.taskless_frame_event(events.connection_ack_frame("stateless"))
    with fake_server(STREAM_HEAD + chunked(sse(ack)) + b"0\r\n\r\n") as server, \
            mur_watch(f"http://127.0.0.1:{server.port}") as mur:
        assert mur.finish() == 1
    assert mur.stderr == (f"[murmur] {mur.address} ended the stream before any event: the gateway is "
                          "stopping (drain); run mur watch again once it is back\n")


def test_a_revoked_token_and_a_drain_are_worded_as_what_happened_exit_1(tmp_path):
    door = tmp_path / "door.toml"
    door.write_text(token_table([("a", "tok-a", ["*"]), ("b", "tok-b", ["*"])]))
    with running_gateway("--config", str(door), workers=1, tmp_path=tmp_path) as gateway, \
            mur_watch(address_of(gateway.port), "--token", "tok-a") as revoked, \
            mur_watch(address_of(gateway.port), "--token", "tok-b") as drained:
        wait_for(lambda: len([r for r in gateway.logs() if r.get("event") == "stream open"]) == 2,
                 what="both watchers attached")
        door.write_text(token_table([("b", "tok-b", ["*"])]))
        os.kill(gateway.pid, signal.SIGHUP)
        assert revoked.finish() == 1
        assert drained.proc.poll() is None
        assert gateway.stop() == 0
        assert drained.finish() == 1
    assert revoked.stderr == (f"[murmur] {revoked.address} ended the stream before any event: its token was "
                              "revoked (a reload took its right to watch) or expired; run mur watch again with "
                              "a token that holds murmur.WatchSession\n")
    assert drained.stderr == (f"[murmur] {drained.address} ended the stream before any event: the gateway is "
                              "stopping (drain); run mur watch again once it is back\n")


def test_a_json_rpc_error_answer_is_one_line_and_a_non_zero_exit():
    body = b'{"jsonrpc":"2.0","id":1,"error":{"code":-32009,"message":"A2A-Version 1.0 is required"}}'
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    with fake_server(answer) as server, mur_watch(f"http://127.0.0.1:{server.port}") as mur:
        assert mur.finish() == 2
    assert mur.stderr == (f"mur watch: {mur.address} refused the request: "
                          f"error -32009: A2A-Version 1.0 is required\n")


def test_sigint_exits_quietly_with_130(sigint_delivered):
    ack = events.taskless_frame_event(events.connection_ack_frame("stateless"))
    with fake_server(STREAM_HEAD + chunked(sse(ack), sse(working("inference turn 1"), 1)), hold=True) as server, \
            mur_watch(f"http://127.0.0.1:{server.port}") as mur:
        mur.read_until("inference turn 1\n")
        mur.proc.send_signal(signal.SIGINT)
        assert mur.finish() == 130
    assert mur.stderr == ""


def test_a_stream_whose_jwt_expired_says_so_exit_1_and_an_expired_jwt_at_connect_exit_2(tmp_path):
    """The gateway ends the stream at the token's `exp` (tests/e2e/test_door_jwt.py); mur watch,
    reading the `exp` of the token it sent, says the token expired. A JWT already past its
    `exp` is refused 401 at once, and mur watch says that too, not merely "not valid"."""
    keys = KeyPair()
    (tmp_path / "jwt.pem").write_bytes(keys.public_pem)
    config = write_config(tmp_path, jwt_table(tmp_path / "jwt.pem"))
    with running_gateway("--config", config, workers=1, tmp_path=tmp_path) as gateway:
        stale = keys.mint(expires_in=-300)
        with mur_watch(address_of(gateway.port), env={"MUR_TOKEN": stale}) as mur:
            assert mur.finish() == 2
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(jwt.decode(stale, options={
            "verify_signature": False})["exp"]))
        assert mur.stderr == (f"mur watch: {mur.address} refused the request: HTTP 401 Unauthorized: the token "
                              f"expired ({when}); run mur watch again with a fresh token\n")
        token = keys.mint(expires_in=6)  # time for mur to start and attach on a loaded box
        (tmp_path / "token").write_text(token)
        with mur_watch(address_of(gateway.port), "--token-file", str(tmp_path / "token")) as mur:
            assert mur.finish() == 1
    expires = jwt.decode(token, options={"verify_signature": False})["exp"]
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
    assert mur.stderr == (f"[murmur] {mur.address} ended the stream before any event: its token expired "
                          f"({when}); run mur watch again with a fresh token\n")
