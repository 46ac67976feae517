"""A stuck worker is replaced; a stopped one, and a busy one starved of the CPU, are left alone.

The workers run with the test-only hook of gateway/common/stall.py (MURGW_TEST_HANG_ON_SIGUSR1):
SIGUSR1 blocks the worker's event loop forever, in read(2) or in an endless Python loop, or
keeps it busy for a few long callbacks. A worker is starved by pinning it to one CPU beside
busy-looping processes (hogs) pinned there too: it then waits on the run queue most of the
time, which the watchdog does not count (/proc/PID/schedstat).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from gateway.common import board
from gateway.common import procstat
from gateway.common.stall import BUSY_CPU_SECONDS, BUSY_TURNS, TEST_HANG_ENV, StallWatch, stood_still_for
from gateway.tuning import STALL_STARTUP_SECONDS
from helpers.gateway_harness import running_gateway, stopped, wait_for
from helpers.http_client import Http, headers_for, rpc_body
from helpers.sse_reading import SSEStream, STORM_WATCHERS, WATCH, frame_of, full_ring, read_replay
from helpers.watchers import Recorder, assert_gapless_to, resume, start_watchers, stop_all

HOGS = 6  # busy loops beside a starved worker on its CPU: it gets about 1/(HOGS + 1) of it

STALL = "1"  # --worker-stall-timeout for these tests, seconds


def stood_still(gw) -> list[dict]:
    return [rec for rec in gw.logs() if rec.get("event", "").startswith("worker's event loop stood still")]


@pytest.mark.parametrize("how", ["syscall", "spin"])
def test_a_stuck_worker_is_replaced_and_its_watchers_resume_without_loss(tmp_path, how):
    with running_gateway("--sim-load", "20", "--worker-stall-timeout", STALL, tmp_path=tmp_path,
                         env={TEST_HANG_ENV: how}) as gw:
        workers = wait_for(lambda: len(gw.worker_pids()) == 2 and gw.worker_pids(), what="workers")
        recorders = start_watchers(gw.port, 8, spread_over=set(workers.values()))
        resumed: list[Recorder] = []
        try:
            wait_for(lambda: all(len(r.ids()) > 3 for r in recorders), what="streams flowing")
            os.kill(workers[0], signal.SIGUSR1)
            hung_at = time.monotonic()
            replaced = wait_for(lambda: gw.worker_pids()[0] != workers[0] and gw.worker_pids()[0],
                                timeout=20, what="slot 0 served by a new worker")
            print(f"{how}: worker replaced {time.monotonic() - hung_at:.2f} s after its loop stopped")
            assert [rec["worker_pid"] for rec in stood_still(gw)] == [workers[0]]
            wait_for(lambda: all(r.lost for r in recorders if r.stream.worker_pid == workers[0]),
                     what="the stuck worker's streams to end")
            lost = [r for r in recorders if r.lost]
            kept = [r for r in recorders if not r.lost]
            assert lost and kept and all(r.stream.worker_pid == workers[0] for r in lost)
            resumed += resume(gw.port, lost)
            assert_gapless_to(max(r.ids()[-1] for r in kept) + 10, resumed + kept)
            assert replaced != workers[0]
        finally:
            stop_all(recorders + resumed)


def test_a_stopped_worker_is_left_alone(tmp_path):
    with running_gateway("--worker-stall-timeout", STALL, tmp_path=tmp_path) as gw:
        workers = wait_for(lambda: len(gw.worker_pids()) == 2 and gw.worker_pids(), what="workers")
        os.kill(workers[0], signal.SIGSTOP)
        try:
            wait_for(lambda: stopped(workers[0]), what="the worker to stop")
            # Not a wait for something to happen: the fault itself, held for several
            # thresholds from the moment it took effect, which the worker must survive.
            time.sleep(4 * float(STALL))
        finally:
            os.kill(workers[0], signal.SIGCONT)
        # Once running, its loop turns again: the same process goes on serving slot 0.
        with SSEStream(gw.port, WATCH, {}) as stream:
            assert stream.status == 200
        assert gw.worker_pids() == workers and not stood_still(gw)
        os.kill(workers[0], 0)  # still alive


def test_stood_still_counts_wall_time_less_the_run_queue_wait():
    assert stood_still_for(5.0, 0) == 5.0  # ran or slept throughout: all of it counts
    assert stood_still_for(5.0, 4_500_000_000) == pytest.approx(0.5)  # waited for a CPU 4.5 s
    assert stood_still_for(5.0, 6_000_000_000) == 0.0  # never below nothing


class FakeKernel:
    """Run-queue waits per pid, as /proc/PID/schedstat would give them (ns), set by the test."""

    def __init__(self):
        self.waits: dict[int, int | None] = {}

    def __call__(self, pid: int) -> int | None:
        return self.waits.get(pid)


def watch_over_fake_worker(timeout: float = 5.0) -> tuple[StallWatch, list[int], FakeKernel]:
    """A StallWatch over one worker (slot 0, our own pid: state R) that has beaten once at t=0."""
    words = [0] * board.CONTROL_WORDS
    kernel = FakeKernel()
    kernel.waits[os.getpid()] = 1_000_000_000
    watch = StallWatch(board.Board(words), timeout, waited=kernel)
    watch.started(0, os.getpid(), 0.0)
    words[board.LOOP_BEAT] += 1
    assert not watch.stuck(0, os.getpid(), 0.0)
    return watch, words, kernel


def test_a_still_word_counts_toward_the_timeout_only_while_not_waiting_for_a_cpu():
    watch, words, kernel = watch_over_fake_worker()
    pid = os.getpid()
    kernel.waits[pid] += 3_000_000_000  # 3 of the 6 s waited on the run queue: 3 s count
    assert not watch.stuck(0, pid, 6.0)
    kernel.waits[pid] += 2_000_000_000  # at 9 s: 5 waited, 4 counted
    assert not watch.stuck(0, pid, 9.0)
    assert watch.stuck(0, pid, 10.5)  # 5.5 counted: past the timeout
    words[board.LOOP_BEAT] += 1  # it beat: the count starts again from here
    assert not watch.stuck(0, pid, 11.0)
    assert not watch.stuck(0, pid, 15.5) and watch.stuck(0, pid, 16.5)


def test_without_the_kernels_account_the_wall_clock_alone_counts():
    watch, _words, kernel = watch_over_fake_worker()
    kernel.waits[os.getpid()] = None  # no /proc/PID/schedstat (or the process is gone)
    assert not watch.stuck(0, os.getpid(), 4.5)
    assert watch.stuck(0, os.getpid(), 5.5)


def test_a_worker_that_never_beat_has_the_startup_grace_of_its_own_time():
    words = [0] * board.CONTROL_WORDS
    kernel = FakeKernel()
    kernel.waits[os.getpid()] = 0
    watch = StallWatch(board.Board(words), 1.0, waited=kernel)
    watch.started(0, os.getpid(), 0.0)
    kernel.waits[os.getpid()] = 20_000_000_000
    assert not watch.stuck(0, os.getpid(), STALL_STARTUP_SECONDS + 10.0)  # 20 s of it waited
    assert watch.stuck(0, os.getpid(), STALL_STARTUP_SECONDS + 21.0)


def test_this_kernel_accounts_run_queue_waits_or_the_watchdog_says_it_counts_wall_time(tmp_path):
    """On a kernel with the accounting the worker's file reads; without, the log says so once."""
    with running_gateway(tmp_path=tmp_path) as gw:
        workers = wait_for(lambda: len(gw.worker_pids()) == 2 and gw.worker_pids(), what="workers")
        warned = [rec for rec in gw.logs() if "run-queue waits" in rec.get("event", "")]
        if procstat.counts_run_queue_wait():
            assert procstat.run_queue_wait_ns(workers[0]) is not None and not warned
        else:
            assert len(warned) == 1


