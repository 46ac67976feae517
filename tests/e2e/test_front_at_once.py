"""The front's at-once path (gateway/worker/http/front.py `_at_once`, door/admission.py
`Admission.at_once`): a `POST /` whose body came with its head, served with no coroutine,
answers exactly as the awaited path does.

Each request is sent twice on one gateway: whole (head and body in one write: the at-once
path) and with `Expect: 100-continue` and no body (the front then runs the app in a task,
which asks for the body: the awaited path; a request the door refuses from its head is
refused with no invitation). The answers' bytes, and the access-log lines each writes, are
the same; a WatchSession opens on both with the same head and first chunk.
"""

from __future__ import annotations

import os
import re
import signal
import socket

import orjson
import pytest

from gateway.protocol.uris import STREAM_URI
from gateway.tuning import OPENINGS_PER_TURN
from helpers.gateway_harness import GatewayOptions, token_table, wait_for
from helpers.http_client import rpc_body
from helpers.raw_http import RAW_READ_TIMEOUT, read_answer

WATCHER, NARROW = "watcher-5e4d3c", "narrow-1a2b3c"
RULES = [("watcher", WATCHER, ["murmur.WatchSession"]), ("narrow", NARROW, ["ListTasks"])]
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
ACCESS_EVENTS = ("request", "stream open", "stream end")
MAX_HEADERS = 12
WATCH = "murmur.WatchSession"
MESSAGE_ID = re.compile(rb'"messageId":"msg_[0-9a-f]+"')
STORM = 2 * OPENINGS_PER_TURN + 22  # openings read together: past the pace's turn


@pytest.fixture(scope="module")
def gateway_options(tmp_path_factory):
    config = tmp_path_factory.mktemp("at-once") / "door.toml"
    config.write_text(token_table(RULES))
    return GatewayOptions("--config", str(config), "--max-json-depth", "4", "--max-headers", str(MAX_HEADERS),
                          workers=1)


def request(body: bytes, token: str | None = WATCHER, content_type: bytes = b"application/json",
            version: bytes = b"1.0", extra: bytes = b"", expect: bool = False) -> tuple[bytes, bytes]:
    """The head (with `Expect: 100-continue` when `expect`) and the body of one `POST /`."""
    head = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nA2A-Version: %s\r\n"
            b"Content-Length: %d\r\n" % (content_type, version, len(body)))
    if token is not None:
        head += b"Authorization: Bearer %s\r\n" % token.encode()
    if expect:
        head += b"Expect: 100-continue\r\n"
    return head + extra + b"\r\n", body


def first_chunk(sock: socket.socket, data: bytes) -> bytes:
    """A stream's head and its first chunk (its opening), read whole."""
    while b"\r\n\r\n" not in data:
        data += recv(sock)
    head, _, rest = data.partition(b"\r\n\r\n")
    while b"\r\n" not in rest:
        rest += recv(sock)
    size = int(rest.partition(b"\r\n")[0], 16)
    end = rest.index(b"\r\n") + 2 + size + 2
    while len(rest) < end:
        rest += recv(sock)
    return head + b"\r\n\r\n" + rest[:end]


def same_ids(answer: bytes) -> bytes:
    """`answer` with each frame's message id (made anew for each: ids.new_message_id) the same."""
    return MESSAGE_ID.sub(b'"messageId":"msg_"', answer)


