"""A stream request, asked of the upstream as a client would ask it: the task it opens with.

The gateway serves every stream from its ring, so of the upstream's stream it needs only the
opening: the task its first event carries (then the stream is closed), or its refusal, a JSON
body, relayed as it came (upstream_errors.py).
"""

from __future__ import annotations

import asyncio

import orjson

from gateway.sequencer.capsule.upstream_errors import raise_refusal, relayed, unreachable
from gateway.sequencer.capsule.upstream_http import Connection, Origin, UpstreamError
from gateway.protocol.errors import INTERNAL_ERROR, RpcError
from gateway.protocol.parser import SSEParser, read_stream_response
from gateway.tuning import UPSTREAM_OPENING_BYTES, UPSTREAM_OPENING_SECONDS


async def stream_opening(origin: Origin, headers: list[tuple[str, str]], method: str, params: dict) -> dict:
    """The task the upstream opens a `method` stream with (the stream is then closed: the
    gateway serves it from its ring); the upstream's refusal, a JSON body, raised as it came."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    conn = Connection(origin)
    try:
        async with asyncio.timeout(UPSTREAM_OPENING_SECONDS):
            head = await conn.open("POST", "/", headers, body)
            kind = dict((k.lower(), v) for k, v in head.headers).get(b"content-type", b"")
            if not kind.startswith(b"text/event-stream"):
                return _no_stream(method, head.status_code, await conn.read_body())
            parser, seen = SSEParser(), 0
            async for chunk in conn.chunks():
                seen += len(chunk)
                for event in parser.feed(chunk):
                    if event.data is not None:
                        return _opening_task(method, event.data)
                if seen > UPSTREAM_OPENING_BYTES:
                    break
    except TimeoutError:
        raise RpcError(INTERNAL_ERROR,
                       f"the upstream did not open {method} within {UPSTREAM_OPENING_SECONDS:g} s") from None
    except UpstreamError as exc:
        raise unreachable(method, exc) from None
    finally:
        conn.close()
    raise RpcError(INTERNAL_ERROR, f"the upstream opened {method} without its task")


def opening_now(params: dict) -> dict:
    """SendMessage params that answer with the task as it opens, as SendStreamingMessage does
    (A2A's `returnImmediately`; a capsule may otherwise answer once the task settles)."""
    configuration = params.get("configuration", {})
    if not isinstance(configuration, dict):
        return params  # the upstream refuses it as it would refuse the stream request
    return {**params, "configuration": {**configuration, "returnImmediately": True}}


def _no_stream(method: str, status: int, payload: bytes) -> dict:
    relayed(method, status, payload)  # raises the refusal it holds
    raise RpcError(INTERNAL_ERROR, f"the upstream answered {method} with no stream and no error")


def _opening_task(method: str, data: str) -> dict:
    try:
        _, item, error = read_stream_response(data)
    except ValueError:
        item = error = None
    if error is not None:
        raise_refusal(method, 200, error)
    if item is None or item.kind != "task":
        raise RpcError(INTERNAL_ERROR, f"the upstream opened {method} without its task")
    return item.body
