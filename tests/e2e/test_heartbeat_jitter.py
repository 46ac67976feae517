"""The heartbeat jitter metric is the worker loop's lateness alone (MurmurGatewayHeartbeatJitterHigh,
docs/runbook.md): a heartbeat that waits because its client does not read is counted in
`murgw_heartbeats_blocked_total`, never as jitter.

Before, a stream whose client had stopped reading kept its due heartbeat until its socket
drained, and the jitter observed then was the time since it came due: with 15 s heartbeats,
clients that stopped reading for 20 s were counted up to 15 s late while the loop never
stood still."""

from __future__ import annotations

import time

from helpers.gateway_harness import running_gateway, scrape, wait_for
from helpers.sse_reading import watch

INTERVAL = 3.0  # over the 1 s the alert watches, so a heartbeat held by its client reads as more
UNREAD_PAST_DUE = 1.5  # how long the watchers stay unread after a heartbeat found them blocked
STOPPED = 3


def test_a_heartbeat_held_by_a_client_that_does_not_read_is_not_loop_jitter(tmp_path):
    with running_gateway("--sim-load", "100", "--sim-load-size", "1024", workers=1, heartbeat=INTERVAL,
                         metrics=True, tmp_path=tmp_path) as gw:
        stopped = [watch(gw.port, last_event_id=str(2**40), rcvbuf=4096) for _ in range(STOPPED)]
        try:
            # The three open together, so their heartbeats come due together: once each was found
            # blocked, they stay unread well past that due time and before the next (the scenario,
            # not a wait for something to happen), then read again.
            wait_for(lambda: scrape(gw.metrics_port)["murgw_heartbeats_blocked_total"] >= STOPPED,
                     timeout=60, what="a heartbeat due while each watcher does not read")
            found = time.monotonic()
            wait_for(lambda: time.monotonic() - found > UNREAD_PAST_DUE, what="the watchers unread past it")
            for watcher in stopped:
                next(e for e in watcher.events(heartbeats=True) if e.data is None)  # the held heartbeat
        finally:
            for watcher in stopped:
                watcher.close()
        samples = scrape(gw.metrics_port)
    assert samples["murgw_heartbeat_jitter_seconds_count"] > 0 and samples["murgw_heartbeats_blocked_total"] >= STOPPED
    # No heartbeat counted more than 1 s late, unless the loop itself was late (its stall pulse
    # saw half a second or more: a box that starves the worker), which is what the metric means.
    late = samples["murgw_heartbeat_jitter_seconds_count"] - samples['murgw_heartbeat_jitter_seconds_bucket{le="1.0"}']
    stalled = samples["murgw_loop_stall_seconds_count"] - samples['murgw_loop_stall_seconds_bucket{le="0.5"}']
    assert late == 0 or stalled > 0, samples
