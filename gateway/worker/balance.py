"""Which worker accepts a new connection: the accept balance between a gateway's workers.

Every worker waits on the one shared accept queue and every one idle in epoll is woken for a
new connection, so without a policy the first to run takes it: on an idle gateway one worker
took every stream (measured: 30 of 30), and under a gathering a worker at its
--max-connections accepted and answered 503 while its siblings had room (loadtest/RESULTS.md:
281 of 100,000 watchers refused so). Before each readable event the worker's accept loop
(gateway/worker/http/accept.py) asks `Balance.burst` how many connections to take, from
every worker's places in the shared metric blocks (metrics.Counters.places_by_worker):

- full (its places all taken, counting connections accepted and not yet made) while a
  sibling has room: none, for as long as that holds; it never accepts to refuse;
- holding more than BALANCE_SLACK streams beyond its least-loaded serving sibling (a worker
  down or not yet started has a cleared block, and is no sibling to wait for): none, once
  (DEFER_SECONDS), so a sibling woken by the same event takes it; still queued then, it takes it;
- otherwise up to its room (ACCEPT_BURST at most); when no sibling has room (every worker
  full, or it serves alone), a whole burst: beyond its limit each is answered 503 with
  Retry-After at the door (requests_refused_total{reason="capacity"}), not left in the queue.
"""

from __future__ import annotations

from gateway.common.metrics import Counters
from gateway.tuning import ACCEPT_BURST, BALANCE_SLACK


class Balance:
    """One worker's side of the balance (its index among the workers' blocks)."""

    __slots__ = ("counters", "index")

    def __init__(self, counters: Counters, index: int):
        self.counters, self.index = counters, index

    def burst(self, deferred: bool, connecting: int) -> int:
        """How many connections to accept now (0: step back); `deferred`: it stepped back from
        the last readable event; `connecting`: accepted, not yet made (a TLS handshake)."""
        places = self.counters.places_by_worker()
        streams, taken, limit = places[self.index]
        others = places[:self.index] + places[self.index + 1:]
        if not any(o_taken < o_limit for _, o_taken, o_limit in others):
            return ACCEPT_BURST
        room = limit - taken - connecting
        if room <= 0:
            return 0
        serving = [o_streams for o_streams, _, o_limit in others if o_limit]  # a cleared block: not serving
        if not deferred and serving and streams > min(serving) + BALANCE_SLACK:
            return 0
        return min(ACCEPT_BURST, room)
