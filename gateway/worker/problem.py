"""The door's own HTTP refusals as RFC 9457 problem details, and every status line's reason.

Why problem details: an A2A client reads a body's `error` member as a JSON-RPC error object,
so a refusal must never carry one (the A2A TCK fails JSONRPC-SSE-002 on `{"error": "..."}`).
Every refusal the door makes (401, 403, 404 on `POST /`, 405, 408, 413, 431, 500, 503) is
built here: `content-type: application/problem+json`, and
`{"type": "about:blank", "title": <reason phrase>, "status": <code>, "detail": <what was wrong>}`.
The attachment endpoint's 404 and 405 stay empty, as the protocol's table says.

The reason phrase is RFC 9110's, the same one the status line carries. Which refusals count,
and under which `reason`, is gateway/common/metrics.py's (`REFUSAL_REASONS`).
"""

from __future__ import annotations

from http import HTTPStatus

import orjson

PROBLEM_TYPE = "application/problem+json"
PROBLEM_HEAD = [(b"content-type", PROBLEM_TYPE.encode())]
# RFC 9110 renamed these; Python before 3.13 still has the RFC 7231 phrases.
RFC9110_PHRASES = {413: "Content Too Large", 416: "Range Not Satisfiable", 422: "Unprocessable Content"}


def reason_phrase(status: int) -> str:
    """`Not Found` for 404; an unregistered code has none."""
    if status in RFC9110_PHRASES:
        return RFC9110_PHRASES[status]
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def problem_body(status: int, detail: str) -> bytes:
    """The body of one refusal (sent with `PROBLEM_HEAD`)."""
    return orjson.dumps({"type": "about:blank", "title": reason_phrase(status), "status": status,
                         "detail": detail})
