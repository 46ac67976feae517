"""The supervisor: creates the shared segments and the listening socket, starts and watches
the sequencer, the workers and the exporter, and drains them all on SIGTERM/SIGINT.

Why not `hypercorn --workers`: its supervisor stops everything when one worker exits and
cannot hand a worker its ring and wake-up socket (docs/architecture.md). Processes start with
the spawn context; each worker gets the listening socket, its wake-up socket and the segments'
handles (memfds). Every child dies with the supervisor, however it dies (lifeline.py).

A worker that dies is replaced in the same slot (same wake-up socket, its counters folded
into the retired totals); the other workers and their streams are untouched. If the
sequencer dies the session is over: the supervisor drains everything and exits 1, so an
orchestrator restarts the gateway and clients reconnect into a new session. A worker whose
event loop stops turning is killed and replaced the same way (stall.py).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import socket
import sys
import time
from multiprocessing.connection import wait

from gateway import config as config_module
from gateway import capacity, config_reload, control, control_words, exporter, lifeline, logs, metrics, sequencer, stall, tls
from gateway.config import Config
from gateway.control import Op
from gateway.protocol.errors import RpcError
from gateway.worker import process as worker_process
from shm import Ring, check_platform

TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
NOTSENT_LOWAT_BYTES = 16 * 1024
DRAIN_SECONDS = 3.0
READY_TIMEOUT = 30.0
RELOAD_TIMEOUT = 5.0
WATCH_SECONDS = stall.PULSE_SECONDS  # how often the supervisor looks at its children


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """The one listening socket every worker accepts on. One shared accept queue, not a
    SO_REUSEPORT socket per worker: reuseport balances new connections better (20/20 against
    28/12 measured), but pins 1/N of them to a worker that is stopped or hung, where they wait;
    a shared queue lets the other workers take them (tests/test_faults.py).

    `backlog` (--listen-backlog, net.core.somaxconn by default) is how many connections the
    kernel holds, handshake done, until a worker accepts one. Beyond it the kernel drops the
    SYN or the handshake's last ACK (TcpExtListenOverflows) and the client sends it again 1 s
    later, then 3 s, 7 s, ...: with a fixed 2048, some of 5,000 watchers reconnecting at once
    were still waiting on those retries a minute later (loadtest/RESULTS.md, "Reconnect
    storm")."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # A stalled reader falls behind (and lags) after ~16 KiB unsent, not after megabytes.
    sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT_BYTES)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Supervisor:
    def __init__(self, config: Config):
        self.log = logs.get("supervisor")
        # Resolved once here, so the workers' own listen() on the shared socket (hypercorn
        # calls it again with hc.backlog) asks for the same queue.
        backlog = config_module.effective_listen_backlog(config.listen_backlog)
        if config.listen_backlog is not None and backlog < config.listen_backlog:
            self.log.warning("--listen-backlog is above net.core.somaxconn; the kernel caps it",
                             configured=config.listen_backlog, backlog=backlog)
        soft_before, hard = capacity.raise_nofile()  # before any child: they inherit it
        if config.max_connections is None:
            limit = capacity.default_max_connections(config.workers)
            config = dataclasses.replace(config, max_connections=limit)
        self.log.info("descriptor limit raised", soft_before=soft_before, soft=hard, hard=hard,
                      max_connections=config.max_connections)
        config = dataclasses.replace(config, listen_backlog=backlog)
        self.config = config
        self.ctx = multiprocessing.get_context("spawn")
        self.listener = listening_socket(*config.bind, config.listen_backlog)
        # Segments are memfds and the control socket is abstract: nothing has a path, so
        # nothing can outlive the processes, whatever kills them (shm.segment, lifeline).
        base = f"murgw-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
        self.ring = Ring.create(base + "-ring", control_words=control_words.COUNT, anonymous=True)
        self.blocks = metrics.create_blocks(base + "-metrics", config.workers)
        self.counters = metrics.Counters(self.blocks, metrics.SUPERVISOR_BLOCK)
        self.counters.add("pid", os.getpid())
        self.control_path = "\0" + base + ".sock"
        self.wake = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(config.workers)]
        for send_end, _ in self.wake:
            send_end.setblocking(False)
        self.config_dict = config.to_dict()
        self.workers: list[multiprocessing.Process | None] = [None] * config.workers
        self.sequencer: multiprocessing.Process | None = None
        self.exporter: multiprocessing.Process | None = None
        self.restarts = 0
        self.stalls = stall.StallWatch(self.ring.control, config.worker_stall_timeout)
        self.stopping = False
        self._signal_r, self._signal_w = os.pipe()
        os.set_blocking(self._signal_w, False)

    def _child(self, name: str, target, *args) -> multiprocessing.Process:
        """A started child process, bound to live no longer than this one (lifeline)."""
        proc = self.ctx.Process(target=lifeline.child_main, name=name, args=(os.getpid(), target, *args))
        proc.start()
        return proc

    def _start_worker(self, index: int) -> None:
        self.workers[index] = self._child(
            f"murgw-worker-{index}", worker_process.main, self.config_dict, index, self.listener,
            self.ring.handle, self.blocks.handle, self.control_path, self.wake[index][1])
        self.stalls.started(index, time.monotonic())

    def start(self) -> None:
        self.sequencer = self._child(
            "murgw-sequencer", sequencer.main, self.config_dict, self.ring.handle, self.blocks.handle,
            self.control_path, [send_end for send_end, _ in self.wake])
        for index in range(self.config.workers):
            self._start_worker(index)
        host, port = self.listener.getsockname()[:2]
        self.log.info("listening", port=port, backlog=self.config.listen_backlog, workers=self.config.workers)
        scheme = "https" if tls.enabled(self.config.certfile, self.config.keyfile) else "http"
        print(f"listening on {scheme}://{url_host(host)}:{port}", flush=True)
        if self.config.metrics_bind is not None:
            parent, child = self.ctx.Pipe(duplex=False)
            mhost, mport = self.config.metrics_bind
            self.exporter = self._child("murgw-exporter", exporter.main, mhost, mport,
                                        self.ring.handle, self.blocks.handle, child)
            if parent.poll(READY_TIMEOUT):
                print(f"metrics on http://{url_host(mhost)}:{parent.recv()}/metrics", flush=True)
            else:
                self.log.error("the metrics exporter did not start")

    def on_signal(self, signum, frame) -> None:
        self.stopping = True
        self._wake_watch()

    def _wake_watch(self) -> None:
        """From a signal handler: the watch loop's wait returns now."""
        try:
            os.write(self._signal_w, b"x")
        except OSError:
            pass

    def watch(self) -> int:
        """Until a signal or the sequencer's death; returns the exit status."""
        while not self.stopping:
            procs = [p for p in (self.sequencer, self.exporter, *self.workers) if p is not None]
            wait([p.sentinel for p in procs] + [self._signal_r], timeout=WATCH_SECONDS)
            if self.stopping:
                break
            if self.reload_asked:
                self.reload()
            if not self.sequencer.is_alive():
                self.log.error("sequencer exited; the session is over, stopping the gateway",
                               exitcode=self.sequencer.exitcode)
                return 1
            self._kill_stuck_workers()
            for index, proc in enumerate(self.workers):
                if proc is not None and not proc.is_alive():
                    self.restarts += 1
                    self.log.warning("worker died; replacing it", worker=index, exitcode=proc.exitcode,
                                     restarts=self.restarts)
                    metrics.retire_worker(self.blocks, index)
                    self.counters.add("worker_restarts")
                    self._start_worker(index)
        return 0

    def on_hup(self, signum, frame) -> None:
        self.reload_asked = True
        self._wake_watch()

    def reload(self) -> None:
        """SIGHUP: re-read --config and hand what may change while running to the sequencer,
        which the workers follow (config_reload.py); one log line either way."""
        self.reload_asked = False
        try:
            while os.read(self._signal_r, 64):
                pass
        except BlockingIOError:
            pass
        before = dict(self.config_dict)
        try:
            loaded, settings, restart_only = config_reload.reread(self.loaded, self.argv)
            self.config_dict.update(settings)  # a replacement worker starts with them
            control.call_blocking(self.control_path, Op.RELOAD, RELOAD_TIMEOUT, settings=settings)
        except (config_module.ConfigError, OSError, RpcError) as exc:
            self.config_dict = before
            self.counters.add("config_reloads", label="rejected")
            self.log.error("config reload rejected; nothing changed", problem=str(exc))
            return
        self.loaded = loaded
        self.counters.add("config_reloads", label="applied")
        self.log.info("config reloaded", tokens=len(loaded.tokens),
                      **({"restart_needed": restart_only} if restart_only else {}))

    def _kill_stuck_workers(self) -> None:
        """SIGKILL every worker whose loop stood still (stall.py); the loop above replaces it."""
        now = time.monotonic()
        for index, proc in enumerate(self.workers):
            if proc is not None and proc.is_alive() and self.stalls.stuck(index, proc.pid, now):
                self.log.warning("worker's event loop stood still; killing it", worker=index,
                                 worker_pid=proc.pid, stall_timeout=self.config.worker_stall_timeout)
                proc.kill()
                proc.join(1.0)

    def drain(self) -> None:
        """Close every stream and stop every process (the memfd segments go with the last of them)."""
        self.ring.control[control_words.CLOSING] = 1
        for proc in self.workers:
            if proc is not None and proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + DRAIN_SECONDS
        for proc in self.workers:
            if proc is not None:
                proc.join(max(0.0, deadline - time.monotonic()))
        for proc in (self.sequencer, self.exporter):
            if proc is not None and proc.is_alive():
                proc.terminate()
                proc.join(max(0.5, deadline - time.monotonic()))
        for proc in (self.sequencer, self.exporter, *self.workers):
            if proc is not None and proc.is_alive():
                proc.kill()
                proc.join(1.0)
        self.listener.close()
        for pair in self.wake:
            for end in pair:
                end.close()
        self.ring.close()
        self.counters.close()


def run(config: Config, argv: list[str] | None = None) -> int:
    """`argv`: the command line `config` was loaded from, read again at each SIGHUP."""
    check_platform()
    logs.setup(config.log_level)
    supervisor = Supervisor(config)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    supervisor.loaded, supervisor.argv, supervisor.reload_asked = config, argv, False
    os.set_blocking(supervisor._signal_r, False)
    signal.signal(signal.SIGHUP, supervisor.on_hup)
    if tls.enabled(config.certfile, config.keyfile):  # for the exporter's expiry gauge
        supervisor.ring.control[control_words.TLS_EXPIRY] = tls.not_after(config.certfile) or 0
    status = 1
    try:
        supervisor.start()
        status = supervisor.watch()
    finally:
        supervisor.drain()
        supervisor.log.info("stopped", restarts=supervisor.restarts)
    sys.stdout.flush()
    return status
