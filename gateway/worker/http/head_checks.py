"""The front's reading of a request head: refused 400 (and the connection closed) where it is
ambiguous, never served or handed on half-parsed, by the door's rules (door/head.py: the raw
bytes, then the headers its parser read). Pure: the front (front.py) calls it.

httptools (llhttp) is lenient where h11 is strict, and two parsers that read one request two
ways are how requests are smuggled: a bare LF or CR as a line end, a NUL, an obs-fold
continuation line, Content-Length together with Transfer-Encoding, two different
Content-Lengths, two Authorization headers (which token is the caller's?).
"""

from __future__ import annotations

import httptools

from gateway.worker.door.head import CRLF, authorization_problem, framing_problem, raw_problem


class Ambiguous(Exception):
    """A head read two ways by two parsers: refused 400, the connection closed."""


class Parsed:
    """What the parser read of one request: its URL, headers (names lowercased), body."""

    __slots__ = ("url", "headers", "body", "size", "complete")

    def __init__(self):
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0
        self.complete = False

    # httptools' callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
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


def header_problem(headers: list[tuple[bytes, bytes]]) -> str | None:
    """A problem in the headers as parsed (names lowercased): the door's rules (door/head.py)."""
    return framing_problem(headers) or authorization_problem(
        sum(1 for name, _ in headers if name == b"authorization"))
