"""The accept balance between workers (gateway/worker/balance.py): a worker at its
--max-connections takes no new connection while a sibling whose loop turns has room (it never
accepts to answer 503 what that sibling would serve); a sibling stopped or stuck is no room to
wait for once its beat word has stood still SIBLING_SILENT_SECONDS; and an opening nobody can
serve is refused, with 503 and Retry-After, counted under requests_refused_total{reason="capacity"}."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from typing import Iterator

from gateway.common.board import Board
from helpers.gateway_harness import Gateway, running_gateway, scrape, stopped, wait_for
from helpers.raw_http import exchange, post, refusal
from helpers.sse_reading import SSEStream
from shm import Ring
from shm.segment import Handle

WATCH = "murmur.WatchSession"
CAPACITY_REFUSED = 'murgw_requests_refused_total{reason="capacity"}'
IDLE = "murgw_connections_idle"
PLACES = 3
ANSWER_TIMEOUT = 60.0  # a read that waits this long fails the test; the answer comes when the bound has passed


@contextlib.contextmanager
def shared_board(gw: Gateway) -> Iterator[Board]:
    """The gateway's board (its ring's control words), mapped from the supervisor's memfd, so a
    test can wait until a worker's beat word moved; unmapped on leaving."""
    fds = f"/proc/{gw.pid}/fd"
    for fd in os.listdir(fds):
        link = os.readlink(f"{fds}/{fd}")
        if link.startswith(f"/memfd:murgw-{gw.pid}-") and "-ring" in link:
            ring = Ring.attach(Handle(link, os.open(f"{fds}/{fd}", os.O_RDWR)))
            try:
                yield Board(ring.control)
            finally:
                ring.close()
            return
    raise AssertionError(f"no ring among the supervisor's descriptors ({fds})")


def open_streams(gw: Gateway, count: int) -> list[SSEStream]:
    return [SSEStream(gw.port, WATCH, {}) for _ in range(count)]


def refused_with_retry_after(gw: Gateway) -> None:
    answer = exchange(gw.port, post(WATCH, {}), timeout=ANSWER_TIMEOUT)  # one send: the refusal may close before more
    assert refusal(answer, 503) and answer is not None and answer.headers["retry-after"] == "1"


def test_a_full_worker_answers_what_a_stopped_sibling_cannot_take_and_leaves_openings_to_it_once_it_turns(tmp_path):
    """Worker B stopped, worker A fills its places; the next opening is answered by A, 503 with
    Retry-After and counted, once B's silence passed the bound. B resumed (its beat word moved),
    the openings go to B and none is refused while B has room."""
    with running_gateway("--max-connections", str(PLACES), workers=2, heartbeat=300, metrics=True,
                         tmp_path=tmp_path) as gw, shared_board(gw) as board:
        workers = gw.worker_pids()  # every worker serving (running_gateway waits for it)
        a, b = workers[0], workers[1]
        held: list[SSEStream] = []
        try:
            os.kill(b, signal.SIGSTOP)
            try:
                wait_for(lambda: stopped(b), what="worker B to stop")
                held += open_streams(gw, PLACES)
                assert [(s.status, s.worker_pid) for s in held] == [(200, a)] * PLACES
                refused_with_retry_after(gw)  # read until it comes: B's room, on paper, held it back until then
                assert stopped(b)  # so A answered it
                wait_for(lambda: scrape(gw.metrics_port)[CAPACITY_REFUSED] == 1, what="the refusal counted")
                silent = board.beats(1)
            finally:
                os.kill(b, signal.SIGCONT)
            # A looks at B's word only when a connection waits: the next look sees it moved.
            wait_for(lambda: board.beats(1) != silent, what="worker B's loop to turn")
            for _ in range(PLACES):
                held += open_streams(gw, 1)
                assert (held[-1].status, held[-1].worker_pid) == (200, b)
            assert scrape(gw.metrics_port)[CAPACITY_REFUSED] == 1  # none refused while B had room
        finally:
            for stream in held:
                stream.close()


def test_with_one_worker_full_openings_go_to_another_and_none_is_refused_while_any_has_room(tmp_path):
    """Both workers live: twice the places are served, each worker its own places exactly (a
    full one leaves the rest to its sibling, whoever filled first), none refused; every worker
    full, the next opening is answered 503 with Retry-After and counted."""
    with running_gateway("--max-connections", str(PLACES), workers=2, heartbeat=300, metrics=True,
                         tmp_path=tmp_path) as gw:
        workers = gw.worker_pids()
        held: list[SSEStream] = []
        try:
            held += open_streams(gw, 2 * PLACES)
            assert all(s.status == 200 for s in held)
            assert sorted(s.worker_pid for s in held) == sorted([*workers.values()] * PLACES)
            assert scrape(gw.metrics_port)[CAPACITY_REFUSED] == 0
            refused_with_retry_after(gw)
            wait_for(lambda: scrape(gw.metrics_port)[CAPACITY_REFUSED] == 1, what="the refusal counted")
        finally:
            for stream in held:
                stream.close()


def test_a_tls_connection_takes_its_place_from_its_accept_where_siblings_see_it(tmp_path, certs):
    """A connection still before its TLS handshake (it has sent nothing) counts in its worker's
    murgw_connections_idle, the shared count the siblings' balance reads as places taken (a
    worker whose room is all in handshakes has none to wait for); one past its handshake, the
    front's now, counts once; closed, both are gone from it."""
    with running_gateway(*certs.args, "--header-timeout", "120", workers=1, metrics=True,
                         tls=certs.client_context(), tmp_path=tmp_path) as gw:
        def idle() -> float:
            return scrape(gw.metrics_port)[IDLE]

        assert idle() == 0
        with socket.create_connection(("127.0.0.1", gw.port)):
            wait_for(lambda: idle() == 1, what="the connection before its handshake counted")
            with certs.client_context().wrap_socket(socket.create_connection(("127.0.0.1", gw.port)),
                                                    server_hostname="127.0.0.1"):
                wait_for(lambda: idle() == 2, what="the connection past its handshake counted once")
        wait_for(lambda: idle() == 0, what="the closed connections gone from the count")
