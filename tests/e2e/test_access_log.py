"""The access log (gateway/worker/access_log.py) and the counters that say what was refused.

Real gateways, real sockets: every line asserted is one the gateway wrote to its stderr. A
request writes one `request` line; a stream a `stream open` and a `stream end` line whose
events and bytes are what the client read; the token itself (or its digest) is never written;
`murmur.StopSession` and `CancelTask` are `warning`, so `--log-level warning` keeps them;
`--access-log off` writes none. JSON-RPC errors count in `murgw_jsonrpc_errors_total{code}`,
the door's refusals in `murgw_requests_refused_total{reason}`, and neither in the other.
"""

from __future__ import annotations

import hashlib
import socket
import struct

import pytest

from helpers.gateway_harness import GatewayOptions, running_gateway, scrape, series, token_table, wait_for
from helpers.http_client import Http, headers_for, rpc, rpc_body, user_message
from helpers.sse_reading import SSEStream

OPS, NARROW, NOT_A_TOKEN = "ops-secret-5e4d3c", "narrow-secret-1a2b3c", "nobody-secret-9z8y7x"
RULES = [("ops", OPS, ["*"]), ("narrow", NARROW, ["ListTasks"])]
ACCESS_EVENTS = ("request", "stream open", "stream end")
REFUSED, JSONRPC_ERRORS = "murgw_requests_refused_total", "murgw_jsonrpc_errors_total"


def access_lines(gw, event: str | None = None) -> list[dict]:
    return [rec for rec in gw.logs() if rec.get("event") in ((event,) if event else ACCESS_EVENTS)]


def line_where(gw, event: str, **fields) -> dict:
    """The first `event` line with these fields, waited for (the worker writes it when the
    request is over, which may be just after the client read its answer)."""
    def found():
        return next((rec for rec in access_lines(gw, event)
                     if all(rec.get(k) == v for k, v in fields.items())), None)
    return wait_for(found, what=f"a {event!r} line with {fields}")


def reset(stream: SSEStream) -> None:
    stream.http.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.http.close()


@pytest.fixture(scope="module")
def gateway_options(tmp_path_factory):
    config = tmp_path_factory.mktemp("access") / "door.toml"
    config.write_text(token_table(RULES))
    return GatewayOptions("--config", str(config), workers=1, metrics=True)


def test_a_request_is_one_line_naming_method_code_caller_client_and_duration(gateway):
    status, _, body = rpc(gateway.port, "GetTask", {"id": "no-such-task"}, token=OPS, rpc_id="one-line")
    assert status == 200 and body["error"]["code"] == -32001
    line = line_where(gateway, "request", method="GetTask", code=-32001)
    assert line["level"] == "info" and line["role"] == "worker"
    assert (line["http_method"], line["path"], line["status"]) == ("POST", "/", 200)
    assert line["caller"] == "ops" and line["client"] == "127.0.0.1"
    assert isinstance(line["duration_s"], float) and line["duration_s"] >= 0


def test_a_401_names_its_reason_no_token_or_unknown_token(gateway):
    """One status, two causes: the line says which, as the refusal's `refusal` field."""
    assert rpc(gateway.port, "ListTasks", {}, rpc_id="no-token")[0] == 401
    assert Http(gateway.port).request("GET", "/attachments/tsk_x/" + "0" * 64,
                                      headers=[("Authorization", "Bearer " + NOT_A_TOKEN)])[0] == 401
    line_where(gateway, "request", status=401, method=None, path="/", refusal="no token")
    line_where(gateway, "request", status=401, http_method="GET", refusal="unknown token")
    assert rpc(gateway.port, "GetTask", {"id": "x"}, token=NARROW)[0] == 403
    assert "refusal" not in line_where(gateway, "request", status=403)


def test_a_path_is_logged_with_its_status_and_cut_short(gateway):
    Http(gateway.port).request("GET", "/" + "x" * 1000)
    line = line_where(gateway, "request", status=404, http_method="GET")
    assert line["path"] == "/" + "x" * 199 and line["method"] is None and line["caller"] is None


