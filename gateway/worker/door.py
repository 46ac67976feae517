"""The door: who is asking (bearer tokens, scopes), and what every request must pass first.

`Admission` wraps the whole app: the worker's open-request limit (503 + Retry-After) and the
head limits (431). `Door` maps an Authorization header to a `Caller`: tokens are kept only as
sha256 and compared in constant time; a token's `name` owns the tasks it creates, so a
rotated token keeps them. The request checks here are pure functions of the parsed head or
body; `app.py` applies them in the order its docstring gives.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.config import Config, TokenRule
from gateway.metrics import Counters
from gateway.protocol.activation import WATCH_SESSION
from gateway.worker.access_log import AccessLog, NotingSend
from gateway.worker.problem import PROBLEM_HEAD, PROBLEM_TYPE, REFUSAL_REASONS, problem_body

JSON_HEAD = [(b"content-type", b"application/json")]
CLOSE = (b"connection", b"close")
NOSNIFF = (b"x-content-type-options", b"nosniff")
RETRY_AFTER_SECONDS = 1
RETRY_AFTER = (b"retry-after", str(RETRY_AFTER_SECONDS).encode())
# Liveness and readiness: never refused for load, so they hold none of --max-connections'
# places. Each is answered at once, so more than a few in flight on one worker is a flood
# (clients that pipeline probes and never read the answers), bounded on its own.
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
PROBES_IN_FLIGHT = 16


class Refused(Exception):
    """A door refusal: its HTTP status, and problem details (problem.py) saying why.

    `reason` is its label in murgw_requests_refused_total, or None where it is not counted
    there: a 429 counts in murgw_requests_limited_total (limits.py), and a 503 made with
    `counted=False` is the gateway's own trouble (an unreachable sequencer), not a refusal."""

    def __init__(self, status: int, message: str, headers: list[tuple[bytes, bytes]] = (), *,
                 counted: bool = True):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, list(headers)
        self.reason = REFUSAL_REASONS.get(status) if counted else None

    @property
    def body(self) -> bytes:
        return problem_body(self.status, self.message)

    def response(self) -> Response:
        """The same refusal as a Starlette response, for a route's handler."""
        return Response(self.body, self.status, {k.decode(): v.decode() for k, v in self.headers},
                        media_type=PROBLEM_TYPE)

    async def send(self, send, asgi: str = "") -> None:
        """`asgi` "websocket." refuses a WebSocket handshake (ASGI's denial response)."""
        await respond_bytes(send, self.status, self.body, [*PROBLEM_HEAD, *self.headers], asgi)

    def count(self, counters: Counters) -> None:
        if self.reason is not None:
            counters.add("requests_refused", label=self.reason)

    async def answer(self, send, counters: Counters, asgi: str = "") -> None:
        """Count, then send: how every refusal leaves the door."""
        self.count(counters)
        await self.send(send, asgi)


INTERNAL_REFUSAL = Refused(500, "internal error")
NO_WEBSOCKET = Refused(403, "this door serves no WebSocket: send JSON-RPC as POST /")


class Caller:
    """Who is asking: the owner name tasks are recorded under, and whether it sees all tasks."""

    def __init__(self, owner: str | None, sees_all: bool):
        self.owner, self.sees_all = owner, sees_all

    def params(self) -> dict:
        return {"owner": self.owner, "sees_all": self.sees_all}


class Door:
    """`[network.authentication]`: bearer tokens kept as sha256, compared in constant time.

    Two steps, because the first needs only the request head: `authenticate` finds the token's
    rule (401 when there is none), `authorize` checks its scope for the method (403). A task
    belongs to the name of the rule whose token created it.
    """

    def __init__(self, config: Config):
        self.rules = config.tokens

    @property
    def public(self) -> bool:
        return not self.rules

    def authenticate(self, authorization: str | None) -> TokenRule | None:
        """The rule the bearer token matches; None on a public door."""
        if self.public:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(401, "this door requires Authorization: Bearer <token>",
                          [(b"www-authenticate", b"Bearer")])
        digest = hashlib.sha256(token.strip().encode()).hexdigest()
        match = None
        for rule in self.rules:  # every rule is compared, so timing says nothing of which
            if hmac.compare_digest(rule.sha256, digest):
                match = rule
        if match is None:
            raise Refused(401, "the bearer token is not valid for this door",
                          [(b"www-authenticate", b'Bearer error="invalid_token"')])
        return match

    def authorize(self, rule: TokenRule | None, method: str) -> Caller:
        if rule is None:
            return Caller(None, True)
        if "*" not in rule.scopes and method not in rule.scopes:
            raise Refused(403, f"the token does not hold the {method} scope")
        return Caller(rule.name, "*" in rule.scopes or WATCH_SESSION in rule.scopes)

    def still_admits(self, rule: TokenRule, method: str) -> bool:
        """Whether the token behind `rule` (a stream opened under it) still holds `method`'s
        scope in the rules now in force (a reload may have replaced them)."""
        now = next((r for r in self.rules if hmac.compare_digest(r.sha256, rule.sha256)), None)
        return now is not None and ("*" in now.scopes or method in now.scopes)


