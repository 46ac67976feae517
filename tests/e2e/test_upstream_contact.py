"""Upstream mode at first contact, real processes: an --upstream or --upstream-cacert that
cannot work stops the start; an https:// upstream verified against a private CA; a restarted
upstream is a new session as soon as the link reconnects; and what a client of B reads when
its upstream is out of reach or refuses B's token (never B's addresses, nor A's wording)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from gateway.sequencer.capsule.resume import RESTARTED, SKIP, Resume
from helpers.gateway_harness import ROOT, front_of, running_gateway, scrape, token_table, upstream_ready, wait_for
from helpers.http_client import Http, problem_detail, rpc, user_message
from helpers.sse_reading import SSEStream, WATCH, is_terminal_event, item, task_id_of, watching_b_after_a_burst

LINK_TOKEN = "link-5d6e7f"


def start(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "--bind", "127.0.0.1:0", "--workers", "1",
                           "--metrics-bind", "off", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def error_of(port: int, method: str, params: dict) -> tuple[int, str]:
    error = rpc(port, method, params)[2]["error"]
    return error["code"], error["message"]


@pytest.mark.parametrize("url, reason", [
    ("http://", "has no host"),
    ("http://127.0.0.1:99999", "has no usable port"),
    ("http://127.0.0.1:0", "has no usable port"),
    ("https://capsule:", "has no usable port"),
    ("http://user:secret@capsule:52222", "must not carry credentials"),
    ("http://capsule:52222/a2a", "must be only scheme://HOST[:PORT]"),
    ("http://capsule:52222?x=1", "must be only scheme://HOST[:PORT]"),
    ("http://capsule:52222/?key=secret", "must be only scheme://HOST[:PORT]"),
    ("ftp://user:secret@capsule", "must not carry credentials"),
    ("capsule:52222", "is not an http:// or https:// URL"),
])
def test_an_upstream_url_that_cannot_work_stops_the_start(url, reason):
    """[claim: upstream-url-credentials]"""
    done = start("--upstream", url)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("mur-gateway: --upstream") and reason in line, line
    assert "secret" not in line  # a credential or a query's key is never echoed


@pytest.mark.parametrize("content, reason", [
    (None, "No such file or directory"),
    ("not a certificate\n", "not a usable PEM CA certificate file"),
])
def test_an_unusable_upstream_cacert_stops_the_start(tmp_path, content, reason):
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_text(content)
    done = start("--upstream", "https://capsule:52222", "--upstream-cacert", str(path))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"mur-gateway: --upstream-cacert {path}: ") and reason in line, line


def test_an_https_upstream_with_a_private_ca(certs, tmp_path):
    with running_gateway(*certs.args, tls=certs.client_context(), tmp_path=tmp_path) as a, \
            running_gateway("--upstream", f"https://localhost:{a.port}", "--upstream-cacert", certs.cafile,
                            tmp_path=tmp_path) as b:
        with SSEStream(b.port, WATCH, {}) as watcher:
            task_id = rpc(b.port, "SendMessage", user_message("hello"))[2]["result"]["task"]["id"]
            seen = [e for e in watcher.read_until(is_terminal_event) if task_id_of(e) == task_id]
        assert item(seen[-1]).body["status"]["state"] == "TASK_STATE_COMPLETED"
        assert rpc(b.port, "GetTask", {"id": task_id})[2]["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_an_https_upstream_outside_the_trusted_cas_is_refused_and_logged(certs, tmp_path):
    """[claim: upstream-verified]"""
    with running_gateway(*certs.args, tls=certs.client_context(), tmp_path=tmp_path) as a, \
            running_gateway("--upstream", f"https://localhost:{a.port}", tmp_path=tmp_path, ready=False) as b:
        lost = wait_for(lambda: [r for r in b.logs() if r.get("event") == "upstream stream lost"],
                        what="B to log the refused certificate")
        assert "its TLS certificate is not trusted" in lost[0]["error"], lost[0]
        assert not upstream_ready(b.port)
        assert error_of(b.port, "GetTask", {"id": "tsk_none"}) == (-32603, "the upstream capsule is unreachable")


def test_security_claim_an_https_upstream_must_hold_a_certificate_for_its_host(certs, tmp_path):
    """[claim: upstream-verified] A's certificate chains to the CA B trusts but names another
    host than B's --upstream: B refuses it as it refuses an untrusted chain (the chain itself
    is test_an_https_upstream_outside_the_trusted_cas_is_refused_and_logged's)."""
    elsewhere = certs.ca.issue_cert("capsule.example")
    certfile, keyfile = tmp_path / "elsewhere.pem", tmp_path / "elsewhere.key"
    for pem in elsewhere.cert_chain_pems:
        pem.write_to_path(str(certfile), append=True)
    elsewhere.private_key_pem.write_to_path(str(keyfile))
    unnamed = certs.client_context()
    unnamed.check_hostname = False  # the test's own readiness check
    with running_gateway("--certfile", str(certfile), "--keyfile", str(keyfile), tls=unnamed, tmp_path=tmp_path) as a, \
            running_gateway("--upstream", f"https://localhost:{a.port}", "--upstream-cacert", certs.cafile,
                            tmp_path=tmp_path, ready=False) as b:
        lost = wait_for(lambda: [r for r in b.logs() if r.get("event") == "upstream stream lost"],
                        what="B to log the refused certificate")
        assert "Hostname mismatch" in lost[0]["error"], lost[0]
        assert not upstream_ready(b.port)
        assert error_of(b.port, "GetTask", {"id": "tsk_none"}) == (-32603, "the upstream capsule is unreachable")


