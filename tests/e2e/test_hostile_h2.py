"""Hostile HTTP/2 clients (h2c prior knowledge on the plain port): a stream blocked on a shut
flow-control window ends when its client leaves, whichever way it leaves (SECURITY.md: "a FIN
or a reset from its client ends it at once"); no input raises out of hypercorn (a burst of
streams opened and reset, PRIORITY trees, heads it cannot read): each is answered with
GOAWAY or RST_STREAM, and the worker's log has no traceback."""

from __future__ import annotations

import itertools
import socket
import struct

import h2.config
import h2.errors
import h2.events
import h2.connection
import h2.settings
import pytest

from gateway.worker.hypercorn.h2_limits import BURST
from helpers.gateway_harness import GatewayOptions, rss_kib, running_gateway, scrape, wait_for
from helpers.http_client import Http, rpc_body
from helpers.sse_reading import watch

WATCH = "murmur.WatchSession"
STREAMS = 20
FEW_MB = 4 * 1024  # KiB over the worker's RSS after a first round: what a second round may add


class ShutWindowClient:
    """One h2c prior-knowledge connection whose streams all open with a zero window and never
    get a WINDOW_UPDATE: every response body waits in the worker."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        self.conn.initiate_connection()
        self.ids: list[int] = []

    def open_watches(self, n: int) -> None:
        body = rpc_body(WATCH, {})
        for _ in range(n):
            stream_id = self.conn.get_next_available_stream_id()
            self.conn.send_headers(stream_id, [
                (b":method", b"POST"), (b":path", b"/"), (b":scheme", b"http"), (b":authority", b"127.0.0.1"),
                (b"content-type", b"application/json"), (b"a2a-version", b"1.0"),
                (b"last-event-id", str(2**40).encode()), (b"content-length", str(len(body)).encode())])
            self.conn.send_data(stream_id, body, end_stream=True)
            self.ids.append(stream_id)
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def leave(self, how: str) -> None:
        if how == "fin":
            self.sock.shutdown(socket.SHUT_WR)
        elif how == "rst":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        elif how == "goaway":
            self.conn.close_connection()
            self.flush()
        else:  # every stream reset
            for stream_id in self.ids:
                self.conn.reset_stream(stream_id)
            self.flush()


@pytest.mark.parametrize("how", ["fin", "rst", "goaway", "rst_stream"])
def test_security_claim_a_fin_or_a_reset_ends_a_stream_blocked_on_a_shut_http2_window(tmp_path, how):
    """[claim: h2-client-leaves] 20 watch streams on one connection with a zero window while events flow: once each is
    surely blocked (an HTTP/1.1 watcher read more than the 32 KiB hypercorn buffers per HTTP/2
    stream), the client leaves; every place is freed and every stream logs its end. Done twice:
    the worker's memory after the second time is near its level after the first (what the
    first grows, the full window and the allocator's arenas, is not a leaving client's)."""
    with running_gateway("--sim-load", "200", "--sim-load-size", "512", workers=1, heartbeat=1, metrics=True,
                         tmp_path=tmp_path) as gw:
        [worker] = gw.worker_pids().values()
        blocked_then_left(gw, how, ended=STREAMS + 1)
        before = rss_kib(worker)
        blocked_then_left(gw, how, ended=2 * (STREAMS + 1))
        assert rss_kib(worker) - before < FEW_MB, (before, rss_kib(worker))


def blocked_then_left(gw, how: str, ended: int) -> None:
    """STREAMS watch streams blocked on a shut window, then their client leaves `how`: every
    place freed, each end logged as the client's (`ended`: the stream ends logged by then)."""
    opened = lambda: scrape(gw.metrics_port).get(f'murgw_connections_open{{endpoint="{WATCH}"}}', 0)
    client = ShutWindowClient(gw.port)
    try:
        client.open_watches(STREAMS)
        wait_for(lambda: opened() == STREAMS, what="every stream open")
        seen = itertools.count()
        with watch(gw.port) as witness:  # the same events, read: 600 x 512 bytes, well past 32 KiB
            witness.read_until(lambda e: e.id is not None and next(seen) >= 600)
        client.leave(how)
        wait_for(lambda: opened() == 0, what=f"every place freed after {how}")
    finally:
        client.sock.close()
    wait_for(lambda: gw.stderr().count('"stream end"') >= ended, what="every stream end logged")
    ends = [rec for rec in gw.logs() if rec.get("event") == "stream end" and rec.get("reason") == "client_left"]
    assert len(ends) >= ended - ended // (STREAMS + 1)


HEALTHZ = [(b":method", b"GET"), (b":path", b"/healthz"), (b":scheme", b"http"), (b":authority", b"127.0.0.1")]


