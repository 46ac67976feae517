"""One HTTP/1.1 server (gateway/worker/http/front.py) for every request: pipelined requests
answered in order, keep-alive, chunked bodies, `Connection: close`, HTTP/1.0,
`Expect: 100-continue`, a head split at every byte, and one body timeout."""

from __future__ import annotations

import socket
import time

import orjson
import pytest

from helpers.gateway_harness import GatewayOptions, running_gateway, scrape, series, token_table, wait_for
from helpers.http_client import rpc_body, user_message
from helpers.raw_http import RAW_READ_TIMEOUT, dechunk, post, read_answer, read_to_close, read_until

BODY_TIMEOUT = 3.0
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
CARD = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
GET_TASK = post("GetTask", {"id": "tsk_none"})
WATCH = post("murmur.WatchSession", {})
REFUSED = "murgw_requests_refused_total"
TIMED_OUT = REFUSED + '{reason="timeout"}'


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions("--header-timeout", "60", "--body-timeout", str(BODY_TIMEOUT), workers=1, metrics=True)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=RAW_READ_TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def test_four_pipelined_requests_are_answered_in_order_the_last_a_stream(gateway):
    with connect(gateway.port) as sock:
        sock.sendall(HEALTHZ + GET_TASK + CARD + WATCH)
        healthz, rest = read_answer(sock)
        get_task, rest = read_answer(sock, rest)
        card, rest = read_answer(sock, rest)
        rest = read_until(sock, b"connection-ack", rest)
    assert healthz.startswith(b"HTTP/1.1 200 OK\r\n") and b'"serving"' in healthz
    assert get_task.startswith(b"HTTP/1.1 200 OK\r\n") and b"-32001" in get_task
    assert card.startswith(b"HTTP/1.1 200 OK\r\n") and b'"supportedInterfaces"' in card
    assert rest.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"), rest


def test_two_send_messages_on_one_connection(gateway):
    with connect(gateway.port) as sock:
        ids = []
        for text in ("one", "two"):
            sock.sendall(post("SendMessage", user_message(text)))
            answer, rest = read_answer(sock)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and not rest, answer
            ids.append(orjson.loads(answer.partition(b"\r\n\r\n")[2])["result"]["task"]["id"])
    assert len(set(ids)) == 2


def test_a_chunked_get_task_body(gateway):
    body = rpc_body("GetTask", {"id": "tsk_none"})
    request = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
               % (10, body[:10], len(body) - 10, body[10:]))
    with connect(gateway.port) as sock:
        for _ in range(2):  # and the connection is kept after it
            sock.sendall(request)
            answer, rest = read_answer(sock)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"-32001" in answer and not rest, answer


