"""Which request heads are ambiguous: refused 400 (and the connection closed), never served
or handed on half-parsed. Pure: the front (front.py) calls it on the raw head bytes and the
headers its parser read.

httptools (llhttp) is lenient where h11 is strict, and two parsers that read one request two
ways are how requests are smuggled: a bare LF or CR as a line end, a NUL, an obs-fold
continuation line, Content-Length together with Transfer-Encoding, two different
Content-Lengths, two Authorization headers (which token is the caller's?).
"""

from __future__ import annotations

CRLF = b"\r\n"


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
