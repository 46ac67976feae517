"""The front: every accepted HTTP/1.1 connection starts as one small protocol object of ours.

Why: a stream's connection never returns to keep-alive, yet hypercorn's general HTTP stack
(h11, its TCPServer, task group, protocol and stream objects and their coroutines) cost a
stream's opening most of its CPU, only to be let go once its head was written
(loadtest/RESULTS.md). A stream is now served by this object from its first byte to its end.

How: `Front` reads the request head (httptools, uvicorn's C HTTP/1.1 parser, over raw head
bytes checked for the ambiguous forms first: head_checks.py) and decides from it alone
where the request goes:

- `POST /` with a JSON body, HTTP/1.1, no Upgrade, Expect or `Connection: close`: the front
  reads the body (bounded by --max-body-bytes and --body-timeout) to learn the JSON-RPC
  method. A stream method (activation.STREAM_METHODS) is served here: the worker's app
  (door.Admission, then dispatch.RpcEndpoint: the same door as every request) runs in a
  short task with this object's `send` and `receive` and the body in its scope, and the
  stream's sink (sink.py) is this object, which writes each chunk in one `transport.write`
  and ends the stream as hypercorn did (the terminating chunk and the FIN in one segment).
  Once the stream is open, that task is over: the hub drives the stream with no coroutine
  (hub.py, `adopt`). A refusal of it is framed as h11 frames it (framing.py). Bytes the
  client sends after a stream request are ignored; its FIN or reset ends the stream at once.
- Anything else (another method or path, HTTP/1.0, an Upgrade, HTTP/2's preface or ALPN
  `h2`, a head the parser does not take, a body over the limit or too slow): the
  connection is handed to the protocol hypercorn asked the loop for, through asyncio's
  public protocol interface (`set_protocol`, `connection_made`, `data_received` with every
  byte read so far). hypercorn then serves it as before, keep-alive included. The head it
  is handed loses an `Upgrade: h2c` offer (head_checks.without_h2c_upgrade) unless
  --h2c-upgrade is on and HTTP/2 offered: hypercorn's own h11, where http11_fixes.py does
  not apply, switches on it whatever the option says.

A refusal of a stream request that keeps the connection (a JSON-RPC error) is followed by the
next request read here as the first was, never handed on unread.

An ambiguous head is refused 400 and closed (head_checks.py); a head not in within
--header-timeout closes the connection, as hypercorn's idle timer did; one past the buffer
hypercorn would take is 431, in hypercorn's bytes. `MURGW_TEST_STREAM_PATH=hypercorn` (tests
only) sends every connection straight to hypercorn, as before the front, so the suites can
compare the bytes of both paths.
"""

from __future__ import annotations

import asyncio
import os

import httptools
import orjson

from gateway import logs
from gateway.config import Config
from gateway.protocol.activation import STREAM_METHODS
from gateway.worker.door import BODY_KEY, head, is_json_content_type
from gateway.worker.door.refusal import count_refusal
from gateway.worker.http import eager, framing, head_checks
from gateway.worker.http.head_checks import HEAD_END, Parsed
from gateway.worker.http.transport_sink import TransportSink, close

SWITCH = "MURGW_TEST_STREAM_PATH"  # "hypercorn": every connection goes straight to hypercorn (tests only)
H2_PREFACE = b"PRI * HTTP/2.0"
HANDED_ON = ("upgrade", "expect")  # a request with one of these is hypercorn's
BAD_REQUEST = "the request is not well-formed HTTP/1.1"
APPS: set[asyncio.Task] = set()  # the app runs of the front's requests that had to wait (eager.py)

log = logs.get("worker")


def enabled() -> bool:
    return os.environ.get(SWITCH, "") != "hypercorn"