def recv(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    assert data, "closed before the answer was whole"
    return data


def answer_of(port: int, head: bytes, body: bytes, awaited: bool) -> bytes:
    """What `POST /` is answered: sent whole, or (`awaited`) its body only once invited."""
    with socket.create_connection(("127.0.0.1", port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(head if awaited else head + body)
        data = recv(sock)
        if awaited:
            while len(data) < len(CONTINUE) and CONTINUE.startswith(data):
                data += recv(sock)
            if data.startswith(CONTINUE):  # invited: its body, and the answer after the invitation
                data = data[len(CONTINUE):]
                sock.sendall(body)
        while b"\r\n\r\n" not in data:
            data += recv(sock)
        if b"text/event-stream" in data.partition(b"\r\n\r\n")[0]:
            return same_ids(first_chunk(sock, data))
        return read_answer(sock, data)[0]


def access_lines(gateway) -> list[dict]:
    return [{k: v for k, v in line.items() if k not in ("ts", "duration_s")}
            for line in gateway.logs() if line.get("event") in ACCESS_EVENTS]


def served(gateway, head: bytes, body: bytes, awaited: bool) -> tuple[bytes, list[dict]]:
    """The answer, and the access lines the request wrote (a stream's end once its client left)."""
    before = len(access_lines(gateway))
    answer = answer_of(gateway.port, head, body, awaited)
    streams = b"text/event-stream" in answer.partition(b"\r\n\r\n")[0]
    wait_for(lambda: len(access_lines(gateway)) >= before + (2 if streams else 1), what="its access lines")
    return answer, access_lines(gateway)[before:]


def watch(rpc_id=1, **params) -> bytes:
    return rpc_body(WATCH, params, rpc_id=rpc_id)


def raw(text: str) -> bytes:
    return text.replace("WATCH", WATCH).encode()


CASES: dict[str, dict] = {
    "a watcher opens": {"body": watch()},
    "a watcher opens with the stream extension and a gap": {
        "body": watch(), "extra": b"A2A-Extensions: %s\r\nLast-Event-ID: 99999\r\n" % STREAM_URI.encode()},
    "a string id": {"body": watch("w-1")},
    "no token: 401": {"body": watch(), "token": None},
    "an unknown token: 401": {"body": watch(), "token": "not-a-token"},
    "a token without the scope: 403": {"body": watch(), "token": NARROW},
    "not JSON's content type: 404": {"body": watch(), "content_type": b"text/plain"},
    "an A2A-Version it does not speak: -32009": {"body": watch(), "version": b"9.9"},
    "params not an object: -32602": {"body": raw('{"jsonrpc":"2.0","id":1,"method":"WATCH","params":[]}')},
    "nested deeper than --max-json-depth: -32600": {
        "body": raw('{"jsonrpc":"2.0","id":1,"method":"WATCH","params":{"a":[[[[1]]]]}}')},
    "brackets in strings only: opens": {"body": raw('{"jsonrpc":"2.0","id":"[[[[{{{{","method":"WATCH"}')},
    "the id twice: -32600 with a null id": {"body": raw('{"jsonrpc":"2.0","id":1,"id":2,"method":"WATCH"}')},
    "an id too long: -32600": {"body": orjson.dumps({"jsonrpc": "2.0", "id": "x" * 5000, "method": WATCH})},
    "not JSON-RPC 2.0: -32600": {"body": raw('{"jsonrpc":"1.0","id":1,"method":"WATCH"}')},
    "more header lines than --max-headers: 431": {
        "body": watch(), "extra": b"".join(b"X-Pad-%d: 1\r\n" % n for n in range(MAX_HEADERS))},
}


@pytest.mark.parametrize("case", CASES)
def test_the_at_once_path_answers_as_the_awaited_path_does(gateway, case):
    at_once = served(gateway, *request(**CASES[case]), awaited=False)
    awaited = served(gateway, *request(**CASES[case], expect=True), awaited=True)
    assert at_once[0].startswith(b"HTTP/1.1 "), at_once[0]
    assert at_once[0] == awaited[0]
    assert at_once[1] == awaited[1]


def test_a_refusal_at_once_keeps_the_connection_for_the_next_request(gateway):
    """A 401 served at once leaves the connection kept (its answer says nothing else), and the
    next request on it opens its stream at once too."""
    refused, body = request(rpc_body(WATCH, {}), None)
    opening, opening_body = request(rpc_body(WATCH, {}))
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(refused + body)
        answer, rest = read_answer(sock)
        assert answer.startswith(b"HTTP/1.1 401 ") and not rest, answer
        sock.sendall(opening + opening_body)
        stream = first_chunk(sock, b"")
    assert stream.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"), stream
    assert b"connection-ack" in stream


def test_a_storm_past_the_pace_opens_every_stream_with_the_same_bytes(gateway):
    """150 openings (`STORM`) read in one turn of the worker's loop (sent while it is stopped, so its
    next turns accept and read them together) pass the pace 64 a turn: the first at once,
    the rest called back on later turns (`OpeningPace.call_on_turn`), with no coroutine.
    Every one opens, with the same head and opening."""
    worker = next(iter(gateway.worker_pids().values()))
    head, body = request(watch())
    socks: list[socket.socket] = []
    try:
        os.kill(worker, signal.SIGSTOP)
        try:
            for _ in range(STORM):
                sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=RAW_READ_TIMEOUT)
                socks.append(sock)
                sock.sendall(head + body)
        finally:
            os.kill(worker, signal.SIGCONT)
        openings = [same_ids(first_chunk(sock, b"")) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert len(openings) == STORM and len(set(openings)) == 1, set(openings)
    assert openings[0].startswith(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"), openings[0]
