"""The upstream's errors, relayed as it worded them, and the two the gateway words itself.

A gateway in front must answer every request as the upstream itself would (a client must
not tell the two apart), so where the answer is the upstream's to give, it is the
upstream's answer: the JSON-RPC error code and message as it wrote them, and a refused stream
as its one JSON body (upstream_opening.py).

Two answers are the gateway's own, worded for a client of the gateway: an upstream it cannot
reach (its addresses and the OS's reason would tell a client the gateway's internal topology),
and an upstream that refuses the gateway's credentials (the upstream's wording is about the
gateway's token, not the client's). Their detail goes to the gateway's log, one line each.
"""

from __future__ import annotations

from typing import NoReturn

import orjson

from gateway import logs
from gateway.sequencer.capsule.upstream_http import UpstreamError
from gateway.protocol.errors import ERRORS, INTERNAL_ERROR, RpcError

UNREACHABLE = "the upstream capsule is unreachable"
CREDENTIALS_REFUSED = "the upstream refused the gateway's credentials"
CREDENTIAL_STATUSES = (401, 403)
log = logs.get("upstream")


def unreachable(what: str, exc: UpstreamError) -> RpcError:
    """The answer while the upstream cannot be asked `what`; the reason goes to the log."""
    log.warning("upstream unreachable", call=what, error=str(exc))
    return RpcError(INTERNAL_ERROR, UNREACHABLE)


def credentials_refused(what: str, status: int, payload: bytes) -> RpcError:
    """The answer when the upstream's door refuses the gateway's token; its words go to the log."""
    log.warning("upstream refused the gateway's credentials", call=what, status=status,
                answer=payload[:500].decode("utf-8", "replace"))
    return RpcError(INTERNAL_ERROR, CREDENTIALS_REFUSED)


def relayed(method: str, status: int, payload: bytes) -> object:
    """The `result` of the upstream's JSON-RPC answer, or its error raised as it came."""
    if status in CREDENTIAL_STATUSES:
        raise credentials_refused(method, status, payload)
    try:
        answer = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise RpcError(INTERNAL_ERROR, f"the upstream answered {method} with HTTP {status} "
                                       "and no JSON-RPC body") from None
    if not isinstance(answer, dict):
        raise RpcError(INTERNAL_ERROR, f"the upstream answered {method} with no JSON-RPC object")
    if "error" in answer:
        raise_refusal(method, status, answer["error"])
    if "result" not in answer:  # a door's refusal: RFC 9457 problem details
        raise_refusal(method, status, answer.get("detail", answer.get("title")))
    return answer["result"]


def raise_refusal(method: str, status: int, error: object) -> NoReturn:
    """The upstream's JSON-RPC error, raised with its code (when it is one of ours) and message;
    a door's own refusal (its problem detail, or an older door's `{"error": "..."}` text) as
    what the upstream said, with its HTTP status."""
    if not isinstance(error, dict):
        raise RpcError(INTERNAL_ERROR, f"the upstream refused {method} with HTTP {status}: {error}")
    code = error.get("code")  # -32001.0 is `in ERRORS` too, but no integer code (nor a metric label)
    raise RpcError(code if type(code) is int and code in ERRORS else INTERNAL_ERROR, str(error.get("message")))
