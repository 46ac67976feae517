"""One open SSE connection: what it writes and when (no socket knowledge beyond `send`).

A stream owns an integer cursor into the worker's window (`Hub`). At each wake-up it takes
every pending event its filter accepts and writes them, with a due heartbeat, in **one**
ASGI send. The lag rule lives here, once:

    A connection more than 128 events behind the ring head skips to head - 128 and, when
    activated, writes one `lagged` frame naming the events it skipped (other tasks' too)
    before the next event it receives. It stays open, and the worker logs
    "SSE broadcast lagged by <n> events". A client that stops reading blocks its own
    `send`; its cursor stays behind, so it lags rather than being buffered without bound.

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
from gateway.protocol.lag import skip_lag
from gateway.worker.hub import Entry, Hub

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
                 task: TaskView | None = None, activated: bool = True):
        self.hub = hub
        self._send = send
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
        self.disconnected = False
        self.lost = False  # a task stream lost an event: it checks its task at heartbeats
        self.last_state = task.opening_state if task else None
        self._pending_missed = 0
        self._heartbeat_due: float | None = None
        self._session_changed = False
        self._waiter: asyncio.Future | None = None

    # --- called by the hub ---

    def poke(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def skip_idle(self, head: int) -> None:
        """Events of other tasks arrived while this task stream was idle: it is not behind."""
        if self._waiter is not None and not self._waiter.done():
            self.cursor = head

    def heartbeat_due(self, due: float) -> None:
        self._heartbeat_due = due
        self.poke()

    def session_changed(self) -> None:
        self._session_changed = True
        self.poke()

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
        head = self.hub.head
        if head <= self.cursor:
            return False
        self.counters.observe("reader_lag_events", head - self.cursor, self.endpoint)
        cursor, missed = skip_lag(self.cursor, head)
        delivered = 0
        for event_id in range(cursor + 1, head + 1):
            entry = self.hub.entry(event_id)
            if entry is None:  # the pump lost it, or the ring overwrote it mid-copy
                missed += 1
                continue
            if not self.accepts(entry):
                continue
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

    async def _check_lost_task(self, parts: list[bytes]) -> bool:
        """A lagged task stream's heartbeat check: write the ending it finds, True to end."""
        try:
            found = await self.control.call("get", id=self.task.id)
        except Exception:
            return False
        snapshot = found["task"]
        status = snapshot["status"]
        if states.is_terminal(status["state"]):
            for artifact in snapshot.get("artifacts", ()):
                if artifact.get("name") == events.RESPONSE_ARTIFACT_NAME:
                    parts.append(self.unnumbered(
                        events.artifact_update(self.task.id, self.task.context_id, artifact)))
            parts.append(self.unnumbered(events.status_update(self.task.id, self.task.context_id, status)))
            return True
        if status["state"] == states.INPUT_REQUIRED and self.task.ends_on_input:
            parts.append(self.unnumbered(events.status_update(self.task.id, self.task.context_id, status)))
            return True
        return False

    async def write(self, body: bytes) -> None:
        try:
            await self._send({"type": "http.response.body", "body": body, "more_body": True})
        except Exception:  # the peer went away mid-write
            self.disconnected = True
            return
        self.counters.add("sends", label=self.endpoint)

    def _has_work(self) -> bool:
        return (self.hub.head > self.cursor or self._heartbeat_due is not None or self.disconnected
                or self.hub.closing or bool(self.hub.session_closed_at) or self._session_changed)

    async def _watch_disconnect(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                self.poke()
                return

    async def serve(self, opening: bytes, ended: bool = False) -> None:
        """Write the opening (head, ack or task, replay), then live events until the end."""
        loop = asyncio.get_running_loop()
        watcher = loop.create_task(self._watch_disconnect())
        self.hub.add(self, None if self.task is None else self.task.key)
        self.counters.add("connections_open", label=self.endpoint)
        self.counters.add("connections", label=self.endpoint)
        try:
            await self.write(opening)
            while not ended and not self.disconnected:
                if not self._has_work():
                    self._waiter = loop.create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
                if self.disconnected or self.hub.closing:
                    break
                parts: list[bytes] = []
                ended = self._collect(parts)
                if self._heartbeat_due is not None:
                    self.counters.observe("heartbeat_jitter_seconds", time.monotonic() - self._heartbeat_due)
                    self.counters.add("heartbeats")
                    self._heartbeat_due = None
                    parts.append(sse.HEARTBEAT)
                    if self.lost and self.task is not None and not ended:
                        ended = await self._check_lost_task(parts)
                closed_at = self.hub.session_closed_at
                if self._session_changed or (closed_at and self.cursor >= closed_at - 1):
                    if self.task is None:
                        parts.append(self.connection_frame(events.capsule_closed_frame()))
                    ended = True
                if parts:
                    await self.write(b"".join(parts))
            if not self.disconnected:
                try:
                    await self._send({"type": "http.response.body", "body": b"", "more_body": False})
                except Exception:
                    pass
        finally:
            self.open = False
            watcher.cancel()
            self.hub.remove(self, None if self.task is None else self.task.key)
            self.counters.sub("connections_open", label=self.endpoint)
