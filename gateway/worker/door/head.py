"""What makes a request head ambiguous, as pure functions of its bytes or its parsed parts.

A head that two readers could frame or read differently is never served: a front end that
frames by Content-Length while this door frames by chunks (request smuggling, RFC 9112
§6.1), a folded or bare-LF line that a proxy reads as two lines, two `Authorization` headers
of which a filter checks one and the door the other. Each function answers why a head is
refused (None when it is not; every 400 reason is one of `AMBIGUITIES`, which the refusal
counter tells apart), and each rule is written once, so every path that reads heads calls
the same rule: the door's ASGI admission (every protocol: `authorization_problem`), and the
one HTTP/1.1 server (gateway/worker/http/head_checks.py: `raw_problem`, `framing_problem`,
`request_problem`).
"""

from __future__ import annotations

from typing import Iterable

HTTP_VERSIONS = (b"1.0", b"1.1")
FOLD = (b" ", b"\t")
FOLDED = (b"\r\n ", b"\r\n\t")  # a line that begins with FOLD continues the one before it
CRLF = b"\r\n"
BARE_LINE_END = "a line of the request head ends in a bare LF or CR, not CRLF"
OBS_FOLD = "a header line is folded (obs-fold)"
CL_AND_TE = "the request has both Content-Length and Transfer-Encoding"
TWO_AUTHORIZATIONS = "the request has more than one Authorization header"
NUL = "the request head holds a NUL byte"
LEADING_WHITESPACE = "the request line begins with whitespace"
TWO_LENGTHS = "the request has two different Content-Lengths"
AMBIGUITIES = frozenset({BARE_LINE_END, OBS_FOLD, CL_AND_TE, TWO_AUTHORIZATIONS, NUL, LEADING_WHITESPACE, TWO_LENGTHS})


def raw_problem(raw: bytes) -> str | None:
    """The line rules over a head's raw bytes, whole or still arriving (a trailing CR may
    start a CRLF not yet read), for a reader that sees the bytes before any parser: a NUL, a
    line end other than CRLF, a folded line, a request line that begins with whitespace."""
    if b"\x00" in raw:
        return NUL
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    crlfs = raw.count(CRLF)
    if raw.count(b"\n") != crlfs or raw.count(b"\r") != crlfs:
        return BARE_LINE_END
    if FOLDED[0] in raw or FOLDED[1] in raw:
        return OBS_FOLD
    if raw[:1] in FOLD:
        return LEADING_WHITESPACE
    return None


def framing_problem(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Two readers that could frame the body two ways (names lower case): Content-Length
    with Transfer-Encoding, or two different Content-Lengths."""
    lengths, encoded = set(), False
    for name, value in headers:
        if name == b"content-length":
            lengths.add(value.strip())
        elif name == b"transfer-encoding":
            encoded = True
    if lengths and encoded:
        return CL_AND_TE
    if len(lengths) > 1:
        return TWO_LENGTHS
    return None


def request_problem(method: bytes, http_version: bytes,
                    headers: Iterable[tuple[bytes, bytes]]) -> tuple[int, str] | None:
    """(status, why) for a request line and its headers (names lower case) that must not be
    served: an HTTP version other than 1.0 and 1.1 (505), a method that is not upper case
    (methods are case-sensitive: `post` is no method this door has, 501), or a body two
    readers could frame two ways (`framing_problem`, 400)."""
    if http_version not in HTTP_VERSIONS:
        return 505, f"HTTP/{http_version.decode('latin-1')} is not spoken in an HTTP/1.x request line"
    if method != method.upper():
        return 501, f"methods are case-sensitive: {method.decode('latin-1')!r} is not one this door implements"
    problem = framing_problem(headers)
    return None if problem is None else (400, problem)


def authorization_problem(lines: int) -> str | None:
    """`lines` Authorization headers: with two or more, which one is the caller's is ambiguous."""
    return TWO_AUTHORIZATIONS if lines > 1 else None


def origin_form(target: bytes) -> tuple[bytes, bytes] | None:
    """(authority, origin-form target) of an absolute-form target (`http://host/path?q`),
    which RFC 9112 §3.2.2 says a server must accept (its authority replaces Host); None for
    any other form."""
    scheme, sep, rest = target.partition(b"://")
    if not sep or scheme.lower() not in (b"http", b"https"):
        return None
    end = min((at for at in (rest.find(b"/"), rest.find(b"?")) if at >= 0), default=len(rest))
    path = rest[end:]  # `http://host?q` has an empty path: `/?q`
    return rest[:end], path if path.startswith(b"/") else b"/" + path