def test_a_restarted_upstream_is_a_new_session_before_its_first_event(tmp_path):
    """A comes back with an empty replay buffer and writes nothing: B's link, resuming one id
    before its last, reads an empty replay up to A's first heartbeat, so its watcher gets
    capsule-closed while A's ring is still empty."""
    with watching_b_after_a_burst(tmp_path, 5) as (a, b, watcher, _):
        a.stop()
        with running_gateway("--bind", f"127.0.0.1:{a.port}", metrics=True, tmp_path=tmp_path) as a2:
            rest = watcher.read_until(lambda e: item(e).frame == {"frame": "capsule-closed"})
            assert [e.id for e in rest if e.id is not None] == []
            assert int(scrape(a2.metrics_port)["murgw_ring_head_id"]) == 0  # A2 wrote nothing
        assert any(r.get("why") == "the upstream replayed nothing" for r in b.logs())


def test_a_restarted_upstream_that_wrote_less_is_told_by_its_gap(tmp_path):
    """B's link is held stopped while A restarts and writes a few events: at its reconnect A2
    never issued the id B resumes after, so its replay opens with a gap at or below it, and
    that gap alone starts B's new session (before A2's replayed ids 1, 2, ...)."""
    with watching_b_after_a_burst(tmp_path, 20) as (a, b, watcher, last):
        link = next(r["pid"] for r in b.logs() if r.get("event") == "upstream stream open")
        os.kill(link, signal.SIGSTOP)
        try:
            a.stop()
            with running_gateway("--bind", f"127.0.0.1:{a.port}", metrics=True, tmp_path=tmp_path) as a2:
                task_id = rpc(a2.port, "SendMessage", user_message("hello"))[2]["result"]["task"]["id"]
                wait_for(lambda: rpc(a2.port, "GetTask", {"id": task_id})[2]["result"]["status"]["state"]
                         == "TASK_STATE_COMPLETED", what="A2's task")
                assert int(scrape(a2.metrics_port)["murgw_ring_head_id"]) < last - 1
                os.kill(link, signal.SIGCONT)
                watcher.read_until(lambda e: item(e).frame == {"frame": "capsule-closed"})
        finally:
            os.kill(link, signal.SIGCONT)
        why = [r["why"] for r in b.logs() if r.get("event", "").startswith("upstream started a new session")]
        assert why == ["the upstream never issued the id the link resumed after"], why


def test_a_link_that_breaks_on_the_same_session_is_not_a_new_session(tmp_path):
    """Killing A's only worker breaks B's link while A's session (its sequencer) lives on: B
    resumes one id before its last, skips that event as the one it holds, and its watcher
    reads on with the next ids and no capsule-closed."""
    with running_gateway(workers=1, tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        rpc(b.port, "SendMessage", user_message("/scenario burst n=5"))
        with SSEStream(b.port, WATCH, {}) as watcher:
            last = watcher.read_until(is_terminal_event)[-1].id
            os.kill(a.worker_pids()[0], signal.SIGKILL)
            wait_for(lambda: sum(r.get("event") == "upstream stream open" for r in b.logs()) >= 2,
                     timeout=30, what="B's link to reconnect")
            task_id = rpc(b.port, "SendMessage", user_message("hello"))[2]["result"]["task"]["id"]
            rest = watcher.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))
        assert all(item(e).frame != {"frame": "capsule-closed"} for e in rest)
        assert [e.id for e in rest if e.id is not None][0] == last + 1
        assert not any(r.get("event", "").startswith("upstream started a new session") for r in b.logs())


