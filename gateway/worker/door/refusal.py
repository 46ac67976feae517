"""A refusal, and the one way every refusal leaves the gateway: `refuse`, count then send.

A `Refused` is an HTTP status and problem details (problem.py) saying why. Where it counts
is decided when it is made: a door refusal in murgw_requests_refused_total{reason} (the
reasons are gateway/common/metrics.py's `REFUSAL_LABELS`), a per-client or per-token limit's 429 in
murgw_requests_limited_total{limit} (limits.py), and the gateway's own trouble (an
unreachable sequencer or upstream, made with `counted=False`) or a 500 nowhere. `refuse`
counts it as it is sent, over raw ASGI; `response` hands the same refusal to Starlette (a
route's handler, the error handler), sent by `refuse` too. A refusal whose one status covers
several causes carries `why`, the access log's `refusal` field (a 401's `no token` or
`unknown token`), and a refused bearer token its `token_problem` (door/auth.py), which the
endpoints that authenticate note in the request's `Exchange` (`Exchange.refused`).

A request head no route sees is answered outside `refuse` (the front's `_refuse`,
gateway/worker/http/front.py); `count_refusal` counts it by the same rule
(`refusal_reason`: an ambiguous head's 400 is `ambiguous`, door/head.py's `AMBIGUITIES`).
"""

from __future__ import annotations

import enum

from starlette.responses import Response

from gateway.common.metrics import AMBIGUOUS, REFUSAL_REASONS, Counters
from gateway.worker.door.asgi_http import answer_messages, send_all
from gateway.worker.door.head import AMBIGUITIES
from gateway.worker.problem import PROBLEM_HEAD, PROBLEM_TYPE, problem_body


def refusal_reason(status: int, detail: str) -> str | None:
    """The `reason` a refusal counts under (None: a status no reason names)."""
    if status == 400 and detail in AMBIGUITIES:
        return AMBIGUOUS
    return REFUSAL_REASONS.get(status)


def count_refusal(counters: Counters, status: int, detail: str) -> None:
    """Count a refusal sent outside `refuse` (the answer to a head no route sees)."""
    reason = refusal_reason(status, detail)
    if reason is not None:
        counters.add("requests_refused", label=reason)


class Refused(Exception):
    """A refusal: its HTTP status, why (problem details), its headers, and the counter and
    label it counts under (None: not counted); `why`, the access log's word for its cause, and
    `token_problem`, why a bearer token was refused."""

    def __init__(self, status: int, message: str, headers: list[tuple[bytes, bytes]] | tuple[()] = (), *,
                 counted: bool = True, limit: str | None = None, why: str | None = None,
                 token_problem: str | None = None):
        super().__init__(message)
        self.status, self.message, self.headers, self.why = status, message, list(headers), why
        self.token_problem = token_problem
        self.counter: tuple[str, str] | None
        if limit is not None:
            self.counter = ("requests_limited", limit)
        elif counted and (reason := refusal_reason(status, message)) is not None:
            self.counter = ("requests_refused", reason)
        else:
            self.counter = None

    @property
    def body(self) -> bytes:
        return problem_body(self.status, self.message)

    def response(self, counters: Counters) -> Response:
        """The same refusal as a Starlette response, for a route's handler: `refuse` sends it."""
        return RefusalResponse(self, counters)


async def refuse(send, refusal: Refused, counters: Counters, asgi: str = "") -> None:
    """Count, then send: how every refusal leaves. `asgi` "websocket." refuses a WebSocket
    handshake (ASGI's denial response)."""
    await send_all(send, refusal_messages(refusal, counters, asgi))


def refusal_messages(refusal: Refused, counters: Counters, asgi: str = "") -> tuple[dict, dict]:
    """Count, then the refusal's two messages: `refuse` sends them, the front's openings put
    them at once (door/asgi_http.py's `put_all`)."""
    if refusal.counter is not None:
        counters.add(refusal.counter[0], label=refusal.counter[1])
    return answer_messages(refusal.status, refusal.body, [*PROBLEM_HEAD, *refusal.headers], asgi)


class RefusalResponse(Response):
    """A refusal handed to Starlette; sent (and counted) by `refuse`, not by Starlette."""

    def __init__(self, refusal: Refused, counters: Counters):
        super().__init__(refusal.body, refusal.status, {k.decode(): v.decode() for k, v in refusal.headers},
                         media_type=PROBLEM_TYPE)
        self.refusal, self.counters = refusal, counters

    async def __call__(self, scope, receive, send) -> None:
        await refuse(send, self.refusal, self.counters)


INTERNAL_REFUSAL = Refused(500, "internal error")


class Answered(enum.Enum):
    """An at-once check's word that it answered the request itself, a refusal or a JSON-RPC
    error (dispatch.py's `RpcEndpoint.admit_now`): no stream opens."""

    ANSWERED = 0
