"""What every request passes before any route: a page's origin where --allowed-origins names
any (403 for another, cors.py), the worker's open-request limit (503 + Retry-After), the head
limits (431) and an ambiguous head (400: two Authorization headers, head.py, on every
protocol); a WebSocket handshake is refused outright (403).

The server bounds what it buffers of an unfinished head (http/head_checks.py); this checks
the finished head, so a refusal can say which limit it was. Liveness and readiness probes
count apart from the open requests, under bounds of their own: `PROBES_IN_FLIGHT` a worker,
`PROBES_PER_CLIENT` a client address (`client_key`: one address cannot take every place).
A probe holds its place while its answer is computed, and gives it back as its answer starts
(`ProbeSend`): never while its client does not read (SECURITY.md, probes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from gateway.config.options import Config
from gateway.common.metrics import Counters
from gateway.tuning import PROBES_IN_FLIGHT, PROBES_PER_CLIENT
from gateway.worker.access_log import AccessLog, Exchange, NotingPut, NotingSend
from gateway.worker.door.asgi_http import CLOSE, RETRY_AFTER, put_all
from gateway.worker.door.client_address import client_key, client_of
from gateway.worker.door.cors import CorsSend, Origins, answer_preflight, is_preflight
from gateway.worker.door.head import authorization_problem
from gateway.worker.door.refusal import INTERNAL_REFUSAL, Answered, Refused, refusal_messages, refuse
from gateway.worker.door.request_head import head_of

if TYPE_CHECKING:
    from gateway.worker.delivery.drivers import Served

# Liveness and readiness: never refused for load, so they hold none of --max-connections'
# places. Each is computed at once, so more than a few in flight on one worker is a flood,
# bounded on its own.
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
NO_WEBSOCKET = Refused(403, "this door serves no WebSocket: send JSON-RPC as POST /")


class Admission:
    """The ASGI app around the whole worker app: every request passes here first."""

    def __init__(self, app, config: Config, counters: Counters, access: AccessLog, rpc=None):
        self.app, self.config, self.counters, self.access = app, config, counters, access
        # `POST /` skips Starlette's middleware and router (Starlette routes it to `rpc` and
        # nothing else): an open stream then holds no frames or closures of theirs.
        self.rpc = rpc
        self.origins = Origins(config.allowed_origins)  # a reload replaces it (worker/reload.py)
        self.open = 0
        self.probes = 0  # probes in flight, apart from `open` (PROBE_PATHS)
        self.probes_of: dict[str, int] = {}  # probes in flight by client key

    def _refusal(self, scope: dict) -> Refused | None:
        head = head_of(scope)
        if head.lines > self.config.max_headers:
            return Refused(431, f"the request has more than {self.config.max_headers} header lines", [CLOSE])
        if head.size > self.config.max_header_bytes:
            return Refused(431, f"the request head exceeds {self.config.max_header_bytes} bytes", [CLOSE])
        ambiguous = authorization_problem(head.count(b"authorization"))
        if ambiguous is not None:
            return Refused(400, ambiguous, [CLOSE])
        if scope["path"] in PROBE_PATHS:
            if self.probes >= PROBES_IN_FLIGHT:
                return Refused(503, f"this worker is answering {PROBES_IN_FLIGHT} probes already; retry shortly",
                               [RETRY_AFTER, CLOSE])
            if self.probes_of.get(self._client(scope), 0) >= PROBES_PER_CLIENT:
                return Refused(503, f"this client has {PROBES_PER_CLIENT} probes in flight already; retry shortly",
                               [RETRY_AFTER, CLOSE])
        elif self.open >= (self.config.max_connections or 0):  # resolved at start: never None here
            return Refused(503, "this worker is serving as many requests as it may; retry shortly",
                           [RETRY_AFTER, CLOSE])
        return None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        # The access log's line is written here, in this frame, when the request is over (an
        # open stream keeps no other frame of its own for it).
        exchange = self.access.begin(scope)
        send = NotingSend(send, exchange)
        placed = False
        try:
            if scope["type"] == "websocket":
                await refuse(send, NO_WEBSOCKET, self.counters, "websocket.")
                return
            # A page's origin, before any token is read (cors.py); with none allowed, Origin is not read.
            cors = self.origins.admit(scope) if self.origins.allowed else None
            if cors is not None:
                if isinstance(cors, Refused):
                    exchange.refused(cors)
                    await refuse(send, cors, self.counters)
                    return
                send = CorsSend(send, cors)
            refusal = self._refusal(scope)
            if refusal is None and cors is not None and is_preflight(scope):
                refusal = await answer_preflight(send, scope, getattr(self.app, "routes", ()))
                if refusal is None:
                    return
            if refusal is not None:
                await refuse(send, refusal, self.counters)
                return
            if scope["path"] in PROBE_PATHS:
                probe = ProbeSend(send, self, self._client(scope))
                try:
                    await self.app(scope, receive, probe)
                finally:
                    probe.release()
                return
            self._take_place()
            placed = True
            to_rpc = self.rpc is not None and scope["path"] == "/" and scope["method"] == "POST"
            try:
                await (self.rpc if to_rpc else self.app)(scope, receive, send)
            except Exception:
                if to_rpc:  # as Starlette would (http_error), if the response has not started
                    try:
                        await refuse(send, INTERNAL_REFUSAL, self.counters)
                    except Exception:
                        pass  # it had: the server ends the connection
                raise
        finally:
            if placed:
                self._run_over(exchange)
            else:  # answered at the door
                self.access.end(exchange)

    def at_once(self, scope: dict, body: bytes, cycle, over: Callable[..., None]) -> bool | None:
        """A `POST /` whose whole body came with its head, served with no coroutine when
        nothing on its way can wait but the pace (`RpcEndpoint.at_once`: a WatchSession's
        opening; no CORS here): the same checks as `__call__`'s in the same order, each answer
        put at once (the front's `Cycle.put`), and, as there, its place taken before the
        pace. True: answered; False: nothing was done, and `__call__` serves it; None: it
        waits for the pace holding its place (`PacedOpening`), and `over(cycle, error)` is
        called when its run is over."""
        rpc = self.rpc
        request = None if rpc is None or self.origins.allowed else rpc.at_once(body)
        if request is None:
            return False
        exchange = self.access.begin(scope)
        put = NotingPut(cycle.put, exchange)
        end: Callable[[Exchange], None] | None = self.access.end  # its line; once placed, its place too
        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                put_all(put, refusal_messages(refusal, self.counters))
                return True
            self._take_place()
            end = self._run_over
            try:
                rule = rpc.admit_now(scope, body, request, put)
            except Exception:
                self._failed(put)
                raise
            if rule is Answered.ANSWERED:
                return True
            pace = rpc.openings.pace
            if not pace.open_now:
                pace.call_on_turn(PacedOpening(self, scope, request, rule, put, cycle, over))
                end = None  # the paced opening ends it: on its turn, or at the stop
                return None
            pace.take()
            self.open_stream(scope, request, rule, put, cycle.front)
            return True
        finally:
            if end is not None:
                end(exchange)

    def open_stream(self, scope: dict, request: dict, rule, put: NotingPut, front) -> None:
        """An at-once opening's stream, on its pace's turn (`RpcEndpoint.open_now`); a failure
        is answered 500, as `__call__` answers it, and raised on."""
        try:
            self.rpc.open_now(scope, request, rule, put, front)
        except Exception:
            self._failed(put)
            raise

    def _failed(self, put: NotingPut) -> None:
        put_all(put, refusal_messages(INTERNAL_REFUSAL, self.counters))  # as `__call__`

    def _take_place(self) -> None:
        """A request holds one of the worker's places (--max-connections) while it runs."""
        self.open += 1
        self.counters.add("worker_requests_open")

    def _give_back(self) -> None:
        """The request's place is back: its run is over, or the stream it opened ended."""
        self.open -= 1
        self.counters.sub("worker_requests_open")

    def _run_over(self, exchange: Exchange) -> None:
        """Its run is over: its place is given back and its line written, unless it opened a
        stream, which holds both until its end (`stream_over`)."""
        if exchange.stream is None:
            self._give_back()
            self.access.end(exchange)

    def _client(self, scope: dict) -> str:
        """The client key a probe counts under (behind the trusted proxies now in force)."""
        return client_key(self.rpc.limits.client(scope) if self.rpc is not None else client_of(scope, ()))

    def stream_over(self, served: Served, reason: str | None) -> None:
        """A stream's request is over (the hub's `on_end`; `reason` None: it failed under it):
        its places are given back and its line written. Its request's frames may have
        returned long before (the front's stream has none: drivers.py)."""
        exchange, served.exchange = served.exchange, None
        assert isinstance(exchange, Exchange)  # set when the stream opened (access_log.stream_opened)
        self.rpc.openings.close(served)
        self._give_back()
        self.counters.add("stream_ends", label=reason or "aborted")
        exchange.ended = reason
        self.access.end(exchange)


class ProbeSend:
    """A probe's send: its places (the worker's, its client's) are held from its creation
    until its answer starts, or its run ends without one, whichever comes first."""

    __slots__ = ("send", "admission", "client", "held")

    def __init__(self, send, admission: Admission, client: str):
        self.send, self.admission, self.client, self.held = send, admission, client, True
        admission.probes += 1
        admission.probes_of[client] = admission.probes_of.get(client, 0) + 1

    async def __call__(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.release()  # computed: what is left is its client's to read
        await self.send(message)

    def release(self) -> None:
        if self.held:
            self.held = False
            admission = self.admission
            admission.probes -= 1
            left = admission.probes_of[self.client] - 1
            if left:
                admission.probes_of[self.client] = left
            else:
                del admission.probes_of[self.client]


class PacedOpening:
    """An opening of the at-once path waiting for its turn in the pace (`OpeningPace.call_on_turn`),
    admitted and holding its place: it opens on its turn, unless its client left meanwhile
    (then, as on the awaited path, it is neither opened nor answered), or the worker's stop
    ends it first (`end`)."""

    __slots__ = ("admission", "scope", "request", "rule", "put", "cycle", "over")

    def __init__(self, admission: Admission, scope: dict, request: dict, rule, put: NotingPut, cycle,
                 over: Callable[..., None]):
        self.admission, self.scope, self.request, self.rule = admission, scope, request, rule
        self.put, self.cycle, self.over = put, cycle, over

    def __call__(self) -> None:
        admission, front, error = self.admission, self.cycle.front, None
        try:
            if not front.closed:
                admission.open_stream(self.scope, self.request, self.rule, self.put, front)
        except Exception as failed:
            error = failed
        finally:
            admission._run_over(self.put.exchange)
        self.over(self.cycle, error)

    def end(self) -> None:
        """The stop's grace ended before its turn: as an awaited opening whose task the stop
        cancels, it is not answered by the app (the front ends its connection: `over`), and
        its place is given back and its line written."""
        self.admission._run_over(self.put.exchange)
        self.over(self.cycle, None)