def http_error_handler(counters: Counters):
    """Starlette's own refusals (no route, a method the route does not take, a bug), as the
    door's refusals are, and counted as they are (a bug's 500 is no refusal)."""

    async def http_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, HTTPException):
            return INTERNAL_REFUSAL.response()
        headers = exc.headers or {}
        if exc.status_code == 404:
            detail = "nothing is served at this path"
        elif exc.status_code == 405 and "Allow" in headers:
            detail = f"this path takes only {headers['Allow']}"
        else:
            detail = exc.detail.lower()
        refusal = Refused(exc.status_code, detail, [(k.encode(), v.encode()) for k, v in headers.items()])
        refusal.count(counters)  # 404 and 405; any other status is answered, not counted
        return refusal.response()

    return http_error


def header(scope: dict, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def header_values(scope: dict, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == name]


def is_json_content_type(value: str | None) -> bool:
    if not value:
        return False
    media = value.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def respond(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] = ()) -> None:
    """A JSON answer."""
    await respond_bytes(send, status, body, [*JSON_HEAD, *headers])


async def respond_bytes(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] = (),
                        asgi: str = "") -> None:
    await send({"type": f"{asgi}http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": f"{asgi}http.response.body", "body": body})


def rpc_id_problem(rpc_id: object, max_chars: int) -> str | None:
    """Why `rpc_id` is not an id this door answers to; None when it is one."""
    if rpc_id is None or isinstance(rpc_id, bool) or not isinstance(rpc_id, (str, int)):
        return "the request id must be a string or an integer"
    if isinstance(rpc_id, int) and not -(1 << 63) <= rpc_id < 1 << 64:
        return "the request id is out of range"
    if isinstance(rpc_id, str) and len(rpc_id) > max_chars:
        return f"the request id is longer than {max_chars} characters"
    return None


def rpc_id_of(request: object, max_chars: int):
    """The id an error answer echoes: the request's, when it is a valid one, else null."""
    if isinstance(request, dict) and rpc_id_problem(request.get("id"), max_chars) is None:
        return request["id"]
    return None


def nests_deeper(value: object, limit: int) -> bool:
    """Whether arrays and objects in `value` nest more than `limit` levels (`{}` is one)."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
    return False


class Admission:
    """What every request passes before any route: the worker's open-request limit and the head
    limits. The server bounds what it buffers of an unfinished head (hypercorn/serving.py);
    this checks the finished head, so a refusal can say which limit it was. A probe counts
    apart from the open requests, under its own bound (PROBES_IN_FLIGHT)."""

    def __init__(self, app, config: Config, counters: Counters, access: AccessLog, rpc=None):
        self.app, self.config, self.counters, self.access = app, config, counters, access
        # `POST /` skips Starlette's middleware and router (Starlette routes it to `rpc` and
        # nothing else): an open stream then holds no frames or closures of theirs.
        self.rpc = rpc
        self.open = 0
        self.probes = 0  # probes in flight, apart from `open` (PROBE_PATHS)

    def _refusal(self, scope: dict) -> Refused | None:
        headers = scope["headers"]
        if len(headers) > self.config.max_headers:
            return Refused(431, f"the request has more than {self.config.max_headers} header lines", [CLOSE])
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + sum(
            len(name) + len(value) for name, value in headers)
        if size > self.config.max_header_bytes:
            return Refused(431, f"the request head exceeds {self.config.max_header_bytes} bytes", [CLOSE])
        if scope["path"] in PROBE_PATHS:
            if self.probes >= PROBES_IN_FLIGHT:
                return Refused(503, f"this worker is answering {PROBES_IN_FLIGHT} probes already; retry shortly",
                               [RETRY_AFTER, CLOSE])
        elif self.open >= self.config.max_connections:
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
        try:
            if scope["type"] == "websocket":
                await NO_WEBSOCKET.answer(send, self.counters, "websocket.")
                return
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal.answer(send, self.counters)
                return
            if scope["path"] in PROBE_PATHS:
                self.probes += 1
                try:
                    await self.app(scope, receive, send)
                finally:
                    self.probes -= 1
                return
            self.open += 1
            to_rpc = self.rpc is not None and scope["path"] == "/" and scope["method"] == "POST"
            try:
                await (self.rpc if to_rpc else self.app)(scope, receive, send)
            except Exception:
                if to_rpc:  # as Starlette would (http_error), if the response has not started
                    try:
                        await INTERNAL_REFUSAL.send(send)
                    except Exception:
                        pass  # it had: the server ends the connection
                raise
            finally:
                self.open -= 1
        finally:
            self.access.end(exchange)
