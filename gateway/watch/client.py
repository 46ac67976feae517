"""`mur watch [ADDRESS] [--token TOKEN | --token-file FILE] [--cacert FILE]`: print what a
capsule (or a gateway) is doing.

The bearer token comes from `--token`, or `--token-file FILE` (its first line), or the
environment's `MUR_TOKEN`, in that order (`token_of`). The file and the environment keep it
off the command line, which `ps`, /proc/PID/cmdline and shell history show to others.

A blocking murmur.WatchSession client over `http.client`, which decodes the chunked body;
the bytes go to `SSEParser`, each event to `WatchPrinter` (gateway/watch/printer.py says
what is printed), and every write is flushed at once so the output can be piped.

It sends `A2A-Version: 1.0` and `Last-Event-ID: 0`, so the replay buffer is printed on
attach, and never reconnects. An `https://` address is verified against the system's CAs, or
only against `--cacert FILE` (a private CA's PEM) when given. Exit status:

- 0: the capsule closed its stream (`capsule-closed`);
- 1: the stream ended without `capsule-closed`. The connection was lost: `E-IO-003`, naming
  the last event id read. Or the server ended the stream itself: one line saying what that
  meant (`why_ended`: the token expired, a reload revoked it, or the gateway is draining);
- 2: the request was refused: the connection itself, an HTTP status other than 200 (401,
  403, ...), or a JSON-RPC error; one line on stderr, never a traceback (a 401 to a JWT
  whose `exp` has come says the token expired, read from the token, unverified);
- 130: SIGINT, quietly.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import http.client
import io
import os
import ssl
import sys
import time
from typing import Callable, Iterator, TextIO
from urllib.parse import urlsplit

import orjson

from gateway.protocol.activation import WATCH_SESSION
from gateway.protocol.parser import SSEParser
from gateway.protocol.uris import A2A_VERSION
from gateway.watch.printer import EXIT_REFUSED, STDERR, STDOUT, WatchPrinter, Write
from gateway.tuning import (CLOCK_SKEW_SECONDS, MAX_TOKEN_FILE_BYTES, WATCH_CONNECT_SECONDS, WATCH_PROBE_SECONDS,
                            WATCH_READ_BYTES)

DEFAULT_ADDRESS = "http://127.0.0.1:52222"
EXIT_LOST = 1
EXIT_INTERRUPTED = 130
TOKEN_ENV = "MUR_TOKEN"
FRESH_TOKEN = "run mur watch again with a fresh token"
WATCH_REQUEST = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": WATCH_SESSION, "params": {}})


class CannotWatch(Exception):
    """Why no stream was opened: a bad address or --cacert, no connection, or an answer that
    is not an event stream (exit status 2, `EXIT_REFUSED`)."""


def request_headers(token: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "A2A-Version": A2A_VERSION, "Last-Event-ID": "0",
               "Accept": "text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def normalized_address(address: str) -> str:
    """`host:port` means `http://host:port`; a trailing slash is dropped."""
    return (address if "://" in address else f"http://{address}").rstrip("/")


def tls_context(cacert: str | None) -> ssl.SSLContext:
    """A verifying client context: the system's CAs, or only those in `cacert`."""
    try:
        return ssl.create_default_context(cafile=cacert)
    except (OSError, ssl.SSLError) as exc:
        raise CannotWatch(f"--cacert {cacert}: {getattr(exc, 'strerror', None) or exc}") from None