class FrontSettings:
    """What every connection's front shares: the worker's app and the bounds it applies, and
    its loop (on Python 3.11 `asyncio.get_running_loop()` is a getpid system call each time:
    three an opening)."""

    __slots__ = ("app", "config", "incomplete_cap", "h2", "h2c", "loop")

    def __init__(self, app, config: Config, incomplete_cap: int, h2: bool = True):
        self.app, self.config, self.incomplete_cap = app, config, incomplete_cap
        self.loop = asyncio.get_running_loop()
        self.h2 = h2  # HTTP/2 is offered: its guarantee holds on this hypercorn (serving.py)
        self.h2c = h2 and config.h2c_upgrade  # an `Upgrade: h2c` is handed on as written


class Front(TransportSink):
    """One accepted connection until it is handed to hypercorn, or, for a stream, for good:
    then it is the stream's sink (sink.py) too."""

    __slots__ = ("settings", "factory", "scheme", "buffer", "head_size", "request", "parser", "timer", "length",
                 "chunked", "served", "chunked_answer", "close_after", "requests", "_gone")

    def __init__(self, factory, settings: FrontSettings):
        super().__init__(None)
        self.settings, self.factory = settings, factory
        self.scheme = "http"
        self.buffer = bytearray()  # every byte read, until the request is whole (or handed on)
        self.head_size = 0  # bytes of the head, once whole
        self.request: Parsed | None = None
        self.parser = None
        self.timer: asyncio.TimerHandle | None = None
        self.length = 0
        self.chunked = False
        self.served = False  # the app runs for this request: nothing more is read
        self.chunked_answer = False
        self.close_after = False
        self.requests = 0  # requests this connection's front went on to after its first (`_next_request`)
        self._gone: asyncio.Future | None = None  # the app's receive, waiting for the client to leave

    # --- reading the request ---

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.high_water = transport.get_write_buffer_limits()[1]
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.scheme = "https"
            if ssl_object.selected_alpn_protocol() not in (None, "http/1.1"):
                self._hand_on()  # h2: hypercorn's
                return
        self.timer = self.settings.loop.call_later(self.settings.config.header_timeout, self._timed_out)

    def data_received(self, data: bytes) -> None:
        if self.served:
            # Its request is whole: kept (bounded) for hypercorn in case the answer is not a
            # stream and the connection stays open; ignored once a stream's head is written.
            if self.buffer is not None and len(self.buffer) <= self.settings.incomplete_cap:
                self.buffer += data
            return
        self.buffer += data
        if self.request is None:
            self._read_head()
        else:
            self._read_body(data)

    def _read_head(self) -> None:
        buffer = self.buffer
        if H2_PREFACE.startswith(bytes(buffer[:len(H2_PREFACE)])):
            if len(buffer) >= len(H2_PREFACE):
                if self.settings.h2:
                    self._hand_on()
                else:  # not offered (its guarantee does not hold here): the close says so
                    self._cancel_timer()
                    self.transport.close()
            return
        end = buffer.find(HEAD_END)
        if end < 0:  # an ambiguous line is refused as soon as it arrives, not at the head's end
            problem = head.raw_problem(bytes(buffer))
            if problem is not None:
                return self._refuse_head(400, problem)
            if len(buffer) > self.settings.incomplete_cap:
                self._refuse_head(431, "the request head is larger than this door buffers")
            return
        self.head_size = end + 4
        try:
            request, self.parser = head_checks.read_head(bytes(buffer[:self.head_size]))
        except head_checks.Ambiguous as refusal:
            return self._refuse_head(400, str(refusal))
        if request is None:
            return self._hand_on()  # not HTTP/1.x as httptools reads it, or an upgrade: hypercorn's
        self.request = request
        parser = self.parser
        if not self._ours(parser, request):
            return self._hand_on()
        self._cancel_timer()
        self.timer = self.settings.loop.call_later(self.settings.config.body_timeout, self._hand_on)
        rest = bytes(buffer[self.head_size:])
        if rest or request.complete:
            self._read_body(rest)

    def _ours(self, parser, request: Parsed) -> bool:
        """Whether the head may be a stream request: else hypercorn's, body unread."""
        if parser.get_method() != b"POST" or request.url != b"/" or parser.get_http_version() != "1.1":
            return False
        length, content_type = None, None
        for name, value in request.headers:
            if name == b"content-length":
                length = value
            elif name == b"content-type":
                content_type = value
            elif name == b"transfer-encoding":
                self.chunked = True
            elif name == b"connection":
                if b"close" in value.lower() or b"upgrade" in value.lower():
                    return False
            elif name.decode("latin-1") in HANDED_ON:
                return False
        if not is_json_content_type(None if content_type is None else content_type.decode("latin-1")):
            return False
        if length is not None:
            self.length = int(length)
            if self.length > self.settings.config.max_body_bytes:
                return False  # the door answers 413 in its order (after 401, 429)
        return True

    def _read_body(self, data: bytes) -> None:
        request = self.request
        if not self.chunked:  # the body's end is known: what follows it is the next request's
            data = data[:max(self.length - request.size, 0)]
        if data:
            try:
                self.parser.feed_data(data)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                # not HTTP/1.x as httptools reads it, or a request pipelined behind this one
                # asks for an upgrade (raised out of data_received, it dropped the connection)
                return self._hand_on()
        if request.size > self.settings.config.max_body_bytes:
            return self._hand_on()
        if request.complete:
            self._request_whole()

    def _request_whole(self) -> None:
        request = self.request
        body = b"".join(request.body)
        try:
            method = orjson.loads(body).get("method") if body.strip() else None
        except (orjson.JSONDecodeError, AttributeError):
            method = None
        if not isinstance(method, str) or method not in STREAM_METHODS:
            return self._hand_on()
        if self.chunked:
            return self._refuse_head(400, "a stream request's body is not chunked")
        self._cancel_timer()
        self.served = True
        del self.buffer[:self.head_size + self.length]  # what follows may be the next request
        self.parser = None
        self._serve(body)

    def _timed_out(self) -> None:
        self.timer = None
        if self.transport is not None:
            self.transport.close()  # as hypercorn's idle timer: no head, no answer

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _refuse_head(self, status: int, detail: str) -> None:
        count_refusal(self.settings.app.counters, status, detail)
        self._cancel_timer()
        self.served = True
        transport = self.transport
        transport.write(framing.error_answer(status, detail))
        close(transport)

    def _hand_on(self):
        """The connection becomes hypercorn's, with every byte read so far (and the client's
        EOF, if it came: what its protocol answers to it is the transport's answer)."""
        self._cancel_timer()
        transport, self.transport = self.transport, None
        if transport is None or transport.is_closing():
            return None
        protocol = self.factory()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if self.buffer:
            data = bytes(self.buffer)
            protocol.data_received(data if self.settings.h2c else head_checks.without_h2c_upgrade(data))
        self.buffer = self.request = self.parser = None
        return protocol.eof_received() if self.left else None

    def eof_received(self):
        if not self.served and self.transport is not None:
            # before a whole stream request: hypercorn's, EOF and all, as before the front
            self.left = True
            return self._hand_on()
        # after one: a stream's watcher has left (its stream ends), a refusal is still answered
        self._leave()
        return True

    def connection_lost(self, exc) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def _leave(self) -> None:
        super()._leave()
        self._disconnect_receive()

    def _disconnect_receive(self) -> None:
        """The app's receive, if it waits, returns its `http.disconnect`."""
        gone, self._gone = self._gone, None
        if gone is not None and not gone.done():
            gone.set_result(None)

    # --- the app's run: the same door as hypercorn's requests ---

    def _scope(self) -> dict:
        transport = self.transport
        peer, own = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        return {"type": "http", "http_version": "1.1", "asgi": {"spec_version": "2.1", "version": "3.0"},
                "method": "POST", "scheme": self.scheme, "path": "/", "raw_path": b"/", "query_string": b"",
                "root_path": "", "headers": self.request.headers,
                "client": None if not peer else (peer[0], peer[1]),
                "server": None if not own else (own[0], own[1]),
                "state": {}, "extensions": {}}

    def _serve(self, body: bytes) -> None:
        scope = self._scope()
        scope[BODY_KEY] = body  # read whole already: the app takes it from the scope
        self.request = None
        number = self.requests  # this request's: a later one's answer is not this run's to close
        try:
            task = eager.start(self.settings.loop, self.settings.app(scope, self.receive, self.send))
        except Exception as error:
            return self._app_over(error, number)
        if task is None:
            return self._app_over(None, number)  # over within this call: the usual opening (eager.py)
        APPS.add(task)
        task.request_number = number
        task.add_done_callback(self._app_done)

    async def receive(self) -> dict:
        """The app's ASGI receive: the body is in the scope (BODY_KEY), so only the client's
        leaving is left to tell."""
        if not self.left:
            self._gone = self.settings.loop.create_future()
            await self._gone
        return {"type": "http.disconnect"}

    def _app_done(self, task: asyncio.Task) -> None:
        APPS.discard(task)
        self._app_over(None if task.cancelled() else task.exception(), task.request_number)

    def _app_over(self, error: BaseException | None, number: int) -> None:
        if error is not None:
            log.warning("a stream request's app failed", error=repr(error))
        # its connection goes with it, unless its stream is open (the hub ends it: hub.py,
        # `adopt`) or its answer kept the connection for the next request (`_next_request`)
        if self._listener is None and number == self.requests:
            self.release()

    async def send(self, message: dict) -> None:
        """The app's ASGI send: the answer framed as h11 frames it, its head written with the
        first bytes after it (one segment)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if message["type"] == "http.response.start":
            headers = message.get("headers", [])
            self.unsent, self.chunked_answer = framing.head(message["status"], headers)
            # a stream, and a refusal that says so, close the connection after the answer
            self.close_after = self.chunked_answer or framing.closes(headers)
            if self.chunked_answer:
                self.buffer = None  # what the client sends after a stream request is ignored
            return
        body = message.get("body", b"")
        if not self.chunked_answer:
            data = self.headed(body)
            if data:
                transport.write(data)
        elif body:
            self.write(body)
        if not message.get("more_body", False):
            self.end()

    # --- the sink (sink.py, transport_sink.py) ---

    def end(self) -> None:
        """The answer's end: a stream's as `TransportSink.end_now`; after a refusal, the close, or
        (the answer kept the connection) the next request read (`_next_request`)."""
        if self.chunked_answer:
            self.chunked_answer = False
            self.end_now()
            return
        transport = self.transport
        if transport is None or self.closed:
            return
        if self.close_after or self.buffer is None:
            close(transport)
        else:
            self._next_request()

    def _next_request(self) -> None:
        """The connection's next request is read as its first was, its head checked here: on
        the path where hypercorn's HTTP/1.1 fixes do not apply (serving.py), handed on unread
        it would reach h11 unpatched, which serves an ambiguous head or an h2c upgrade."""
        self.request = self.parser = None
        self.requests += 1
        self.served = self.chunked = self.close_after = False
        self.head_size = self.length = 0
        self._disconnect_receive()  # the answered request's: as hypercorn tells it
        self.timer = self.settings.loop.call_later(self.settings.config.header_timeout, self._timed_out)
        if self.buffer:
            self._read_head()


async def end_apps(apps: set[asyncio.Task], grace: float) -> None:
    """The server stops: as hypercorn does with its own, give every app run of the front's
    still going (an opening that waits on the sequencer or the pace; an open stream has none:
    the hub ends it) `grace` seconds to end, then cancel what is left."""
    if apps:
        await asyncio.wait(list(apps), timeout=grace)
    for task in list(apps):
        task.cancel()
    if apps:
        await asyncio.wait(list(apps))
