"""The accept balance between workers (gateway/worker/balance.py): a worker at its
--max-connections takes no new connection while a sibling has room (it never accepts to answer
503), and only when every worker is full is an opening refused, with 503 and Retry-After,
counted under requests_refused_total{reason="capacity"}."""

from __future__ import annotations

import os
import signal

from helpers.gateway_harness import running_gateway, scrape, serving_pid, stopped, wait_for
from helpers.http_client import Http, headers_for, rpc_body
from helpers.raw_http import exchange, post, refusal
from helpers.sse_reading import SSEStream

WATCH = "murmur.WatchSession"
CAPACITY_REFUSED = 'murgw_requests_refused_total{reason="capacity"}'
PULSES = "murgw_loop_stall_seconds_count"  # every worker's stall pulses: its loop's turns
PLACES = 3


def test_a_full_worker_leaves_openings_to_a_sibling_with_room(tmp_path):
    """Worker B stopped, worker A fills its places; the next opening waits in the accept queue
    through A's loop turning (A is full, B has room), is taken by B once it runs, and none is
    refused until both are full."""
    with running_gateway("--max-connections", str(PLACES), workers=2, heartbeat=300, metrics=True,
                         tmp_path=tmp_path) as gw:
        workers = gw.worker_pids()
        a, b = workers[0], workers[1]
        held: list[SSEStream] = []
        pending = None
        try:
            os.kill(b, signal.SIGSTOP)
            try:
                wait_for(lambda: stopped(b), what="worker B to stop")
                held += [SSEStream(gw.port, WATCH, {}) for _ in range(PLACES)]
                assert [(s.status, s.worker_pid) for s in held] == [(200, a)] * PLACES
                pending = Http(gw.port)
                pending.send_request("POST", "/", headers_for(), rpc_body(WATCH, {}))
                # Two of A's stall pulses (B's are stopped) after the connection was queued: A's
                # loop has turned past its readable listener, and left the connection there.
                pulses = scrape(gw.metrics_port)[PULSES]
                wait_for(lambda: scrape(gw.metrics_port)[PULSES] >= pulses + 2, what="worker A's loop to turn")
                assert serving_pid(pending.sock) is None  # still in the accept queue: A did not take it
                assert scrape(gw.metrics_port)[CAPACITY_REFUSED] == 0
            finally:
                os.kill(b, signal.SIGCONT)
            assert pending.read_head() == 200 and serving_pid(pending.sock) == b
            held += [SSEStream(gw.port, WATCH, {}) for _ in range(PLACES - 1)]
            assert all(s.status == 200 for s in held) and [s.worker_pid for s in held].count(b) == PLACES - 1
            assert scrape(gw.metrics_port)[CAPACITY_REFUSED] == 0  # none refused while a worker had room
            # every worker full: the opening is answered, refused with Retry-After, and counted
            refused = exchange(gw.port, post(WATCH, {}))  # one send: the refusal may close before more
            assert refusal(refused, 503) and refused is not None and refused.headers["retry-after"] == "1"
            wait_for(lambda: scrape(gw.metrics_port)[CAPACITY_REFUSED] == 1, what="the refusal counted")
        finally:
            if pending is not None:
                pending.close()
            for stream in held:
                stream.close()
