"""Starlette's own refusals (no route, a method the route does not take, a bug), made the
door's refusals: the same problem details, sent and counted by `refuse` (a 404 or 405
counts; a bug's 500 is no refusal and counts nowhere)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.common.metrics import Counters
from gateway.worker.door.refusal import INTERNAL_REFUSAL, Refused


def http_error_handler(counters: Counters):
    """The handler for both HTTPException and Exception (app.py's `create_app`)."""

    async def http_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, HTTPException):
            return INTERNAL_REFUSAL.response(counters)
        headers = exc.headers or {}
        if exc.status_code == 404:
            detail = "nothing is served at this path"
        elif exc.status_code == 405 and "Allow" in headers:
            detail = f"this path takes only {headers['Allow']}"
        else:
            detail = exc.detail.lower()
        refusal = Refused(exc.status_code, detail,
                          [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()])
        return refusal.response(counters)

    return http_error
