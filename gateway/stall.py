"""A stuck worker is replaced: a heartbeat word per worker that its event loop bumps.

Each worker bumps its beat word (``board.LOOP_BEAT + index``, gateway/board.py) every
PULSE_SECONDS from a timer on its event loop (`start_pulse`), and its hub bumps the same word
as it makes progress (a pass's streams written, a catch-up run, an opening served:
gateway/worker/hub.py): the word moves while the loop turns or the worker writes, so a worker
that is busy, even inside one long callback, is not taken for a stuck one while it gets the
CPU. A worker starved of it (more workers than cores, at 100,000 watchers) moves the word no
more than a stuck one, and may be replaced: docs/sizing.md says to raise the timeout there.
A loop blocked in a system call, or spinning in code that writes nothing, moves it neither way. The
supervisor (`StallWatch`) remembers when each word last moved; a worker whose word has stood
still for ``--worker-stall-timeout`` seconds is treated like a crashed one:
killed with SIGKILL (a blocked or spinning loop would never run a SIGTERM handler) and
replaced, and its watchers reconnect with ``Last-Event-ID`` into the replay. The supervisor
compares only the worker's own counter with its own clock, so no clocks are shared.

A worker stopped by a signal (state ``T``, or ``t`` under a tracer) is not stuck: someone
chose to stop it, and SIGCONT resumes it where it was. It is left alone, and its clock
starts again when it runs. A worker that has not beaten once since it was started is given
STARTUP_SECONDS (imports, attaching) before the same rule applies.

Test-only hook: with MURGW_TEST_HANG_ON_SIGUSR1 set to ``syscall`` or ``spin`` in a
worker's environment, SIGUSR1 makes its event loop block forever in ``read(2)`` on a pipe
nobody writes, or in an endless Python loop. Only the tests set it; without it SIGUSR1 keeps
its default action.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Callable

from gateway import procstat
from gateway.board import Board

PULSE_SECONDS = 0.25
STARTUP_SECONDS = 30.0
STOPPED_STATES = ("T", "t")
TEST_HANG_ENV = "MURGW_TEST_HANG_ON_SIGUSR1"


def start_pulse(board: Board, index: int, late: Callable[[float], None] = lambda seconds: None) -> Pulse:
    """Bump worker `index`'s beat word now and every PULSE_SECONDS, until ``cancel``; `late`
    is told, at each beat, how many seconds past its due time it ran (the loop's stall)."""
    pulse = Pulse(board, index, late)
    pulse.beat()
    _install_test_hang(asyncio.get_running_loop())
    return pulse


class Pulse:
    """The worker's side: one timer on its event loop, one u64 it alone writes."""

    def __init__(self, board: Board, index: int, late: Callable[[float], None]):
        self.board, self.index, self.late = board, index, late
        self.timer: asyncio.TimerHandle | None = None

    def beat(self) -> None:
        self.board.beat(self.index)
        loop = asyncio.get_running_loop()
        if self.timer is not None:
            self.late(max(0.0, loop.time() - self.timer.when()))
        self.timer = loop.call_later(PULSE_SECONDS, self.beat)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


class StallWatch:
    """The supervisor's view of every worker's beat word."""

    def __init__(self, board: Board, timeout: float):
        self.board, self.timeout = board, timeout
        self._last: dict[int, tuple[int, float, bool]] = {}  # index -> (word, since, has beaten)

    def started(self, index: int, now: float) -> None:
        """A new process serves slot `index`: the word's value now is its baseline."""
        self._last[index] = (self.board.beats(index), now, False)

    def stuck(self, index: int, pid: int, now: float) -> bool:
        """True when slot `index`'s loop has not turned for the timeout (0: never)."""
        word = self.board.beats(index)
        value, since, beaten = self._last.get(index, (word, now, False))
        if word != value:
            self._last[index] = (word, now, True)
            return False
        if self.timeout <= 0:
            return False
        if procstat.state(pid) in STOPPED_STATES:
            self._last[index] = (value, now, beaten)  # paused on purpose: its clock restarts
            return False
        return now - since > (self.timeout if beaten else max(self.timeout, STARTUP_SECONDS))


def _install_test_hang(loop: asyncio.AbstractEventLoop) -> None:
    how = os.environ.get(TEST_HANG_ENV)
    if how in ("syscall", "spin"):
        loop.add_signal_handler(signal.SIGUSR1, _hang, how)


def _hang(how: str) -> None:
    if how == "syscall":
        read_end, _write_end = os.pipe()
        os.read(read_end, 1)  # nobody ever writes: blocked in read(2) for good
    while True:
        pass
