"""HTTP/2 over TLS (ALPN h2): every stream endpoint delivers the same `id:` and `data:` bytes as
over HTTP/1.1; heartbeats, lag and replay behave the same; many streams share one connection.
HTTP/2 is hypercorn's, and its streams take the plain ASGI sink (gateway/worker/hypercorn/
asgi.py; HTTP/1.1 chunk framing written into the HTTP/2 connection would break every check
below)."""

from __future__ import annotations

import httpx
import pytest

from helpers.gateway_harness import GatewayOptions, running_gateway, scrape, wait_for
from helpers.http_client import user_message
from helpers.sse_reading import (CADENCE_TURNS, SSEStream, describe, heartbeats_among_events, is_terminal_event,
                         item, task_id_of)
from helpers.tls_support import H2Connection, accounted, lagged_frames

WATCH = "murmur.WatchSession"
LIVE = str(2**40)  # a Last-Event-ID past head: live events only, no replay


@pytest.fixture(scope="module")
def gateway_options(certs):
    return GatewayOptions(*certs.args, tls=certs.client_context(), workers=1)


def send(gw, certs, text: str) -> str:
    with httpx.Client(http2=True, verify=certs.client_context()) as client:
        answer = client.post(f"https://127.0.0.1:{gw.port}/", headers={"A2A-Version": "1.0"},
                             json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": user_message(text)})
    assert answer.http_version == "HTTP/2"
    return answer.json()["result"]["task"]["id"]


def numbered(events, task_id: str | None = None) -> list[tuple[int, str]]:
    return [(e.id, e.data) for e in events if e.id is not None and (task_id is None or task_id_of(e) == task_id)]


def until_terminal(h2: H2Connection, stream, task_id: str | None = None) -> None:
    def done():
        return stream.ended or any(e.data and is_terminal_event(e) and (task_id is None or task_id_of(e) == task_id)
                                   for e in stream.events)
    h2.pump_until(done, "terminal status")


def test_watch_session_same_bytes_as_http1(gateway, certs):
    h2 = H2Connection(gateway.port, certs.client_context())
    h1 = SSEStream(gateway.port, WATCH, {}, last_event_id=LIVE, tls=certs.client_context(["http/1.1"]))
    try:
        stream = h2.post(WATCH, {}, last_event_id=LIVE)
        h2.pump_until(lambda: stream.events, "connection-ack")
        assert stream.status == 200 and stream.headers[b"content-type"] == b"text/event-stream"
        assert b"connection" not in stream.headers  # HTTP/2 has no connection-specific headers
        assert describe(h1.next()) == describe(stream.events[0]) == "connection-ack"
        task_id = send(gateway, certs, "hello")
        until_terminal(h2, stream, task_id)
        h1_events = h1.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))
        assert numbered(stream.events, task_id) == numbered(h1_events, task_id)
        assert [describe(e) for e in stream.events if task_id_of(e) == task_id][-1].startswith("completed")
    finally:
        h1.close()
        h2.close()


def test_send_streaming_and_subscribe_same_bytes_as_http1(gateway, certs):
    h2 = H2Connection(gateway.port, certs.client_context())
    try:
        ssm = h2.post("SendStreamingMessage", user_message("/scenario slow turns=3 delay=0.2"), activate=True)
        h2.pump_until(lambda: ssm.events, "opening task")
        task_id = item(ssm.events[0]).body["id"]
        sub2 = h2.post("SubscribeToTask", {"id": task_id}, activate=True, last_event_id="0")
        with SSEStream(gateway.port, "SubscribeToTask", {"id": task_id}, activate=True, last_event_id="0",
                       tls=certs.client_context(["http/1.1"])) as sub1:
            h1_events = sub1.read_until(is_terminal_event)
        until_terminal(h2, sub2)
        until_terminal(h2, ssm)
        h2.pump_until(lambda: ssm.ended and sub2.ended, "the ends of both streams")
        assert numbered(sub2.events) == numbered(h1_events)
        # the SendStreamingMessage stream saw them live: the same events, each byte the same
        assert numbered(ssm.events) == numbered(h1_events)[-len(numbered(ssm.events)):]
        assert describe(ssm.events[-1]).startswith("completed")
    finally:
        h2.close()


def test_many_streams_share_one_connection(gateway, certs):
    h2 = H2Connection(gateway.port, certs.client_context())
    try:
        streams = [h2.post(WATCH, {}, last_event_id=LIVE, rpc_id=7) for _ in range(40)]
        h2.pump_until(lambda: all(s.events for s in streams), "every connection-ack")
        task_id = send(gateway, certs, "hello")
        for stream in streams:
            until_terminal(h2, stream, task_id)
        expected = numbered(streams[0].events, task_id)
        assert expected and all(numbered(s.events, task_id) == expected for s in streams)
        assert len({s.id for s in streams}) == 40
    finally:
        h2.close()