def test_refusals_are_logged_and_no_token_ever_is(gateway):
    """[claim: tokens-never-logged]"""
    status, _, _ = rpc(gateway.port, "ListTasks", {}, token=NOT_A_TOKEN)
    assert status == 401
    unauthenticated = line_where(gateway, "request", status=401)
    assert unauthenticated["level"] == "info" and unauthenticated["caller"] is None
    assert rpc(gateway.port, "GetTask", {"id": "x"}, token=NARROW)[0] == 403
    forbidden = line_where(gateway, "request", status=403)
    assert (forbidden["caller"], forbidden["method"]) == ("narrow", "GetTask")
    stderr = gateway.stderr()
    for token in (OPS, NARROW, NOT_A_TOKEN):
        assert token not in stderr
        assert hashlib.sha256(token.encode()).hexdigest() not in stderr


def test_a_stream_logs_its_opening_and_its_end_with_what_it_wrote(gateway):
    with SSEStream(gateway.port, "SendStreamingMessage", user_message("/scenario burst n=20"),
                   token=OPS, activate=True) as stream:
        events = list(stream.events())
        assert stream.ended
    numbered = [e for e in events if e.id]
    opened = line_where(gateway, "stream open", method="SendStreamingMessage")
    assert (opened["status"], opened["caller"], opened["client"]) == (200, "ops", "127.0.0.1")
    end = line_where(gateway, "stream end", method="SendStreamingMessage")
    assert end["reason"] == "task_ended" and end["caller"] == "ops"
    assert end["events"] == len(numbered) >= 20
    assert end["bytes"] == len(stream.raw)  # the SSE body, as the client read it
    assert end["duration_s"] >= 0


def test_a_watcher_that_leaves_ends_with_client_left(gateway):
    watcher = SSEStream(gateway.port, "murmur.WatchSession", {}, token=OPS, rpc_id="leaves")
    rpc(gateway.port, "SendMessage", user_message("/scenario burst n=5"), token=OPS)
    read = watcher.read_until(lambda e: e.id is not None)
    reset(watcher)
    end = line_where(gateway, "stream end", method="murmur.WatchSession", reason="client_left")
    assert end["events"] >= len([e for e in read if e.id]) >= 1
    assert end["bytes"] >= len(watcher.raw)


def test_a_jsonrpc_error_counts_by_code_and_not_as_a_refusal(gateway):
    before = scrape(gateway.metrics_port)
    assert rpc(gateway.port, "GetTask", {"id": "still-no-such-task"}, token=OPS)[2]["error"]["code"] == -32001
    code = f'{JSONRPC_ERRORS}{{code="-32001"}}'
    after = wait_for(lambda: (s := scrape(gateway.metrics_port))[code] == before[code] + 1 and s,
                     what="the error counted")
    assert series(after, REFUSED) == series(before, REFUSED)
    assert after[f'{JSONRPC_ERRORS}{{code="-32601"}}'] == before[f'{JSONRPC_ERRORS}{{code="-32601"}}']


def test_a_401_counts_as_refused_unauthenticated_and_no_jsonrpc_error(gateway):
    before = scrape(gateway.metrics_port)
    status, _, _ = Http(gateway.port).request("POST", "/", headers_for(token=NOT_A_TOKEN), rpc_body("GetTask"))
    assert status == 401
    reason = f'{REFUSED}{{reason="unauthenticated"}}'
    after = wait_for(lambda: (s := scrape(gateway.metrics_port))[reason] == before[reason] + 1 and s,
                     what="the refusal counted")
    assert after[f'{REFUSED}{{reason="capacity"}}'] == before[f'{REFUSED}{{reason="capacity"}}']
    assert series(after, JSONRPC_ERRORS) == series(before, JSONRPC_ERRORS)


