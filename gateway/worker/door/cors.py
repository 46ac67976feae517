"""Pages on other origins (CORS, the Fetch standard): which may call the gateway, and the
headers that let a browser hand them its answers.

With `--allowed-origins` empty (the default) nothing here runs: `Admission` checks that the
set is empty and reads no `Origin`, so every answer is byte for byte what it was. With
origins named, a request is decided before any route, before the door reads its token:

- no `Origin`, or the page is the gateway's own (`Origin`'s host and port are the request's
  `Host`, as behind an application's proxy on one origin): served as before, no CORS header;
- an allowed origin: every answer carries `Access-Control-Allow-Origin: <that origin>`,
  `Vary: Origin` and `Access-Control-Expose-Headers: A2A-Extensions`, refusals and stream
  heads included (`CorsSend` adds them to the response head, on HTTP/1.1 and HTTP/2 alike);
  its preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered 204 with the
  methods the path takes, the request headers the protocol uses and a max age;
- any other origin (and `null`): 403, problem details, no `Access-Control-*` header, so a
  browser hands the page nothing, its preflight included.

A head the HTTP/1.1 front refuses before any app sees it (malformed, ambiguous, past its
buffer: gateway/worker/http/front.py) is answered without them: no browser sends one, and its
`Origin` is never read.

No `Access-Control-Allow-Credentials`: the gateway reads tokens from `Authorization`, never
from cookies, so a browser never sends a credential a page did not put in the request
itself (SECURITY.md, "Browsers and CORS").
"""

from __future__ import annotations

from gateway.tuning import CORS_MAX_AGE_SECONDS
from gateway.worker.access_log import NotingSend
from gateway.worker.door.refusal import Refused
from gateway.worker.door.request_head import head_of

# The request headers the protocol uses; a page's fetch may carry any of them.
PROTOCOL_HEADERS = b"Authorization, Content-Type, A2A-Version, A2A-Extensions, Last-Event-ID"
VARY = (b"vary", b"Origin")
EXPOSE = (b"access-control-expose-headers", b"A2A-Extensions")
PREFLIGHT_HEAD = [(b"access-control-allow-headers", PROTOCOL_HEADERS),
                  (b"access-control-max-age", str(CORS_MAX_AGE_SECONDS).encode())]
NOT_ALLOWED = Refused(403, "this page's origin is not one the gateway allows (--allowed-origins)",
                      why="origin not allowed")
NOT_FOUND = Refused(404, "nothing is served at this path")


class Origins:
    """The origins whose pages may call the gateway, and each one's answer headers (made once)."""

    __slots__ = ("_heads", "allowed")

    def __init__(self, allowed: tuple[str, ...]):
        self._heads = {origin.encode(): [(b"access-control-allow-origin", origin.encode()), VARY, EXPOSE]
                       for origin in allowed}
        self.allowed = bool(self._heads)

    def admit(self, scope: dict) -> list[tuple[bytes, bytes]] | Refused | None:
        """The headers every answer to this request carries (its origin is allowed), None (no
        `Origin`, or the gateway's own page), or NOT_ALLOWED."""
        origins = head_of(scope).all(b"origin")
        if not origins:
            return None
        origin = origins[0].encode("latin-1")
        heads = self._heads.get(origin) if len(origins) == 1 else None
        if heads is not None:
            return heads
        if len(origins) == 1 and _same_origin(origin, scope):
            return None
        return NOT_ALLOWED


def is_preflight(scope: dict) -> bool:
    return scope["method"] == "OPTIONS" and head_of(scope).get(b"access-control-request-method") is not None


def path_methods(routes, path: str) -> bytes | None:
    """The methods the route serving `path` takes (None: no route serves it). A route that
    takes every method is the attachments' (gateway/worker/attachments.py), which serves GET."""
    for route in routes:
        if route.path_regex.match(path):
            return ", ".join(sorted(route.methods or ("GET",))).encode()
    return None


async def answer_preflight(send, scope: dict, routes) -> Refused | None:
    """204 with the path's methods; the refusal to send instead when no route serves the path."""
    methods = path_methods(routes, scope["path"])
    if methods is None:
        return NOT_FOUND
    await send({"type": "http.response.start", "status": 204,
                "headers": [(b"access-control-allow-methods", methods), *PREFLIGHT_HEAD]})
    await send({"type": "http.response.body", "body": b""})
    return None


def _same_origin(origin: bytes, scope: dict) -> bool:
    """Whether `Origin` names the host the request reached (its `Host`, or HTTP/2's
    `:authority` that hypercorn hands on as `host`): a page the gateway or a proxy in front of
    it serves on the gateway's own origin, which a browser calls without CORS."""
    authority = origin.partition(b"://")[2].lower()
    return any(name.lower() == b"host" and value.lower() == authority for name, value in scope["headers"])


class CorsSend(NotingSend):
    """The server's send, its status noted (`NotingSend`), with an allowed origin's headers
    added to the response head."""

    __slots__ = ("cors",)

    def __init__(self, noting: NotingSend, cors: list[tuple[bytes, bytes]]):
        super().__init__(noting.send, noting.exchange)
        self.cors = cors

    async def __call__(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *self.cors]}
        await NotingSend.__call__(self, message)
