"""The front: the one server of every HTTP/1.1 request, one protocol object per connection.

Why: a stream's connection never returns to keep-alive, yet hypercorn's general HTTP stack
(h11, its TCPServer, task group, protocol and stream objects and their coroutines) cost a
stream's opening most of its CPU (loadtest/RESULTS.md); and two servers sharing one
connection, each with its own parser, timers and refusals, are where requests were smuggled
(a pipelined request's headers read as the stream request's). uvicorn's httptools_impl.py is
the model: the head read by httptools over raw bytes checked first (head_checks.py), the
body cut where it ends (body.py), and the worker's app run for each request (cycle.py), one
at a time, in order. HTTP/2 (its preface as the connection's first bytes, or ALPN `h2`) is
handed to hypercorn at once, through asyncio's protocol interface; nothing else is.

The connection's states, in h11's manner (what the front does with the client's bytes, and
what moves it on):

- HEAD: the client's bytes are kept until a head is whole (--header-timeout from the
  connection's start or the last answer's end: no head, the close); left when a head is read:
  BODY, the app run; refused (400, 431, 501, 505): CLOSED; HTTP/2's preface first: hypercorn's.
- BODY: the body's bytes, cut where it ends; reading pauses while the app has a full buffer of
  it unread; left when the body is whole: APP; the answer ends first, or the client's EOF (its
  app hears `http.disconnect`): CLOSED.
- APP: the next request's bytes, kept; left when the answer ends: HEAD, or CLOSED (it closes:
  HTTP/1.0, `Connection: close`, the keep-alive limit, a client's EOF).
- STREAM: the client's bytes ignored; its EOF or reset ends the stream; left at the stream's
  end (the hub's): CLOSED.
- CLOSED: the client's bytes ignored; left when its answers' bytes are sent, or
  CLOSE_GRACE_SECONDS pass (gateway/tuning.py): the abort.

A connection in HEAD or CLOSED belongs to no request or stream: it counts in the worker's
`connections_idle` gauge (gateway/common/metrics.py) until it moves on or is gone. It has
counted there since its accept (the accept loop's count, gateway/worker/http/accept.py: a
place its worker's siblings see), so the front takes that count over rather than adding one.

Flow control, as h11 and uvicorn do it: while the transport's write buffer is above its
high-water mark (the client is not reading its answers), the connection is not read and no
further request is parsed; nor is it read while it holds more unread request bytes than one
head may take (pipelined requests wait their turn in the kernel's buffers), so a client that pipelines and never reads
holds at most its socket buffers and one write buffer, and no answer being computed (SECURITY.md, probes).

The body timeout is the app's (dispatch.py: a body not in within --body-timeout is answered
408), started when the head is read; a body the app does not read keeps the connection only
until its answer ends (then it closes). `Expect: 100-continue` is answered
`100 Continue` when the app first waits for the body (cycle.py), as h11 does: a request the
door refuses from its head gets its refusal, no invitation, then the close. A `POST /` whose
body came whole with its head is served within the read: with no coroutine and no scope where
nothing on its way can wait but the pace (`_at_once`: a stream's opening, finished in the
pace's callback when it waits its turn, holding its place), else run at once until it must
wait (eager.py); any other request runs in a task.
"""

from __future__ import annotations

import asyncio

from gateway import logs
from gateway.common.metrics import IDLE_GAUGE
from gateway.tuning import BODY_BUFFERED, KEEP_ALIVE_REQUESTS
from gateway.worker.door import BODY_KEY
from gateway.worker.door.head import raw_problem
from gateway.worker.door.refusal import count_refusal
from gateway.worker.http import framing, runs
from gateway.worker.http.body import Body, Malformed
from gateway.worker.http.cycle import Cycle, peer_of, scope_of, view_of
from gateway.worker.http.head_checks import BAD_REQUEST, HEAD_END, HEAD_TOO_LARGE, Refused, read_head
from gateway.worker.http.runs import FrontSettings
from gateway.worker.http.transport_sink import TransportSink, close

