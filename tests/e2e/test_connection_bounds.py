"""Every connection ends within a bound its state names (SECURITY.md, "Connection states"):
an HTTP/2 connection with no open stream within --header-timeout of its start or its last
stream's end (prior knowledge and TLS ALPN `h2`: GOAWAY, then the close); a connection closing
with answers its client never reads within CLOSE_GRACE_SECONDS (the abort); and the worker's
`murgw_connections_idle` counts the connections that belong to no request or stream. Every line
a gateway writes to stderr is one JSON object (SECURITY.md, "Logs"), a TLS client's half-close
included, and the harness holds every gateway the tests start to it (gateway_harness.not_json).

Each close is asserted by reading to the connection's end under a generous deadline, never by
how long it took.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import subprocess
import sys

import h2.config
import h2.connection
import h2.events
import h2.settings
import orjson
import pytest

from helpers.gateway_harness import GatewayOptions, ROOT, not_json, running_gateway, scrape, wait_for
from helpers.http_client import rpc_body
from helpers.raw_http import never_reading, push, read_answer
from helpers.sse_reading import SSEStream, WATCH

HEADER_TIMEOUT = "1"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # the client's preface, and nothing after it
SETTINGS, GOAWAY = 0x4, 0x7
READ_DEADLINE = 60.0  # far beyond every bound: what is asserted is the close, not its time
PIPELINES = 100
PROBE = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
CARD = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n"
PIPELINE = CARD * 20_000  # 1 MB: more than the kernel's buffers on both ends hold
PIPELINES_DEADLINE = 240.0  # 100 pipelines answered on a shared machine: seconds, given minutes
IDLE = "murgw_connections_idle"
WIDEST = 2**31 - 1  # the largest HTTP/2 flow-control window


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions("--header-timeout", HEADER_TIMEOUT, workers=1, metrics=True)


@pytest.fixture(scope="module")
def tls_gateway(certs, tmp_path_factory):
    with running_gateway(*certs.args, "--header-timeout", HEADER_TIMEOUT, workers=1,
                         tls=certs.client_context(), tmp_path=tmp_path_factory.mktemp("tls-gw")) as gw:
        yield gw


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a FIN, a TLS close, or a reset)."""
    data = b""
    with contextlib.suppress(ConnectionResetError, ssl.SSLEOFError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def frames(data: bytes) -> list[tuple[int, bytes]]:
    """(type, payload) of each whole HTTP/2 frame in `data`."""
    found = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        found.append((data[3], data[9:9 + length]))
        data = data[9 + length:]
    return found


def goaway(data: bytes) -> tuple[int, int]:
    """The (last stream id, error code) of the one GOAWAY in `data`, after the server's SETTINGS."""
    sent = frames(data)
    assert sent and sent[0][0] == SETTINGS, sent
    payloads = [payload for kind, payload in sent if kind == GOAWAY]
    assert len(payloads) == 1, sent
    last, code = struct.unpack("!II", payloads[0][:8])
    return last & 0x7FFFFFFF, code


def worker_fds(gateway) -> int:
    return len(os.listdir(f"/proc/{next(iter(gateway.worker_pids().values()))}/fd"))


def test_an_h2_preface_alone_is_closed_with_goaway(gateway):
    """[claim: h2-idle] The 24-byte prior-knowledge preface, then nothing: the worker answers
    its SETTINGS and, --header-timeout later, GOAWAY (no stream processed, NO_ERROR) and the close."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=READ_DEADLINE) as sock:
        sock.sendall(PREFACE)
        assert goaway(read_to_end(sock)) == (0, 0)


def test_a_tls_h2_preface_alone_is_closed_with_goaway(tls_gateway, certs):
    """[claim: h2-idle] ALPN `h2`, the preface, then nothing: GOAWAY and the close, as on the
    plain port."""
    raw = socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=READ_DEADLINE)
    with certs.client_context(["h2"]).wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        assert sock.selected_alpn_protocol() == "h2"
        sock.sendall(PREFACE)
        assert goaway(read_to_end(sock)) == (0, 0)


def h2c(port: int) -> tuple[socket.socket, h2.connection.H2Connection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_DEADLINE)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    return sock, conn


def events_to_end(sock: socket.socket, conn: h2.connection.H2Connection) -> list[h2.events.Event]:
    """What the server sends until it closes, as h2 events."""
    events = []
    while data := read_to_end(sock):
        events += conn.receive_data(data)
    return events


def goaways(events: list[h2.events.Event]) -> list[tuple[int, int]]:
    return [(e.last_stream_id, e.error_code) for e in events if isinstance(e, h2.events.ConnectionTerminated)]


def test_an_h2_connection_is_closed_after_its_last_stream_ends(gateway):
    """[claim: h2-idle] A stream answered, then nothing: --header-timeout after its end, GOAWAY
    naming it as the last stream processed, then the close."""
    sock, conn = h2c(gateway.port)
    with sock:
        conn.send_headers(1, [(b":method", b"GET"), (b":path", b"/healthz"), (b":scheme", b"http"),
                              (b":authority", b"127.0.0.1")], end_stream=True)
        sock.sendall(conn.data_to_send())
        events = events_to_end(sock, conn)
    assert [e.stream_id for e in events if isinstance(e, h2.events.StreamEnded)] == [1]
    assert goaways(events) == [(1, 0)]


def test_an_h2_connection_is_closed_after_its_client_resets_its_last_stream(gateway):
    """[claim: h2-idle] A watch stream its client resets (`RST_STREAM`), then nothing: the
    connection is idle from the reset on, and ends with GOAWAY and the close."""
    sock, conn = h2c(gateway.port)
    with sock:
        body = rpc_body(WATCH, {})
        conn.send_headers(1, [(b":method", b"POST"), (b":path", b"/"), (b":scheme", b"http"),
                              (b":authority", b"127.0.0.1"), (b"content-type", b"application/json"),
                              (b"a2a-version", b"1.0"), (b"content-length", str(len(body)).encode())])
        conn.send_data(1, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        events = []
        while not any(isinstance(e, h2.events.DataReceived) for e in events):  # the stream is open
            events += conn.receive_data(sock.recv(65536))
        conn.reset_stream(1)
        sock.sendall(conn.data_to_send())
        assert goaways(events_to_end(sock, conn)) == [(1, 0)]


def test_never_reading_pipelines_are_released_with_their_descriptors(gateway):
    """[claim: closing-grace] 100 connections pipeline agent-card requests and never read: the header
    timeout closes each with its answers unsent, and CLOSE_GRACE_SECONDS later it is aborted:
    the worker's descriptors are back to what they were while the clients still hold their
    sockets, unread."""
    before = worker_fds(gateway)
    pipelines, sent = [], [0] * PIPELINES
    try:
        for _ in range(PIPELINES):
            pipelines.append(never_reading(gateway.port))
        wait_for(lambda: worker_fds(gateway) >= before + PIPELINES, READ_DEADLINE, "every pipeline accepted")

        def released() -> bool:
            for i, sock in enumerate(pipelines):
                with contextlib.suppress(ConnectionError):  # closed by the gateway: what is awaited
                    sent[i] = push(sock, PIPELINE, sent[i])
            return worker_fds(gateway) <= before
        wait_for(released, PIPELINES_DEADLINE, "every never-reading pipeline's descriptor released")
        assert max(sent) < len(PIPELINE), "a pipeline was read whole: nothing was left unsent"
    finally:
        for sock in pipelines:
            sock.close()


def test_an_h2_connection_closing_with_unsent_answers_is_released(gateway):
    """[claim: closing-grace] An HTTP/2 client opens every window wide, asks for 90 agent cards
    on one connection, never reads, and sends GOAWAY: hypercorn closes the connection with
    answers unsent, and CLOSE_GRACE_SECONDS later it is aborted, its descriptor back."""
    before = worker_fds(gateway)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gateway.port))
    with sock:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WIDEST})
        conn.initiate_connection()
        conn.increment_flow_control_window(WIDEST - 65535)  # the connection's own, to the widest
        for _ in range(90):
            conn.send_headers(conn.get_next_available_stream_id(), [
                (b":method", b"GET"), (b":path", b"/.well-known/agent-card.json"), (b":scheme", b"http"),
                (b":authority", b"127.0.0.1")], end_stream=True)
        sock.sendall(conn.data_to_send())
        wait_for(lambda: worker_fds(gateway) > before, READ_DEADLINE, "the connection accepted")
        conn.close_connection()
        sock.sendall(conn.data_to_send())
        wait_for(lambda: worker_fds(gateway) <= before, READ_DEADLINE, "the unread connection's descriptor released")


def test_the_idle_gauge_counts_connections_with_no_request_or_stream(tmp_path):
    """Three connections that sent nothing and one HTTP/2 preface count in
    murgw_connections_idle; a stream does not; closed by their clients, none is left."""
    with running_gateway("--header-timeout", "120", workers=1, metrics=True, tmp_path=tmp_path) as gw:
        def idle() -> float:
            return scrape(gw.metrics_port)[IDLE]

        assert idle() == 0
        quiet = [socket.create_connection(("127.0.0.1", gw.port), timeout=READ_DEADLINE) for _ in range(3)]
        h2c = socket.create_connection(("127.0.0.1", gw.port), timeout=READ_DEADLINE)
        try:
            h2c.sendall(PREFACE)
            assert frames(h2c.recv(65536))[0][0] == SETTINGS  # hypercorn's now
            wait_for(lambda: idle() == 4, what="four idle connections counted")
            stream = SSEStream(gw.port, WATCH, {})
            try:
                assert stream.status == 200
                assert idle() == 4  # the stream's connection belongs to its stream
            finally:
                stream.close()
        finally:
            for sock in (*quiet, h2c):
                sock.close()
        wait_for(lambda: idle() == 0, READ_DEADLINE, "every idle connection gone from the gauge")


def test_a_tls_half_close_writes_no_line_that_is_not_json(tls_gateway, certs):
    """[claim: json-logs] A TLS client that reads its answer, then sends close_notify (its
    half-close): the connection ends, and the worker writes nothing that is not a JSON object
    (uvloop's `returning true from eof_received() has no effect when using ssl` was one)."""
    raw = socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=READ_DEADLINE)
    sock = certs.client_context(["http/1.1"]).wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        sock.sendall(PROBE)
        assert read_answer(sock)[0].startswith(b"HTTP/1.1 200 OK\r\n")
        with contextlib.suppress(OSError):
            sock.unwrap()  # close_notify, then the server's
    finally:
        sock.close()
    # a later exchange on a fresh connection: the worker's lines from the first are written by then
    raw = socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=READ_DEADLINE)
    with certs.client_context(["http/1.1"]).wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        sock.sendall(PROBE)
        assert read_answer(sock)[0].startswith(b"HTTP/1.1 200 OK\r\n")
    with open(tls_gateway.stderr_path, "rb") as fh:
        written = fh.read()
    assert not_json(written) == [] and b"eof_received" not in written