@contextlib.contextmanager
def starved(pids: list[int], cpu: int):
    """`pids` pinned to `cpu` beside HOGS busy-looping processes pinned there too; the hogs
    are killed by pid at exit, and `pids` are given back every CPU this process may use."""
    everywhere = os.sched_getaffinity(0)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
    try:
        for pid in [hog.pid for hog in hogs] + pids:
            os.sched_setaffinity(pid, {cpu})
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(pid, everywhere)


def stalls_past(metrics_port: int, seconds: float) -> float:
    """How many of the workers' stall pulses ran more than `seconds` late (murgw_loop_stall_seconds)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    total = float(re.search(r"^murgw_loop_stall_seconds_count (\S+)$", text, re.M).group(1))
    within = float(re.search(rf'^murgw_loop_stall_seconds_bucket{{le="{seconds}"}} (\S+)$', text, re.M).group(1))
    return total - within


def ran_for(pid: int) -> float:
    """The process's CPU seconds; infinite once it is gone (killed: the assertions then say so)."""
    usage = procstat.cpu_and_rss(pid)
    return float("inf") if usage is None else usage[0]


@pytest.mark.skipif(not procstat.counts_run_queue_wait(), reason="the kernel does not account run-queue waits")
def test_a_busy_worker_starved_of_the_cpu_is_not_replaced(tmp_path):
    """Its loop stands still longer than the timeout by the wall clock (its pulse says so), as
    under the CPU starvation of 100,000 watchers on one core, yet it ran far less than that."""
    with running_gateway("--worker-stall-timeout", STALL, metrics=True, tmp_path=tmp_path,
                         env={TEST_HANG_ENV: "busy"}) as gw:
        workers = wait_for(lambda: len(gw.worker_pids()) == 2 and gw.worker_pids(), what="workers")
        with starved([workers[0]], cpu=max(os.sched_getaffinity(0))):
            cpu_before = ran_for(workers[0])
            os.kill(workers[0], signal.SIGUSR1)
            # Its callbacks are done once it has run their CPU time; the pulse after each ran
            # late by the wall time it took, more than the timeout beside the hogs.
            wait_for(lambda: ran_for(workers[0]) - cpu_before >= BUSY_TURNS * BUSY_CPU_SECONDS,
                     timeout=120, what="the starved worker's busy callbacks to run")
            assert gw.worker_pids() == workers and not stood_still(gw)
            wait_for(lambda: stalls_past(gw.metrics_port, float(STALL)) >= 1, timeout=30,
                     what="a stall longer than the timeout by the wall clock")
        assert gw.worker_pids() == workers and not stood_still(gw)
        with SSEStream(gw.port, WATCH, {}) as stream:
            assert stream.status == 200


