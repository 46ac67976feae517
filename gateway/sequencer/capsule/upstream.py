"""Upstream mode: the gateway in front of a real capsule (or another gateway).

The sequencer holds **one** `murmur.WatchSession` to the upstream and adopts its event ids
verbatim, so every replica in front of one capsule numbers every event alike and a client can
resume on any replica. The `result` bytes go into the ring as they came (only the plain form of
an annotated status is re-encoded). Control methods are forwarded; a SendStreamingMessage is
forwarded as the SendMessage that takes the message (its answer is the opening task), and the
stream itself is served from the ring. What only the upstream knows is asked of it
(`upstream_opening`, `upstream_attachments`): a stream it refuses, attachment bytes; and its
errors are relayed as it worded them (`upstream_errors`).

What watchers see of upstream trouble:
- a break the upstream's replay covers: nothing (the link resumes with Last-Event-ID); the
  same when the link itself falls behind the upstream's lag limit: on the upstream's `lagged`
  frame it resumes at once from its last id, so the skipped events come from the replay;
- a break it does not cover (the upstream answers with a `gap` past our last id): the ids in
  between are missing from the ring, so every stream crossing them writes a `lagged` frame
  naming them (a task stream checks its task at its heartbeats, as after any loss);
- a new upstream session, told at the reconnect by its replay (`resume.py`: the link resumes
  one id before its last, which the same session always answers with something) or later by
  an id at or below our last one (a replay after our Last-Event-ID never repeats one):
  a new gateway session: the ring is reset (new epoch), watchers get `capsule-closed`, and a
  reconnect with an old Last-Event-ID is answered by the spec's replay table. A restarted
  upstream that has written past our last id and evicted it cannot be told apart from the
  same session (the protocol carries no session identity): the spec's own limit.

Trouble reaching the upstream is logged with its detail and answered to clients in the
gateway's own words (`upstream_errors.unreachable`, `credentials_refused`).
- the upstream's `capsule-closed` closes the gateway's session the same way.
"""

from __future__ import annotations

import asyncio
import base64
import random
from typing import Any

import orjson

from gateway import logs
from gateway.common import records
from gateway.sequencer.capsule import paging
from gateway.sequencer.capsule.contexts import ContextOwners
from gateway.sequencer.capsule.upstream_http import Connection, Origin, UpstreamError, request
from gateway.sequencer.capsule.resume import RESTARTED, SKIP, Resume
from gateway.sequencer.capsule.upstream_attachments import AttachmentCache, fetch_attachment
from gateway.sequencer.capsule.upstream_errors import CREDENTIAL_STATUSES, credentials_refused, relayed, unreachable
from gateway.sequencer.capsule.upstream_opening import opening_now, stream_opening
from gateway.sequencer.capsule.interfaces import RingWriter
from gateway.common.control import Caller, Op
from gateway.protocol import events, states
from gateway.protocol.activation import (CANCEL_TASK, GET_EXTENDED_AGENT_CARD, GET_TASK, LIST_TASKS,
                                         SEND_MESSAGE, SEND_STREAMING_MESSAGE, STOP_SESSION,
                                         SUBSCRIBE_TO_TASK, WATCH_SESSION)
from gateway.protocol.errors import INTERNAL_ERROR, TASK_NOT_FOUND, RpcError
from gateway.protocol.parser import SSEParser, read_stream_response
from gateway.protocol.uris import A2A_VERSION, STREAM_URI
from gateway.tuning import ATTACHMENT_CACHE_BYTES, UPSTREAM_BACKOFF_CAP, UPSTREAM_BACKOFF_FIRST, UPSTREAM_CARD_SECONDS

LINK_RPC_ID = 0
LINK_PREFIX = b'{"jsonrpc":"2.0","id":0,"result":'
KNOWN_STATES = frozenset(state for state, _word in states.STATES)


class KnownTask:
    __slots__ = ("key", "owner", "state")

    def __init__(self, key: int, owner: str | None):
        self.key, self.owner, self.state = key, owner, None