def test_python_and_library_reports_are_json_lines():
    """What asyncio, a library's `logging` record, `warnings.warn` and an uncaught exception
    would print as plain text is one JSON object a line once logs.setup has run."""
    script = ("import asyncio, logging, warnings\n"
              "from gateway import logs\n"
              "logs.setup('info', 'worker')\n"
              "try:\n    1 / 0\nexcept ZeroDivisionError:\n"
              "    logging.getLogger('asyncio').exception('Exception in callback\\nhandle: <x>')\n"
              "logging.getLogger('hypercorn.error').warning('a %s warning', 'library')\n"
              "warnings.warn('deprecated thing')\n"
              "raise ValueError('nobody caught me')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=30)
    assert not_json(done.stderr) == [], done.stderr
    lines = [orjson.loads(line) for line in done.stderr.splitlines()]
    assert [(line["level"], line["role"]) for line in lines] == [("error", "worker"), ("warning", "worker"),
                                                                 ("warning", "worker"), ("error", "worker")]
    assert lines[0]["logger"] == "asyncio" and "ZeroDivisionError" in lines[0]["exc"]
    assert lines[1]["event"] == "a library warning"
    assert "deprecated thing" in lines[2]["event"]
    assert lines[3]["event"] == "uncaught exception" and "ValueError: nobody caught me" in lines[3]["exc"]


def test_the_harness_fails_a_gateway_that_wrote_a_plain_line(tmp_path):
    """The harness's check: a gateway whose stderr holds a line that is not a JSON object
    fails the test that started it, once that test is otherwise done."""
    # Python's own import-time report: plain lines on stderr from every process, past the logger
    with pytest.raises(AssertionError, match="not JSON objects: \\[b'import time:"):
        with running_gateway(workers=1, tmp_path=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"}):
            pass
    assert not_json(b'{"event": "x"}\n[1]\n"text"\nplain\n') == [b"[1]", b'"text"', b"plain"]
