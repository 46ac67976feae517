"""The per-client and per-token limits end to end (gateway/worker/door/limits.py, sequencer/client_ledger.py):
counted across 2 workers, one HTTP/2 stream as one, the client read behind a trusted proxy
and not behind an untrusted one, each 429 an RFC 9457 problem with a whole-second Retry-After
answered before anything streams, and a closed stream's place free again."""

from __future__ import annotations

import os
import signal

import orjson

from helpers.gateway_harness import running_gateway, scrape, token_table, wait_for
from helpers.http_client import Http, headers_for, problem_detail, rpc, rpc_body
from helpers.sse_reading import SSEStream
from helpers.tls_support import H2Connection

WATCH = "murmur.WatchSession"
LIVE = str(2**40)


def forwarded_for(client: str) -> dict:
    return {"extra": [("X-Forwarded-For", client)]}


def refused_429(status: int, headers: dict, body: bytes) -> str:
    assert status == 429, (status, body)
    assert headers["retry-after"].isdigit() and int(headers["retry-after"]) >= 1, headers
    return problem_detail(429, headers, body)


def watch(port: int, **options) -> SSEStream:
    return SSEStream(port, WATCH, {}, last_event_id=LIVE, **options)


def open_watch_on(port: int, worker_pid: int | None, avoid: int | None, **options) -> Http:
    """A watch stream on a fresh connection that the worker `worker_pid` (or any but `avoid`)
    accepted: connections are asked /healthz until one lands there."""
    for _ in range(200):
        http = Http(port)
        http.send_request("GET", "/healthz")
        http.read_head()
        pid = orjson.loads(http.read_body())["pid"]
        if (worker_pid is None or pid == worker_pid) and pid != avoid:
            http.conn.start_next_cycle()
            http.send_request("POST", "/", headers_for(last_event_id=LIVE, **options), rpc_body(WATCH, {}))
            http.worker_pid = pid
            return http
        http.close()
    raise AssertionError("no connection reached the other worker")


def test_client_streams_across_two_workers(tmp_path):
    """[claim: client-streams]"""
    with running_gateway("--max-streams-per-client", "2", workers=2, metrics=True) as gw:
        assert scrape(gw.metrics_port)['murgw_requests_limited_total{limit="client_streams"}'] == 0
        first = watch(gw.port)
        second = open_watch_on(gw.port, None, avoid=first.worker_pid)
        try:
            assert first.status == 200 and second.read_head() == 200
            assert {first.worker_pid, second.worker_pid} == set(gw.worker_pids().values())
            for worker in (first.worker_pid, second.worker_pid):  # refused on either worker
                third = open_watch_on(gw.port, worker, None)
                status = third.read_head()
                detail = refused_429(status, third.headers, third.read_body())
                assert "2 open streams" in detail
                third.close()
            first.close()  # its place is free again: the next stream opens
            refused_meanwhile = []  # tries that came before the worker had given the place back
            fourth = wait_for(lambda: _opened(watch(gw.port), refused_meanwhile), what="the freed place")
            fourth.close()
            assert scrape(gw.metrics_port)['murgw_requests_limited_total{limit="client_streams"}'] == (
                2 + len(refused_meanwhile))
        finally:
            second.close()


def _opened(stream: SSEStream, refused: list | None = None) -> SSEStream | None:
    if stream.status == 200:
        return stream
    if refused is not None and stream.status == 429:
        refused.append(stream.status)
    stream.close()
    return None


def test_trusted_proxy_names_the_client():
    """[claim: forwarded-client]"""
    with running_gateway("--max-streams-per-client", "1", "--trusted-proxies", "127.0.0.1/32") as gw:
        one = watch(gw.port, **forwarded_for("192.0.2.1"))
        other = watch(gw.port, **forwarded_for("203.0.113.7, 127.0.0.1"))
        again = watch(gw.port, **forwarded_for("198.51.100.3, 192.0.2.1"))  # the left is not believed
        try:
            assert one.status == 200 and other.status == 200
            refused_429(again.status, again.headers, again.http.read_body())
            v6 = watch(gw.port, extra=[("Forwarded", 'for="[2001:db8:1:2::1]:4711"')])
            same_64 = watch(gw.port, extra=[("Forwarded", 'for="[2001:db8:1:2::99]"')])
            assert v6.status == 200 and same_64.status == 429  # IPv6 is counted by /64
            malformed = watch(gw.port, extra=[("Forwarded", 'for="[2001:db8')])
            assert malformed.status == 200  # the peer, 127.0.0.1, itself: never a refusal
            for stream in (v6, same_64, malformed):
                stream.close()
        finally:
            for stream in (one, other, again):
                stream.close()