class UpstreamCapsule:
    """The capsule side of the sequencer when `--upstream` is set."""

    def __init__(self, writer: RingWriter, url: str, token: str | None, cacert: str | None):
        self.writer = writer
        self.url = url
        self.origin = Origin(url, cacert)
        self.token = token
        self.tasks: dict[str, KnownTask] = {}
        self.contexts = ContextOwners()  # of the tasks created through this gateway
        self._keys = 0
        self.last_id = 0
        self._last_event: bytes | None = None  # the result bytes of event `last_id`
        self._resume = Resume(0, None)
        self.closed = False
        self.attachments = AttachmentCache(ATTACHMENT_CACHE_BYTES)
        self._card: tuple[float, dict] | None = None
        self._link: asyncio.Task | None = None
        self.log = logs.get("upstream")
        self.operations = {Op.SEND: self.send, Op.GET: self.get, Op.SUBSCRIBE: self.subscribe,
                           Op.LIST: self.list, Op.CANCEL: self.cancel, Op.STOP: self.stop_session,
                           Op.ATTACHMENT: self.attachment, Op.CARD: self.card,
                           Op.EXTENDED_CARD: self.extended_card}

    def start(self) -> None:
        self._link = asyncio.create_task(self.run())

    def close(self) -> None:
        if self._link is not None:
            self._link.cancel()

    # --- the one upstream stream ---

    def headers(self, extra: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()) -> list[tuple[str, str]]:
        headers = [("Content-Type", "application/json"), ("A2A-Version", A2A_VERSION), *extra]
        if self.token:
            headers.append(("Authorization", f"Bearer {self.token}"))
        return headers

    async def run(self) -> None:
        """Hold the WatchSession forever, reconnecting with capped, jittered backoff."""
        delay = UPSTREAM_BACKOFF_FIRST
        while True:
            try:
                resumed_from = self.last_id
                if await self._follow() and self.last_id > resumed_from:
                    self.log.warning("upstream link lagged; resuming from the upstream's replay",
                                     last_id=self.last_id)
                    continue  # at once: the events the upstream skipped are in its replay buffer
                delay = UPSTREAM_BACKOFF_FIRST
            except (UpstreamError, ValueError) as exc:
                self.log.warning("upstream stream lost", error=str(exc), last_id=self.last_id)
            self.writer.set_connected(False)
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(UPSTREAM_BACKOFF_CAP, delay * 2)

    async def _follow(self) -> bool:
        """Read the upstream's WatchSession into the ring until it ends; True when it ended on
        the upstream's `lagged` frame (this link fell behind its lag limit), whose skipped
        events a resume with our Last-Event-ID gets back from its replay."""
        conn = Connection(self.origin)
        body = orjson.dumps({"jsonrpc": "2.0", "id": LINK_RPC_ID, "method": WATCH_SESSION, "params": {}})
        self._resume = Resume(self.last_id, self._last_event)
        try:
            head = await conn.open("POST", "/", self.headers([("Last-Event-ID", str(self._resume.after))]), body)
            if head.status_code != 200:
                refusal = ("the upstream refused the gateway's credentials" if head.status_code in CREDENTIAL_STATUSES
                           else "the upstream answered WatchSession with")
                raise UpstreamError(f"{refusal} (HTTP {head.status_code}): {await self._its_words(conn)}")
            parser = SSEParser()
            async for chunk in conn.chunks():
                for event in parser.feed(chunk):
                    if event.data is None:  # a heartbeat: the replay is over
                        self._judge(self._resume.heartbeat(), "the upstream replayed nothing")
                    elif self._take(event.id, event.data.encode()):
                        return True
        finally:
            conn.close()
        return False

    def _take(self, event_id: int | None, data: bytes) -> bool:
        """Append one upstream event to the ring; True for the upstream's `lagged` frame."""
        _, item, error = read_stream_response(data)
        if error is not None:
            raise UpstreamError(f"the upstream refused the WatchSession: {error.get('message')}")
        if event_id is None:
            return self._take_unnumbered(item)
        full = data[len(LINK_PREFIX):-1] if data.startswith(LINK_PREFIX) and data.endswith(b"}") else \
            orjson.dumps(orjson.loads(data)["result"])
        verdict = self._resume.event(event_id, full)
        if verdict is SKIP:
            return False  # our last event again: the replay's one event of overlap
        if event_id <= self.last_id:  # a replay after an id never repeats it: ids restarted
            verdict = RESTARTED
        self._judge(verdict, f"the upstream wrote id {event_id} again")
        key, meta, plain = self._classify(item)
        self.writer.append_raw(event_id, key, meta, full, plain)
        self.last_id, self._last_event = event_id, full
        return False

    def _take_unnumbered(self, item) -> bool:
        frame = (item.frame if item is not None else None) or {}
        name = frame.get("frame")
        if name == events.FRAME_LAGGED:
            return True
        if name == events.FRAME_GAP:
            self._judge(self._resume.gap(frame.get("firstAvailableId")),
                        "the upstream never issued the id the link resumed after")
        elif name == events.FRAME_CONNECTION_ACK:
            self.writer.set_conversation(frame.get("conversationMode", "stateless"))
            self.writer.set_connected(True)
            self.log.info("upstream stream open", url=self.url, last_id=self.last_id)
        elif name == events.FRAME_CAPSULE_CLOSED:
            if not self.closed:
                self.closed = True
                self.writer.close_session()
        return False

    @staticmethod
    async def _its_words(conn: Connection) -> str:
        """What the upstream said when it refused the stream (its body, the first 500
        characters), for the log line that says why the link is down."""
        try:
            said = await conn.read_body()
        except (UpstreamError, ValueError) as exc:
            return f"(its answer not read: {exc})"
        return said[:500].decode("utf-8", "replace") or "(no body)"

    def _judge(self, verdict: str | None, why: str) -> None:
        """On the resume check's RESTARTED (resume.py): the upstream's ids restarted, so a new
        gateway session."""
        if verdict is not RESTARTED:
            return
        self.log.warning("upstream started a new session; starting a new gateway session",
                         last_id=self.last_id, why=why)
        self.tasks.clear()
        self.contexts.clear()
        self.attachments.clear()  # the old session's tasks are gone upstream
        self.last_id, self._last_event = 0, None
        self.closed = False
        self.writer.new_session()

    def _key(self, task_id: str) -> KnownTask:
        known = self.tasks.get(task_id)
        if known is None:
            self._keys += 1
            known = self.tasks[task_id] = KnownTask(self._keys, None)
        return known

    def _classify(self, item) -> tuple[int, int, bytes | None]:
        """(task key, meta, plain form or None) of one upstream event."""
        if item is None:  # a member we do not know: watchers only
            return 0, records.FRAME, None
        if item.kind not in ("statusUpdate", "artifactUpdate"):
            return 0, records.FRAME, None
        known = self._key(item.body.get("taskId", ""))
        if item.frame is not None:
            return known.key, records.make_meta(known.state, records.FRAME), None
        if item.kind == "artifactUpdate":
            return known.key, records.make_meta(known.state, 0), None
        state = item.body.get("status", {}).get("state")
        known.state = state if state in KNOWN_STATES else known.state
        metadata = item.body.get("metadata")
        plain = None
        if isinstance(metadata, dict) and STREAM_URI in metadata:
            plain = orjson.dumps(events.plain_form({"statusUpdate": item.body}))
        meta = records.status_meta(state) if state in KNOWN_STATES else records.make_meta(known.state, records.STATUS)
        return known.key, meta, plain

    # --- forwarded control calls ---

    async def call(self, method: str, params: dict) -> Any:  # the JSON-RPC result, as parsed
        body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        try:
            status, _, payload = await request(self.origin, "POST", "/", self.headers(), body)
        except UpstreamError as exc:
            raise unreachable(method, exc) from None
        return relayed(method, status, payload)

    def _visible(self, task_id: object, p: dict) -> KnownTask | None:
        """The task's record, or -32001 when the caller does not see it (no existence leak)."""
        if not isinstance(task_id, str) or not task_id:
            return None  # the upstream answers it (-32602)
        known = self.tasks.get(task_id)
        if not Caller.of(p).sees(None if known is None else known.owner):
            raise RpcError(TASK_NOT_FOUND, f"task {task_id} not found")
        return known

    async def send(self, p: dict) -> dict:
        params = p.get("params") or {}
        message = params.get("message") if isinstance(params, dict) else None
        if isinstance(message, dict) and message.get("taskId") is not None:
            self._visible(message.get("taskId"), p)
        elif isinstance(message, dict):
            self.contexts.check(message.get("contextId"), Caller.of(p))
        task: dict | None
        if p.get("streaming") and not await self._serves_streams():
            task = await self._upstream_opening(SEND_STREAMING_MESSAGE, params)
        else:
            result = await self.call(SEND_MESSAGE, opening_now(params) if p.get("streaming") else params)
            if isinstance(result, dict) and "message" in result and "task" not in result:
                if not p.get("streaming"):
                    return {"message": result["message"]}  # a capsule may answer with a message
                task = await self._upstream_opening(SEND_STREAMING_MESSAGE, params)  # a stream carries a task
            else:
                task = result.get("task") if isinstance(result, dict) else None
        if not isinstance(task, dict):
            raise RpcError(INTERNAL_ERROR, "the upstream answered SendMessage without a task")
        if task.get("status", {}).get("state") == states.REJECTED:
            return {"rejected": task}
        known = self._key(task["id"])
        if not (isinstance(message, dict) and message.get("taskId") is not None):
            known.owner = p.get("owner")  # ours: the link may have recorded its first event already
            self.contexts.add(task.get("contextId"), known.owner)
        return {"task": task, "key": known.key}

    async def get(self, p: dict) -> dict:
        known = self._visible(p.get("id"), p)
        task = await self.call(GET_TASK, {"id": p.get("id")})
        return {"task": task, "key": (known or self._key(task["id"])).key}

    async def subscribe(self, p: dict) -> dict:
        if await self._serves_streams():
            found = await self.get(p)
            if found["task"]["status"]["state"] not in states.TERMINAL_STATES:
                return found
        # The upstream's own refusal (an ended task, or no task streams at all), as it words it.
        task = await self._upstream_opening(SUBSCRIBE_TO_TASK, {"id": p.get("id")})
        known = self._visible(task.get("id"), p)
        return {"task": task, "key": (known or self._key(task["id"])).key}

    async def _serves_streams(self) -> bool:
        """Whether the upstream's card (read as `card` reads it) says it serves task streams:
        one whose `lifecycle.task_acceptance` is `none` says `streaming: false`."""
        try:
            card = await self.card({})
        except RpcError:
            return True  # no card: the request itself finds out
        capabilities = card.get("capabilities") if isinstance(card, dict) else None
        return not isinstance(capabilities, dict) or capabilities.get("streaming") is not False

    async def _upstream_opening(self, method: str, params: dict) -> dict:
        """The task the upstream opens `method`'s stream with, or its refusal raised as it
        came. An opening its card said it would refuse means the card changed: read it again."""
        task = await stream_opening(self.origin, self.headers(), method, params)
        self._card = None
        if not isinstance(task.get("id"), str):
            raise RpcError(INTERNAL_ERROR, f"the upstream opened {method} with a task without an id")
        return task

    async def list(self, p: dict) -> dict:
        """The upstream's listing; for a caller who sees only its own tasks, those tasks paged
        here, as a door that held them would page them (the upstream's pages hold everyone's)."""
        params = p.get("params") or {}
        caller = Caller.of(p)
        if caller.sees_all:
            return await self.call(LIST_TASKS, params)
        start, size = paging.window(params)
        mine = await paging.listed_tasks(self.call, params,
                                         lambda t: caller.sees(getattr(self.tasks.get(t["id"]), "owner", None)))
        return paging.page(mine, start, size)

    async def cancel(self, p: dict) -> dict:
        self._visible(p.get("id"), p)
        return await self.call(CANCEL_TASK, {"id": p.get("id")})

    async def stop_session(self, p: dict) -> dict:
        await self.call(STOP_SESSION, {})
        return {}

    async def attachment(self, p: dict) -> dict | None:
        """Only what the upstream serves for this task: the caller must see the task here, and
        the bytes are cached under (task, sha256), so a hash another task returned is fetched
        (and refused) upstream like any other."""
        task_id, sha = p.get("task_id"), p.get("sha256")
        if not isinstance(task_id, str) or not isinstance(sha, str):
            return None
        try:
            self._visible(task_id, p)
        except RpcError:
            return None
        found = self.attachments.get(task_id, sha)
        if found is None:
            found = await fetch_attachment(self.origin, self.headers(), task_id, sha)
            if found is None:
                return None
            self.attachments.put(task_id, sha, found)
        return {"mediaType": found[0], "data": base64.b64encode(found[1]).decode()}

    async def card(self, p: dict) -> dict:
        """The upstream's public card (cached briefly); the worker puts its own address in."""
        now = asyncio.get_running_loop().time()
        if self._card is None or now - self._card[0] > UPSTREAM_CARD_SECONDS:
            try:
                status, _, body = await request(self.origin, "GET", "/.well-known/agent-card.json", [])
            except UpstreamError as exc:
                raise unreachable("agent card", exc) from None
            if status in CREDENTIAL_STATUSES:
                raise credentials_refused("agent card", status, body)
            if status != 200:  # a refusal's body is not a card
                raise RpcError(INTERNAL_ERROR, f"the upstream answered its agent card with HTTP {status}")
            try:
                self._card = (now, orjson.loads(body))
            except orjson.JSONDecodeError:
                raise RpcError(INTERNAL_ERROR, "the upstream's agent card is not JSON") from None
        return self._card[1]

    async def extended_card(self, p: dict) -> dict:
        return await self.call(GET_EXTENDED_AGENT_CARD, {})
