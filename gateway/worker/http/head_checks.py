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

from gateway.config.options import Config
from gateway.worker.door.head import (CRLF, authorization_problem, framing_problem, origin_form, raw_problem,
                                      request_problem)

HEAD_END = CRLF + CRLF
BAD_REQUEST = "the request is not well-formed HTTP/1.1"
UNSUPPORTED_CODING = "the request's transfer-encoding is not supported"
HEAD_TOO_LARGE = "the request head is larger than this door buffers"
HEAD_LINE_FRAMING = 4  # ": " and CRLF around each header line
REQUEST_LINE_EXTRA = 64  # method, version, spaces and the blank line that ends the head
# A Content-Length of more digits is refused 400 before it is converted, as h11 refuses it:
# Python's int() raises past this many digits (its default limit), leading zeros included.
LENGTH_DIGITS_MOST = 4300
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_REQUEST_LINE = re.compile(rb"([^ ]+) ([^ ]+) HTTP/([0-9])\.([0-9])")


class Refused(Exception):
    """A head that is not served: its status and why; the connection closes after it."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class Parsed:
    """What the parser read of one request head: target, headers (names lowercased), method,
    version; and, noted as each header is read (the head's one walk before the door's), what
    the rules and the front ask of them: the framing headers, the Authorization and Host
    lines, `length` (None: chunked), whether it keeps the connection, asks for 100-continue,
    or is a WebSocket handshake."""

    __slots__ = ("url", "headers", "method", "version", "framing", "authorizations", "hosts", "codings",
                 "length", "closes", "expects", "upgrade", "upgrading")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.method = b""
        self.version = b"1.1"
        self.framing: list[tuple[bytes, bytes]] = []  # the Content-Length and Transfer-Encoding lines
        self.authorizations = self.hosts = 0
        self.codings: list[bytes] = []  # Transfer-Encoding values
        self.length: int | None = 0
        self.closes = self.expects = self.upgrading = False
        self.upgrade = b""

    # httptools' callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name, value = name.lower(), value.strip(b" \t")
        self.headers.append((name, value))
        if name == b"content-length" or name == b"transfer-encoding":
            self.framing.append((name, value))
            if name == b"transfer-encoding":
                self.codings.append(value)
        elif name == b"authorization":
            self.authorizations += 1
        elif name == b"host":
            self.hosts += 1
        elif name == b"connection":
            tokens = [token.strip() for token in value.lower().split(b",")]
            self.closes |= b"close" in tokens
            self.upgrading |= b"upgrade" in tokens
        elif name == b"expect":
            self.expects = value.lower() == b"100-continue"
        elif name == b"upgrade":
            self.upgrade = value.lower()

    @property
    def keep_alive(self) -> bool:
        return self.version == b"1.1" and not self.closes

    @property
    def websocket(self) -> bool:
        """A WebSocket handshake, as hypercorn told it from any other request: the app refuses
        it (its denial answer), and the connection closes."""
        return self.method == b"GET" and self.upgrading and self.upgrade == b"websocket"


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
        raw = Parsed()
        for name, _, value in (text.partition(b":") for text in head.split(CRLF)[1:] if text):
            raw.on_header(name.strip(), value)
        _check(method, b"%s.%s" % (line.group(3), line.group(4)) if line else b"", raw)
        raise Refused(400, BAD_REQUEST) from None
    request.method, request.version = method, parser.get_http_version().encode()
    _check(method, request.version, request)
    return _framed(request)


def _check(method: bytes, version: bytes, request: Parsed) -> None:
    """The door's rules (door/head.py), in its order, over what the head's walk noted."""
    problem = framing_problem(request.framing) or authorization_problem(request.authorizations)
    if problem is not None:
        raise Refused(400, problem)
    if version:
        refusal = request_problem(method, version, ())  # its framing rule: just applied
        if refusal is not None:
            raise Refused(*refusal)
    if request.codings and [coding.lower() for coding in request.codings] != [b"chunked"]:  # h11's: one, chunked
        raise Refused(501, UNSUPPORTED_CODING)


def _framed(request: Parsed) -> Parsed:
    """What h11 requires that llhttp lets pass, the body's length (its digits bounded before
    they are converted), and an absolute-form target (served as its origin form, its
    authority the Host)."""
    if not (request.hosts == 1 or (request.hosts == 0 and request.version == b"1.0")):
        raise Refused(400, BAD_REQUEST)
    absolute = origin_form(request.url)
    if absolute is not None:
        authority, request.url = absolute
        request.headers = [(b"host", authority), *((n, v) for n, v in request.headers if n != b"host")]
    if request.codings:
        request.length = None
    elif request.framing:
        value = request.framing[0][1]
        if not value.isdigit() or len(value) > LENGTH_DIGITS_MOST:
            raise Refused(400, BAD_REQUEST)
        request.length = int(value)
    request.expects = request.expects and request.version == b"1.1"
    return request
