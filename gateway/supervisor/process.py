"""The supervisor: creates the shared segments and the listening socket, starts and watches
the sequencer, the workers and the exporter, and drains them all on SIGTERM/SIGINT.

Why not `hypercorn --workers`: its supervisor stops everything when one worker exits and
cannot hand a worker its ring and wake-up socket (docs/architecture.md). Processes start with
the spawn context; each worker gets the listening socket, its wake-up socket and the segments'
handles (memfds). Every child dies with the supervisor, however it dies (supervisor/lifeline.py).

Both listening sockets, the clients' and the metrics', are bound here before any child
starts: an address that cannot be bound stops the start with one line naming its option
(exit 2), and a replaced child serves on the same socket.

A worker that dies is replaced in the same slot (same wake-up socket, its counters folded
into the retired totals); the other workers and their streams are untouched. An exporter
that dies is replaced too, on the same metrics socket. If the sequencer dies the session is
over: the supervisor drains everything and exits 1, so an orchestrator restarts the gateway
and clients reconnect into a new session. A worker whose event loop stops turning is killed
and replaced the same way (common/stall.py).
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

from gateway.config import options as config_module
from gateway import logs
from gateway.supervisor import banner
from gateway.common import board
from gateway.config import capacity
from gateway.config import found as config_found
from gateway.config import reload as config_reload
from gateway.common import control
from gateway.supervisor import exporter
from gateway.supervisor import lifeline
from gateway.common import metrics
from gateway.supervisor import proctitle
from gateway.supervisor import restarts
from gateway.supervisor import sd_notify
from gateway.sequencer import process as sequencer
from gateway.common import stall
from gateway.config import tls
from gateway.config.options import Config, ConfigError
from gateway.common.control import Op
from gateway.tuning import DRAIN_SECONDS, METRICS_BACKLOG, NOTSENT_LOWAT_BYTES, RELOAD_SECONDS
from gateway.protocol.errors import RpcError
from gateway.worker import process as worker_process
from shm import Ring, check_platform

TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
WATCH_SECONDS = stall.PULSE_SECONDS  # how often the supervisor looks at its children


def listening_socket(host: str, port: int, backlog: int, option: str = "bind") -> socket.socket:
    """The one listening socket every worker accepts on (`option` "bind"), or the exporter's
    ("metrics-bind"); an address that cannot be bound is a ConfigError naming the option.

    One shared accept queue, not a SO_REUSEPORT socket per worker: reuseport balances new
    connections better (20/20 against 28/12 measured), but pins 1/N of them to a worker that
    is stopped or hung, where they wait; a shared queue lets the other workers take them
    (tests/e2e/test_faults.py).

    `backlog` (--listen-backlog, net.core.somaxconn by default) is how many connections the
    kernel holds, handshake done, until a worker accepts one. Beyond it the kernel drops the
    SYN or the handshake's last ACK (TcpExtListenOverflows) and the client sends it again 1 s
    later, then 3 s, 7 s, ...: with a fixed 2048, some of 5,000 watchers reconnecting at once
    were still waiting on those retries a minute later (loadtest/RESULTS.md, "Reconnect
    storm")."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if option == "bind":
        # A stalled reader falls behind (and lags) after ~16 KiB unsent, not after megabytes.
        sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT_BYTES)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise ConfigError(f"--{option} {url_host(host)}:{port}: {reason[:1].lower()}{reason[1:]}") from None
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def address_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{url_host(host)}:{port}"


def url_of(sock: socket.socket, scheme: str, path: str = "") -> str:
    return f"{scheme}://{address_of(sock)}{path}"


