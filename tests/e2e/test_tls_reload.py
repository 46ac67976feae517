"""Certificate rotation by SIGHUP (gateway/config/tls.py, config_reload.CERTIFICATE), end to end: the
pair rewritten in place, a new TLS connection sees the new notAfter, a stream opened before
keeps reading with nothing missed, the expiry gauge follows; a pair that does not load
rejects the reload: nothing changes, and the log says why."""

from __future__ import annotations

import datetime
import os
import signal
import socket

from helpers.gateway_harness import running_gateway, scrape, wait_for
from helpers.sse_reading import SSEStream
from helpers.tls_support import Certificates

WATCH = "murmur.WatchSession"
EXPIRY = "murgw_tls_certificate_expiry_timestamp_seconds"
RENEWED = datetime.datetime(2031, 6, 1, tzinfo=datetime.UTC)


def served_not_after(port: int, certs: Certificates) -> str:
    """The notAfter of the certificate a new handshake gets."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            return sock.getpeercert()["notAfter"]


def renew(certs: Certificates) -> None:
    """Rewrite the pair in place, as certbot does, with a certificate valid until RENEWED."""
    server = certs.ca.issue_cert("127.0.0.1", not_after=RENEWED)
    server.cert_chain_pems[0].write_to_path(certs.certfile)
    server.private_key_pem.write_to_path(certs.keyfile)


def reloads_applied(gw) -> float:
    return scrape(gw.metrics_port)['murgw_config_reloads_total{outcome="applied"}']


def test_sighup_rotates_the_certificate_without_dropping_streams(tmp_path):
    """[claim: cert-reload]"""
    certs = Certificates(tmp_path)
    with running_gateway(*certs.args, "--sim-load", "50", workers=2, metrics=True, tmp_path=tmp_path,
                         tls=certs.client_context()) as gw:
        before = served_not_after(gw.port, certs)
        assert before != "Jun  1 00:00:00 2031 GMT"
        stream = SSEStream(gw.port, WATCH, {}, tls=certs.client_context(["http/1.1"]))
        try:
            assert stream.status == 200
            ids = [e.id for e in stream.read_until(lambda e: e.id is not None and e.id > 3) if e.id is not None]
            renew(certs)
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: reloads_applied(gw) == 1, what="the reload applied")
            wait_for(lambda: len([r for r in gw.logs() if r.get("event") == "reloaded settings applied"
                                  and r.get("certificate_reloaded")]) == 2, what="both workers loading the pair")
            assert {served_not_after(gw.port, certs) for _ in range(4)} == {"Jun  1 00:00:00 2031 GMT"}
            assert scrape(gw.metrics_port)[EXPIRY] == RENEWED.timestamp()
            line = next(r for r in gw.logs() if r.get("event") == "config reloaded")
            assert line["certfile"] == certs.certfile and line["certificate_reloaded"] is True
            # the stream opened before goes on over its own TLS session, nothing missed
            more = stream.read_until(lambda e: e.id is not None and e.id > ids[-1] + 20)
            ids += [e.id for e in more if e.id is not None]
            assert ids == list(range(ids[0], ids[-1] + 1)) and not stream.ended

            # a pair that does not load: a key that is not the certificate's
            other = certs.ca.issue_cert("127.0.0.1")
            other.private_key_pem.write_to_path(certs.keyfile)
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: scrape(gw.metrics_port)['murgw_config_reloads_total{outcome="rejected"}'] == 1,
                     what="the mismatched pair rejected")
            problem = next(r for r in gw.logs() if r.get("event") == "config reload rejected; nothing changed")
            assert "KEY_VALUES_MISMATCH" in problem["problem"] and certs.keyfile in problem["problem"]
            assert served_not_after(gw.port, certs) == "Jun  1 00:00:00 2031 GMT"
            assert scrape(gw.metrics_port)[EXPIRY] == RENEWED.timestamp()
            more = stream.read_until(lambda e: e.id is not None and e.id > ids[-1] + 10)
            ids += [e.id for e in more if e.id is not None]
            assert ids == list(range(ids[0], ids[-1] + 1)) and not stream.ended
        finally:
            stream.close()


def test_a_reload_without_config_or_tls_says_it_reread_nothing(tmp_path):
    with running_gateway(workers=1, metrics=True, tmp_path=tmp_path) as gw:
        os.kill(gw.pid, signal.SIGHUP)
        wait_for(lambda: reloads_applied(gw) == 1, what="the reload")
        line = next(r for r in gw.logs() if r.get("event") == "config reloaded")
        assert line["reread"] == "nothing: no --config, no --certfile/--keyfile" and "tokens" not in line