H2_PREFACE = b"PRI * HTTP/2.0"
HEAD, BODY, APP, STREAM, CLOSED = "reading a head", "reading a body", "running the app", "streaming", "closed"
WRITING, PIPELINED, UNREAD = 1, 2, 4  # why reading is paused: answers unread, a head buffered, a body unread

log = logs.get("worker")


class Front(TransportSink):
    """One accepted connection: every HTTP/1.1 request on it, and the sink (sink.py) of the
    stream that ends it, if one does."""

    __slots__ = ("settings", "factory", "scheme", "state", "buffer", "body", "cycle", "requests",
                 "paused", "reading_paused", "eof", "idle")

    def __init__(self, factory, settings: FrontSettings):
        super().__init__(None)
        self.settings, self.factory = settings, factory  # hypercorn's protocol, for HTTP/2
        self.scheme = "http"
        self.state = HEAD
        self.buffer = bytearray()  # bytes read and not yet a request's
        self.body: Body | None = None  # the current request's body, as it is read
        self.cycle: Cycle | None = None  # the current request's run of the app
        self.requests = 0  # requests read on this connection
        self.paused = 0  # why reading is paused (WRITING, PIPELINED, UNREAD)
        self.reading_paused = False
        self.eof = False  # the client shut its write side after its request: the answer, then the close
        self.idle: bool | None = True  # counted in connections_idle (since its accept: accept.py's count); None: gone

    # --- the connection ---

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # typeshed: BaseTransport
        self.transport = transport
        self.high_water = transport.get_write_buffer_limits()[1]
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.scheme = "https"
            if ssl_object.selected_alpn_protocol() not in (None, "http/1.1"):
                self._hand_on()  # h2: hypercorn's
                return
        self._held(True)
        self.settings.heads.arm(self)  # --header-timeout for its head (head_deadlines.py)

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state is STREAM or state is CLOSED:
            return
        self.buffer += data
        if state is HEAD:
            self._read_head()
        elif state is BODY:
            self._read_body()
        if len(self.buffer) > self.settings.incomplete_cap and self.state is not CLOSED:
            self._pause(PIPELINED)  # read on once the requests it holds are read

    def eof_received(self):
        state = self.state
        if state is STREAM:
            self._leave()  # its watcher has left: its stream ends
        elif state is HEAD:
            self.eof = True  # what it sent whole is answered, then the close
            if not self.paused & WRITING:
                self._read_head()
                if self.state is HEAD:  # nothing whole left to answer
                    if self.buffer:  # a head cut short: h11's answer
                        self._refuse(400, BAD_REQUEST)
                    else:
                        self._close()
        elif state is BODY:
            self._leave()  # gone before its body was whole: the app's receive is told
        else:
            self.eof = True  # a half-close: its answer runs on, then the close
        # Kept open to answer what it sent; a TLS transport closes after its client's
        # close_notify whatever this says, and logs a plain-text line when told True
        return self.scheme == "http"

    def connection_lost(self, exc) -> None:
        self.settings.heads.disarm(self)
        self._held(False)
        self.idle = None
        if self.state is not STREAM:
            self.state = CLOSED
        super().connection_lost(exc)

    def _leave(self) -> None:
        super()._leave()
        if self.cycle is not None:
            self.cycle.wake()

    def pause_writing(self) -> None:
        self._pause(WRITING)  # its answers are unread: nothing more is read

    def resume_writing(self) -> None:
        super().resume_writing()  # a stream goes on
        self._resume(WRITING)
        if self.state is HEAD and self.buffer:
            self._read_head()

    def _pause(self, why: int) -> None:
        self.paused |= why
        self._set_reading()

    def _resume(self, why: int) -> None:
        self.paused &= ~why
        self._set_reading()

    def _set_reading(self) -> None:
        """Read while nothing pauses it; a stream's connection always (its FIN is its end)."""
        transport = self.transport
        pause = bool(self.paused) and self.state is not STREAM
        if pause is not self.reading_paused and transport is not None and not transport.is_closing():
            self.reading_paused = pause
            (transport.pause_reading if pause else transport.resume_reading)()

    # --- reading a request ---

    def _read_head(self) -> None:
        buffer = self.buffer
        if self.paused & WRITING:
            return  # read once its client has read what it was sent (resume_writing)
        if not self.requests and H2_PREFACE.startswith(bytes(buffer[:len(H2_PREFACE)])):
            if len(buffer) >= len(H2_PREFACE):
                if self.settings.h2:
                    self._hand_on()
                else:  # not offered (its guarantee does not hold here): the close says so
                    self._close()
            return
        end = buffer.find(HEAD_END)
        if end < 0:  # an ambiguous line is refused as soon as it arrives, not at the head's end
            problem = raw_problem(bytes(buffer))
            if problem is not None:
                return self._refuse(400, problem)
            if len(buffer) > self.settings.incomplete_cap:
                self._refuse(431, HEAD_TOO_LARGE)
            return
        head = bytes(buffer[:end + 4])
        del buffer[:end + 4]
        try:
            request = read_head(head)
        except Refused as refusal:
            return self._refuse(refusal.status, refusal.detail)
        self.settings.heads.disarm(self)
        self._held(False)
        self.requests += 1
        websocket = request.websocket
        # kept after its answer unless it says otherwise, or is a WebSocket handshake (refused)
        cycle = self.cycle = Cycle(self, request, request.keep_alive and not websocket
                                   and self.requests < KEEP_ALIVE_REQUESTS)
        self.body = Body(request.length)
        # invited to send its body when the app first waits for it (cycle.py), as h11 does: a
        # request the door refuses before reading its body gets its refusal and no invitation
        cycle.expects = request.expects and not self.body.done and not buffer
        self.state = BODY
        self._read_body()
        if self.state is CLOSED:
            return  # its body was refused
        if self.eof and self.state is BODY:
            self._leave()  # its client shut its side before the body was whole: the app is told at once
        if len(buffer) <= self.settings.incomplete_cap:  # measured once its body's bytes are taken
            self._resume(PIPELINED)
        whole = cycle.body_done and request.method == b"POST" and request.url == b"/"
        body, client = b"", peer_of(self.transport)
        if whole:  # the app takes it whole, with no receive and no body timer
            body = b"".join(cycle.parts)
            whole = len(body) <= self.settings.config.max_body_bytes  # else the door's 413, in its order
            if whole:
                cycle.parts.clear()
                cycle.given = True
                if self._at_once(cycle, body, view_of(request, client)):
                    return
        scope = scope_of(request, self.transport, self.scheme, websocket, client, self)
        if whole:
            scope[BODY_KEY] = body
        runs.run(self.settings, cycle, scope, whole, self._app_over)

    def _read_body(self) -> None:
        cycle = self.cycle
        assert cycle is not None  # BODY: a request's cycle is running
        try:
            data = self.body.read(self.buffer)
        except Malformed:
            if cycle.started:
                return self._close()
            return self._refuse(400, BAD_REQUEST)
        if data:
            cycle.parts.append(data)
            cycle.expects = False  # sending already
        if self.body.done:
            cycle.body_done = True
            self.state = APP
        elif sum(map(len, cycle.parts)) > BODY_BUFFERED:
            self._pause(UNREAD)
        cycle.wake()

    def body_taken(self) -> None:
        """The app has received what was read of the body: read on."""
        if self.paused & UNREAD:
            self._resume(UNREAD)

    # --- the app's run ---

    def _at_once(self, cycle: Cycle, body: bytes, view: dict) -> bool:
        """The app's run with no coroutine or scope (`Admission.at_once`), over within this
        call or, after a wait for the pace, within its callback (`door.admission.PacedOpening`,
        which tells `_app_over`); False: nothing was done."""
        error = None
        try:
            taken = self.settings.app.at_once(view, body, cycle, self._app_over)
            if not taken:
                return taken is None
        except Exception as failed:
            error = failed
        self._app_over(cycle, error)
        return True

    def _app_over(self, cycle: Cycle, error: BaseException | None) -> None:
        if error is not None:
            log.warning("an HTTP/1.1 request's app failed", error=repr(error))
        if cycle.streaming:
            if self._listener is None:
                self.release()  # its stream never reached the hub
            return
        if cycle.over or cycle is not self.cycle:
            return
        # over without its whole answer: the connection goes with it
        if not cycle.started and not self.left and self.transport is not None:
            self.transport.write(framing.error_answer(500, "internal error"))
        self._close()

    def on_disconnect(self, listener) -> None:
        """The hub takes this front as its stream's sink (`Hub._open`, its first call): the
        head the request's cycle holds is handed over with it (`Cycle.hand_over`)."""
        if self.cycle is not None:
            self.cycle.hand_over()
        super().on_disconnect(listener)

    def stream(self, head: bytes, chunked: bool) -> None:
        """The answer is an event stream: this connection is its sink from here on (the hub
        writes it, with `head` before its first bytes); what the client sends is ignored."""
        self.state = STREAM
        self.unsent, self.framed = head, chunked
        self.buffer.clear()
        self.cycle = self.body = None
        self.paused = 0
        self._set_reading()

    def answered(self, cycle: Cycle) -> None:
        """The answer's end: the connection closes, or (kept) the next request is read."""
        if cycle is not self.cycle or self.state is CLOSED:
            return
        if cycle.closes or not self.body.done or self.left:
            return self._close()
        if self.eof and HEAD_END not in self.buffer:  # nothing whole left: a head cut short gets h11's
            return self._refuse(400, BAD_REQUEST) if self.buffer else self._close()  # answer, as at its EOF
        self.cycle = self.body = None
        cycle.wake()  # its receive, if it waits, hears `http.disconnect`, as hypercorn tells it
        self.state = HEAD
        self._held(True)
        self.settings.heads.arm(self)
        if self.buffer:  # a pipelined request: read on the loop's next turn, not inside this answer
            self.settings.loop.call_soon(self._read_next)

    def _read_next(self) -> None:
        if self.state is HEAD and self.buffer:
            self._read_head()

    # --- ends ---

    def timed_out(self) -> None:
        """No whole head within --header-timeout (head_deadlines.py)."""
        if self.state is HEAD:
            self._close()  # as hypercorn's idle timer: no head, no answer

    def _refuse(self, status: int, detail: str) -> None:
        """A head no route sees, answered here (problem details), then the close."""
        count_refusal(self.settings.app.counters, status, detail)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(framing.error_answer(status, detail))
        self._close()

    def _held(self, idle: bool) -> None:
        """Whether the connection belongs to no request or stream (HEAD, or CLOSED with its
        transport not yet gone): counted in the worker's connections_idle gauge."""
        if self.idle is None or self.idle is idle:
            return
        self.idle = idle
        counters = self.settings.app.counters
        (counters.add if idle else counters.sub)(IDLE_GAUGE)

    def _close(self) -> None:
        self.state = CLOSED
        self.settings.heads.disarm(self)
        self._held(True)
        if self.cycle is not None:
            self.cycle.wake()
        if self.transport is not None and not self.transport.is_closing():
            close(self.transport)

    def _hand_on(self) -> None:
        """HTTP/2: the connection becomes hypercorn's, with every byte read so far."""
        self.settings.heads.disarm(self)
        self._held(False)  # hypercorn's part counts it while it has no stream (h2_idle.py)
        self.idle = None
        self.state = CLOSED
        transport, self.transport = self.transport, None
        if transport is None or transport.is_closing():
            return
        protocol = self.factory()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if self.buffer:
            protocol.data_received(bytes(self.buffer))
        self.buffer.clear()

