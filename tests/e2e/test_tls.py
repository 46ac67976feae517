"""HTTPS (--certfile/--keyfile): a verifying TLS client (Python's ssl, httpx) against the real
gateway with a throwaway CA; refusals of a bad pair at start; `mur watch https://… --cacert`."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys

import httpx
import pytest

from helpers.gateway_harness import GatewayOptions, ROOT, running_gateway, wait_for
from helpers.http_client import problem_detail, user_message
from helpers.sse_reading import SSEStream, describe, is_terminal_event, task_id_of
from helpers.tls_support import accounted, lagged_frames


@pytest.fixture(scope="module")
def gateway_options(certs):
    return GatewayOptions(*certs.args, tls=certs.client_context())


def start(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "--bind", "127.0.0.1:0", "--workers", "1",
                           "--metrics-bind", "off", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_card_says_https_over_both_alpn_protocols(gateway, certs):
    url = f"https://127.0.0.1:{gateway.port}/.well-known/agent-card.json"
    for http2, version in ((False, "HTTP/1.1"), (True, "HTTP/2")):
        with httpx.Client(http2=http2, verify=certs.client_context()) as client:
            answer = client.get(url)
        assert answer.http_version == version
        assert [i["url"] for i in answer.json()["supportedInterfaces"]] == [f"https://127.0.0.1:{gateway.port}/"]


def test_client_without_the_ca_refuses_the_certificate(gateway):
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"https://127.0.0.1:{gateway.port}/healthz", verify=ssl.create_default_context())


def test_plain_http_on_a_tls_door_is_answered_400_in_plain_http_then_closed(gateway):
    """[claim: plain-http-on-tls] As nginx does: the answer names the mistake, in the protocol the client spoke."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):  # to the server's close (a hang fails on the timeout)
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    assert status == "HTTP/1.1 400 Bad Request" and headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    assert "this port speaks HTTPS" in problem_detail(400, headers, body)
    answer = httpx.get(f"http://127.0.0.1:{gateway.port}/", headers={"A2A-Version": "1.0"})
    assert answer.status_code == 400 and answer.json()["detail"].startswith("this port speaks HTTPS")
    wait_for(lambda: any(r.get("event") == "plain HTTP on the TLS port" and r["status"] == 400
                         and r["client"] == "127.0.0.1" for r in gateway.logs()), what="the refusal logged")


def test_a_stream_over_tls_http1_is_the_fronts(gateway, certs):
    """HTTP/1.1 over TLS: the front serves the stream under the TLS transport."""
    with SSEStream(gateway.port, "SendStreamingMessage", user_message("hello"), activate=True,
                   tls=certs.client_context(["http/1.1"])) as stream:
        assert stream.status == 200
        seen = stream.read_until(is_terminal_event)
    assert describe(seen[0]) == "task" and describe(seen[-1]).startswith("completed")
    ids = [e.id for e in seen if e.id is not None]
    assert ids == list(range(ids[0], ids[0] + len(ids)))


@pytest.mark.parametrize("args, message", [
    (("--certfile", "/nonexistent/cert.pem", "--keyfile", "/nonexistent/key.pem"),
     "mur-gateway: --certfile /nonexistent/cert.pem: No such file or directory"),
    (("--certfile", "/etc/hostname"), "mur-gateway: --certfile needs --keyfile too"),
])
def test_missing_certificate_is_one_line_exit_2(args, message):
    done = start(*args)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


