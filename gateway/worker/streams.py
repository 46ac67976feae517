"""One open SSE connection: what it writes and when (no socket knowledge beyond `send`).

A stream owns an integer cursor into the worker's window (`Hub`). At each wake-up it takes
every pending event its filter accepts and writes them, with a due heartbeat, in **one**
write. Where the connection has a direct body (direct.py: hypercorn's HTTP/1.1 path), a
parked stream is written by the hub's pass itself (`wake`), with no coroutine switch; its
coroutine (`serve`) only opens, ends, waits out a full buffer and makes the task lookups
that need an await. Elsewhere each wake-up resumes `serve`, which makes one ASGI send.
The lag rule lives here, once:

    A connection more than 128 events behind the ring head skips to head - 128 and, when
    activated, writes one `lagged` frame naming the events it skipped (other tasks' too)
    before the next event it receives. It stays open, and the worker logs
    "SSE broadcast lagged by <n> events". A client that stops reading fills its transport
    buffer past the high-water mark: its stream stops writing and waits for the buffer to
    drain, its cursor stays behind, so it lags rather than being buffered without bound.

A task stream that lost events may have lost its ending: from the first loss on it asks the
sequencer for its task's state at each heartbeat and writes the ending it finds (spec
"Events a connection misses").
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import orjson

from gateway import logs, records
from gateway.control import ControlClient
from gateway.metrics import Counters
from gateway.protocol import events, sse, states
from gateway.protocol.lag import LAG_LIMIT, skip_lag
from gateway.worker import direct
from gateway.worker.direct import DirectBody
from gateway.worker.hub import Entry, Hub
from gateway.worker.lean import LeanQueue

Send = Callable[[dict], Awaitable[None]]
Receive = Callable[[], Awaitable[dict]]

log = logs.get("worker")


class TaskView:
    """What a task stream knows of its task: ids for carriers, and how it ends."""

    def __init__(self, snapshot: dict, key: int, ends_on_input: bool):
        self.id = snapshot["id"]
        self.context_id = snapshot["contextId"]
        self.key = key
        self.ends_on_input = ends_on_input
        self.opening_state = snapshot["status"]["state"]


class Stream:
    def __init__(self, hub: Hub, send: Send, receive: Receive, *, endpoint: str,
                 rpc_id_json: bytes, counters: Counters, control: ControlClient,
                 task: TaskView | None = None, activated: bool = True, raw_send: Send | None = None):
        self.hub = hub
        self._send = send
        self._raw_send = raw_send
        self._receive = receive
        self.endpoint = endpoint
        self.rpc_id_json = rpc_id_json
        self.prefix = sse.rpc_prefix(rpc_id_json)
        self.counters = counters
        self.control = control
        self.task = task
        self.activated = activated
        self.plain = not activated
        self.cursor = 0
        self.open = True
        self.ended = False
        self.opening = b""  # what `serve` writes first (head, ack or task, replay); dropped once written
        self.disconnected = False
        self.lost = False  # a task stream lost an event: it checks its task at heartbeats
        self.last_state = task.opening_state if task else None
        self.direct: DirectBody | None = None
        self._pending_missed = 0
        self._heartbeat_due: float | None = None
        self._check_due = False
        self._session_changed = False
        self._waiter: asyncio.Future | None = None

    # --- called by the hub ---

    def _parked(self) -> bool:
        return self._waiter is not None and not self._waiter.done()

    def poke(self) -> None:
        if self._parked():
            self._waiter.set_result(None)

    def wake(self) -> bool:
        """Something to write (events, a heartbeat, a session change). A stream parked on a
        direct body writes it here and now, in the hub's pass, without a coroutine switch;
        whatever needs an await (a full buffer, a task check, the end) goes to `serve`.
        True when it wrote (the hub counts the sends of its pass)."""
        waiter = self._waiter
        if waiter is None or waiter.done():
            return False  # running: `serve` looks for work before it parks again
        if self.direct is None or self.hub.closing or self.disconnected or self._check_due:
            waiter.set_result(None)
            return False
        wrote = self._write_direct(self._gather())
        if self.ended or self._must_wait():
            waiter.set_result(None)
        return wrote

    def skip_idle(self, head: int) -> None:
        """Events of other tasks arrived while this task stream was idle: it is not behind."""
        if self._parked():
            self.cursor = head

    def heartbeat_due(self, due: float) -> bool:
        self._heartbeat_due = due
        return self.wake()

    def session_changed(self) -> bool:
        self._session_changed = True
        return self.wake()

    # --- writing ---

    def unnumbered(self, result: dict) -> bytes:
        return sse.frame_event(None, self.rpc_id_json, orjson.dumps(result))

    def connection_frame(self, frame: dict) -> bytes:
        """gap / lagged / connection-ack / capsule-closed in the carrier this stream uses."""
        if self.task is None:
            return self.unnumbered(events.taskless_frame_event(frame))
        return self.unnumbered(events.task_frame_event(
            self.task.id, self.task.context_id, frame, state=self.last_state))

    def accepts(self, entry: Entry) -> bool:
        if self.task is None:
            return True
        return entry.key == self.task.key and not (self.plain and entry.meta & records.FRAME)

    def ends_at(self, entry: Entry, live: bool) -> bool:
        if self.task is None:
            return False
        if entry.meta & records.TERMINAL:
            return True
        return live and self.task.ends_on_input and bool(entry.meta & records.INPUT_REQUIRED)

    def take(self, entry: Entry, parts: list[bytes]) -> None:
        if self._pending_missed:
            if self.activated:
                parts.append(self.connection_frame(events.lagged_frame(self._pending_missed)))
                self.counters.add("lagged_frames", label=self.endpoint)
            self._pending_missed = 0
        parts.append(entry.wire(self.prefix, self.plain))
        if entry.meta & records.STATUS:
            self.last_state = records.meta_state(entry.meta)

    def replay(self, after: int, parts: list[bytes]) -> bool:
        """Buffered events with id > after (this stream's filter); True if one ended it."""
        self.cursor = self.hub.head
        for event_id in range(max(after, self.hub.oldest - 1) + 1, self.hub.head + 1):
            entry = self.hub.entry(event_id)
            if entry is not None and self.accepts(entry):
                self.take(entry, parts)
                if self.ends_at(entry, live=False):
                    return True
        return False

    def _collect(self, parts: list[bytes]) -> bool:
        """Every pending event this stream accepts; True when the stream must end after them."""
        hub = self.hub
        head, cursor = hub.head, self.cursor
        if head <= cursor:
            return False
        if self.task is None and not self._pending_missed and head - cursor <= LAG_LIMIT:
            # A watcher takes every event: watchers at the same cursor with the same request
            # id write the same bytes, so the hub joins them, and counts them, once per pass.
            batch = hub.batch(cursor, self.prefix, self.plain)
            if batch is not None:
                batch.takers += 1
                parts.append(batch.body)
                self.cursor = head
                return False
        self.counters.observe("reader_lag_events", head - cursor, self.endpoint)
        cursor, missed = skip_lag(cursor, head)
        delivered = 0
        for event_id in range(cursor + 1, head + 1):
            entry = hub.entry(event_id)
            if entry is None:  # the pump lost it, or the ring overwrote it mid-copy
                missed += 1
                continue
            if not self.accepts(entry):
                continue
            if missed:
                self._note_missed(missed)
                missed = 0
            self.take(entry, parts)
            delivered += 1
            if self.ends_at(entry, live=True):
                self.cursor = event_id
                self.counters.add("events_delivered", delivered, self.endpoint)
                return True
        self._note_missed(missed)
        self.cursor = head
        self.counters.add("events_delivered", delivered, self.endpoint)
        return False

    def _note_missed(self, missed: int) -> None:
        if missed:
            self._pending_missed += missed
            self.lost = True
            self.counters.add("events_lost_to_lag", missed, self.endpoint)
            log.warning(f"SSE broadcast lagged by {missed} events", endpoint=self.endpoint)

    def _gather(self) -> bytes:
        """What is due now: pending events, a due heartbeat, the session's end. Sets `ended`,
        and `_check_due` when a lagged task stream must look its task up (an await)."""
        parts: list[bytes] = []
        self.ended = self._collect(parts)
        if self._heartbeat_due is not None:
            self.counters.observe("heartbeat_jitter_seconds", time.monotonic() - self._heartbeat_due)
            self.counters.add("heartbeats")
            self._heartbeat_due = None
            parts.append(sse.HEARTBEAT)
            self._check_due = self.lost and self.task is not None and not self.ended
        closed_at = self.hub.session_closed_at
        if self._session_changed or (closed_at and self.cursor >= closed_at - 1):
            if self.task is None:
                parts.append(self.connection_frame(events.capsule_closed_frame()))
            self.ended = True
        return b"".join(parts)

    async def _check_lost_task(self) -> bytes:
        """A lagged task stream's heartbeat check: the ending it finds (and `ended`), or b""."""
        try:
            found = await self.control.call("get", id=self.task.id)
        except Exception:
            return b""
        snapshot = found["task"]
        status = snapshot["status"]
        parts: list[bytes] = []
        if states.is_terminal(status["state"]):
            for artifact in snapshot.get("artifacts", ()):
                if artifact.get("name") == events.RESPONSE_ARTIFACT_NAME:
                    parts.append(self.unnumbered(
                        events.artifact_update(self.task.id, self.task.context_id, artifact)))
            parts.append(self.unnumbered(events.status_update(self.task.id, self.task.context_id, status)))
            self.ended = True
        elif status["state"] == states.INPUT_REQUIRED and self.task.ends_on_input:
            parts.append(self.unnumbered(events.status_update(self.task.id, self.task.context_id, status)))
            self.ended = True
        return b"".join(parts)

    def _must_wait(self) -> bool:
        """Whether the next step needs `serve`'s awaits."""
        return (self.disconnected or self._check_due
                or (self.direct is not None and (self.direct.blocked or self.direct.closed)))

    def _write_direct(self, body: bytes) -> bool:
        if not body:
            return False
        if self.direct.closed:
            self.disconnected = True
            return False
        self.direct.write(body)
        return True

    async def write(self, body: bytes) -> None:
        if not body:
            return
        if self.direct is not None:
            if self._write_direct(body):
                self.counters.add("sends", label=self.endpoint)
            await self._drain()
            return
        try:
            await self._send({"type": "http.response.body", "body": body, "more_body": True})
        except Exception:  # the peer went away mid-write
            self.disconnected = True
            return
        self.counters.add("sends", label=self.endpoint)

    async def _drain(self) -> None:
        if self.direct.closed:
            self.disconnected = True
        elif self.direct.blocked:
            try:
                await self.direct.drain()
            except Exception:  # the peer went away while we waited
                self.disconnected = True

    def _has_work(self) -> bool:
        return (self.hub.head > self.cursor or self._heartbeat_due is not None
                or self.hub.closing or bool(self.hub.session_closed_at) or self._session_changed
                or self.ended or self._must_wait())

    async def _watch_disconnect(self) -> None:
        """Where the server's receive queue is not lean.py's: a task of its own waits on it."""
        while not self.disconnected:
            self._on_receive(await self._receive())

    def _on_receive(self, message: dict) -> None:
        if message["type"] == "http.disconnect":
            self.disconnected = True
            self.poke()

    async def serve(self) -> None:
        """Write the opening (head, ack or task, replay), then live events until the end
        (at once when `ended` is already set). Between wake-ups the stream parks; with a direct
        body the hub writes for it (`wake`)."""
        loop = asyncio.get_running_loop()
        inbox = getattr(self._receive, "__self__", None)  # hypercorn's receive queue (lean.py)
        watcher = None
        if isinstance(inbox, LeanQueue):
            inbox.on_put = self._on_receive
            while not inbox.empty():  # the client may have left while the stream opened
                self._on_receive(inbox.get_nowait())
        else:
            inbox = None
            watcher = loop.create_task(self._watch_disconnect())
        opening, self.opening = self.opening, b""
        self.direct = direct.find(self._raw_send)
        self.hub.add(self, None if self.task is None else self.task.key)
        self.counters.add("connections_open", label=self.endpoint)
        self.counters.add("connections", label=self.endpoint)
        try:
            await self.write(opening)
            del opening
            while not self.ended and not self.disconnected:
                if self.direct is not None:
                    await self._drain()
                if not self._has_work():
                    self._waiter = loop.create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
                if self.disconnected or self.hub.closing or self.ended:  # `wake` may have ended it
                    break
                if self._check_due:
                    self._check_due = False
                    await self.write(await self._check_lost_task())
                    continue
                await self.write(self._gather())
            if not self.disconnected:
                try:
                    await self._send({"type": "http.response.body", "body": b"", "more_body": False})
                except Exception:
                    pass
        finally:
            self.open = False
            if watcher is not None:
                watcher.cancel()
            if inbox is not None:
                inbox.on_put = None
            self.hub.remove(self, None if self.task is None else self.task.key)
            self.counters.sub("connections_open", label=self.endpoint)
            # The heartbeat wheel holds a closed stream until its next due time: let it hold
            # the stream alone, not the connection behind it.
            self._send = self._raw_send = self._receive = self.direct = None