class Supervisor:
    def __init__(self, config: Config, argv: list[str] | None = None):
        self.log = logs.get("supervisor")
        # What a SIGHUP reload re-reads (`argv`) and compares against (`loaded`: the settings
        # as loaded, before the capacity and backlog defaults below are resolved).
        self.loaded, self.argv, self.reload_asked = config, argv, False
        soft_before, self.descriptors = capacity.raise_nofile()  # before any child: they inherit it
        if soft_before != self.descriptors:
            self.log.info("descriptor limit raised", soft_before=soft_before, soft=self.descriptors,
                          hard=self.descriptors)
        # Resolved once here, so the workers' own listen() on the shared socket (hypercorn
        # calls it again with hc.backlog) asks for the same queue.
        found = config_found.at_start(config.workers, config.max_connections, config.listen_backlog,
                                      self.descriptors)
        if found.backlog_capped:
            self.log.warning("--listen-backlog is above net.core.somaxconn; the kernel caps it",
                             configured=config.listen_backlog, backlog=found.listen_backlog)
        if config.h2c_upgrade:  # kept so configurations that name it still start
            self.log.warning("--h2c-upgrade has no effect: the front serves HTTP/1.1 and answers "
                             "Upgrade: h2c over it (HTTP/2 is prior knowledge or TLS ALPN h2)")
        self.capacity_bound = found.capacity_bound
        config = dataclasses.replace(config, max_connections=found.max_connections,
                                     listen_backlog=found.listen_backlog)
        self.config = config
        self.ctx = multiprocessing.get_context("spawn")
        lifeline.without_resource_tracker()  # nothing for it to track (supervisor/lifeline.py)
        self.listener = listening_socket(*config.bind, found.listen_backlog)
        self.address = address_of(self.listener)  # in every process title: which gateway this is
        self.metrics_listener: socket.socket | None = None
        if config.metrics_bind is not None:
            try:
                self.metrics_listener = listening_socket(*config.metrics_bind, METRICS_BACKLOG, "metrics-bind")
            except ConfigError:
                self.listener.close()
                raise
        # Segments are memfds and the control socket is abstract: nothing has a path, so
        # nothing can outlive the processes, whatever kills them (shm.segment, lifeline).
        base = f"murgw-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
        self.ring = Ring.create(base + "-ring", slots=board.RING_SLOTS, control_words=board.CONTROL_WORDS,
                                anonymous=True)
        self.board = board.Board(self.ring.control)
        self.blocks = metrics.create_blocks(base + "-metrics", config.workers)
        self.counters = metrics.Counters(self.blocks, board.SUPERVISOR_BLOCK)
        self.counters.add("pid", os.getpid())
        self.control_path = "\0" + base + ".sock"
        self.wake = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(config.workers)]
        for send_end, _ in self.wake:
            send_end.setblocking(False)
        self.config_dict = config.to_dict()
        self.workers: list[multiprocessing.process.BaseProcess | None] = [None] * config.workers
        self.sequencer: multiprocessing.process.BaseProcess | None = None
        self.exporter: multiprocessing.process.BaseProcess | None = None
        self.restarts = 0
        # each worker slot's restart policy, then the exporter's (supervisor/restarts.py)
        self.backoffs = [restarts.Backoff() for _ in range(config.workers + 1)]
        self.stalls = stall.StallWatch(self.board, config.worker_stall_timeout)
        self.stopping: str | bool = False  # the signal's name once one asks the gateway to stop
        self.notifier = sd_notify.Notifier()  # systemd's Type=notify, when it started us
        # A signal handler only writes a byte here; watch() wakes on it and drains it.
        self._signal_r, self._signal_w = os.pipe()
        os.set_blocking(self._signal_r, False)
        os.set_blocking(self._signal_w, False)

    def _child(self, role: str, target, *args) -> multiprocessing.process.BaseProcess:
        """A started child process, named after its role and the gateway's address
        (supervisor/proctitle.py) and bound to live no longer than this one (supervisor/lifeline.py)."""
        title = f"{role} {self.address}"
        proc = self.ctx.Process(target=lifeline.child_main, name=proctitle.PREFIX + title,
                                args=(os.getpid(), title, target, *args))
        proc.start()
        return proc

    def _start_worker(self, index: int) -> None:
        proc = self.workers[index] = self._child(
            f"worker {index}", worker_process.main, self.config_dict, index, self.listener,
            self.ring.handle, self.blocks.handle, self.control_path, self.wake[index][1])
        now = time.monotonic()
        self.backoffs[index].started_at(now)
        assert proc.pid is not None  # started
        self.stalls.started(index, proc.pid, now)

    def _start_exporter(self) -> None:
        self.exporter = self._child("exporter", exporter.main, self.metrics_listener,
                                    self.ring.handle, self.blocks.handle)
        self.backoffs[-1].started_at(time.monotonic())

    def start(self) -> None:
        if not self.stalls.counts_waits:
            self.log.warning("this kernel does not account run-queue waits (/proc/PID/schedstat): "
                             "the stall watchdog counts wall time, so a worker starved of CPU may be "
                             "taken for a stuck one")
        self.sequencer = self._child(
            "sequencer", sequencer.main, self.config_dict, self.ring.handle, self.blocks.handle,
            self.control_path, [send_end for send_end, _ in self.wake])
        for index in range(self.config.workers):
            self._start_worker(index)
        scheme = "http"
        if tls.enabled(self.config.certfile, self.config.keyfile):
            scheme = "https"  # and the exporter's expiry gauge, read once here
            self.board.tls_expiry = tls.not_after(self.config.certfile) or 0
        listening = url_of(self.listener, scheme)
        print(f"listening on {listening}", flush=True)
        metrics_url = None
        if self.metrics_listener is not None:
            self._start_exporter()
            metrics_url = url_of(self.metrics_listener, "http", "/metrics")
            print(f"metrics on {metrics_url}", flush=True)
        self.log.info("listening", **banner.fields(
            self.config, listening=listening, metrics=metrics_url,
            capacity_bound=self.capacity_bound, descriptors=self.descriptors))

    def on_signal(self, signum, frame) -> None:
        self.stopping = signal.Signals(signum).name
        self._wake_watch()

    def _wake_watch(self) -> None:
        """From a signal handler: the watch loop's wait returns now."""
        try:
            os.write(self._signal_w, b"x")
        except OSError:
            pass

    def watch(self) -> int:
        """Until a signal or the sequencer's death; returns the exit status."""
        assert self.sequencer is not None  # start() started it
        while not self.stopping:
            self.notifier.check_ready(self.board, self.config.workers)
            # Every dead child found below leaves this list (its slot waits for its restart,
            # supervisor/restarts.py) or ends the loop, so no sentinel in it stays ready from one turn to
            # the next.
            procs = [p for p in (self.sequencer, self.exporter, *self.workers) if p is not None]
            ready = wait([p.sentinel for p in procs] + [self._signal_r], timeout=self._next_look())
            if self._signal_r in ready:
                self._drain_signal_pipe()
            if self.stopping:
                break
            if self.reload_asked:
                self.notifier.reloading()
                self.reload()
                self.notifier.reloaded()
            if not self.sequencer.is_alive():
                self.log.error("sequencer exited; the session is over, stopping the gateway",
                               exitcode=self.sequencer.exitcode)
                return 1
            self._kill_stuck_workers()
            now = time.monotonic()
            for index, proc in enumerate(self.workers):
                if proc is not None and not proc.is_alive():
                    self._replacing("worker", proc, "worker_restarts", self.backoffs[index], now, worker=index)
                    metrics.retire_worker(self.blocks, index)
                    self.workers[index] = None
                if self.workers[index] is None and self.backoffs[index].is_due(now):
                    self._start_worker(index)
            if self.exporter is not None and not self.exporter.is_alive():
                self._replacing("exporter", self.exporter, "exporter_restarts", self.backoffs[-1], now)
                self.exporter = None
            if self.exporter is None and self.backoffs[-1].is_due(now):
                self._start_exporter()
        return 0

    def _next_look(self) -> float:
        """How long the watch loop may wait: its period, or less when a restart falls due sooner."""
        dues = [b.due for b in self.backoffs if b.due is not None]
        return max(0.0, min([WATCH_SECONDS, *(due - time.monotonic() for due in dues)]))

    def _drain_signal_pipe(self) -> None:
        """Empty the wake-up pipe, which would otherwise stay readable (and wait() return at
        once) after any signal that does not stop the gateway."""
        try:
            while os.read(self._signal_r, 512):
                pass
        except BlockingIOError:
            pass

    def _replacing(self, role: str, dead: multiprocessing.process.BaseProcess, counter: str, backoff: restarts.Backoff,
                   now: float, **fields) -> None:
        """Log and count a dead child, and set when its replacement starts (supervisor/restarts.py)."""
        delay = backoff.died_at(now)
        self.restarts += 1
        self.counters.add(counter)
        self.log.warning(f"{role} died; replacing it", exitcode=dead.exitcode, restarts=self.restarts,
                         delay_s=delay, **{f"{role}_pid": dead.pid}, **fields)

    def on_hup(self, signum, frame) -> None:
        self.reload_asked = True
        self._wake_watch()

    def reload(self) -> None:
        """SIGHUP: re-read --config and, with TLS, the certificate pair, and hand what may
        change while running to the sequencer, which the workers follow (config/reload.py);
        one log line either way, naming what was re-read, or every problem that rejected it."""
        self.reload_asked = False
        before = dict(self.config_dict)
        try:
            loaded, settings, restart_only = config_reload.reread(self.loaded, self.argv)
            self.config_dict.update(settings)  # a replacement worker starts with them
            certificate = self._recheck_certificate()
            control.call_blocking(self.control_path, Op.RELOAD, RELOAD_SECONDS,
                                  settings={**settings, config_reload.CERTIFICATE: certificate})
        except (config_module.ConfigError, OSError, RpcError) as exc:
            self.config_dict = before
            self.counters.add("config_reloads", label="rejected")
            problems = list(exc.lines) if isinstance(exc, ConfigError) else [str(exc)]
            self.log.error("config reload rejected; nothing changed", problem=problems[0], problems=problems)
            return
        keys = config_reload.jwt_keys_now(self.loaded, loaded)
        self.loaded = loaded
        self.counters.add("config_reloads", label="applied")
        reread = config_reload.config_file(self.argv, os.environ)
        fields = {"config": reread, "tokens": len(loaded.tokens)} if reread else {}
        if keys is not None:
            fields["jwt_keys"] = keys
        if tls.enabled(self.config.certfile, self.config.keyfile):
            fields.update(certfile=self.config.certfile, certificate_reloaded=certificate)
        if not fields:  # the same line, saying what there was to re-read
            fields = {"reread": "nothing: no --config, no --certfile/--keyfile"}
        self.log.info("config reloaded", **fields, **({"restart_needed": restart_only} if restart_only else {}))

    def _recheck_certificate(self) -> bool:
        """With TLS: the pair was read again, and loads (config_resolve.load checked it, as at start:
        one that does not rejects the reload); the expiry gauge follows it, and the workers
        load it (worker/reload.py)."""
        if not tls.enabled(self.config.certfile, self.config.keyfile):
            return False
        self.board.tls_expiry = tls.not_after(self.config.certfile) or 0
        return True

    def _kill_stuck_workers(self) -> None:
        """SIGKILL every worker whose loop stood still (common/stall.py); the loop above replaces it."""
        now = time.monotonic()
        for index, proc in enumerate(self.workers):
            if (proc is not None and proc.pid is not None and proc.is_alive()
                    and self.stalls.stuck(index, proc.pid, now)):
                wall, waited = self.stalls.still[index]
                self.log.warning("worker's event loop stood still; killing it", worker=index,
                                 worker_pid=proc.pid, stall_timeout=self.config.worker_stall_timeout,
                                 still_s=round(wall, 3), waited_for_cpu_s=round(waited, 3))
                proc.kill()
                proc.join(1.0)

    def drain(self) -> None:
        """Close every stream and stop every process (the memfd segments go with the last of them)."""
        self.notifier.stopping()
        self.log.info("draining: closing every stream, stopping every process",
                      **({"signal": self.stopping} if self.stopping else {}), drain_s=DRAIN_SECONDS)
        self.board.closing = True
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
        if self.metrics_listener is not None:
            self.metrics_listener.close()
        for pair in self.wake:
            for end in pair:
                end.close()
        self.ring.close()
        self.counters.close()


def run(config: Config, argv: list[str] | None = None) -> int:
    """`argv`: the command line `config` was loaded from, read again at each SIGHUP."""
    check_platform()
    logs.setup(config.log_level, "supervisor")
    supervisor = Supervisor(config, argv)
    proctitle.name(f"supervisor {supervisor.address}")
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    signal.signal(signal.SIGHUP, supervisor.on_hup)
    status = 1
    try:
        supervisor.start()
        status = supervisor.watch()
    finally:
        supervisor.drain()
        supervisor.log.info("stopped", restarts=supervisor.restarts)
    sys.stdout.flush()
    return status