def test_unusable_certificate_is_one_line_exit_2(certs, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    done = start("--certfile", str(garbage), "--keyfile", certs.keyfile)
    assert done.returncode == 2
    assert "not a usable PEM certificate and key" in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_certificate_from_environment_is_checked(certs):
    done = subprocess.run([sys.executable, "-m", "gateway", "--bind", "127.0.0.1:0", "--metrics-bind", "off"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "MUR_GATEWAY_CERTFILE": "/nonexistent/c.pem",
                               "MUR_GATEWAY_KEYFILE": certs.keyfile})
    assert done.returncode == 2 and done.stderr.startswith("mur-gateway: --certfile /nonexistent/c.pem:")


def mur_watch(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gateway.watch.client", "watch", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_mur_watch_over_https_with_cacert(certs, tmp_path):
    with running_gateway(*certs.args, tls=certs.client_context(), workers=1) as gw:
        address = f"https://127.0.0.1:{gw.port}"
        refused = subprocess.run([sys.executable, "-m", "gateway.watch.client", "watch", address], cwd=ROOT,
                                 capture_output=True, text=True, timeout=30)
        assert refused.returncode == 2 and "certificate verify failed" in refused.stderr, refused.stderr
        watcher = mur_watch(address, "--cacert", certs.cafile)
        try:
            with httpx.Client(verify=certs.client_context()) as client:
                # mur watch asks with Last-Event-ID: 0, so it prints the task however late it attaches
                task = client.post(address + "/", headers={"A2A-Version": "1.0"}, json={
                    "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": user_message("hello")}).json()
                task_id = task["result"]["task"]["id"]
                with SSEStream(gw.port, "SubscribeToTask", {"id": task_id}, tls=certs.client_context()) as sub:
                    sub.read_until(is_terminal_event)
                client.post(address + "/", headers={"A2A-Version": "1.0"},
                            json={"jsonrpc": "2.0", "id": 2, "method": "murmur.StopSession", "params": {}})
            out, err = watcher.communicate(timeout=30)
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait()
    assert watcher.returncode == 0, err
    assert f"tsk:{task_id[-6:]} [completed]" in out
    assert "[murmur] capsule closed" in err


def test_mur_watch_cacert_that_does_not_exist(certs):
    done = subprocess.run([sys.executable, "-m", "gateway.watch.client", "watch", "https://127.0.0.1:1",
                           "--cacert", "/nonexistent/ca.pem"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stderr.startswith("mur watch: --cacert /nonexistent/ca.pem:"), done.stderr


def test_certificate_options_from_every_source(certs, tmp_path):
    from gateway.config.resolve import load

    toml = tmp_path / "tls.toml"
    toml.write_text(f'certfile = "{certs.certfile}"\nkeyfile = "{certs.keyfile}"\n')
    for argv, environ in ((["--config", str(toml)], {}),
                          ([], {"MUR_GATEWAY_CERTFILE": certs.certfile, "MUR_GATEWAY_KEYFILE": certs.keyfile}),
                          (list(certs.args), {})):
        loaded = load(argv, environ)
        assert (loaded.certfile, loaded.keyfile) == (certs.certfile, certs.keyfile)
    assert load([], {}).certfile is None


def test_stalled_tls_reader_lags_and_stays_open(certs, tmp_path):
    """HTTP/1.1 over TLS: a reader that stops reading fills the TLS transport, its stream
    waits and lags (the same rule as plain HTTP/1.1, tests/e2e/test_gateway_watch.py)."""
    live = {"last_event_id": str(2**40), "tls": certs.client_context(["http/1.1"])}
    with running_gateway(*certs.args, tls=certs.client_context(), workers=1, tmp_path=tmp_path) as gw:
        slow = SSEStream(gw.port, "murmur.WatchSession", {}, rcvbuf=4096, **live)
        fast = SSEStream(gw.port, "murmur.WatchSession", {}, **live)
        try:
            assert describe(slow.next()) == describe(fast.next()) == "connection-ack"
            with httpx.Client(verify=certs.client_context()) as client:
                task_id = client.post(f"https://127.0.0.1:{gw.port}/", headers={"A2A-Version": "1.0"}, json={
                    "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": user_message("/scenario burst n=3000")}).json()["result"]["task"]["id"]
            fast_events = fast.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))
            slow_events = slow.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))
        finally:
            slow.close()
            fast.close()
    # the other stream gets every event (or, on a loaded box, accounts for each one it missed)
    assert accounted(fast_events, 3004)
    assert lagged_frames(slow_events) and accounted(slow_events, 3004)


def test_tls_server_accepts_in_bursts(certs):
    """The worker's TLS server on the inherited socket is the burst accept loop, which wraps
    each accepted socket in TLS itself: a verifying client completes a request through it."""
    import asyncio

    import uvloop

    from gateway.worker.http.accept import BurstServer

    async def scenario() -> bytes:
        server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_context.load_cert_chain(certs.certfile, certs.keyfile)
        listener = socket.create_server(("127.0.0.1", 0))

        async def answer(reader, writer):
            writer.write(await reader.readline())
            await writer.drain()
            writer.close()

        server = BurstServer(asyncio.get_running_loop(), listener, 100,
                             lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), answer),
                             tls=server_context, handshake_timeout=5)
        try:
            reader, writer = await asyncio.open_connection(*listener.getsockname(), ssl=certs.client_context(),
                                                           server_hostname="127.0.0.1")
            writer.write(b"over tls\n")
            echoed = await reader.readline()
            writer.close()
            return echoed
        finally:
            server.close()

    assert uvloop.run(scenario()) == b"over tls\n"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_security_claim_tls_is_1_2_or_later_without_compression(gateway, certs):
    """[claim: tls-versions] A client that offers TLS 1.1 at most is refused in the handshake;
    TLS 1.2 and 1.3 are served, never compressed."""
    old = certs.client_context()
    old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # this client would offer it; the door must refuse
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as raw:
        with pytest.raises(ssl.SSLError) as refused:
            old.wrap_socket(raw, server_hostname="127.0.0.1")
        assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value)  # offered, and refused by the gateway
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        context = certs.client_context()
        context.minimum_version = context.maximum_version = version
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.version() == version.name.replace("v1_", "v1.") and tls.compression() is None


def test_security_claim_a_handshake_is_bounded_and_metrics_stay_plain(certs, tmp_path):
    """[claim: tls-handshake-bounded] [claim: metrics-plain] With --header-timeout 0.5, a connection that sends
    nothing, and one that stops inside its ClientHello, are closed by the gateway (the
    client's own timeout is 10 s); `/metrics` is plain HTTP on its own address."""
    with running_gateway(*certs.args, "--header-timeout", "0.5", tls=certs.client_context(), metrics=True,
                         workers=1, tmp_path=tmp_path) as gw:
        for sent in (b"", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"):
            with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
                sock.sendall(sent)
                assert sock.recv(65536) == b""
        assert httpx.get(f"http://127.0.0.1:{gw.metrics_port}/metrics").status_code == 200
