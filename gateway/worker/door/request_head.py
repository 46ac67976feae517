"""One request's head as the door reads it: its size, its line count and every header the door
asks about, read in one pass over the ASGI header list.

Why: the door's answers come from a handful of headers (the token, the content type and
length, the A2A version and extensions, Last-Event-ID, Expect, a browser's Origin), asked for at its checks in turn, on
both paths (the front of HTTP/1.1 connections and hypercorn's). Scanning the header list once
per lookup cost an opening a few dozen comparisons; the view is made once, when `Admission`
first looks at the request, kept in its scope (`HEAD_KEY`), and every later check reads it.
Names are matched case-insensitively (the front's parser keeps the client's case, ASGI
servers lower-case them); values stay as sent, decoded as Latin-1 when read.
"""

from __future__ import annotations

HEAD_KEY = "murgw.head"  # where the view rides in the ASGI scope

# The headers the door reads: asking for any other is a mistake in the code, not a miss.
DOOR_HEADERS = frozenset({b"authorization", b"content-type", b"content-length", b"a2a-version",
                          b"a2a-extensions", b"last-event-id", b"expect", b"origin",
                          b"access-control-request-method"})


class RequestHead:
    """`lines` header lines of `size` bytes (names, values, path and query); the door's headers."""

    __slots__ = ("lines", "size", "_values")

    def __init__(self, scope: dict):
        headers = scope["headers"]
        self.lines = len(headers)
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        values: dict[bytes, list[bytes]] = {}
        for name, value in headers:
            size += len(name) + len(value)
            name = name.lower()
            if name in DOOR_HEADERS:
                if name in values:
                    values[name].append(value)
                else:
                    values[name] = [value]
        self.size = size
        self._values = values

    def get(self, name: bytes) -> str | None:
        """The first value of `name`, None when it is absent."""
        found = self._found(name)
        return found[0].decode("latin-1") if found else None

    def all(self, name: bytes) -> list[str]:
        """Every value of `name`, in order."""
        return [value.decode("latin-1") for value in self._found(name)]

    def count(self, name: bytes) -> int:
        return len(self._found(name))

    def _found(self, name: bytes) -> list[bytes] | tuple[()]:
        if name not in DOOR_HEADERS:
            raise ValueError(f"the door reads no {name!r} header (DOOR_HEADERS)")
        return self._values.get(name, ())


def head_of(scope: dict) -> RequestHead:
    """The request's view, made on first use."""
    head = scope.get(HEAD_KEY)
    if head is None:
        head = scope[HEAD_KEY] = RequestHead(scope)
    return head
