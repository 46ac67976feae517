"""An HTTP/1.1 watcher that stopped reading, so its worker's send waits on a full socket, and
then leaves: by its FIN or a reset, the stream ends and frees its place at once, on the
front's own sink (every HTTP/1.1 stream's), with the adapter's table holding or not. The
HTTP/2 forms of the same claim are tests/e2e/test_hostile_h2.py's."""

from __future__ import annotations

import socket
import struct

import pytest

from gateway.worker.hypercorn.patches import TEST_SWITCH as INTERNALS_MOVED
from helpers.gateway_harness import running_gateway, scrape, wait_for
from helpers.sse_reading import SSEStream, WATCH

FRAME = 16384
# the gateway's environment: the adapter's table holding, and not (no HTTP/2 offered)
SINKS = {"front": {}, "front, internals moved": {INTERNALS_MOVED: "1"}}


def leave(sock: socket.socket, how: str) -> None:
    if how == "fin":
        sock.shutdown(socket.SHUT_WR)
    else:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


@pytest.mark.parametrize("how", ["fin", "rst"])
@pytest.mark.parametrize("sink", sorted(SINKS))
def test_security_claim_a_watcher_that_stopped_reading_ends_when_it_leaves(tmp_path, sink, how):
    """[claim: client-leaves] The watcher's socket takes 4 KiB; it reads past its replay (a
    replay the ring laps may be ended under the worker's lapped-replay budget: SECURITY.md),
    then stops; a witness on the same worker reads 1,000 events of 16 KiB (past every
    buffer between the worker and the stalled watcher: tcp_wmem's 4 MiB at most, the
    transport's), so the stalled stream's send waits; then it leaves, and its place is freed
    and its end logged."""
    with running_gateway("--sim-load", "2000", "--sim-load-size", str(FRAME), workers=1, metrics=True,
                         env=SINKS[sink], tmp_path=tmp_path) as gw:
        opened = lambda: scrape(gw.metrics_port).get(f'murgw_connections_open{{endpoint="{WATCH}"}}', 0)
        stalled = SSEStream(gw.port, WATCH, {}, rcvbuf=4096)
        try:
            assert stalled.status == 200
            head = scrape(gw.metrics_port)["murgw_ring_head_id"]  # its replay's end at least
            stalled.read_until(lambda e: e.id is not None and e.id >= head, within=60)
            with SSEStream(gw.port, WATCH, {}) as witness:
                start = witness.read_until(lambda e: e.id is not None)[-1].id
                witness.read_until(lambda e: e.id is not None and e.id >= start + 1000)
            wait_for(lambda: opened() == 1, what="the witness's place freed; the stalled stream's held")
            leave(stalled.http.sock, how)
            wait_for(lambda: opened() == 0, what=f"the stalled stream's place freed after its {how}")
        finally:
            stalled.close()
        wait_for(lambda: any(r.get("event") == "stream end" and r.get("reason") == "client_left"
                             for r in gw.logs()), what="its end logged")