def test_httpx_http2_client_streams(gateway, certs):
    """httpx's own HTTP/2 client: one pooled connection, a watch stream and a request beside it."""
    with httpx.Client(http2=True, verify=certs.client_context()) as client:
        with client.stream("POST", f"https://127.0.0.1:{gateway.port}/", headers={
                "A2A-Version": "1.0", "Last-Event-ID": LIVE, "Content-Type": "application/json"},
                content=b'{"jsonrpc":"2.0","id":1,"method":"murmur.WatchSession","params":{}}') as answer:
            assert answer.http_version == "HTTP/2" and answer.status_code == 200
            lines = answer.iter_lines()
            assert '"connection-ack"' in next(lines)
            task = client.post(f"https://127.0.0.1:{gateway.port}/", headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": user_message("hello")}).json()
            task_id = task["result"]["task"]["id"]
            for line in lines:
                if task_id in line and "TASK_STATE_COMPLETED" in line:
                    break
            else:
                raise AssertionError("the stream ended before the task completed")


def test_heartbeats_keep_cadence_over_http2(gateway, certs):
    """As over HTTP/1.1 (test_gateway_watch): heartbeats fall between a busy task's events."""
    h2 = H2Connection(gateway.port, certs.client_context())
    try:
        stream = h2.post(WATCH, {}, last_event_id=LIVE)
        h2.pump_until(lambda: stream.events, "connection-ack")
        task_id = send(gateway, certs, f"/scenario slow turns={CADENCE_TURNS} delay=0.1")
        until_terminal(h2, stream, task_id)
    finally:
        h2.close()
    order = ["hb" if e.data is None else "event" for e in stream.events[1:]
             if e.data is None or task_id_of(e) == task_id]
    assert all(e.comments == ("heartbeat",) for e in stream.events if e.data is None)
    assert heartbeats_among_events(order) >= 2, order


def test_replay_over_http2_is_the_http1_replay(gateway, certs):
    task_id = send(gateway, certs, "hello")
    with SSEStream(gateway.port, "SubscribeToTask", {"id": task_id}, tls=certs.client_context()) as sub:
        sub.read_until(is_terminal_event)
    with SSEStream(gateway.port, WATCH, {}, last_event_id="0", tls=certs.client_context(["http/1.1"])) as h1:
        h1_events = h1.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))
    h2 = H2Connection(gateway.port, certs.client_context())
    try:
        stream = h2.post(WATCH, {}, last_event_id="0")
        until_terminal(h2, stream, task_id)
    finally:
        h2.close()
    replayed = numbered(stream.events)
    assert replayed[:len(numbered(h1_events))] == numbered(h1_events)


def test_stalled_http2_stream_lags_while_its_neighbour_goes_on(certs, tmp_path):
    """[claim: h2-stalled-bounded] One connection, two watch streams; one's flow-control window
    is held shut (a reader that stopped reading): it lags and stays open, and the other stream
    on the same connection reaches the end while the first is still stalled."""
    with running_gateway(*certs.args, tls=certs.client_context(), workers=1, tmp_path=tmp_path) as gw:
        h2 = H2Connection(gw.port, certs.client_context())
        try:
            slow = h2.post(WATCH, {}, last_event_id=LIVE, wide=False)
            fast = h2.post(WATCH, {}, last_event_id=LIVE)
            h2.pump_until(lambda: slow.events and fast.events, "connection-acks")
            h2.stall(slow)
            task_id = send(gw, certs, "/scenario burst n=3000")
            until_terminal(h2, fast, task_id)  # while its neighbour's window is still shut
            h2.stall(slow, False)
            until_terminal(h2, slow, task_id)
            assert not slow.ended and not fast.ended
        finally:
            h2.close()
        # The neighbour has every event, or (a client this slow under load) a lagged frame for
        # each hole; the stalled stream must have lagged.
        assert accounted(fast.events, 3004) and lagged_frames(slow.events)
        assert "SSE broadcast lagged by" in gw.stderr()


def test_a_reset_stream_or_a_closed_connection_frees_its_place(certs, tmp_path):
    """RST_STREAM ends that stream alone, a dropped connection every stream on it; heartbeats
    are 300 s apart, so each is noticed from what the client sent, not at a write."""
    with running_gateway(*certs.args, tls=certs.client_context(), workers=1, heartbeat=300, metrics=True,
                         tmp_path=tmp_path) as gw:
        opened = lambda: scrape(gw.metrics_port)['murgw_connections_open{endpoint="murmur.WatchSession"}']
        h2 = H2Connection(gw.port, certs.client_context())
        try:
            streams = [h2.post(WATCH, {}, last_event_id=LIVE) for _ in range(3)]
            h2.pump_until(lambda: all(s.events for s in streams), "every connection-ack")
            wait_for(lambda: opened() == 3, what="three open")
            h2.conn.reset_stream(streams[0].id)
            h2.sock.sendall(h2.conn.data_to_send())
            wait_for(lambda: opened() == 2, what="the reset stream's place freed")
        finally:
            h2.sock.close()  # no GOAWAY: as a client that was killed
        wait_for(lambda: opened() == 0, what="every place on the closed connection freed")
