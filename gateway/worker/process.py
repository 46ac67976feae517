"""A worker process: hypercorn under uvloop, serving the app on the inherited listening socket.

Shutdown: the supervisor sets the ring's CLOSING word and sends SIGTERM. Hypercorn never
tells a streaming response it is shutting down, so the worker first ends every stream
through the hub, then fires hypercorn's shutdown trigger.
"""

from __future__ import annotations

import asyncio
import signal
import socket

from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig

from gateway import logs, stall, tls
from gateway.config import Config, effective_listen_backlog
from gateway.control import ControlClient
from gateway.metrics import Counters
from gateway.worker import h2_backpressure, http11_fixes, lean
from gateway.worker.accept import BALANCE_SLACK
from gateway.worker.app import create_app
from gateway.worker.hub import Hub
from shm import Ring
from shm.segment import Handle

GRACE_SECONDS = 2.0
HEAD_LINE_FRAMING = 4  # ": " and CRLF around each header line
REQUEST_LINE_EXTRA = 64  # method, version, spaces and the blank line that ends the head


def hypercorn_config(listener: socket.socket, config: Config) -> HypercornConfig:
    hc = HypercornConfig()
    hc.bind = [f"fd://{listener.fileno()}"]
    hc.include_server_header = False
    hc.include_date_header = False
    hc.graceful_timeout = GRACE_SECONDS
    hc.accesslog = None
    hc.errorlog = None
    # The worker's server listens again on the inherited socket with this value (accept.py),
    # and the last listen() on a socket sets its accept queue: every worker asks for what the
    # supervisor resolved (--listen-backlog, capped at net.core.somaxconn).
    hc.backlog = effective_listen_backlog(config.listen_backlog)
    # hypercorn's idle timer runs from the connection's start (and from the end of each
    # response) until a whole request head has arrived: slow headers and idle keep-alive
    # connections are closed after it.
    hc.keep_alive_timeout = config.header_timeout
    # What h11 buffers of an unfinished head. The app checks the finished head exactly
    # (app.Admission, 431 with a JSON body); this cap, the limit plus each line's framing,
    # only bounds the memory a head that never finishes can take (431, closed: http11_fixes.py).
    hc.h11_max_incomplete_size = (config.max_header_bytes + REQUEST_LINE_EXTRA
                                  + HEAD_LINE_FRAMING * (config.max_headers + 1))
    tls.configure(hc, config.certfile, config.keyfile, handshake_timeout=config.header_timeout)
    return hc


async def run(config: Config, index: int, listener: socket.socket, ring_segment: Handle,
              counters_segment: Handle, control_path: str, wake_sock: socket.socket) -> None:
    lean.install()
    http11_fixes.install()
    h2_backpressure.install()
    ring = Ring.attach(ring_segment)
    counters = Counters.attach(counters_segment, "worker", index)
    hub = Hub(ring, wake_sock, index, config.heartbeat_interval, counters)

    def busier() -> bool:
        load = counters.open_streams_by_worker()
        others = load[:index] + load[index + 1:]
        return bool(others) and load[index] > min(others) + BALANCE_SLACK

    asyncio.get_running_loop().busier = busier  # read by accept.Loop.create_server
    control = ControlClient(control_path)
    app = create_app(config, hub, control, counters)
    stop = asyncio.Event()

    def on_term() -> None:
        hub.close_all()
        asyncio.get_running_loop().call_later(0.05, stop.set)

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_term)
    hub.start()
    pulse = stall.start_pulse(ring.control, index)  # the supervisor replaces a loop that stops
    logs.get("worker").info("worker serving", worker=index)
    try:
        await serve(app, hypercorn_config(listener, config), shutdown_trigger=stop.wait)
    finally:
        pulse.cancel()
        hub.stop()
        await control.close()


def main(config_dict: dict, index: int, listener: socket.socket, ring_segment: Handle,
         counters_segment: Handle, control_path: str, wake_sock: socket.socket) -> None:
    """Process entry point (spawn context)."""
    import uvloop

    from gateway.worker.accept import Loop

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor drives shutdown
    config = Config.from_dict(config_dict)
    logs.setup("worker", config.log_level)
    # Loop: uvloop, accepting up to 128 connections per wake-up instead of libuv's one per
    # loop iteration (accept.py), so a busy worker still drains a reconnect storm.
    uvloop.run(run(config, index, listener, ring_segment, counters_segment, control_path, wake_sock),
               loop_factory=Loop)