def test_untrusted_proxy_headers_are_ignored():
    """[claim: forwarded-client]"""
    with running_gateway("--max-streams-per-client", "1", "--trusted-proxies", "10.0.0.0/8") as gw:
        one = watch(gw.port, **forwarded_for("192.0.2.1"))
        other = watch(gw.port, **forwarded_for("203.0.113.7"))
        try:
            assert one.status == 200
            refused_429(other.status, other.headers, other.http.read_body())
        finally:
            one.close()
            other.close()


def test_request_rate_bucket_across_workers():
    """[claim: client-rate]"""
    with running_gateway("--client-request-rate", "0.01", "--client-request-burst", "3",
                         "--trusted-proxies", "127.0.0.1/32", workers=2, metrics=True) as gw:
        answers = [rpc(gw.port, "ListTasks", {}) for _ in range(3)]
        assert [status for status, _, _ in answers] == [200, 200, 200]
        status, headers, body = Http(gw.port).request("POST", "/", headers_for(), rpc_body("ListTasks", {}))
        assert "requests a second" in refused_429(status, headers, body)
        assert int(headers["retry-after"]) >= 60  # a request is back in 1 / 0.01 s
        status, headers, body = Http(gw.port).request("GET", "/attachments/tsk_x/" + "0" * 64)
        refused_429(status, headers, body)  # the attachment endpoint draws from the same bucket
        for _ in range(5):  # probes are never limited
            assert Http(gw.port).request("GET", "/healthz")[0] == 200
            assert Http(gw.port).request("GET", "/readyz")[0] == 200
        assert Http(gw.port).request("GET", "/watch")[0] == 200
        assert rpc(gw.port, "ListTasks", {}, **forwarded_for("192.0.2.1"))[0] == 200  # another client
        assert scrape(gw.metrics_port)['murgw_requests_limited_total{limit="client_rate"}'] == 2


def test_each_http2_stream_counts_as_one(certs):
    """[claim: client-streams]"""
    with running_gateway(*certs.args, "--max-streams-per-client", "2", tls=certs.client_context(),
                         workers=2) as gw:
        h2 = H2Connection(gw.port, certs.client_context())
        try:
            streams = [h2.post(WATCH, {}, last_event_id=LIVE) for _ in range(3)]
            h2.pump_until(lambda: all(s.status for s in streams) and streams[2].ended, "three answers")
            assert [s.status for s in streams] == [200, 200, 429]
            refused = streams[2]
            assert refused.headers[b"retry-after"].isdigit()
            problem_detail(429, {k.decode(): v.decode() for k, v in refused.headers.items()}, bytes(refused.raw))
            assert not streams[0].ended and not streams[1].ended
            h2.conn.reset_stream(streams[0].id)  # the client leaves one stream: its place frees
            h2.sock.sendall(h2.conn.data_to_send())

            def reopened():
                stream = h2.post(WATCH, {}, last_event_id=LIVE)
                h2.pump_until(lambda: stream.status, "an answer")
                return stream if stream.status == 200 else None

            assert wait_for(reopened, what="the freed place").status == 200
        finally:
            h2.close()


def test_token_max_streams(tmp_path):
    """[claim: token-streams]"""
    (tmp_path / "door.toml").write_text(token_table([
        ("capped", "capped-token-1", ["*"], 1), ("free", "free-token-2", ["*"])]))
    with running_gateway("--config", str(tmp_path / "door.toml"), workers=2, metrics=True) as gw:
        one = watch(gw.port, token="capped-token-1")
        two = open_watch_on(gw.port, None, avoid=one.worker_pid, token="capped-token-1")
        free = [watch(gw.port, token="free-token-2") for _ in range(3)]
        try:
            assert one.status == 200
            assert "the token has 1 open streams" in refused_429(two.read_head(), two.headers, two.read_body())
            assert [s.status for s in free] == [200, 200, 200]
            assert scrape(gw.metrics_port)['murgw_requests_limited_total{limit="token_streams"}'] == 1
        finally:
            for stream in (one, *free):
                stream.close()
            two.close()


def test_a_dead_workers_places_are_released():
    with running_gateway("--max-streams-per-client", "1", workers=2) as gw:
        held = watch(gw.port)
        try:
            assert held.status == 200
            os.kill(held.worker_pid, signal.SIGKILL)  # its control connection closes with it
            reopened = wait_for(lambda: _opened(watch(gw.port)), what="the dead worker's place")
            reopened.close()
        finally:
            held.close()