def test_connection_close_is_answered_then_closed(gateway):
    with connect(gateway.port) as sock:
        sock.sendall(HEALTHZ.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") + HEALTHZ)
        data = read_to_close(sock)
    head = data.partition(b"\r\n\r\n")[0]
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\nConnection: close"), data
    assert data.count(b"HTTP/1.1 ") == 1


def test_http10_is_answered_then_closed(gateway):
    with connect(gateway.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        data = read_to_close(sock)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\nConnection: close\r\n" in data, data


def test_an_http10_stream_ends_with_its_connection_unchunked(gateway):
    with connect(gateway.port) as sock:
        sock.sendall(post("SendStreamingMessage", user_message("hello"), version="1.0"))
        data = read_to_close(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower() and head.endswith(b"\r\nConnection: close"), head
    assert b"TASK_STATE_COMPLETED" in body and not body.endswith(b"0\r\n\r\n")


def test_expect_100_continue(gateway):
    head, _, body = GET_TASK.partition(b"\r\n\r\n")
    with connect(gateway.port) as sock:
        sock.sendall(head + b"\r\nExpect: 100-continue\r\n\r\n")
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(65536)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        answer, _ = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"-32001" in answer


def expecting(request: bytes, headers: bytes = b"") -> bytes:
    """`request`'s head, asking `Expect: 100-continue`, without its body."""
    head = request.partition(b"\r\n\r\n")[0]
    return head + b"\r\nExpect: 100-continue\r\n" + headers + b"\r\n"


def test_a_body_the_door_refuses_by_its_length_gets_no_100_continue(gateway):
    """The 413 of a declared length comes before the client is invited to send (h11's manner:
    `100 Continue` when the app first waits for the body)."""
    head = expecting(GET_TASK).replace(b"Content-Length: %d" % len(GET_TASK.partition(b"\r\n\r\n")[2]),
                                       b"Content-Length: 2000000")
    with connect(gateway.port) as sock:
        sock.sendall(head)
        answer, _ = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer


def test_a_request_the_door_refuses_unauthenticated_gets_no_100_continue(tmp_path):
    config = tmp_path / "door.toml"
    config.write_text(token_table([("alice", "alice-token", ["GetTask"])]))
    with running_gateway("--config", str(config), workers=1, tmp_path=tmp_path) as gw:
        with connect(gw.port) as sock:
            sock.sendall(expecting(GET_TASK))
            answer, _ = read_answer(sock)
            assert answer.startswith(b"HTTP/1.1 401 "), answer
            assert read_to_close(sock) == b""  # its body unsent: where a next request starts is unknown
        with connect(gw.port) as sock:
            sock.sendall(expecting(GET_TASK, b"Authorization: Bearer alice-token\r\n"))
            interim = read_until(sock, b"\r\n\r\n")
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n", interim


@pytest.mark.parametrize("request_bytes", [HEALTHZ, GET_TASK, CARD], ids=["healthz", "get_task", "card"])
def test_a_head_split_at_every_byte_is_read_as_one(gateway, request_bytes):
    head_end = request_bytes.index(b"\r\n\r\n") + 4
    with connect(gateway.port) as sock:
        sock.sendall(request_bytes)
        expected = read_answer(sock)[0].partition(b"\r\n\r\n")[0]
        for at in range(1, head_end):
            sock.sendall(request_bytes[:at])
            sock.sendall(request_bytes[at:])
            answer, rest = read_answer(sock)
            assert answer.partition(b"\r\n\r\n")[0] == expected and not rest, at


def test_a_trickling_stream_body_is_408_at_the_body_timeout_once(gateway):
    """A byte every 0.2 s: one timer, --body-timeout's, answers 408, not before it, and closes
    the connection; one 408 is logged and counted (the front and hypercorn once each started
    one, and the 408 came at twice the timeout)."""
    head, _, body = WATCH.partition(b"\r\n\r\n")
    before = series(scrape(gateway.metrics_port), REFUSED).get(TIMED_OUT, 0)
    with connect(gateway.port) as sock:
        sock.setblocking(False)
        sock.sendall(head + b"\r\n\r\n")
        started, answer = time.monotonic(), b""
        for byte in body[:-1]:
            try:
                sock.send(bytes([byte]))
                answer += sock.recv(65536)
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                break
            if answer:
                break
            time.sleep(0.2)
        took = time.monotonic() - started
        sock.setblocking(True)
        answer += read_to_close(sock)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and answer.count(b"HTTP/1.1 ") == 1, answer
    assert took >= BODY_TIMEOUT, took
    wait_for(lambda: series(scrape(gateway.metrics_port), REFUSED).get(TIMED_OUT, 0) > before, what="the 408 counted")
    assert series(scrape(gateway.metrics_port), REFUSED)[TIMED_OUT] == before + 1
    logged = wait_for(lambda: [r for r in gateway.logs() if r.get("event") == "request" and r.get("status") == 408],
                      what="the 408's access line")
    assert len(logged) == 1, logged


def test_a_stream_served_chunked_on_http11(gateway):
    with connect(gateway.port) as sock:
        sock.sendall(post("SendStreamingMessage", user_message("hello")))
        data = read_to_close(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"TASK_STATE_COMPLETED" in dechunk(body)


def test_the_eager_openings_need_no_current_task(gateway):
    """eager.py runs an app whose body came whole with its head with no current task: a
    `POST /` stream opening, a SendMessage, a GetTask, each through the whole door. Were any of
    them to await, before their first real wait, something that needs a current task
    (`asyncio.timeout`, a TaskGroup, anyio), the run would fail: answered 500, logged."""
    with connect(gateway.port) as sock:
        sock.sendall(post("SendMessage", user_message("eager")) + GET_TASK)
        sent, rest = read_answer(sock)
        got, _ = read_answer(sock, rest)
        sock.sendall(WATCH)
        data = read_until(sock, b"connection-ack")
    assert sent.startswith(b"HTTP/1.1 200 OK\r\n") and got.startswith(b"HTTP/1.1 200 OK\r\n")
    assert data.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
    assert not [r for r in gateway.logs() if r.get("event") == "an HTTP/1.1 request's app failed"]


def test_a_pipelined_post_with_a_big_body_is_answered(gateway):
    """More than one head's worth of pipelined bytes pauses reading; the next request's body
    taking them out of the buffer must resume it, or the body never finishes (408)."""
    big = post("SendMessage", user_message("x" * 200_000))
    with connect(gateway.port) as sock:
        sock.sendall(HEALTHZ + big)
        healthz, rest = read_answer(sock)
        sent, _ = read_answer(sock, rest)
    assert healthz.startswith(b"HTTP/1.1 200 OK\r\n")
    assert sent.startswith(b"HTTP/1.1 200 OK\r\n") and b'"task"' in sent, sent[:200]


@pytest.mark.parametrize("codings", [b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                                     b"Transfer-Encoding: chunked, chunked\r\n",
                                     b"Transfer-Encoding: chunked\r\nTransfer-Encoding: \r\n"],
                         ids=["two_lines", "one_line", "and_empty"])
def test_anything_but_exactly_one_chunked_coding_is_501(gateway, codings):
    """h11 refuses a body chunked twice as 501, as any other coding: where it ends is unclear."""
    request = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + codings
               + b"\r\n0\r\n\r\n")
    with connect(gateway.port) as sock:
        sock.sendall(request + HEALTHZ)
        data = read_to_close(sock)
    assert data.startswith(b"HTTP/1.1 501 Not Implemented\r\n") and data.count(b"HTTP/1.1 ") == 1, data


def test_an_eof_after_a_head_and_part_of_its_body_ends_the_request_at_once(tmp_path):
    """The client's EOF completes a head whose body is cut short: the app hears
    `http.disconnect` and the connection closes, not at --body-timeout (an hour here; a hang
    fails at the socket's read timeout)."""
    head, _, body = GET_TASK.partition(b"\r\n\r\n")
    with running_gateway("--body-timeout", "3600", workers=1, tmp_path=tmp_path) as gw:
        with connect(gw.port) as sock:  # alone: its head read as it comes, then the EOF
            sock.sendall(head + b"\r\n\r\n" + body[:len(body) // 2])
            sock.shutdown(socket.SHUT_WR)
            assert read_to_close(sock) == b""
        with connect(gw.port) as sock:  # pipelined: its head read after the EOF, once /healthz is answered
            sock.sendall(HEALTHZ + head + b"\r\n\r\n" + body[:len(body) // 2])
            sock.shutdown(socket.SHUT_WR)
            healthz, rest = read_answer(sock)
            assert healthz.startswith(b"HTTP/1.1 200 OK\r\n") and rest + read_to_close(sock) == b""


def test_a_head_cut_short_by_the_eof_after_an_answer_is_400_as_when_alone(gateway):
    """A whole request, then part of a second head, then the client's EOF: the first is
    answered, the cut head gets h11's 400 (problem details), then the close, whether the EOF
    came while the first was answered or after (it was closed with no answer when during)."""
    with connect(gateway.port) as sock:
        sock.sendall(GET_TASK + GET_TASK[:30])
        sock.shutdown(socket.SHUT_WR)
        get_task, rest = read_answer(sock)
        rest += read_to_close(sock)
    assert get_task.startswith(b"HTTP/1.1 200 OK\r\n") and b"-32001" in get_task
    assert rest.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b'"status":400' in rest, rest
