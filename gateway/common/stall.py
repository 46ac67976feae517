"""A stuck worker is replaced: a heartbeat word per worker that its event loop bumps.

Each worker bumps its beat word (``board.LOOP_BEAT + index``, gateway/common/board.py) every
PULSE_SECONDS from a timer on its event loop (`start_pulse`), and its hub bumps the same word
as it makes progress (a pass's streams written, a catch-up run, an opening served:
gateway/worker/delivery/hub.py): the word moves while the loop turns or the worker writes. The
supervisor (`StallWatch`) remembers when each word last moved, and how long the worker's main
thread had then waited for a CPU (runnable, on the run queue: /proc/PID/schedstat). While the
word stands still, the time it counts toward ``--worker-stall-timeout`` is the wall time minus
the worker's run-queue wait since (`stood_still_for`): the time the worker ran, or slept, with
its loop not turning. So:

- a loop spinning in code that beats nothing (running) and a loop blocked in a system call
  (sleeping) count every second they hold the CPU or the call, and are replaced as before;
  beside N other busy processes on its core a spinning loop counts about its 1/(N+1) share of
  the wall clock, so it is replaced that much later;
- a worker that is busy but starved of the CPU (more workers than cores, at 100,000 watchers;
  a storm's openings and replays in every worker on one core) counts only the time it ran, and
  is replaced only when its loop stood still for the timeout of its own running.

The kernel adds a wait to the file when the wait ends (the worker is put on the CPU), so a wait
in progress counts as standing still until then: one time slice of its run queue, milliseconds.
A kernel without the accounting (no /proc/PID/schedstat, or zeros there) leaves wall time: the
supervisor says so once in its log, and a starved worker may then be taken for a stuck one.

A stuck worker is treated like a crashed one: killed with SIGKILL (a blocked or spinning loop
would never run a SIGTERM handler) and replaced, and its watchers reconnect with
``Last-Event-ID`` into the replay. The supervisor compares only the worker's own counter and
the kernel's account of it with its own clock, so no clocks are shared.

A worker stopped by a signal (state ``T``, or ``t`` under a tracer) is not stuck: someone
chose to stop it, and SIGCONT resumes it where it was. It is left alone, and its clock
starts again when it runs. A worker that has not beaten once since it was started is given
STALL_STARTUP_SECONDS (imports, attaching) before the same rule applies.

The workers read each other's words too, for the accept balance (gateway/worker/balance.py):
a sibling whose word stands still, stopped or stuck, is no room for a full worker to wait for.

Test-only hook: with MURGW_TEST_HANG_ON_SIGUSR1 set to ``syscall`` or ``spin`` in a
worker's environment, SIGUSR1 makes its event loop block forever in ``read(2)`` on a pipe
nobody writes, or in an endless Python loop; set to ``busy``, SIGUSR1 makes it run
BUSY_TURNS callbacks one after another, each BUSY_CPU_SECONDS of its own CPU time long and
beating nothing, the loop turning (and pulsing) between them: a busy worker, which the tests
starve of the CPU. Only the tests set it; without it SIGUSR1 keeps its default action.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Callable

from gateway.common import procstat
from gateway.common.board import Board
from gateway.tuning import PULSE_SECONDS, STALL_STARTUP_SECONDS

STOPPED_STATES = ("T", "t")
TEST_HANG_ENV = "MURGW_TEST_HANG_ON_SIGUSR1"
BUSY_TURNS = 3  # the test hook's busy worker (above), not a tunable
BUSY_CPU_SECONDS = 0.3


def start_pulse(board: Board, index: int, late: Callable[[float], None] = lambda seconds: None) -> Pulse:
    """Bump worker `index`'s beat word now and every PULSE_SECONDS, until ``cancel``; `late`
    is told, at each beat, how many seconds past its due time it ran (the loop's stall)."""
    pulse = Pulse(board, index, late)
    pulse.beat()
    _install_test_hang(pulse.loop)
    return pulse


class Pulse:
    """The worker's side: one timer on its event loop, one u64 it alone writes."""

    def __init__(self, board: Board, index: int, late: Callable[[float], None]):
        self.board, self.index, self.late = board, index, late
        self.timer: asyncio.TimerHandle | None = None
        self.loop = asyncio.get_running_loop()  # once: on Python 3.11 each call is a getpid system call

    def beat(self) -> None:
        self.board.beat(self.index)
        loop = self.loop
        if self.timer is not None:
            self.late(max(0.0, loop.time() - self.timer.when()))
        self.timer = loop.call_later(PULSE_SECONDS, self.beat)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


def stood_still_for(wall_seconds: float, waited_ns: int) -> float:
    """What a beat word's `wall_seconds` standing still count toward the timeout: all of them
    but the `waited_ns` the worker spent runnable and waiting for a CPU meanwhile (never < 0)."""
    return max(0.0, wall_seconds - waited_ns / 1e9)


class StallWatch:
    """The supervisor's view of every worker's beat word and of its waits for a CPU.

    `waited`: a pid's run-queue wait so far in ns, or None (procstat.run_queue_wait_ns); where
    the kernel does not account it (`counts_waits` false), wall time alone is counted."""

    def __init__(self, board: Board, timeout: float, waited: Callable[[int], int | None] | None = None):
        self.board, self.timeout = board, timeout
        self.counts_waits = waited is not None or procstat.counts_run_queue_wait()
        self.waited = waited or (procstat.run_queue_wait_ns if self.counts_waits else lambda pid: None)
        # index -> (word, since, run-queue wait at since or None, has beaten)
        self._last: dict[int, tuple[int, float, int | None, bool]] = {}
        self.still: dict[int, tuple[float, float]] = {}  # index -> (wall s, waited s) at the last look

    def started(self, index: int, pid: int, now: float) -> None:
        """A new process `pid` serves slot `index`: the word's value now is its baseline."""
        self._last[index] = (self.board.beats(index), now, self.waited(pid), False)

    def stuck(self, index: int, pid: int, now: float) -> bool:
        """True when slot `index`'s loop has not turned for the timeout of its own time, run or
        slept, not waited for a CPU (0: never)."""
        word = self.board.beats(index)
        waited = self.waited(pid)
        value, since, waited_since, beaten = self._last.get(index, (word, now, waited, False))
        if word != value:
            self._last[index] = (word, now, waited, True)
            return False
        if self.timeout <= 0:
            return False
        if procstat.state(pid) in STOPPED_STATES:
            self._last[index] = (value, now, waited, beaten)  # paused on purpose: its clock restarts
            return False
        waited_ns = waited - waited_since if waited is not None and waited_since is not None else 0
        self.still[index] = (now - since, waited_ns / 1e9)
        limit = self.timeout if beaten else max(self.timeout, STALL_STARTUP_SECONDS)
        return stood_still_for(now - since, waited_ns) > limit


def _install_test_hang(loop: asyncio.AbstractEventLoop) -> None:
    how = os.environ.get(TEST_HANG_ENV)
    if how in ("syscall", "spin"):
        loop.add_signal_handler(signal.SIGUSR1, _hang, how)
    elif how == "busy":
        loop.add_signal_handler(signal.SIGUSR1, _busy, loop, BUSY_TURNS)


def _hang(how: str) -> None:
    if how == "syscall":
        read_end, _write_end = os.pipe()
        os.read(read_end, 1)  # nobody ever writes: blocked in read(2) for good
    while True:
        pass


def _busy(loop: asyncio.AbstractEventLoop, turns: int) -> None:
    """One callback of BUSY_CPU_SECONDS of this thread's CPU time, then the next on a later turn."""
    until = time.thread_time() + BUSY_CPU_SECONDS
    while time.thread_time() < until:
        pass
    if turns > 1:
        loop.call_soon(_busy, loop, turns - 1)
