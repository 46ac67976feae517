"""`jwks_url` (gateway/sequencer/jwks.py): the JWT keys an identity provider publishes over
HTTPS, fetched at start, fetched again when a token names a `kid` the set lacks, and kept
when the provider fails. The provider is a real HTTPS server in this process, its
certificate from a throwaway CA (trustme) the gateway trusts through `SSL_CERT_FILE`."""

from __future__ import annotations

import http.server
import ssl
import threading

import pytest

from helpers.gateway_harness import running_gateway, wait_for
from helpers.http_client import rpc
from helpers.jwt_tokens import AUDIENCE, ISSUER, KeyPair, jwks
from helpers.tls_support import Certificates

OLD, NEW, LATER = KeyPair("2026-05"), KeyPair("2026-06"), KeyPair("2026-07")


class Provider(http.server.ThreadingHTTPServer):
    """Publishes `document` at /.well-known/jwks.json over HTTPS, or answers `status`."""

    def __init__(self, certs: Certificates):
        super().__init__(("127.0.0.1", 0), ProviderHandler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.certfile, certs.keyfile)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.document, self.status, self.fetches = jwks(OLD), 200, 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}/.well-known/jwks.json"


class ProviderHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 -- http.server's name
        provider = self.server
        provider.fetches += 1
        body = provider.document if provider.status == 200 else b"unavailable"
        self.send_response(provider.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def provider(tmp_path):
    server = Provider(Certificates(tmp_path))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def status_with(gw, pair: KeyPair) -> int:
    return rpc(gw.port, "ListTasks", {}, token=pair.mint(scope="ListTasks"))[0]


def lines(gw, event: str) -> list[dict]:
    return [r for r in gw.logs() if r.get("event") == event]


def test_the_published_set_is_fetched_at_start_again_for_a_new_kid_and_kept_when_the_provider_fails(
        tmp_path, provider):
    """[claim: jwks-url]"""
    door = tmp_path / "door.toml"
    door.write_text(f'[network.authentication.jwt]\njwks_url = "{provider.url}"\nalgorithms = ["ES256"]\n'
                    f'issuer = "{ISSUER}"\naudience = "{AUDIENCE}"\n')
    env = {"SSL_CERT_FILE": str(tmp_path / "ca.pem")}
    with running_gateway("--config", str(door), workers=2, metrics=True, tmp_path=tmp_path, env=env) as gw:
        wait_for(lambda: lines(gw, "JWT keys fetched"), what="the set fetched at start")
        assert lines(gw, "JWT keys fetched")[0]["jwt_keys"] == ["2026-05"]
        wait_for(lambda: status_with(gw, OLD) == 200, what="the workers verifying with the set")
        assert provider.fetches == 1

        provider.document = jwks(OLD, NEW)  # the provider publishes its next key
        wait_for(lambda: status_with(gw, NEW) == 200, timeout=30, what="a token of the new kid opening")
        assert lines(gw, "JWT keys fetched")[-1]["jwt_keys"] == ["2026-05", "2026-06"]
        assert provider.fetches == 2  # once at start, once for the new kid: no more
        assert any(r.get("token_problem") == "unknown_key" for r in lines(gw, "request"))

        provider.status = 503
        assert status_with(gw, LATER) == 401  # a kid neither set holds: fetched again, and failing
        failed = wait_for(lambda: lines(gw, "JWT keys not fetched; the keys in use stay"), timeout=30,
                          what="the failed fetch said")
        assert failed[0]["level"] == "warning" and failed[0]["problem"] == "answered 503"
        assert failed[0]["jwt_keys"] == ["2026-05", "2026-06"]
        assert (status_with(gw, OLD), status_with(gw, NEW)) == (200, 200)
