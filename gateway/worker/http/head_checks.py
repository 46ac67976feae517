"""The front's reading of a request head: what it asks for (`Parsed`), or why it is refused
(`Refused`: status and problem detail), by the door's rules (door/head.py: the raw bytes,
the request line, then the headers its parser read). Pure: the front (front.py) calls it.

httptools (llhttp) is lenient where h11 is strict, and two parsers that read one request two
ways are how requests are smuggled: a bare LF or CR as a line end, a NUL, an obs-fold
continuation line, Content-Length together with Transfer-Encoding, two different
Content-Lengths, two Authorization headers (which token is the caller's?). Each is refused
400 and the connection closed. A head is parsed alone: the parser never sees a body or the
next request (body.py reads bodies), so no request's bytes reach another's parser state.

llhttp knows a fixed list of methods, h11 any token: the head is parsed with its method
written as `PUT` and the method checked here, so `PROPFIND` or `PRI /` reach the router (404,
405) as they did under h11. An upgrade offer (`Upgrade: h2c`, `websocket`) is read as any
header: the front answers over HTTP/1.1 (a WebSocket handshake is the app's to refuse).
"""

from __future__ import annotations

import re

import httptools

from gateway.config import Config
from gateway.worker.door.head import (CRLF, authorization_problem, framing_problem, origin_form, raw_problem,
                                      request_problem)

HEAD_END = CRLF + CRLF
BAD_REQUEST = "the request is not well-formed HTTP/1.1"
UNSUPPORTED_CODING = "the request's transfer-encoding is not supported"
HEAD_TOO_LARGE = "the request head is larger than this door buffers"
HEAD_LINE_FRAMING = 4  # ": " and CRLF around each header line
REQUEST_LINE_EXTRA = 64  # method, version, spaces and the blank line that ends the head
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_REQUEST_LINE = re.compile(rb"([^ ]+) ([^ ]+) HTTP/([0-9])\.([0-9])")


class Refused(Exception):
    """A head that is not served: its status and why; the connection closes after it."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class Parsed:
    """What the parser read of one request head: target, headers (names lowercased), method,
    version; `length` (None: chunked), whether it keeps the connection and asks for 100-continue."""

    __slots__ = ("url", "headers", "method", "version", "length", "chunked", "keep_alive", "expects")

    def __init__(self):
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.method = b""
        self.version = b"1.1"
        self.length = 0
        self.chunked = False
        self.keep_alive = True
        self.expects = False

    # httptools' callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.strip(b" \t")))


def head_cap(config: Config) -> int:
    """The bytes of an unfinished head a connection may buffer: the limit plus each line's framing."""
    return config.max_header_bytes + REQUEST_LINE_EXTRA + HEAD_LINE_FRAMING * (config.max_headers + 1)


def read_head(head: bytes) -> Parsed:
    """A whole head (through its blank line), checked then parsed; `Refused` where it may not
    be served."""
    problem = raw_problem(head)
    if problem is not None:
        raise Refused(400, problem)
    line = _REQUEST_LINE.match(head, 0, head.find(CRLF))
    method = line.group(1) if line else b""
    request = Parsed()
    parser = httptools.HttpRequestParser(request)
    try:
        if line is None or not _TOKEN.fullmatch(method):
            raise httptools.HttpParserError(BAD_REQUEST)
        parser.feed_data(b"PUT" + head[len(method):])
    except httptools.HttpParserUpgrade:
        pass  # headers whole: an offer to switch protocols, read as any header
    except httptools.HttpParserError:
        # llhttp stops at the first problem: the refusal is named from the raw lines
        headers = _raw_headers(head)
        _check(method, b"%s.%s" % (line.group(3), line.group(4)) if line else b"", headers)
        raise Refused(400, BAD_REQUEST) from None
    request.method, request.version = method, parser.get_http_version().encode()
    _check(method, request.version, request.headers)
    return _framed(request)


def _check(method: bytes, version: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    problem = framing_problem(headers) or authorization_problem(sum(1 for name, _ in headers if name == b"authorization"))
    if problem is not None:
        raise Refused(400, problem)
    if version:
        refusal = request_problem(method, version, headers)
        if refusal is not None:
            raise Refused(*refusal)
    if any(name == b"transfer-encoding" and value.lower() != b"chunked" for name, value in headers):
        raise Refused(501, UNSUPPORTED_CODING)


def _framed(request: Parsed) -> Parsed:
    """What h11 requires that llhttp lets pass, then the body's framing, the connection's
    keeping and an absolute-form target (served as its origin form, its authority the Host)."""
    hosts = sum(1 for name, _ in request.headers if name == b"host")
    if not (hosts == 1 or (hosts == 0 and request.version == b"1.0")):
        raise Refused(400, BAD_REQUEST)
    absolute = origin_form(request.url)
    if absolute is not None:
        authority, request.url = absolute
        request.headers = [(b"host", authority), *((n, v) for n, v in request.headers if n != b"host")]
    request.keep_alive = request.version == b"1.1"
    for name, value in request.headers:
        if name == b"content-length":
            if not value.isdigit():
                raise Refused(400, BAD_REQUEST)
            request.length = int(value)
        elif name == b"transfer-encoding":
            request.chunked, request.length = True, None
        elif name == b"connection" and b"close" in value.lower():
            request.keep_alive = False
        elif name == b"expect" and value.lower() == b"100-continue":
            request.expects = request.version == b"1.1"
    return request


def _raw_headers(head: bytes) -> list[tuple[bytes, bytes]]:
    """The header lines of a head as written (names lowercased), for a head httptools refused."""
    lines = head.split(CRLF)[1:]
    return [(name.strip().lower(), value.strip()) for name, _, value in (line.partition(b":") for line in lines if line)]
