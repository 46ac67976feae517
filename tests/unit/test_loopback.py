"""loadtest/loopback.py: a reader's source addresses, and the wait for the last run's TIME_WAIT."""

from __future__ import annotations

import threading

from loadtest import loopback

SOCKSTAT = """sockets: used 130
TCP: inuse 5 orphan 0 tw {tw} alloc 7 mem 1
UDP: inuse 0 mem 0
"""


def test_source_addresses_hold_at_most_their_share_of_ports():
    assert [loopback.source_addrs(n) for n in (1, 4_000, 4_001, 60_000, 100_000)] == [1, 1, 2, 15, 25]
    assert loopback.source_addrs(100_000, 8) == 8  # one given wins


def test_time_wait_read_from_the_tcp_line(tmp_path):
    sockstat = tmp_path / "sockstat"
    sockstat.write_text(SOCKSTAT.format(tw=60_020))
    assert loopback.time_wait_sockets(str(sockstat)) == 60_020
    assert loopback.time_wait_sockets("/proc/net/sockstat") >= 0  # this machine's own


def test_rest_returns_at_once_on_a_quiet_loopback(tmp_path):
    sockstat = tmp_path / "sockstat"
    sockstat.write_text(SOCKSTAT.format(tw=12))
    assert loopback.rest(str(sockstat)) == {"found": 12, "waited_s": 0.0, "left": 12}


def test_rest_waits_until_the_time_wait_sockets_have_gone(tmp_path):
    """It returns only once the count fell below the quiet mark, and says what it found."""
    sockstat = tmp_path / "sockstat"
    sockstat.write_text(SOCKSTAT.format(tw=5_000))
    seen: list[dict] = []
    waiting = threading.Thread(target=lambda: seen.append(loopback.rest(str(sockstat), quiet=1_000, most=60)))
    waiting.start()
    waiting.join(timeout=1.2)
    assert waiting.is_alive()  # two reads of 5,000 at least: still waiting
    sockstat.write_text(SOCKSTAT.format(tw=3))
    waiting.join(timeout=30)
    assert not waiting.is_alive()
    assert seen[0]["found"] == 5_000 and seen[0]["left"] == 3 and seen[0]["waited_s"] >= 1.0


def test_rest_gives_up_at_its_bound(tmp_path):
    sockstat = tmp_path / "sockstat"
    sockstat.write_text(SOCKSTAT.format(tw=5_000))
    found = loopback.rest(str(sockstat), quiet=1_000, most=0.6)
    assert found["found"] == found["left"] == 5_000 and found["waited_s"] >= 0.6
