"""Raw HTTP/1.x bytes for the tests: `exchange` sends bytes as written and reads the answer
with h11 (or names what was malformed), and `until_close` reads everything up to the
server's close."""

from __future__ import annotations

import contextlib
import socket
from typing import NamedTuple

import h11
import orjson

from helpers.http_client import problem_detail


# --- raw bytes: one request, the answer as a client that refuses malformed HTTP reads it ---

class Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes  # b"" for a stream, whose head is all that is read


class Malformed(AssertionError):
    """The server wrote bytes that are not one well-formed HTTP/1.1 response."""


def exchange(port: int, data: bytes, *, method: str = "POST", half_close: bool = False,
             timeout: float = 10.0) -> Answer | None:
    """Send `data` on a new connection; the answer, or None when the server closed without one.

    `method` tells h11 how the response is framed (HEAD has no body). `half_close` shuts the
    write side after sending, as a client that truncates its request does.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        conn = h11.Connection(h11.CLIENT)
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "fuzz")]))
        conn.send(h11.EndOfMessage())
        status, headers, body, received = None, {}, bytearray(), 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if received == 0:
                    return None
                raise Malformed(f"{exc}: {bytes(body[:200])!r}") from exc
            if event is h11.NEED_DATA:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                received += len(chunk)
                conn.receive_data(chunk)
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = {k.decode().lower(): v.decode() for k, v in event.headers}
                if headers.get("content-type") == "text/event-stream":
                    return Answer(status, headers, b"")
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return Answer(status, headers, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                if status is not None:
                    raise Malformed("the connection closed in the middle of a response")
                return None


def head(method: str, target: str, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers)]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def refusal(answer: Answer | None, status: int) -> str:
    """The problem `detail` of an answer that must be that door refusal."""
    assert answer is not None and answer.status == status, answer
    return problem_detail(status, answer.headers, answer.body)


# --- raw HTTP/1.x exchanges read to the close ---

RAW_READ_TIMEOUT = 20.0  # a server that hangs fails the test here


def post(method: str, params: dict, version: str = "1.1", headers: bytes = b"") -> bytes:
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return (f"POST / HTTP/{version}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n").encode() + headers + b"\r\n" + body


def until_close(port: int, request: bytes, *, half_close: bool = False) -> bytes:
    """Every byte the server writes for `request`, up to its close (a hang fails the test)."""
    with socket.create_connection(("127.0.0.1", port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        return read_to_close(sock)


def after_an_answer(port: int, first: bytes, request: bytes) -> tuple[bytes, bytes]:
    """(the answer to `first`, which must keep the connection; every byte the server writes
    for `request`, sent on that connection once the answer is read, the write side then shut,
    up to the close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(first)
        answer, rest = read_answer(sock)
        assert not rest, rest
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        return answer, read_to_close(sock)


def read_answer(sock: socket.socket, data: bytes = b"") -> tuple[bytes, bytes]:
    """One answer with a Content-Length, and what was read past it."""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


def read_until(sock: socket.socket, marker: bytes, data: bytes = b"") -> bytes:
    """What the server sends up to `marker` (a stream's `connection-ack`), with `data` read before."""
    while marker not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before {marker!r}: {data!r}"
        data += chunk
    return data


def read_to_close(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def dechunk(body: bytes) -> bytes:
    """A chunked body's bytes; it must end with the terminating chunk and nothing after."""
    out = b""
    while True:
        size_line, sep, body = body.partition(b"\r\n")
        assert sep, "a chunk's size line is cut off"
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", body  # the terminating chunk, no trailers, then the close
            return out
        assert body[size:size + 2] == b"\r\n"
        out, body = out + body[:size], body[size + 2:]


def never_reading(port: int) -> socket.socket:
    """A connection with 4 KiB buffers (set before connecting: its window), non-blocking, that
    its caller writes to and never reads: the client that pipelines and leaves answers unsent."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


def push(sock: socket.socket, data: bytes, sent: int) -> int:
    """Send what the server takes of the rest of `data` (a non-blocking socket); the bytes sent
    so far. A connection the server closed raises."""
    with contextlib.suppress(BlockingIOError):
        while sent < len(data):
            sent += sock.send(data[sent:sent + 65536])
    return sent
