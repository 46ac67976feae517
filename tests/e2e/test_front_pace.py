"""Openings that wait for the pace (gateway/worker/pace.py) on the front's at-once path
(door/admission.py `Admission.at_once`, `PacedOpening`): each holds its worker place while it
waits, one whose client leaves meanwhile is not opened (on the awaited path neither), and the
worker's stop answers every one still waiting (http/runs.py `end_apps`).

The openings are held in the pace without the scheduler's help: their requests are sent on
connections the worker accepted, while it is stopped (SIGSTOP), so it reads them all in one
turn of its loop when it goes on; past the first OPENINGS_PER_TURN they wait in the pace. The
test hook of gateway/common/stall.py, its SIGUSR1 sent while the worker is stopped, runs after
those reads: its loop hangs for good (`syscall`), or runs a few long callbacks between the
pace's turns (`busy`), during which the worker is stopped again to look.
"""

from __future__ import annotations

import os
import signal
import socket
import struct

import pytest

from gateway.common.stall import TEST_HANG_ENV
from gateway.protocol.activation import WATCH_SESSION
from gateway.tuning import OPENINGS_PER_TURN
from helpers.gateway_harness import gone, running_gateway, scrape, stopped, wait_for
from helpers.http_client import rpc_body
from helpers.raw_http import RAW_READ_TIMEOUT, head, read_to_close

HELD = 4 * OPENINGS_PER_TURN  # openings read together: all but a turn's wait
# the awaited path's opening: its method's name written with a JSON escape (dispatch.py's `at_once`)
AWAITED_BODY = b'{"jsonrpc":"2.0","id":1,"method":"%s\\u%04x"}' % (WATCH_SESSION[:-1].encode(), ord(WATCH_SESSION[-1]))


def opening(body: bytes = rpc_body(WATCH_SESSION)) -> bytes:
    """A whole `POST /` opening a WatchSession at a public door (head and body: one write)."""
    return head("POST", "/", [("Content-Type", "application/json"), ("A2A-Version", "1.0")], body)


def places(gw) -> tuple[float, float, float]:
    """The worker's places taken by requests (open streams included), its connections waiting
    for a head, and its open streams (the exporter reads them from the shared blocks, so a
    stopped worker's are read too)."""
    samples = scrape(gw.metrics_port)
    streams = sum(v for k, v in samples.items() if k.startswith("murgw_connections_open{"))
    return samples['murgw_worker_requests_open{process="worker-0"}'], samples["murgw_connections_idle"], streams


def accepted(gw, n: int) -> list[socket.socket]:
    """`n` connections the worker has accepted, each waiting for its head."""
    socks = [socket.create_connection(("127.0.0.1", gw.port), timeout=RAW_READ_TIMEOUT) for _ in range(n)]
    wait_for(lambda: places(gw)[1] == n, what="every connection accepted")
    return socks


def read_together(worker: int, socks: list[socket.socket], requests: list[bytes], *signals: int) -> None:
    """Each request sent while the worker is stopped, then `signals` (pending until it goes on:
    its loop reads the requests first, in one turn, then hears them)."""
    os.kill(worker, signal.SIGSTOP)
    try:
        wait_for(lambda: stopped(worker), what="the worker to stop")
        for sock, request in zip(socks, requests):
            sock.sendall(request)
        for sig in signals:
            os.kill(worker, sig)
    finally:
        os.kill(worker, signal.SIGCONT)


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def test_openings_waiting_for_the_pace_hold_their_worker_places(tmp_path):
    """`HELD` openings read in one turn: a turn's pass the pace at once, the rest wait, and the
    worker's loop hangs a turn or two later (never replaced: --worker-stall-timeout 0). Every
    one holds its place meanwhile: places taken are `HELD`, more than the streams open, and no
    connection is counted as waiting for a head (so the accept balance and --max-connections
    see each)."""
    with running_gateway("--worker-stall-timeout", "0", workers=1, metrics=True, tmp_path=tmp_path,
                         env={TEST_HANG_ENV: "syscall"}) as gw:
        worker = gw.worker_pids()[0]
        socks = accepted(gw, HELD)
        try:
            read_together(worker, socks, [opening()] * HELD, signal.SIGUSR1)
            wait_for(lambda: places(gw)[0] == HELD, what="every opening holding its place")
            taken, idle, streams = places(gw)
            assert idle == 0 and streams < taken, (taken, idle, streams)  # the rest wait in the pace, its loop hung
        finally:
            os.kill(worker, signal.SIGKILL)  # hung for good: the supervisor replaces it
            close_all(socks)