def test_an_unreachable_upstream_is_worded_for_the_client(tmp_path):
    """[claim: upstream-own-words]"""
    with running_gateway(tmp_path=tmp_path) as a:
        port = a.port
        with front_of(a, tmp_path) as b:
            a.stop()
            wait_for(lambda: not upstream_ready(b.port), what="B to lose A")
            for method, params in (("GetTask", {"id": "tsk_none"}), ("SendMessage", user_message("hello")),
                                   ("SendStreamingMessage", user_message("hello")), ("ListTasks", {})):
                assert error_of(b.port, method, params) == (-32603, "the upstream capsule is unreachable")
            status, headers, body = Http(b.port).request("GET", "/.well-known/agent-card.json")
            assert problem_detail(status, headers, body) == \
                "the upstream's agent card is not available: the upstream capsule is unreachable"
            logged = [r for r in b.logs() if r.get("event") == "upstream unreachable"]
            assert any(f"127.0.0.1:{port}" in r["error"] for r in logged), logged


def test_an_upstream_that_refuses_bs_token_is_worded_for_the_client(tmp_path):
    """[claim: upstream-own-words]"""
    config = tmp_path / "door.toml"
    config.write_text(token_table([("link", LINK_TOKEN, ["*"])]))
    with running_gateway("--config", str(config), tmp_path=tmp_path) as a, \
            running_gateway("--upstream", f"http://127.0.0.1:{a.port}", "--upstream-token", "wrong-token",
                            tmp_path=tmp_path, ready=False) as b:
        a_wording = rpc(a.port, "GetTask", {"id": "tsk_none"}, token="wrong-token")
        assert a_wording[0] == 401
        # B never becomes ready (its upstream refuses it), so its workers may serve before its
        # sequencer listens: its calls are asked once the sequencer has met the refusal
        wait_for(lambda: any(r.get("event") == "upstream stream lost" for r in b.logs()),
                 what="B's sequencer refused by A")
        for method, params in (("GetTask", {"id": "tsk_none"}), ("SendMessage", user_message("hello"))):
            assert error_of(b.port, method, params) == (-32603, "the upstream refused the gateway's credentials")
        logged = [r for r in b.logs() if r.get("event") == "upstream refused the gateway's credentials"]
        assert logged and logged[0]["status"] == 401 and a_wording[2]["detail"] in logged[0]["answer"], logged
        # the gateway's own stream refused: the upstream's words logged with the refusal
        wait_for(lambda: any("refused the gateway's credentials (HTTP 401): " in r["error"]
                             and a_wording[2]["detail"] in r["error"]
                             for r in b.logs() if r.get("event") == "upstream stream lost"),
                 what="the link's refusal logged in the upstream's words")


def test_the_resume_check_reads_the_replay_as_the_spec_writes_it():
    """resume.py's decisions, one per row of the spec's replay table as the link sees it."""
    assert Resume(0, None).after == 0 and Resume(0, None).heartbeat() is None  # a first connection
    assert Resume(10, b"e").after == 9
    assert Resume(10, b"e").gap(3) is RESTARTED  # oldest at or below 9: 9 was never issued
    assert Resume(10, b"e").gap(40) is None  # evicted: the same session, ids 11..39 lost
    assert Resume(10, b"e").event(10, b"e") is SKIP  # the overlap: our last event again
    assert Resume(10, b"e").event(10, b"other") is RESTARTED  # another session's id 10
    assert Resume(10, b"e").event(11, b"f") is None  # no overlap (the caller's id rule applies)
    assert Resume(10, b"e").heartbeat() is RESTARTED  # an empty replay
    check = Resume(10, b"e")
    assert check.event(10, b"e") is SKIP and check.heartbeat() is None and check.event(10, b"e") is None