def open_connection(address: str, cacert: str | None = None,
                    timeout: float = WATCH_CONNECT_SECONDS) -> http.client.HTTPConnection:
    try:
        url = urlsplit(address)
        port = url.port
    except ValueError:
        raise CannotWatch(f"not a valid address: {address}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise CannotWatch(f"not an http:// or https:// address: {address}")
    connection: http.client.HTTPConnection
    if url.scheme == "https":
        connection = http.client.HTTPSConnection(url.hostname, port, timeout=timeout,
                                                 context=tls_context(cacert))
    else:
        connection = http.client.HTTPConnection(url.hostname, port, timeout=timeout)
    try:
        connection.connect()
    except OSError as exc:
        raise CannotWatch(f"cannot connect to {address}: {exc.strerror or exc}") from None
    return connection


def refusal(response: http.client.HTTPResponse) -> str:
    """One line naming why a non-stream answer refused the request."""
    body = response.read()
    try:
        answer = orjson.loads(body)
    except ValueError:
        answer = None
    error = answer.get("error") if isinstance(answer, dict) else None
    problem = answer.get("detail") if isinstance(answer, dict) else None
    if isinstance(error, dict):  # a JSON-RPC error
        detail = f"error {error.get('code')}: {error.get('message')}"
    elif isinstance(problem, str):  # the door's own refusal: RFC 9457 problem details
        detail = problem
    else:
        detail = body.decode("utf-8", "replace").strip().splitlines()[0] if body.strip() else "no body"
    phrase = http.client.responses.get(response.status, response.reason)  # servers may send no reason
    return f"HTTP {response.status} {phrase}: {detail}" if response.status != 200 else detail


class Console:
    """Where the printer's writes go; each batch is flushed as it arrives."""

    def __init__(self, stdout: TextIO, stderr: TextIO):
        self.streams = {STDOUT: stdout, STDERR: stderr}

    def show(self, writes: list[Write]) -> None:
        touched = set()
        for write in writes:
            self.streams[write.stream].write(write.text)
            touched.add(write.stream)
        for name in touched:
            self.streams[name].flush()


def start_watch(connection: http.client.HTTPConnection, address: str,
                token: str | None) -> http.client.HTTPResponse | None:
    """The event stream's response; None when the connection was lost before its head."""
    try:
        connection.request("POST", urlsplit(address).path or "/", body=WATCH_REQUEST, headers=request_headers(token))
        response = connection.getresponse()
        if response.status == 401 and (when := expired_at(token)) is not None:
            raise CannotWatch(f"{address} refused the request: HTTP 401 Unauthorized: the token expired "
                              f"({when}); {FRESH_TOKEN}")
        if response.status != 200 or not response.getheader("content-type", "").startswith("text/event-stream"):
            raise CannotWatch(f"{address} refused the request: {refusal(response)}")
    except (OSError, http.client.HTTPException):
        return None
    connection.sock.settimeout(None)  # heartbeats may pause; only a closed connection ends the stream
    return response


class Body:
    """The body's bytes as they arrive, until it ends or the connection is lost; `ended`: the
    server ended it (its last chunk came), rather than the connection breaking under it."""

    def __init__(self, response: http.client.HTTPResponse):
        self.response, self.ended = response, False

    def __iter__(self) -> Iterator[bytes]:
        try:
            while chunk := self.response.read1(WATCH_READ_BYTES):
                yield chunk
        except (OSError, http.client.HTTPException):
            return
        self.ended = True


def jwt_expiry(token: str | None) -> float | None:
    """A JWT's `exp` as its payload says (unverified: only the wording of an end depends on
    it); None for a token that is no JWT or names none."""
    parts = (token or "").split(".")
    if len(parts) != 3:
        return None
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None


def expired_at(token: str | None) -> str | None:
    """When the JWT `token` expired, as a line says it; None for a token that is no JWT, names
    no `exp`, or whose `exp` has not come (by this host's clock give or take `CLOCK_SKEW_SECONDS`)."""
    expires = jwt_expiry(token)
    if expires is None or expires > time.time() + CLOCK_SKEW_SECONDS:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))


