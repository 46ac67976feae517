"""Every limit of the door, end to end over raw sockets: each answered with its status and body.

The limits and what each defends are in SECURITY.md; the order of checks in
gateway/worker/dispatch.py. `exchange` (raw_http.py) sends raw bytes and reads the answer with h11
(a client that refuses malformed HTTP); the fuzz suite uses it too.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time

import orjson
import pytest

from helpers.gateway_harness import GatewayOptions, running_gateway, wait_for
from helpers.http_client import headers_for, rpc, rpc_body, user_message
from helpers.raw_http import Answer, exchange, head, read_to_close, refusal
from helpers.sse_reading import SSEStream, WATCH, item


def rpc_error(answer: Answer | None) -> dict:
    assert answer is not None and answer.status == 200, answer
    return orjson.loads(answer.body)


def post(body: bytes, extra: list | None = None) -> bytes:
    return head("POST", "/", headers_for(extra=extra), body)


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions("--max-body-bytes", "4096", "--max-headers", "12", "--max-header-bytes", "2048",
                          "--max-rpc-id-chars", "8", "--body-timeout", "0.5", "--header-timeout", "0.5")


def test_body_over_the_limit_is_413(gateway):
    """[claim: body-size]"""
    big = rpc_body("GetTask", {"id": "x" * 5000})
    assert refusal(exchange(gateway.port, post(big)), 413) == "request body exceeds 4096 bytes"
    chunked = head("POST", "/", [*headers_for(), ("Transfer-Encoding", "chunked")])
    chunked += b"".join(b"400\r\n" + b" " * 1024 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n"
    assert refusal(exchange(gateway.port, chunked), 413) == "request body exceeds 4096 bytes"


def test_a_declared_length_over_the_limit_is_413_before_any_body(gateway):
    """[claim: body-size] Only the head is sent: the answer is 413 at once, not the 408 a
    door waiting for the body would give after --body-timeout."""
    declared = head("POST", "/", headers_for(extra=[("Content-Length", "10000000")]))
    assert refusal(exchange(gateway.port, declared), 413) == "request body exceeds 4096 bytes"


def test_too_many_header_lines_is_431_and_closes(gateway):
    """[claim: header-lines]"""
    extra = [(f"X-Filler-{i}", "y") for i in range(12)]
    answer = exchange(gateway.port, head("GET", "/healthz", extra))
    assert refusal(answer, 431) == "the request has more than 12 header lines"
    assert answer.headers["connection"] == "close"
    assert exchange(gateway.port, head("GET", "/healthz", extra[:8]), method="GET").status == 200


def test_a_head_over_the_limit_is_431(gateway):
    """[claim: head-size]"""
    answer = exchange(gateway.port, head("GET", "/healthz", [("X-Big", "a" * 2100)]), method="GET")
    assert refusal(answer, 431) == "the request head exceeds 2048 bytes"
    answer = exchange(gateway.port, head("GET", "/healthz?" + "q" * 2100, []), method="GET")
    assert refusal(answer, 431) == "the request head exceeds 2048 bytes"


def test_a_head_that_never_ends_is_cut_off_at_the_buffer_cap(gateway):
    """[claim: head-size]"""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(64):
                sock.sendall(b"a" * 1024)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")


def test_json_nested_deeper_than_the_limit_is_invalid_request(gateway):
    """[claim: json-depth]"""
    def nested(depth: int) -> dict:  # the request object is level 1, params level 2
        value: object = {}
        for _ in range(depth - 3):
            value = [value]
        return {"jsonrpc": "2.0", "id": "d", "method": "GetTask", "params": {"id": "tsk_x", "deep": value}}

    answer = rpc_error(exchange(gateway.port, post(orjson.dumps(nested(33)))))
    assert answer["id"] == "d" and answer["error"]["code"] == -32600
    assert answer["error"]["message"] == "the request nests arrays and objects deeper than 32 levels"
    assert rpc_error(exchange(gateway.port, post(orjson.dumps(nested(32)))))["error"]["code"] == -32001


def test_json_nested_past_what_the_parser_reads_is_a_parse_error(gateway):
    """[claim: json-depth] Beyond 1024 levels orjson itself refuses: -32700."""
    body = b'{"jsonrpc":"2.0","id":"d","method":"GetTask","params":{"deep":' + b"[" * 1100 + b"]" * 1100 + b"}}"
    assert rpc_error(exchange(gateway.port, post(body)))["error"]["code"] == -32700


def test_the_deepest_configurable_nesting_still_travels_to_the_sequencer(tmp_path):
    with running_gateway("--max-json-depth", "200", tmp_path=tmp_path, workers=1) as gw:
        data: object = {"x": 1}
        for _ in range(200 - 6):  # request, params, message, parts, part, data
            data = [data]
        params = user_message("deep")
        params["message"]["parts"].append({"data": data})
        status, _, body = rpc(gw.port, "SendMessage", params)
        assert status == 200 and body["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_a_long_rpc_id_is_invalid_request_answered_with_a_null_id(gateway):
    """[claim: rpc-id-length]"""
    answer = rpc_error(exchange(gateway.port, post(rpc_body("GetTask", {"id": "tsk_x"}, "123456789"))))
    assert answer["id"] is None and answer["error"]["code"] == -32600
    assert answer["error"]["message"] == "the request id is longer than 8 characters"
    answer = rpc_error(exchange(gateway.port, post(rpc_body("GetTask", {"id": "tsk_x"}, "12345678"))))
    assert answer["id"] == "12345678" and answer["error"]["code"] == -32001


def test_a_body_that_stalls_is_408_and_closes(gateway):
    """[claim: body-timeout]"""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(head("POST", "/", [*headers_for(), ("Content-Length", "100")]) + b'{"jsonrpc"')
        data = read_to_close(sock)
    status_line, _, rest = data.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout" and b"connection: close" in rest
    assert rest.split(b"\r\n\r\n", 1)[1] == (
        b'{"type":"about:blank","title":"Request Timeout","status":408,'
        b'"detail":"the request body did not arrive within 0.5 seconds"}')


def test_slow_request_headers_are_closed_after_the_header_timeout(gateway):
    """[claim: header-timeout]"""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        closed, answer = False, b""
        for i in range(200):  # a byte every 50 ms: at most 10 s, far beyond the 0.5 s timeout
            try:
                sock.sendall(b"X-Slow-%d: y\r\n" % i)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            readable, _, _ = select.select([sock], [], [], 0.05)
            if readable:
                with contextlib.suppress(ConnectionResetError):
                    answer = sock.recv(65536)
                closed = True
                break
    assert closed and answer == b""
    assert exchange(gateway.port, head("GET", "/healthz", []), method="GET").status == 200


def test_each_connection_is_closed_at_its_own_header_timeout(gateway):
    """[claim: header-timeout] One timer serves every connection's header timeout (gateway/worker/http/
    head_deadlines.py): six connections opened 70 ms apart, so that the later ones wait while the first
    one's time is up, each idle, cut mid-head, or kept after its answer, are each closed with nothing
    more written, and none before its own 0.5 s from its connect (less 10 ms: the loop counts its time
    in whole milliseconds). A timer that closed every waiting connection at the earliest deadline would
    close the later ones early; one not set again for the next deadline, never."""
    opened = []
    try:
        for kind in ("idle", "cut", "kept") * 2:
            started = time.monotonic()
            sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
            opened.append((kind, started, sock))
            if kind == "cut":
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            elif kind == "kept":
                sock.sendall(head("GET", "/healthz", []))
            time.sleep(0.07)
        for kind, started, sock in opened:
            data = read_to_close(sock)
            lived = time.monotonic() - started
            if kind == "kept":
                assert data.startswith(b"HTTP/1.1 200 ") and b"connection: close" not in data.lower(), data
                assert data.count(b"HTTP/1.1") == 1
            else:
                assert data == b"", (kind, data)
            assert lived >= 0.49, (kind, lived)
    finally:
        for _, _, sock in opened:
            sock.close()


CARD = head("GET", "/.well-known/agent-card.json", [])


def test_open_requests_per_worker_are_capped_with_503_and_retry_after(tmp_path):
    """[claim: max-connections]"""
    with running_gateway("--max-connections", "2", tmp_path=tmp_path, workers=1) as gw:
        first = SSEStream(gw.port, WATCH, {})
        second = SSEStream(gw.port, WATCH, {})
        try:
            assert first.status == second.status == 200
            answer = exchange(gw.port, CARD, method="GET")
            assert refusal(answer, 503) == "this worker is serving as many requests as it may; retry shortly"
            assert answer.headers["retry-after"] == "1" and answer.headers["connection"] == "close"
            # SECURITY.md: a probe is never refused for load; it holds none of the places
            assert exchange(gw.port, head("GET", "/healthz", []), method="GET").status == 200
            assert exchange(gw.port, head("GET", "/readyz", []), method="GET").status == 200
            assert refusal(exchange(gw.port, CARD, method="GET"), 503)
        finally:
            first.close()
        wait_for(lambda: exchange(gw.port, CARD, method="GET").status == 200, what="a slot to free up")
        second.close()


@pytest.mark.parametrize("value", ["", "-1", "abc", "1e3", "+5", "0x10", "1 2"])
def test_a_last_event_id_that_is_not_a_number_replays_a_watch_from_zero(gateway, value):
    """[claim: last-event-id] SECURITY.md: trimmed; only decimal digits are a number. The spec's Replay table: a watch
    replays from 0 when the header is not a number."""
    with SSEStream(gateway.port, WATCH, {}, last_event_id=value) as stream:
        assert item(stream.next()).frame["frame"] == "connection-ack"
        first = stream.next()
        assert first.id == 1, first  # no gap: the buffer has evicted nothing


@pytest.mark.parametrize("value", [str(2**64 - 1), str(2**64), "9" * 1500, "0" * 300 + "7" * 30])
def test_a_last_event_id_beyond_any_issued_id_is_a_gap(gateway, value):
    """[claim: last-event-id] Beyond 64 bits the id was never issued by this session: a gap naming the oldest id."""
    with SSEStream(gateway.port, WATCH, {}, last_event_id=value) as stream:
        assert item(stream.next()).frame["frame"] == "connection-ack"
        gap = item(stream.next()).frame
        assert gap["frame"] == "gap" and gap["firstAvailableId"] == 1


@pytest.fixture(scope="module", autouse=True)
def one_event_written(gateway):
    """The replay tests need a non-empty buffer."""
    rpc(gateway.port, "SendMessage", user_message("/scenario fail"))
    with SSEStream(gateway.port, WATCH, {}, last_event_id="0") as stream:
        assert item(stream.next()).frame["frame"] == "connection-ack"
        assert stream.next().id == 1


def anon_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("RssAnon:"))


def test_a_watcher_that_never_reads_costs_bounded_memory(tmp_path):
    """[claim: never-reading-watcher]"""
    frame = 16384
    with running_gateway("--sim-load", "2000", "--sim-load-size", str(frame), tmp_path=tmp_path,
                         workers=1) as gw:
        (worker,) = gw.worker_pids().values()
        stalled = SSEStream(gw.port, WATCH, {}, rcvbuf=4096)
        try:
            with SSEStream(gw.port, WATCH, {}) as reader:
                first = reader.read_until(lambda e: e.id is not None)[-1].id
                # measured from a full window (512 events kept by design), so what grows after
                # is only what would grow with the bytes written
                start = reader.read_until(lambda e: e.id is not None and e.id >= first + 600)[-1].id
                before = anon_kib(worker)
                end = reader.read_until(lambda e: e.id is not None and e.id >= start + 4000)[-1].id
                after = anon_kib(worker)
            written_kib = (end - start) * frame // 1024
            assert written_kib > 60_000
            assert after - before < written_kib // 4, (before, after, written_kib)
        finally:
            stalled.close()