def test_every_reason_and_code_is_served_at_zero_from_start(tmp_path):
    with running_gateway(workers=1, metrics=True, tmp_path=tmp_path) as gw:
        samples = scrape(gw.metrics_port)
    reasons = {"bad_request", "ambiguous", "unauthenticated", "forbidden", "not_found", "method_not_allowed",
               "timeout", "body_too_large", "headers_too_large", "not_implemented", "capacity",
               "version_not_supported"}
    assert {k.split('"')[1] for k in series(samples, REFUSED)} == reasons
    codes = {"-32700", "-32600", "-32601", "-32602", "-32603", "-32001", "-32002", "-32003",
             "-32004", "-32005", "-32007", "-32009"}
    assert {k.split('"')[1] for k in series(samples, JSONRPC_ERRORS)} == codes
    assert set(series(samples, JSONRPC_ERRORS).values()) == {0}
    assert samples[f'{REFUSED}{{reason="capacity"}}'] == 0


def test_stop_session_ends_streams_and_is_logged_as_a_warning(tmp_path):
    with running_gateway(workers=1, tmp_path=tmp_path) as gw:
        watcher = SSEStream(gw.port, "murmur.WatchSession", {})
        watcher.next()  # the connection-ack: the stream is open
        task = rpc(gw.port, "SendMessage", user_message("/scenario slow turns=20"))[2]["result"]["task"]["id"]
        assert "result" in rpc(gw.port, "CancelTask", {"id": task})[2]
        assert "result" in rpc(gw.port, "murmur.StopSession", {})[2]
        list(watcher.events())
        assert watcher.ended
        cancel = line_where(gw, "request", method="CancelTask")
        stop = line_where(gw, "request", method="murmur.StopSession")
        end = line_where(gw, "stream end", method="murmur.WatchSession")
        watcher.close()
    assert cancel["level"] == stop["level"] == "warning" and stop["status"] == 200
    assert end["reason"] == "session_closed" and end["level"] == "info"


def test_log_level_warning_keeps_stop_session_and_cancel_only(tmp_path):
    with running_gateway("--log-level", "warning", workers=1, tmp_path=tmp_path) as gw:
        rpc(gw.port, "GetTask", {"id": "none"})
        rpc(gw.port, "CancelTask", {"id": "none"})
        rpc(gw.port, "murmur.StopSession", {})
    lines = access_lines(gw)  # the gateway has exited: every line it wrote is in
    assert [(rec["method"], rec["level"]) for rec in lines] == [
        ("CancelTask", "warning"), ("murmur.StopSession", "warning")]
    assert lines[0]["code"] == -32001


def test_access_log_off_writes_no_line(tmp_path):
    with running_gateway("--access-log", "off", workers=1, tmp_path=tmp_path) as gw:
        with SSEStream(gw.port, "SendStreamingMessage", user_message("/scenario burst n=3")) as stream:
            list(stream.events())
        rpc(gw.port, "GetTask", {"id": "none"})
        rpc(gw.port, "murmur.StopSession", {})
        Http(gw.port).request("GET", "/nothing-here")
        assert rpc(gw.port, "ListTasks", {}, token=NOT_A_TOKEN)[0] == 200  # a public door
    assert access_lines(gw) == []  # the gateway has exited: every line it wrote is in
    assert any(rec.get("event") == "worker serving" for rec in gw.logs())


def test_behind_a_trusted_proxy_the_line_names_the_forwarded_client(tmp_path):
    """From a peer in --trusted-proxies the line's client is the one X-Forwarded-For names (the
    same rule the per-client limits key on); a peer outside the ranges is named itself."""
    forwarded = [("X-Forwarded-For", "203.0.113.7, 127.0.0.1")]
    with running_gateway("--trusted-proxies", "127.0.0.0/8", workers=1, tmp_path=tmp_path) as gw:
        rpc(gw.port, "GetTask", {"id": "behind-proxy"}, extra=forwarded)
        assert line_where(gw, "request", method="GetTask")["client"] == "203.0.113.7"
    with running_gateway("--trusted-proxies", "10.0.0.0/8", workers=1, tmp_path=tmp_path) as gw:
        rpc(gw.port, "GetTask", {"id": "not-behind-proxy"}, extra=forwarded)
        assert line_where(gw, "request", method="GetTask")["client"] == "127.0.0.1"