def why_ended(address: str, cacert: str | None, token: str | None = None) -> str:
    """What a gateway's end of a watcher's stream, without capsule-closed, meant, told by one
    look at its /readyz (not a reconnect): still ready, it ended the stream because the token
    expired (a JWT whose `exp` has come, by this host's clock give or take `CLOCK_SKEW_SECONDS`), or
    because a reload revoked the token or a static token's `expires` came (worker/reload.py,
    worker/opening.py); not answering, or 503, it is stopping (its drain)."""
    try:
        connection = open_connection(address, cacert, WATCH_PROBE_SECONDS)
        with contextlib.closing(connection):
            connection.request("GET", urlsplit(address).path.rstrip("/") + "/readyz")
            status = connection.getresponse().status
    except (CannotWatch, OSError, http.client.HTTPException):
        status = None
    when = expired_at(token)
    if status == 200 and when is not None:
        return f"its token expired ({when}); {FRESH_TOKEN}"
    if status == 200:
        return ("its token was revoked (a reload took its right to watch) or expired; run mur watch "
                "again with a token that holds murmur.WatchSession")
    if status in (None, 503):
        return "the gateway is stopping (drain); run mur watch again once it is back"
    return "the server ended it without capsule-closed; run mur watch again to reattach"


def watch(address: str, token: str | None, console: Console, cacert: str | None = None) -> int:
    address = normalized_address(address)
    try:
        connection = open_connection(address, cacert)
        with contextlib.closing(connection):
            return print_stream(start_watch(connection, address, token), address, console,
                                lambda: why_ended(address, cacert, token))
    except CannotWatch as exc:
        console.show([Write(STDERR, f"mur watch: {exc}\n")])
        return EXIT_REFUSED


def print_stream(response: http.client.HTTPResponse | None, address: str, console: Console,
                 explain: Callable[[], str]) -> int:
    """Print the stream to its end; the exit status. An end without capsule-closed is exit 1
    either way (the spec's table): worded by `explain` when the server ended the stream, as
    E-IO-003 when the connection was lost."""
    printer = WatchPrinter()
    body = None
    if response is not None:
        parser, body = SSEParser(), Body(response)
        for chunk in body:
            for event in parser.feed(chunk):
                console.show(printer.feed(event))
                if printer.exit_code is not None:
                    return printer.exit_code
    console.show(printer.ended(address, explain()) if body is not None and body.ended else printer.lost(address))
    return EXIT_LOST


def token_of(args: argparse.Namespace, environ) -> str | None:
    """--token, else --token-file's first line, else $MUR_TOKEN, else None (no token)."""
    if args.token is not None:
        return args.token
    if args.token_file is not None:
        try:
            with open(args.token_file, "rb") as fh:
                text = fh.read(MAX_TOKEN_FILE_BYTES).decode("utf-8", "replace")
        except OSError as exc:
            raise CannotWatch(f"--token-file {args.token_file}: {exc.strerror or exc}") from None
        token = next(iter(text.splitlines()), "").strip()
        if not token:
            raise CannotWatch(f"--token-file {args.token_file}: the file's first line holds no token")
        return token
    return environ.get(TOKEN_ENV) or None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mur", description="murmur client commands")
    commands = parser.add_subparsers(dest="command", required=True)
    watch_command = commands.add_parser("watch", help="print every task a capsule runs, as it runs",
                                        description="Attach to a capsule's murmur.WatchSession and print it.")
    watch_command.add_argument("address", nargs="?", default=DEFAULT_ADDRESS,
                               help=f"the capsule's or gateway's address (default {DEFAULT_ADDRESS})")
    token = watch_command.add_mutually_exclusive_group()
    token.add_argument("--token", help="bearer token, sent as Authorization: Bearer TOKEN "
                                       "(visible in ps: prefer --token-file or $MUR_TOKEN)")
    token.add_argument("--token-file", metavar="FILE",
                       help=f"read the bearer token from FILE's first line [else env {TOKEN_ENV}]")
    watch_command.add_argument("--cacert", metavar="FILE",
                               help="https:// only: trust the CA certificates in FILE (PEM) instead of the system's")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")  # tool output must never stop the watch
    console = Console(sys.stdout, sys.stderr)
    try:
        token = token_of(args, os.environ)
    except CannotWatch as exc:
        console.show([Write(STDERR, f"mur watch: {exc}\n")])
        return EXIT_REFUSED
    try:
        return watch(args.address, token, console, args.cacert)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # stdout's reader went away (`mur watch | head`): exit quietly, and keep the
        # interpreter's final flush from complaining about the same pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_LOST


if __name__ == "__main__":
    sys.exit(main())
