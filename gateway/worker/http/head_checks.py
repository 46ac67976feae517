"""The front's reading of a request head: refused 400 (and the connection closed) where it is
ambiguous, never served or handed on half-parsed, by the door's rules (door/head.py: the raw
bytes, then the headers its parser read), and the head it hands on to hypercorn less an h2c
upgrade offer where none may be taken (`without_h2c_upgrade`). Pure: the front (front.py)
calls it.

httptools (llhttp) is lenient where h11 is strict, and two parsers that read one request two
ways are how requests are smuggled: a bare LF or CR as a line end, a NUL, an obs-fold
continuation line, Content-Length together with Transfer-Encoding, two different
Content-Lengths, two Authorization headers (which token is the caller's?).
"""

from __future__ import annotations

import httptools

from gateway.worker.door.head import CRLF, authorization_problem, framing_problem, raw_problem

HEAD_END = CRLF + CRLF


class Ambiguous(Exception):
    """A head read two ways by two parsers: refused 400, the connection closed."""


class Parsed:
    """What the parser read of one request: its URL, headers (names lowercased), body.

    One request only: once it is complete, what the parser reads after it (a request
    pipelined behind it, in the same write) is the next request's, never added to this one's
    headers or body."""

    __slots__ = ("url", "headers", "body", "size", "complete")

    def __init__(self):
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0
        self.complete = False

    # httptools' callbacks
    def on_url(self, url: bytes) -> None:
        if not self.complete:
            self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:
            self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self.size += len(body)
            self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True



def raw_headers(head: bytes) -> list[tuple[bytes, bytes]]:
    """The header lines of a head as written (names lowercased), for a head httptools refused."""
    lines = head.split(CRLF)[1:]
    return [(name.strip().lower(), value.strip()) for name, _, value in (line.partition(b":") for line in lines if line)]


def read_head(head: bytes):
    """A whole head (through its blank line), checked then parsed: (Parsed, its parser, to
    read the body with), or (None, None) where httptools does not take it as HTTP/1.x or it
    asks for an upgrade (hypercorn answers it); `Ambiguous` where it is one of the forms above."""
    problem = raw_problem(head)
    if problem is not None:
        raise Ambiguous(problem)
    request = Parsed()
    parser = httptools.HttpRequestParser(request)
    try:
        parser.feed_data(head)
    except httptools.HttpParserUpgrade:
        return None, None
    except httptools.HttpParserError:
        # llhttp stops at the first problem (Content-Length with Transfer-Encoding among
        # them): the ambiguous forms are named from the raw lines, the rest is hypercorn's
        problem = header_problem(raw_headers(head))
        if problem is not None:
            raise Ambiguous(problem) from None
        return None, None
    problem = header_problem(request.headers)
    if problem is not None:
        raise Ambiguous(problem)
    if not well_formed(request, parser):
        return None, None
    return request, parser


def well_formed(request: Parsed, parser) -> bool:
    """What h11 requires that llhttp lets pass (not ambiguous: hypercorn refuses it, 400)."""
    hosts = sum(1 for name, _ in request.headers if name == b"host")
    return hosts == 1 or (hosts == 0 and parser.get_http_version() == "1.0")


def without_h2c_upgrade(data: bytes) -> bytes:
    """`data` with the request head at its start (once whole) less its offer to switch to
    HTTP/2 (RFC 7540 §3.2): the `Upgrade` lines that name h2c, the `HTTP2-Settings` lines, and
    the Connection tokens that named them. For the bytes the front hands on where an h2c
    upgrade is not allowed: hypercorn's own h11 switches on `Upgrade: h2c` alone, so the
    request is then answered over HTTP/1.1 by whichever hypercorn reads it, patched or not."""
    end = data.find(HEAD_END)
    if end < 0 or b"h2c" not in data[:end].lower():
        return data
    request_line, *lines = data[:end].split(CRLF)
    kept = [line for line in lines if not _h2c_offer(line)]
    named = {b"http2-settings"} if any(_name(line) == b"upgrade" for line in kept) else {b"http2-settings", b"upgrade"}
    out = [request_line]
    for line in kept:
        if _name(line) == b"connection":
            name, _, value = line.partition(b":")
            tokens = [token for token in value.split(b",") if token.strip().lower() not in named]
            if not any(token.strip() for token in tokens):
                continue
            line = name + b":" + b",".join(tokens)
        out.append(line)
    return CRLF.join(out) + data[end:]


def _name(line: bytes) -> bytes:
    return line.partition(b":")[0].strip().lower()


def _h2c_offer(line: bytes) -> bool:
    """An `HTTP2-Settings` line, or an `Upgrade` line that names h2c among its protocols."""
    name = _name(line)
    return name == b"http2-settings" or (
        name == b"upgrade" and b"h2c" in (token.strip().lower() for token in line.partition(b":")[2].split(b",")))


def header_problem(headers: list[tuple[bytes, bytes]]) -> str | None:
    """A problem in the headers as parsed (names lowercased): the door's rules (door/head.py)."""
    return framing_problem(headers) or authorization_problem(
        sum(1 for name, _ in headers if name == b"authorization"))
