"""A small asyncio HTTP/1.1 client (h11) for talking to an upstream capsule.

The gateway needs two things of its upstream: one-shot JSON-RPC calls and GETs, and one
long-lived SSE response read as it arrives. h11 is already here (hypercorn uses it), so this
adds no dependency. Every call has a timeout; response bodies are bounded. An https://
upstream is spoken to over Python's ssl with verification on: the certificate must chain to
--upstream-cacert (or the system store) and name the URL's host (SNI is that host).

An UpstreamError's text holds the upstream's address and the OS's or TLS library's reason:
it is for the gateway's log, never for a client (upstream_errors.py words what a client reads).
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from typing import AsyncIterator

import h11

from gateway.config import tls
from gateway.tuning import UPSTREAM_CONNECT_SECONDS, UPSTREAM_MAX_BODY, UPSTREAM_REQUEST_SECONDS


class UpstreamError(ConnectionError):
    """The upstream could not be reached, or broke off mid-answer."""


class Origin:
    """Where the upstream is and how to reach it: host, port, the Host header, and the TLS
    context of an https:// one (built once: it reads the CA file). `url` is what config
    accepted (config_values.parse_url), so it has a host and a usable port."""

    def __init__(self, url: str, cacert: str | None):
        parts = urllib.parse.urlsplit(url)
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.authority = parts.netloc
        self.tls: ssl.SSLContext | None = tls.upstream_context(cacert) if parts.scheme == "https" else None

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection (TLS verified when https), or UpstreamError saying why not."""
        try:
            return await asyncio.wait_for(asyncio.open_connection(
                self.host, self.port, ssl=self.tls, server_hostname=self.host if self.tls else None),
                UPSTREAM_CONNECT_SECONDS)
        except ssl.SSLCertVerificationError as exc:
            raise UpstreamError(f"{self.authority}: its TLS certificate is not trusted: "
                                f"{exc.verify_message or exc.reason}") from None
        except ssl.SSLError as exc:
            raise UpstreamError(f"{self.authority}: the TLS handshake failed: {exc.reason or exc}") from None
        except (TimeoutError, OSError) as exc:
            raise UpstreamError(f"cannot connect to {self.authority}: {str(exc) or 'timed out'}") from None


class Connection:
    """One HTTP/1.1 exchange over a fresh TCP (or, https://, TLS) connection."""

    def __init__(self, origin: Origin):
        self.origin = origin
        self.authority = origin.authority
        self.conn = h11.Connection(h11.CLIENT)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b"") -> h11.Response:
        self.reader, self.writer = await self.origin.connect()
        all_headers = [("Host", self.authority), ("Content-Length", str(len(body))), *headers]
        self.writer.write(self.conn.send(h11.Request(method=method, target=path, headers=all_headers)))
        if body:
            self.writer.write(self.conn.send(h11.Data(data=body)))
        self.writer.write(self.conn.send(h11.EndOfMessage()))
        event = await self._next()
        if not isinstance(event, h11.Response):
            raise UpstreamError(f"{self.authority} answered without a response head")
        return event

    async def _next(self):
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise UpstreamError(f"{self.authority}: {exc}") from None
            if event is h11.NEED_DATA:
                try:
                    data = await self.reader.read(65536)
                except OSError as exc:
                    raise UpstreamError(f"{self.authority}: {exc}") from None
                self.conn.receive_data(data)
                continue
            return event

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; UpstreamError if the connection breaks mid-body."""
        while True:
            event = await self._next()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise UpstreamError(f"{self.authority} closed the connection mid-body")

    async def read_body(self, limit: int = UPSTREAM_MAX_BODY) -> bytes:
        parts, size = [], 0
        async for chunk in self.chunks():
            size += len(chunk)
            if size > limit:
                raise UpstreamError(f"{self.authority} answered more than {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def request(origin: Origin, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b"",
                  timeout: float = UPSTREAM_REQUEST_SECONDS,
                  limit: int = UPSTREAM_MAX_BODY) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body of at most `limit` bytes) of one request."""
    conn = Connection(origin)
    try:
        async with asyncio.timeout(timeout):
            head = await conn.open(method, path, headers, body)
            payload = await conn.read_body(limit)
    except TimeoutError:
        raise UpstreamError(f"{conn.authority} did not answer within {timeout} s") from None
    finally:
        conn.close()
    return head.status_code, {k.decode().lower(): v.decode() for k, v in head.headers}, payload
