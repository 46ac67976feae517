"""A request body's bytes, cut from the connection's bytes where the body ends: what follows
is the next request's, never read as this one's.

The head's parser (httptools, head_checks.py) reads heads only; a body is read here, by
Content-Length or by chunks, as h11 reads them: a chunk-size line of at most 20 hex digits
(h11's bound, matched before the size is converted; an extension after `;` is ignored)
ending in CRLF, the chunk's bytes and their CRLF, the last
chunk (size 0), then trailer lines up to a blank line. Anything else is `Malformed`: the
front answers 400 and closes, since where the next request starts is then unknown. Pure.
"""

from __future__ import annotations

import re

from gateway.tuning import LINE_MOST, TRAILER_MOST

CRLF = b"\r\n"
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})[ \t]*(;.*)?")

SIZE, DATA, DATA_END, TRAILER, DONE = range(5)


class Malformed(Exception):
    """A chunked body that is not what RFC 9112 §7.1 allows."""


class Body:
    """One request's body: `read` takes what of it `buffer` holds (and removes it there)."""

    __slots__ = ("chunked", "state", "left", "trailer")

    def __init__(self, length: int | None):
        """`length`: its Content-Length; None: chunked."""
        self.chunked = length is None
        self.state = SIZE if length is None else (DATA if length else DONE)
        self.left = length or 0
        self.trailer = 0

    @property
    def done(self) -> bool:
        return self.state == DONE

    def read(self, buffer: bytearray) -> bytes:
        """The body's bytes at the start of `buffer`, taken out of it."""
        if not self.chunked:
            taken = bytes(buffer[:self.left])
            del buffer[:len(taken)]
            self.left -= len(taken)
            if not self.left:
                self.state = DONE
            return taken
        out = []
        while self.state != DONE and buffer:
            if self.state == DATA:
                piece = bytes(buffer[:self.left])
                del buffer[:len(piece)]
                out.append(piece)
                self.left -= len(piece)
                if not self.left:
                    self.state = DATA_END
            elif self.state == DATA_END:
                if len(buffer) < 2:
                    break
                if buffer[:2] != CRLF:
                    raise Malformed("a chunk's data does not end in CRLF")
                del buffer[:2]
                self.state = SIZE
            else:
                line = _line(buffer)
                if line is None:
                    break
                if self.state == SIZE:
                    self._size(line)
                elif line:
                    self.trailer += len(line) + 2
                    if self.trailer > TRAILER_MOST:
                        raise Malformed("the chunked body's trailer is too long")
                else:
                    self.state = DONE
        return b"".join(out)

    def _size(self, line: bytes) -> None:
        found = _CHUNK_SIZE.fullmatch(line)
        if found is None:
            raise Malformed("a chunk-size line is not a hexadecimal size")
        self.left = int(found.group(1), 16)
        self.state = DATA if self.left else TRAILER


def _line(buffer: bytearray) -> bytes | None:
    """One CRLF-ended line taken from `buffer` (without its CRLF); None until it is whole."""
    end = buffer.find(CRLF)
    if end < 0:
        if len(buffer) > LINE_MOST:
            raise Malformed("a chunk-size or trailer line is too long")
        return None
    line = bytes(buffer[:end])
    if len(line) > LINE_MOST or b"\n" in line or b"\r" in line:
        raise Malformed("a chunk-size or trailer line is malformed")
    del buffer[:end + 2]
    return line
