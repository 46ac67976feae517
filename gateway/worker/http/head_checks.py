"""Which request heads are ambiguous: refused 400 (and the connection closed), never served
or handed on half-parsed. Pure: the front (front.py) calls it on the raw head bytes and the
headers its parser read.

httptools (llhttp) is lenient where h11 is strict, and two parsers that read one request two
ways are how requests are smuggled: a bare LF or CR as a line end, a NUL, an obs-fold
continuation line, Content-Length together with Transfer-Encoding, two different
Content-Lengths, two Authorization headers (which token is the caller's?).
"""

from __future__ import annotations

import httptools

CRLF = b"\r\n"


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
    problem = line_problem(head)
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



def line_problem(raw: bytes) -> str | None:
    """A problem in the bytes of a head (whole or still arriving: a trailing CR may be the
    start of a CRLF not yet read)."""
    if b"\x00" in raw:
        return "the request head holds a NUL byte"
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    crlfs = raw.count(CRLF)
    if raw.count(b"\n") != crlfs or raw.count(b"\r") != crlfs:
        return "a line of the request head does not end in CRLF"
    if b"\r\n " in raw or b"\r\n\t" in raw:
        return "the request head folds a header over two lines (obs-fold)"
    if raw[:1] in (b" ", b"\t"):
        return "the request line begins with whitespace"
    return None


def header_problem(headers: list[tuple[bytes, bytes]]) -> str | None:
    """A problem in the headers as parsed (names lowercased)."""
    lengths, encodings, authorizations = set(), 0, 0
    for name, value in headers:
        if name == b"content-length":
            lengths.add(value.strip())
        elif name == b"transfer-encoding":
            encodings += 1
        elif name == b"authorization":
            authorizations += 1
    if len(lengths) > 1:
        return "the request has two different Content-Lengths"
    if lengths and encodings:
        return "the request has both Content-Length and Transfer-Encoding"
    if authorizations > 1:
        return "the request has more than one Authorization header"
    return None
