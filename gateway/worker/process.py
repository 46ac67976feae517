"""A worker process: the hub and the app, served by the worker's server on the inherited socket (server.py).

Shutdown: the supervisor sets the ring's CLOSING word and sends SIGTERM. The server never
tells a streaming response it is shutting down, so the worker first ends every stream
through the hub, then stops the server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

import uvloop

from gateway import logs
from gateway.common import stall
from gateway.common.board import Role
from gateway.config.options import Config
from gateway.common.control import ControlClient
from gateway.common.metrics import Counters
from gateway.worker import collector, hypercorn, reload, server
from gateway.worker.app import create_app
from gateway.worker.balance import Balance
from gateway.worker.malloc_trim import Trimmer
from gateway.worker.delivery.hub import Hub
from shm import Ring
from shm.segment import Handle

# Test-only: a worker started with this set in its environment exits at once, as one whose
# start fails would (tests/e2e/test_supervision.py: the supervisor's restart backoff).
TEST_EXIT_ENV = "MURGW_TEST_WORKER_EXITS_AT_START"

async def run(config: Config, index: int, listener: socket.socket, ring_segment: Handle,
              counters_segment: Handle, control_path: str, wake_sock: socket.socket) -> None:
    logs.per_turn(asyncio.get_running_loop())  # two access-log lines a stream: one write a turn
    sink_for = hypercorn.prepare()
    ring = Ring.attach(ring_segment)
    counters = Counters.attach(counters_segment, Role.WORKER, index)
    assert config.max_connections is not None  # found at start (config/found.py) before any worker runs
    counters.set("worker_max_connections", config.max_connections)  # no reload changes it
    control = ControlClient(control_path)
    hub = Hub(ring, wake_sock, index, config.heartbeat_interval, counters, control,
              lapped_budget=config.max_lapped_replay_bytes)

    app = create_app(config, hub, control, counters, sink_for)
    stop = asyncio.Event()

    def on_term() -> None:
        hub.close_all()
        asyncio.get_running_loop().call_later(0.05, stop.set)

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_term)
    hub.start()
    # The supervisor replaces a loop that stops; how late each pulse ran is the loop's stall.
    pulse = stall.start_pulse(hub.board, index, lambda late: counters.observe("loop_stall_seconds", late))
    trimmer = Trimmer()
    trimmer.start()
    reloads = asyncio.create_task(reload.follow(config, app, hub))  # SIGHUP's settings
    collector.tune()  # no full collection over tens of thousands of streams mid-storm
    logs.get("worker").info("worker serving", worker=index)
    try:
        await server.serve(app, config, listener, stop.wait, Balance(counters, hub.board, index))
    finally:
        pulse.cancel()
        trimmer.cancel()
        reloads.cancel()
        hub.stop()
        await control.close()


def main(config_dict: dict, index: int, listener: socket.socket, ring_segment: Handle,
         counters_segment: Handle, control_path: str, wake_sock: socket.socket) -> None:
    """Process entry point (spawn context)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor drives shutdown
    config = Config.from_dict(config_dict)
    logs.setup(config.log_level, "worker")
    if os.environ.get(TEST_EXIT_ENV):
        logs.get("worker").error("exiting at start", worker=index, hook=TEST_EXIT_ENV)
        sys.exit(3)
    try:
        uvloop.run(run(config, index, listener, ring_segment, counters_segment, control_path, wake_sock))
    finally:
        logs.flush()