class PlainH2:
    """An h2c prior-knowledge connection that reads what the gateway sends, event by event."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())

    def post_head(self, length: int) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, [
            (b":method", b"POST"), (b":path", b"/"), (b":scheme", b"http"), (b":authority", b"127.0.0.1"),
            (b"content-type", b"application/json"), (b"a2a-version", b"1.0"),
            (b"content-length", str(length).encode())])
        self.sock.sendall(self.conn.data_to_send())
        return stream_id

    def until(self, kind, stream_id: int) -> list:
        """Read until an event of `kind` on `stream_id` (the last of those answered); the
        connection must stay up, and the stream must not be reset unless that is `kind`."""
        seen = []
        while True:
            data = self.sock.recv(65536)
            assert data, "the gateway closed the connection"
            events = self.conn.receive_data(data)
            self.sock.sendall(self.conn.data_to_send())
            assert not any(isinstance(e, h2.events.ConnectionTerminated) for e in events), events
            for event in events:
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                seen.append(event)
                if isinstance(event, kind):
                    return seen
                assert not isinstance(event, h2.events.StreamReset), event

    def healthz(self) -> int:
        """GET /healthz on a new stream: its status."""
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, HEALTHZ, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        [head] = [e for e in self.until(h2.events.StreamEnded, stream_id) if isinstance(e, h2.events.ResponseReceived)]
        return int(dict(head.headers)[b":status"])

    def ending(self) -> h2.events.ConnectionTerminated:
        """Read until the gateway's GOAWAY."""
        while True:
            data = self.sock.recv(65536)
            assert data, "the connection closed with no GOAWAY"
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ConnectionTerminated):
                    return event

    def answered(self, method: str) -> int:
        """A whole request on a new stream: its status once its answer has ended."""
        body = rpc_body(method, {})
        stream_id = self.post_head(len(body))
        self.conn.send_data(stream_id, body, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        [head] = [e for e in self.until(h2.events.StreamEnded, stream_id) if isinstance(e, h2.events.ResponseReceived)]
        return int(dict(head.headers)[b":status"])


def test_security_claim_a_stream_over_the_concurrency_limit_is_refused_alone(gateway):
    """[claim: h2-refused-stream] The 101st concurrent stream gets RST_STREAM REFUSED_STREAM, not a GOAWAY: the 100
    others stay, and once one ends a new stream is served."""
    client = PlainH2(gateway.port)
    try:
        waiting = [client.post_head(100) for _ in range(100)]  # each waits for its body
        extra = client.post_head(100)
        assert client.until(h2.events.StreamReset, extra)[-1].error_code == h2.errors.ErrorCodes.REFUSED_STREAM
        client.conn.reset_stream(waiting[0])
        assert client.answered("ListTasks") == 200
    finally:
        client.sock.close()


def test_security_claim_data_on_a_finished_stream_gives_the_connection_its_window_back(gateway):
    """[claim: h2-data-credited] A body the gateway refused from its head (413) that the client sends anyway: the
    connection's window is credited for it and the connection stays up, past the 64 KiB window
    many times over."""
    client = PlainH2(gateway.port)
    try:
        for _ in range(40):  # 40 x 16,000 bytes: ten times the connection's first window
            stream_id = client.post_head(2_000_000)
            client.until(h2.events.StreamEnded, stream_id)
            while client.conn.outbound_flow_control_window < 16_000:
                client.until(h2.events.WindowUpdated, 0)
            client.conn.send_data(stream_id, b"x" * 16_000)
            client.sock.sendall(client.conn.data_to_send())
        assert client.answered("ListTasks") == 200
    finally:
        client.sock.close()


def test_security_claim_each_http2_stream_holds_a_max_connections_place(tmp_path):
    """[claim: h2-prior-knowledge] [claim: h2-streams-counted] Two watch streams on one connection take a worker's two
    places: the third stream is refused 503 with Retry-After, and the connection stays up."""
    with running_gateway("--max-connections", "2", workers=1, tmp_path=tmp_path) as gw:
        client = PlainH2(gw.port)
        try:
            heads = []
            for _ in range(3):
                body = rpc_body(WATCH, {})
                stream_id = client.post_head(len(body))
                client.conn.send_data(stream_id, body, end_stream=True)
                client.sock.sendall(client.conn.data_to_send())
                [head] = [e for e in client.until(h2.events.ResponseReceived, stream_id)
                          if isinstance(e, h2.events.ResponseReceived)]
                heads.append(dict(head.headers))
            assert [int(h[b":status"]) for h in heads] == [200, 200, 503] and heads[2][b"retry-after"] == b"1"
        finally:
            client.sock.close()


def test_security_claim_two_authorization_headers_are_refused_over_http2(gateway):
    """[claim: two-authorizations] As on HTTP/1.1: 400 with problem details, never served."""
    client = PlainH2(gateway.port)
    try:
        stream_id = client.conn.get_next_available_stream_id()
        client.conn.send_headers(stream_id, [
            (b":method", b"GET"), (b":path", b"/healthz"), (b":scheme", b"http"), (b":authority", b"127.0.0.1"),
            (b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")], end_stream=True)
        client.sock.sendall(client.conn.data_to_send())
        events = client.until(h2.events.StreamEnded, stream_id)
        [head] = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
        body = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
        assert int(dict(head.headers)[b":status"]) == 400 and b"more than one Authorization header" in body
    finally:
        client.sock.close()


def test_security_claim_a_burst_of_reset_streams_ends_its_connection_with_goaway(gateway):
    """[claim: h2-no-traceback] 1,100 x (HEADERS GET /healthz with END_STREAM, RST_STREAM) in one write: more streams
    than hypercorn's priority tree takes (1,000) before its sending task runs. The connection
    ends with GOAWAY ENHANCE_YOUR_CALM and one warning line, no traceback, and the worker
    serves on."""
    client = PlainH2(gateway.port)
    try:
        assert client.healthz() == 200  # the connection is hypercorn's HTTP/2 before the burst
        for _ in range(1100):
            stream_id = client.conn.get_next_available_stream_id()
            client.conn.send_headers(stream_id, HEALTHZ, end_stream=True)
            client.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        client.sock.sendall(client.conn.data_to_send())
        assert client.ending().error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    finally:
        client.sock.close()
    assert Http(gateway.port).request("GET", "/readyz")[0] == 200
    wait_for(lambda: BURST in gateway.stderr(), what="the burst's warning")
    [line] = [rec for rec in gateway.logs() if rec.get("event") == BURST]
    assert line["level"] == "warning" and line["streams_opened"] == 1100
    assert "Traceback" not in gateway.stderr()


def _priority_trees(conn: h2.connection.H2Connection, shape: str) -> None:
    """PRIORITY frames for idle streams (odd ids from 1,001), as hypercorn took them into its
    priority tree."""
    ids = itertools.count(1001, 2)
    if shape == "wide":  # 1,100 streams: more than the tree takes
        for _ in range(1100):
            conn.prioritize(next(ids), depends_on=0)
    else:  # a chain, each stream on the one before: 990 deep, or 120 with its root then put on its leaf
        chain = [next(ids)]
        conn.prioritize(chain[0], depends_on=0)
        for _ in range(990 if shape == "deep" else 120):
            chain.append(next(ids))
            conn.prioritize(chain[-1], depends_on=chain[-2])
        if shape == "loop":
            conn.prioritize(chain[0], depends_on=chain[-1])


@pytest.mark.parametrize("shape", ["wide", "deep", "loop"])
def test_security_claim_priority_signals_are_ignored(gateway, shape):
    """[claim: h2-no-traceback] PRIORITY frames hypercorn's priority tree refused (too many streams), recursed on (a
    chain deeper than Python's stack) or took for a loop (a reprioritization deeper than its
    check): ignored (RFC 9113 §5.3.2), the connection serves on and no traceback is logged."""
    client = PlainH2(gateway.port)
    try:
        _priority_trees(client.conn, shape)
        client.sock.sendall(client.conn.data_to_send())
        assert client.healthz() == 200
    finally:
        client.sock.close()
    assert "Traceback" not in gateway.stderr()


UNREADABLE_HEADS = {
    "connect_without_path": [(b":method", b"CONNECT"), (b":authority", b"127.0.0.1:1")],
    "non_ascii_method": [(b":method", b"G\xc3\x89T"), *HEALTHZ[1:]],
    "non_ascii_path": [HEALTHZ[0], (b":path", b"/healthz\xc3\xa9"), *HEALTHZ[2:]],
    "non_ascii_websocket_protocol": [(b":method", b"CONNECT"), (b":protocol", b"websocket"), *HEALTHZ[1:],
                                     (b"sec-websocket-version", b"13"), (b"sec-websocket-protocol", b"\xc3\xa9")],
    "non_ascii_websocket_extensions": [(b":method", b"CONNECT"), (b":protocol", b"websocket"), *HEALTHZ[1:],
                                       (b"sec-websocket-version", b"13"), (b"sec-websocket-extensions", b"\xc3\xa9")],
}


@pytest.mark.parametrize("case", sorted(UNREADABLE_HEADS))
@pytest.mark.parametrize("then_reset", [False, True], ids=["alone", "reset_in_the_same_write"])
def test_security_claim_a_head_hypercorn_cannot_read_resets_its_stream_alone(gateway, case, then_reset):
    """[claim: h2-no-traceback] A malformed head (RFC 9113 §8.1.1) hypercorn failed on (its `:method`, `:path` or an
    extended CONNECT's WebSocket field not ASCII, a CONNECT without `:path`): RST_STREAM
    PROTOCOL_ERROR for that stream (none where the client reset it in the same write), the
    connection serves on, no traceback."""
    client = PlainH2(gateway.port)
    try:
        stream_id = client.conn.get_next_available_stream_id()
        client.conn.send_headers(stream_id, UNREADABLE_HEADS[case], end_stream=True)
        if then_reset:
            client.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        client.sock.sendall(client.conn.data_to_send())
        if not then_reset:
            assert client.until(h2.events.StreamReset, stream_id)[-1].error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
        assert client.healthz() == 200
    finally:
        client.sock.close()
    assert "Traceback" not in gateway.stderr()


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions(workers=1)
