"""systemd's readiness protocol (sd_notify), a few lines over the ``NOTIFY_SOCKET`` datagram.

A unit of ``Type=notify`` (deploy/systemd/mur-gateway.service) counts the gateway started when
it says ``READY=1``, which the supervisor sends once ``/readyz`` would answer 200: the
sequencer serves, the upstream is connected where one is configured (the embedded capsule
is at once), and every worker's loop has turned (its first stall pulse, gateway/common/stall.py,
comes as it starts serving the shared listener). Around a SIGHUP reload it says
``RELOADING=1`` (with ``MONOTONIC_USEC``, which systemd's reload handling asks for) and
``READY=1`` again, and ``STOPPING=1`` as it drains.

Without ``NOTIFY_SOCKET`` (not started by systemd) every call does nothing. A name starting
with ``@`` is an abstract socket (a leading NUL byte). A failed send is ignored: readiness
is a courtesy to the service manager and never stops the gateway.
"""

from __future__ import annotations

import os
import socket
import time

from gateway.common.board import Board

ENVIRONMENT = "NOTIFY_SOCKET"


def socket_address(name: str) -> str:
    """The AF_UNIX address `name` (the variable's value) means: '@x' is the abstract '\\0x'."""
    return "\0" + name[1:] if name.startswith("@") else name


def send(*fields: str) -> bool:
    """One datagram of `fields` ("KEY=value"), newline-separated; whether it was sent."""
    name = os.environ.get(ENVIRONMENT)
    if not name:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto("\n".join(fields).encode(), socket_address(name))
    except OSError:
        return False
    return True


def serving(board: Board, workers: int) -> bool:
    """What ``/readyz`` answers 200 on (worker/app.py), seen from the supervisor: the sequencer
    serves, the upstream link is up, the session is open, and every worker has turned."""
    return bool(board.sequencer_pid and board.upstream_connected and not board.session_closed
                and all(board.beats(index) for index in range(workers)))


class Notifier:
    """The supervisor's side: READY=1 once, RELOADING=1/READY=1 around a reload, STOPPING=1."""

    def __init__(self) -> None:
        self.ready = False

    def check_ready(self, board: Board, workers: int) -> None:
        """READY=1 the first time the gateway is `serving`; nothing after."""
        if not self.ready and serving(board, workers):
            self.ready = True
            send("READY=1", f"STATUS=serving, {workers} workers")

    def reloading(self) -> None:
        """Before a SIGHUP's re-read; systemd wants the monotonic clock in microseconds."""
        send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def reloaded(self) -> None:
        """After it, applied or rejected (the log line says which): ready again, if it was."""
        if self.ready:
            send("READY=1")

    def stopping(self) -> None:
        send("STOPPING=1")
