"""The sequencer: the only writer of event ids and of the ring.

It holds one capsule: the embedded one (sequencer/capsule/embedded.py) or, with --upstream, the link
to a real one (sequencer/capsule/upstream.py). The capsule hands it encoded events (`RingWriter`);
the sequencer numbers each from 1 (or adopts the upstream's id), writes it into the ring,
and wakes the workers that asked for it. Workers reach the capsule only through control
calls (`gateway.common.control`), which the sequencer routes to the capsule's table of
operations, so data flows one way: capsule -> sequencer -> ring -> worker.

The door's limits are the exception: their calls (`acquire`, `release`, `take`) are
answered by the sequencer itself from its exact counts (sequencer/client_ledger.py), per worker
connection, and so are `reload` (the supervisor's, after SIGHUP), `settings` and `jwks_stale`:
with a `jwks_url`, the sequencer fetches the JWT keys and hands them to the workers as
reloaded settings (sequencer/jwks.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

from gateway import logs
from gateway.common import control
from gateway.common import records
from gateway.common.board import Board, Role
from gateway.sequencer.client_ledger import Holdings, RateBuckets, StreamLedger
from gateway.sequencer.capsule.embedded import EmbeddedCapsule
from gateway.sequencer.capsule.upstream import UpstreamCapsule
from gateway.sequencer.capsule.interfaces import Capsule
from gateway.config.options import Config
from gateway.config.reload import CERTIFICATE, RELOADABLE
from gateway.sequencer.jwks import JwksFetcher
from gateway.common.control import Op
from gateway.common.metrics import Counters
from gateway.protocol.errors import METHOD_NOT_FOUND, RpcError
from shm import Ring
from shm.segment import Handle


class Sequencer:
    def __init__(self, config: Config, ring: Ring, wake_socks: list[socket.socket],
                 counters: Counters):
        self.ring = ring
        self.board = Board(ring.control)
        self.wake_socks = wake_socks
        self.counters = counters
        self.capsule: Capsule = (
            UpstreamCapsule(self, config.upstream, config.upstream_token, config.upstream_cacert)
            if config.upstream else EmbeddedCapsule(config, self))
        self.next_id = ring.head + 1
        self._wake_pending = False
        self.stopped = False  # set at shutdown: tasks cancelled then write nothing more
        self.log = logs.get("sequencer")
        self.streams = StreamLedger()
        self.buckets = RateBuckets()
        self.settings: dict | None = None  # the reloadable settings last sent to the workers
        self.started_with = config
        self.jwks = JwksFetcher(self._keys_fetched)
        self.own_operations = {Op.ACQUIRE: self._acquire, Op.RELEASE: self._release, Op.TAKE: self._take,
                               Op.RELOAD: self._reload, Op.SETTINGS: self._settings,
                               Op.JWKS_STALE: lambda held, p: self.jwks.stale()}

    # --- RingWriter: how the capsule's events reach the ring ---

    def publish(self, key: int, meta: int, full: bytes, plain: bytes | None = None) -> None:
        if not self.stopped:
            self.append_raw(self.next_id, key, meta, full, plain)

    def append_raw(self, event_id: int, key: int, meta: int, full: bytes, plain: bytes | None) -> None:
        flag, data = records.pack(full, plain)
        self.ring.append(event_id, key, meta | flag, data)
        self.next_id = event_id + 1
        self.counters.add("events_written")
        if not self._wake_pending:
            self._wake_pending = True
            asyncio.get_running_loop().call_soon(self._wake, False)

    def _wake(self, everyone: bool) -> None:
        """One byte to each worker that armed itself (or to all, for a session change)."""
        self._wake_pending = False
        for index, sock in enumerate(self.wake_socks):
            armed = self.board.take_armed(index)
            if everyone or armed:
                try:
                    sock.send(b"\x01")
                except (BlockingIOError, OSError):
                    pass  # a full socket already holds a wake-up; a dead worker is restarted

    def new_session(self) -> None:
        self.ring.reset()
        self.next_id = 1
        self.board.session_closed = 0
        self._wake(True)

    def close_session(self) -> None:
        self.board.session_closed = self.next_id
        self.set_connected(False)
        self._wake(True)

    def set_connected(self, up: bool) -> None:
        self.board.upstream_connected = up

    def set_conversation(self, mode: str) -> None:
        self.board.upstream_threaded = mode == "threaded"

    # --- control calls from workers ---

    async def handle(self, name: object, p: dict) -> object:
        """One control call, answered by the capsule's operation of that name."""
        op = Op.named(name)
        operation = None if op is None else self.capsule.operations.get(op)
        if operation is None:
            raise RpcError(METHOD_NOT_FOUND, f"unknown control call {str(name)[:64]}")
        return await operation(p)

    # --- the door's limits and reloads: one worker connection's calls ---

    async def serve_worker(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One control connection; the stream places it took are released when it closes."""
        held = Holdings()

        async def handle(name: object, p: dict) -> object:
            op = Op.named(name)
            own = self.own_operations.get(op) if op is not None else None
            return own(held, p) if own is not None else await self.handle(name, p)

        try:
            await control.serve_connection(reader, writer, handle)
        finally:
            self.streams.release_all(held)

    @staticmethod
    def _places(p: dict) -> list[tuple[str, str, int]]:
        """(the limit's name, its ledger key, its limit) of each limit a stream falls under."""
        places = []
        if p.get("client") is not None and p.get("client_limit"):
            places.append(("client_streams", "client " + str(p["client"]), int(p["client_limit"])))
        if p.get("token") is not None and p.get("token_limit"):
            places.append(("token_streams", "token " + str(p["token"]), int(p["token_limit"])))
        return places

    def _acquire(self, held: Holdings, p: dict) -> dict:
        places = self._places(p)
        refused = self.streams.acquire(held, [(key, limit) for _name, key, limit in places])
        return {"refused": None if refused is None else places[refused][0]}

    def _release(self, held: Holdings, p: dict) -> None:
        keys = [f"{kind} {p[kind]}" for kind in ("client", "token") if p.get(kind) is not None]
        self.streams.release(held, keys)

    def _take(self, held: Holdings, p: dict) -> dict:
        wait = self.buckets.take(str(p["client"]), float(p["rate"]), float(p["burst"]), time.monotonic())
        return {"retry_after": wait}

    def _reload(self, held: Holdings, p: dict) -> dict:
        self.settings = self._with_fetched_keys(p["settings"])
        self.board.config_generation += 1
        return self._settings(held, p)

    def _with_fetched_keys(self, settings: dict) -> dict:
        """`settings` (a reload's, whose JWT table names the `jwks_url` but holds no key) with
        the set fetched from that URL, when there is one."""
        jwt = settings.get("jwt") or {}
        text = self.jwks.follow(jwt)
        return {**settings, "jwt": {**jwt, "key": text}} if text and jwt.get("jwks_url") else settings

    def _keys_fetched(self, url: str, text: str) -> None:
        """A new set from `url`: the workers verify with it from their next look."""
        settings = self.settings or {name: self.started_with.to_dict()[name] for name in RELOADABLE}
        jwt = settings.get("jwt")
        if jwt is not None and jwt.get("jwks_url") == url:  # the certificate is not read again for it
            self.settings = {**settings, "jwt": {**jwt, "key": text}, CERTIFICATE: False}
            self.board.config_generation += 1

    def _settings(self, held: Holdings, p: dict) -> dict:
        return {"generation": self.board.config_generation, "settings": self.settings}


async def serve(config: Config, ring_segment: Handle, counters_segment: Handle, control_path: str,
                wake_socks: list[socket.socket]) -> None:
    ring = Ring.attach(ring_segment)
    counters = Counters.attach(counters_segment, Role.SEQUENCER)
    sequencer = Sequencer(config, ring, wake_socks, counters)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_unix_server(
        sequencer.serve_worker, path=control_path)
    sequencer.capsule.start()
    sequencer.jwks.follow(config.to_dict()["jwt"])
    fetching = asyncio.create_task(sequencer.jwks.run())
    sequencer.board.sequencer_pid = os.getpid()
    sequencer.log.info("sequencer ready", control=control_path)
    try:
        await stop.wait()
    finally:
        sequencer.stopped = True
        fetching.cancel()
        sequencer.capsule.close()
        sequencer.board.sequencer_pid = 0
        server.close()
        counters.close()
        ring.close()


def main(config_dict: dict, ring_segment: Handle, counters_segment: Handle, control_path: str,
         wake_socks: list[socket.socket]) -> None:
    """Process entry point (spawn context)."""
    import uvloop

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor drives shutdown
    config = Config.from_dict(config_dict)
    logs.setup(config.log_level, "sequencer")
    uvloop.run(serve(config, ring_segment, counters_segment, control_path, wake_socks))
