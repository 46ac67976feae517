"""The gateway where the internals its adapter follows have moved (gateway/worker/hypercorn/
patches.py), forced with the test-only switch MURGW_TEST_INTERNALS_MOVED: nothing is patched,
and what it promises still holds, or is not offered: `h2` leaves ALPN (a stalled HTTP/2
stream could not be bounded); HTTP/1.1, the front's, is served as ever, keep-alive included.
The wire tests of task streams run on this path too (test_gateway_task_streams.py)."""

from __future__ import annotations

import socket

from gateway.worker.hypercorn.patches import TEST_SWITCH
from helpers.gateway_harness import running_gateway
from helpers.http_client import rpc_body, user_message
from helpers.raw_http import read_answer
from helpers.sse_reading import SSEStream, WATCH

MOVED = {TEST_SWITCH: "1"}


def test_h2_is_not_offered_and_http11_streams_serve(tmp_path, certs):
    with running_gateway("--certfile", certs.certfile, "--keyfile", certs.keyfile, workers=1,
                         tls=certs.client_context(), env=MOVED, tmp_path=tmp_path) as gw:
        context = certs.client_context(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.selected_alpn_protocol() == "http/1.1"
        with SSEStream(gw.port, WATCH, {}, tls=certs.client_context(["h2", "http/1.1"])) as stream:
            assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
            assert stream.next().id is None  # the connection-ack
        warned = [r for r in gw.logs() if r.get("event", "").startswith("h2 not offered")]
        assert warned and TEST_SWITCH in warned[0]["reason"]


def test_http11_keeps_its_connection_where_hypercorns_table_does_not_hold(tmp_path):
    with running_gateway(workers=1, env=MOVED, tmp_path=tmp_path) as gw:
        body = rpc_body("SendMessage", user_message("hello"), 1)
        request = (b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\na2a-version: 1.0\r\n"
                   b"content-length: %d\r\n\r\n" % len(body)) + body
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            for _ in range(2):
                sock.sendall(request)
                answer, _ = read_answer(sock)
                assert answer.startswith(b"HTTP/1.1 200 ") and b'"result"' in answer, answer


def test_plain_http_refusal_on_the_tls_port_still_answers(tmp_path, certs):
    """The accept loop's own answers do not rest on the table: plain HTTP to the TLS port."""
    with running_gateway("--certfile", certs.certfile, "--keyfile", certs.keyfile, workers=1,
                         tls=certs.client_context(), env=MOVED, tmp_path=tmp_path) as gw:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 400 ")


def test_http2_prior_knowledge_on_the_plain_port_is_closed(tmp_path):
    with running_gateway(workers=1, env=MOVED, tmp_path=tmp_path) as gw:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000"))
            assert sock.recv(65536) == b""  # closed, nothing served over an HTTP/2 it cannot bound
