"""The raw ASGI the door speaks: a whole answer sent (the head is read through
request_head.py's view).

`POST /` and the attachment endpoint are raw ASGI (dispatch.py says why), so they send their
answers here rather than through Starlette's Response.
"""

from __future__ import annotations

from gateway.tuning import RETRY_AFTER_SECONDS

JSON_HEAD = [(b"content-type", b"application/json")]
CLOSE = (b"connection", b"close")
NOSNIFF = (b"x-content-type-options", b"nosniff")
RETRY_AFTER = (b"retry-after", str(RETRY_AFTER_SECONDS).encode())
# Where a server that read the whole body before the app ran (the front of HTTP/1.1
# connections, within --max-body-bytes) puts it in the ASGI scope: the app takes it from
# there, with no receive and no body timer.
BODY_KEY = "murgw.body"


async def respond(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | tuple[()] = ()) -> None:
    """A JSON answer."""
    await respond_bytes(send, status, body, [*JSON_HEAD, *headers])


async def respond_bytes(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | tuple[()] = (),
                        asgi: str = "") -> None:
    """`asgi` "websocket." answers a WebSocket handshake (ASGI's denial response)."""
    await send_all(send, answer_messages(status, body, headers, asgi))


def answer_messages(status: int, body: bytes, headers: list[tuple[bytes, bytes]] | tuple[()] = (),
                    asgi: str = "") -> tuple[dict, dict]:
    """A whole answer's two ASGI messages: sent by `respond_bytes`, or put at once by a
    server's send that never waits (the front's openings: `put_all`)."""
    return ({"type": f"{asgi}http.response.start", "status": status,
             "headers": [(b"content-length", str(len(body)).encode()), *headers]},
            {"type": f"{asgi}http.response.body", "body": body})


async def send_all(send, messages) -> None:
    for message in messages:
        await send(message)


def put_all(put, messages) -> None:
    """`messages` through `put`, a send that never waits."""
    for message in messages:
        put(message)