def test_a_client_that_leaves_while_its_opening_waits_is_not_opened_on_either_path(tmp_path):
    """Two openings at the end of `2 * HELD` read together, one on the at-once path, one on
    the awaited path, wait in the pace while the worker's loop runs long callbacks between
    its turns; the worker is stopped there (they are still unanswered, a turn's openings away
    from theirs), their clients reset, and it goes on. Neither is opened (no stream ends
    `client_left`): each writes one `request` line with no status, the same on both paths, and
    their places are back (every other opening's stream open, holding one)."""
    total = 2 * HELD
    with running_gateway(workers=1, metrics=True, tmp_path=tmp_path, env={TEST_HANG_ENV: "busy"}) as gw:
        worker = gw.worker_pids()[0]
        socks = accepted(gw, total)
        leaving = socks[-2:]
        try:
            read_together(worker, socks, [opening()] * (total - 1) + [opening(AWAITED_BODY)], signal.SIGUSR1)

            def held_after_reading_them_all() -> bool:
                os.kill(worker, signal.SIGSTOP)
                wait_for(lambda: stopped(worker), what="the worker to stop")
                if places(gw)[0] == total:
                    return True
                os.kill(worker, signal.SIGCONT)
                return False

            try:
                wait_for(held_after_reading_them_all, what="the worker stopped with every opening read")
                streams = places(gw)[2]
                assert streams + OPENINGS_PER_TURN < total - len(leaving), streams  # theirs is turns away
                for sock in leaving:
                    sock.setblocking(False)
                    with pytest.raises(BlockingIOError):
                        sock.recv(1, socket.MSG_PEEK)  # not answered yet
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.close()  # a reset
            finally:
                os.kill(worker, signal.SIGCONT)
            left = total - len(leaving)
            wait_for(lambda: places(gw)[0] == left and places(gw)[2] == left,
                     what="every other opening's stream open, the leaving ones' places back")
            lines = wait_for(lambda: (found := access_lines(gw)) and events(found).count("request") == 2
                             and events(found).count("stream open") == left and found, what="every line")
        finally:
            close_all(socks)  # the others' streams end now: the lines above were read before
    requests = [line for line in lines if line["event"] == "request"]
    assert requests[0] == requests[1], requests
    assert requests[0]["status"] is None and requests[0]["method"] == WATCH_SESSION, requests[0]
    assert "stream end" not in events(lines)  # neither was opened (then ended client_left)


def access_lines(gw) -> list[dict]:
    """The access log's lines for `POST /` (not the start's readiness probe), without their times."""
    return [{k: v for k, v in line.items() if k not in ("ts", "duration_s")}
            for line in gw.logs() if line.get("event") in ("request", "stream open", "stream end")
            and line.get("path") == "/"]


def events(lines: list[dict]) -> list[str]:
    return [line["event"] for line in lines]


def test_the_stop_answers_every_opening_still_waiting_for_the_pace(tmp_path):
    """`3 * HELD` openings read in one turn, with the worker's SIGTERM and the hook's SIGUSR1
    heard right after: its loop runs long callbacks between the pace's turns, so its stop
    (50 ms after SIGTERM) comes while most still wait. The stop waits for them within its
    grace: each is opened into the closing hub, which ends it at once (or, past the grace,
    the front answers 500 as to an awaited opening cancelled then). Every connection gets a
    whole answer, none a bare close, and every one its access line."""
    total = 3 * HELD
    with running_gateway(workers=1, tmp_path=tmp_path, metrics=True, env={TEST_HANG_ENV: "busy"}) as gw:
        worker = gw.worker_pids()[0]
        socks = accepted(gw, total)
        try:
            read_together(worker, socks, [opening()] * total, signal.SIGUSR1, signal.SIGTERM)
            answers = [read_to_close(sock) for sock in socks]
        finally:
            close_all(socks)
        wait_for(lambda: gone(worker), what="the worker to exit")
        lines = [line for line in gw.logs() if line.get("pid") == worker and line.get("path") == "/"
                 and line.get("event") in ("request", "stream end")]
    whole = [a for a in answers if a.startswith(b"HTTP/1.1 200 ") and a.endswith(b"\r\n0\r\n\r\n")
             or a.startswith(b"HTTP/1.1 500 ")]
    assert len(whole) == total, [a[:40] for a in answers if a not in whole][:5]
    assert len(lines) == total
    assert all(line["event"] == "stream end" and line["reason"] == "drain" or line["status"] is None
               for line in lines), lines
