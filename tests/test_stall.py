"""A stuck worker is replaced; a stopped one is left alone.

The workers run with the test-only hook of gateway/stall.py (MURGW_TEST_HANG_ON_SIGUSR1):
SIGUSR1 blocks the worker's event loop forever, in read(2) or in an endless Python loop.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from gateway.stall import TEST_HANG_ENV
from support import (Recorder, SSEStream, WATCH, assert_gapless_to, resume, running_gateway,
                     start_watchers, stop_all, stopped, wait_for)

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
