"""What the loopback leaves between two runs, and how a reader spreads its connections on it.

Both bound a ramp from the client's side, not the server's (measured here, loadtest/RESULTS.md
run 15, csse on its own core):

- csse's connect() searches its source address's ephemeral ports for a free one (the kernel's
  `__inet_hash_connect`, `__inet_check_established`), and the search grows with the ports in
  use: at 15,000 connections an address it was 56% of the reader's CPU (perf), 154 µs a
  connection against 53 µs at 3,750, and 60,000 openings on 6 workers took 13.3 s on 4
  addresses (the reader's core full, the server's a third idle) against 8.3 s on 16 (the
  server's core full throughout). So a run spreads its connections PORTS_PER_ADDRESS at most
  an address unless told otherwise (`source_addrs`).
- The connections a run closed stay in TIME_WAIT for 60 s, and their ports are searched too:
  nginx+nchan's 100,000 ramp took 76.4 s right after the gateway's 100,000 closed, 4.7 s on a
  rested box (run 14). So each system starts once the loopback's TIME_WAIT sockets are fewer
  than TIME_WAIT_QUIET, waiting at most TIME_WAIT_WAIT_MOST (`rest`), and its report says what
  it found.
"""

from __future__ import annotations

import time

PORTS_PER_ADDRESS = 4_000
TIME_WAIT_QUIET = 1_000
TIME_WAIT_WAIT_MOST = 90.0  # the kernel holds a closed connection's TIME_WAIT for 60 s
SOCKSTAT = "/proc/net/sockstat"


def source_addrs(connections: int, given: int | None = None) -> int:
    """The loopback source addresses for `connections`: `given`, else PORTS_PER_ADDRESS an address."""
    return given if given else max(1, -(-connections // PORTS_PER_ADDRESS))


def time_wait_sockets(sockstat: str = SOCKSTAT) -> int:
    """The machine's IPv4 TCP sockets in TIME_WAIT (its `TCP:` line's `tw`)."""
    with open(sockstat) as fh:
        for line in fh:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("tw") + 1])
    return 0


def rest(sockstat: str = SOCKSTAT, quiet: int = TIME_WAIT_QUIET, most: float = TIME_WAIT_WAIT_MOST) -> dict:
    """Wait until fewer than `quiet` sockets are in TIME_WAIT, at most `most` seconds: what the
    last run's closes left, found and waited for (a report's `time_wait`)."""
    found = left = time_wait_sockets(sockstat)
    start = time.monotonic()
    while left >= quiet and time.monotonic() - start < most:
        time.sleep(0.5)
        left = time_wait_sockets(sockstat)
    return {"found": found, "waited_s": round(time.monotonic() - start, 1), "left": left}