@pytest.mark.skipif(not procstat.counts_run_queue_wait(), reason="the kernel does not account run-queue waits")
def test_workers_starved_under_a_storm_of_full_replays_are_not_replaced(tmp_path):
    """The heaviest storm of the suite (tests/e2e/test_reconnect_storm.py), both workers on one CPU
    beside the hogs and the watchdog at its tightest: every replay exact, no worker replaced."""
    with running_gateway("--worker-stall-timeout", STALL, metrics=True, tmp_path=tmp_path) as gw:
        workers = wait_for(lambda: len(gw.worker_pids()) == 2 and gw.worker_pids(), what="workers")
        newest = full_ring(gw.port)
        oldest = newest - 511
        conns = [Http(gw.port, timeout=120) for _ in range(STORM_WATCHERS)]
        try:
            with starved(list(workers.values()), cpu=max(os.sched_getaffinity(0))):
                for conn in conns:
                    conn.send_request("POST", "/", headers_for(last_event_id="0"), rpc_body(WATCH))
                for conn in conns:
                    assert conn.read_head() == 200, conn.headers
                    ids, unnumbered = read_replay(conn, newest)
                    assert ids == list(range(oldest, newest + 1))
                    assert [frame_of(data) for data in unnumbered][1:] == [{"frame": "gap", "firstAvailableId": oldest}]
        finally:
            for conn in conns:
                conn.close()
        print(f"pulses later than the timeout by the wall clock: {stalls_past(gw.metrics_port, float(STALL)):.0f}")
        assert gw.worker_pids() == workers and not stood_still(gw)
