"""The access log: one JSON line per request, and two per stream (its opening and its end).

Written by the worker that served the request, on stderr, through logs.py, so a line is
`{"ts", "level", "role": "worker", "pid", "event", ...}` like every other; `--access-log off`
writes none. The events:

- `request`: every request that is not a stream, refusals included;
- `stream open`: a stream's response head is sent;
- `stream end`: the stream is over, with `events`, `bytes` and `reason`.

Fields: `http_method` and `path` (the path cut at `MAX_PATH_CHARS`), `method` (the JSON-RPC
method, on `POST /` once the body named a known one), `status` (the HTTP status; null when
the client left before any answer), `code` (a JSON-RPC error's code), `caller` (the name of
the token's `[[network.authentication.tokens]]` entry, or a JWT's `sub`: never the token, never its digest),
`client` (the peer, or the client behind `--trusted-proxies`: `limits.ClientLimits.client`) and `duration_s` (from the
request's head to its last byte; for
`stream end`, the stream's whole life). A stream's end adds `events` (numbered events it
wrote, a replay's included), `bytes` (the SSE body bytes, without HTTP framing) and
`reason`: `client_left`, `task_ended` (its task's final or input-required status), `session_closed`,
`session_changed` (the ring began a new session), `revoked` (a reload took its token's right to it), `expired` (its
token's `expires` or `exp` came), `lapped` (the ring lapped its replay, and what lapped replays kept alive
passed the worker's `--max-lapped-replay-bytes`: delivery/lapped.py), `drain` (the gateway is stopping) or
`aborted` (the connection failed under it). A refusal whose status covers several causes adds
`refusal`: a 401's `no token` (none, or another scheme) or `unknown token` (no rule matches,
an expired token, a JWT that fails a check), and a refused bearer token `token_problem`: why,
for the operator (gateway/common/metrics.py's `TOKEN_PROBLEMS`: `expired`, `not_yet_valid`,
`signature`, `algorithm`, `issuer`, `audience`, `unknown_key`, `claims`, `malformed`; the
client's 401 says none of it).

Levels: `info`, refusals included, except `murmur.StopSession` and `CancelTask`, which are
`warning` whatever their answer: they change state for others (StopSession ends every task
and stream of the session, and on a public door anyone may call it), so `--log-level warning`
still says who asked.

Cost: a stream writes two lines whatever it carries. What its end reports is counted where the
hub hands its bodies to the sink and where it takes an event (one add each), never logged per
event.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from gateway import logs
from gateway.protocol.activation import CANCEL_TASK, STOP_SESSION
from gateway.tuning import MAX_PATH_CHARS

if TYPE_CHECKING:
    from gateway.worker.delivery.drivers import Served

SCOPE_KEY = "murgw.exchange"  # where a request's `Exchange` rides in its ASGI scope
STATE_CHANGING = (STOP_SESSION, CANCEL_TASK)

log = logs.get("worker")


def peer_address(scope: dict) -> str:
    """The connection's peer (the ASGI scope's `client`), "" when the server knows none: the
    client a line names until the app hands the log the trusted-proxy rule (`client_of`)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


class Exchange:
    """One request as the access log reports it: the endpoints fill in what only they know
    (the JSON-RPC method, the code, the caller's name, the stream and why it ended)."""

    __slots__ = ("started", "http_method", "path", "client", "status", "method", "code", "caller",
                 "stream", "ended", "refusal", "token_problem")

    def __init__(self, scope: dict, client: str):
        self.started = time.monotonic()
        self.http_method = scope.get("method", "WEBSOCKET")
        self.path = scope["path"][:MAX_PATH_CHARS]
        self.client = client
        self.status: int | None = None
        self.method: str | None = None
        self.code: int | None = None
        self.caller: str | None = None
        self.stream: Served | None = None  # the hub's record of the stream it opened
        self.ended: str | None = None
        self.refusal: str | None = None  # door/refusal.py's `why`
        self.token_problem: str | None = None

    def refused(self, refusal) -> None:
        """Note why a refusal (door/refusal.py's `Refused`) was sent."""
        self.refusal, self.token_problem = refusal.why, refusal.token_problem

    def fields(self) -> dict:
        fields = {"http_method": self.http_method, "path": self.path, "method": self.method,
                  "status": self.status, "code": self.code, "caller": self.caller, "client": self.client}
        if self.refusal is not None:
            fields["refusal"] = self.refusal
        if self.token_problem is not None:
            fields["token_problem"] = self.token_problem
        return fields


def exchange_of(scope: dict) -> Exchange:
    return scope[SCOPE_KEY]


class NotingSend:
    """The server's `send`, noting the response status in the request's `Exchange`."""

    __slots__ = ("send", "exchange")

    def __init__(self, send, exchange: Exchange):
        self.send, self.exchange = send, exchange

    async def __call__(self, message: dict) -> None:
        note_status(self.exchange, message)
        await self.send(message)


class NotingPut(NotingSend):
    """`NotingSend` around a send that never waits (the front's `Cycle.put`), for the front's
    openings, which run with no coroutine."""

    __slots__ = ()

    def __call__(self, message: dict) -> None:  # type: ignore[override]  # at once, not awaited
        note_status(self.exchange, message)
        self.send(message)


def note_status(exchange: Exchange, message: dict) -> None:
    if message["type"] in ("http.response.start", "websocket.http.response.start"):
        exchange.status = message["status"]


class AccessLog:
    """Writes the lines (or, with `--access-log off`, none). `Admission` (door/admission.py)
    begins an `Exchange` for every HTTP request and WebSocket handshake and ends it when the
    request is over; the stream's opening is written by `POST /` when its head is sent."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.client_of: Callable[[dict], str] = peer_address

    def begin(self, scope: dict) -> Exchange:
        exchange = scope[SCOPE_KEY] = Exchange(scope, self.client_of(scope))
        return exchange

    def stream_opened(self, exchange: Exchange, served: Served) -> None:
        exchange.stream, served.exchange = served, exchange
        self._write("stream open", exchange)

    def end(self, exchange: Exchange) -> None:
        served = exchange.stream
        if served is None:
            self._write("request", exchange, duration_s=_since(exchange.started))
        else:
            self._write("stream end", exchange, duration_s=_since(exchange.started),
                        events=served.stream.events_sent, bytes=served.bytes_sent,
                        reason=exchange.ended or "aborted")

    def _write(self, event: str, exchange: Exchange, **extra) -> None:
        level = "warning" if exchange.method in STATE_CHANGING else "info"
        if not self.enabled or not log.wants(level):
            return
        fields = exchange.fields()
        if extra:
            fields.update(extra)
        log.write(level, event, fields)


def _since(started: float) -> float:
    return round(time.monotonic() - started, 4)
