"""How a stream opens: its place under the limits, its task, its replay and its response head.

A stream method (SendStreamingMessage, SubscribeToTask, WatchSession) that passed the door
(dispatch.py) first takes a place under the stream limits (limits.py, 429 else), then the hub
notes where its live events begin (`Hub.reading_point`, before the task is read, so no event
is lost in between). A task stream reads its task from the sequencer (a rejected message is
answered as one `task` event, and no stream opens); a watcher's opening is its
`connection-ack`. The replay (`Last-Event-ID`, protocol/replay.py) decides where its events
begin and whether a `gap` frame follows the opening; the hub opens the stream there
(`Hub.open_stream`), and writes the replay's events from its window a piece at a time
(stream.py, catchup.py): the opening holds only its head frames. A murgw.WatchOwnTasks
watcher opens as a WatchSession does, filtered by the code its caller's tasks carry in ring
records (asked of the sequencer once a caller, `Op.OWNER_CODE`, and kept: `owner_codes`,
at most `tuning.OWNER_CODES_KEPT`); upstream mode refuses it (-32004):
the upstream names a new task's id only once its first events may be in the ring already,
so their owner is not known when they are recorded. The response head
(`text/event-stream`, `A2A-Extensions`) is sent last, once nothing can refuse the stream.

Each open stream that a limit counts or a token let in is held here (`holds`): a reload ends
the ones whose token it removed (reload.py), and each gives its places back when it ends
(`close`). A stream whose token expires (a JWT's `exp`, a static token's `expires`) holds a
timer that ends it then, as a revocation does, with the access line's reason "expired"
(`expire_at`: the stream ends at that moment; after it, the token is answered 401 as an
unknown one). The timer runs on the loop's monotonic clock and
checks the wall clock when it fires, so the stream never ends before its token's expiry.
"""

from __future__ import annotations

import asyncio
import time

import orjson

from gateway import tuning
from gateway.config.options import Config, TokenRule
from gateway.common.control import ControlClient, Op
from gateway.common.metrics import Counters
from gateway.protocol import activation, events, sse
from gateway.protocol.activation import SEND_STREAMING_MESSAGE, WATCH_OWN_TASKS, WATCH_SESSION, WATCHER_METHODS
from gateway.protocol.errors import UNSUPPORTED_OPERATION, RpcError
from gateway.protocol.replay import ReplayPlan, parse_last_event_id, plan_replay
from gateway.worker.door import Caller, head_of
from gateway.worker.delivery.drivers import Served
from gateway.worker.delivery.hub import Hub
from gateway.worker.delivery.sink import gone
from gateway.worker.door.limits import ClientLimits, Holding
from gateway.worker.pace import OpeningPace
from gateway.worker.delivery.stream import TaskView

STREAM_HEAD = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
               (b"connection", b"keep-alive")]


class Openings:
    """Every stream opening of one worker, and the places its open streams hold."""

    def __init__(self, config: Config, hub: Hub, control: ControlClient, counters: Counters,
                 limits: ClientLimits):
        self.config = config
        self.hub = hub
        self.control = control
        self.counters = counters
        self.limits = limits
        self.holds: dict[Served, tuple[TokenRule | None, Holding | None]] = {}
        self.expiries: dict[Served, asyncio.TimerHandle] = {}  # streams whose token expires
        self.pace = OpeningPace()  # a storm's openings, a few a turn of the loop
        self.conversation_mode = config.lifecycle.conversation
        self.owner_codes: dict[str, int] = {}  # owner name -> the code its tasks carry in ring records

    async def open(self, scope, send, method: str, rpc_id, params: dict, caller: Caller,
                   rule: TokenRule | None) -> Served | None:
        """`_stream`, once the limits gave it a place (429 else) and the pace its turn; the
        place is given back at once when no stream opens. A client that left while it waited
        for the pace is not opened, nor answered (as on the front's at-once path)."""
        holding = await self.limits.hold_stream(scope, rule)
        served = None
        try:
            if not (await self.pace.admit() and gone(scope)):
                served = await self._stream(scope, send, method, rpc_id, params, caller)
        finally:
            if served is None:
                self.limits.release(holding)
            else:
                self._hold(served, rule, holding)
        return served

    def watch_now(self, scope, put, rpc_id, rule: TokenRule | None) -> Served:
        """A WatchSession's opening with no wait (`open` without its awaits), for the front's
        at-once path (dispatch.py's `at_once`), which asked first that no limit counts it and
        gave it its turn in the pace (door/admission.py); `put` sends at once."""
        served, start = self._watch(scope, WATCH_SESSION, rpc_id, None, self.hub.reading_point())
        put(start)
        self._hold(served, rule, None)
        return served

    def _hold(self, served: Served, rule: TokenRule | None, holding: Holding | None) -> None:
        if rule is not None or holding is not None:
            self.holds[served] = (rule, holding)
            if rule is not None:
                self.expire_at(served, rule.expires)

    def close(self, served: Served) -> None:
        """The stream is over: the places it held are given back, its expiry forgotten."""
        _rule, holding = self.holds.pop(served, (None, None))
        self.limits.release(holding)
        self.expire_at(served, None)

    def expire_at(self, served: Served, expires: float | None) -> None:
        """End `served` at `expires` (Unix seconds; None: never), in place of any expiry it had."""
        timer = self.expiries.pop(served, None)
        if timer is not None:
            timer.cancel()
        if expires is not None:
            self.expiries[served] = asyncio.get_running_loop().call_later(
                max(0.0, expires - time.time()), self._expire, served, expires)

    def _expire(self, served: Served, expires: float) -> None:
        del self.expiries[served]
        if time.time() < expires:  # the monotonic clock ran ahead of the wall clock
            self.expire_at(served, expires)
        else:
            self.hub.end_stream(served, "expired")

    def _conversation(self) -> str:
        """The capsule's lifecycle.conversation; in upstream mode, what the upstream's ack said."""
        if self.config.upstream:
            return "threaded" if self.hub.upstream_threaded else "stateless"
        return self.conversation_mode

    async def _stream(self, scope, send, method: str, rpc_id, params: dict,
                      caller: Caller) -> Served | None:
        """Open the stream (its head sent, its opening ready in `stream.opening`), or answer a
        rejected task and return None."""
        since = self.hub.reading_point()  # before the task is read, so no event is lost in between
        if method in WATCHER_METHODS:
            owner = await self._owner_code(caller) if method == WATCH_OWN_TASKS else None
            served, start = self._watch(scope, method, rpc_id, owner, since)
            await send(start)
            return served
        rpc_id_json, activated, door_used = self._named(scope, method, rpc_id, params)
        who = caller.params()
        if method == SEND_STREAMING_MESSAGE:
            answer = await self.control.call(Op.SEND, params=params, streaming=True, **who)
            if "rejected" in answer:
                await send(self._start(method, activated, door_used))
                rejected = sse.frame_event(None, rpc_id_json, orjson.dumps(events.task_event(answer["rejected"])))
                await send({"type": "http.response.body", "body": rejected})
                return None
            if isinstance(params["message"].get("taskId"), str):
                # spec: "No message on the opening `task` of a continued task"
                status = answer["task"]["status"]
                answer["task"]["status"] = {k: v for k, v in status.items() if k != "message"}
        else:
            answer = await self.control.call(Op.SUBSCRIBE, id=params.get("id"), **who)
        task = TaskView(answer["task"], answer["key"], ends_on_input=method == SEND_STREAMING_MESSAGE)
        plan = self._replay_plan(scope, watch=False)
        served = self.hub.open_stream(since=since, replay_after=plan.after, endpoint=method,
                                      rpc_id_json=rpc_id_json, task=task, activated=activated)
        self._set_opening(served, served.stream.unnumbered(events.task_event(answer["task"])), plan)
        await send(self._start(method, activated, door_used))
        return served

    def _watch(self, scope, method: str, rpc_id, owner: int | None, since: int) -> tuple[Served, dict]:
        """A watcher's stream, its opening set (its `connection-ack`, a gap), and its response
        head's message: no wait in it."""
        rpc_id_json, activated, door_used = self._named(scope, method, rpc_id, None)
        plan = self._replay_plan(scope, watch=True)
        served = self.hub.open_stream(since=since, replay_after=plan.after, endpoint=method,
                                      rpc_id_json=rpc_id_json, owner=owner)
        self._set_opening(served, served.stream.connection_frame(events.connection_ack_frame(self._conversation())),
                          plan)
        return served, self._start(method, activated, door_used)

    @staticmethod
    def _named(scope, method: str, rpc_id, params: dict | None) -> tuple[bytes, bool, bool]:
        """The stream's id as JSON, whether it activated the connection extension, whether its
        message uses the door's."""
        # orjson.dumps answers a bytes object that keeps its whole ~4 KiB write buffer; the
        # stream keeps its id for as long as it is open, so keep a right-sized copy.
        rpc_id_json = bytes(memoryview(orjson.dumps(rpc_id)))
        activated = activation.connection_activated(method, head_of(scope).all(b"a2a-extensions"))
        door_used = params is not None and method == SEND_STREAMING_MESSAGE and activation.message_uses_door(
            message if isinstance(message := params.get("message"), dict) else {})
        return rpc_id_json, activated, door_used

    @staticmethod
    def _set_opening(served: Served, head: bytes, plan: ReplayPlan) -> None:
        # The replay's events are not copied here: the hub writes them from the window a
        # piece at a time (stream.py, catchup.py); the opening holds its gap frame alone.
        stream = served.stream
        gap = plan.gap if stream.activated else None
        stream.opening = head + stream.connection_frame(events.gap_frame(gap)) if gap is not None else head

    async def _owner_code(self, caller: Caller) -> int:
        """The code the caller's own tasks carry in ring records (0 at a public door, where
        every task is the anonymous caller's)."""
        if self.config.upstream:
            raise RpcError(UNSUPPORTED_OPERATION, f"{WATCH_OWN_TASKS} is not served in upstream mode: "
                                                  "use SubscribeToTask for each task")
        if caller.owner is None:
            return 0
        code = self.owner_codes.get(caller.owner)
        if code is None:
            code = (await self.control.call(Op.OWNER_CODE, **caller.params()))["code"]
            if len(self.owner_codes) >= tuning.OWNER_CODES_KEPT:
                self.owner_codes.clear()
            self.owner_codes[caller.owner] = code
        return code

    def _replay_plan(self, scope: dict, watch: bool) -> ReplayPlan:
        """What the stream replays (`Last-Event-ID`), counted by its outcome."""
        plan = plan_replay(watch=watch, last_event_id=parse_last_event_id(head_of(scope).get(b"last-event-id")),
                           oldest=self.hub.oldest, next_id=self.hub.next_id)
        self.counters.add("replays", label="none" if plan.after is None else
                          "gap" if plan.gap is not None else "replayed")
        return plan

    @staticmethod
    def _start(method: str, activated: bool, door_used: bool) -> dict:
        """The response head's message, sent last: nothing can refuse the stream after it."""
        headers = list(STREAM_HEAD)
        value = activation.extensions_header(
            activation.response_extensions(method, activated=activated, door_used=door_used))
        if value:
            headers.append((b"a2a-extensions", value.encode()))
        return {"type": "http.response.start", "status": 200, "headers": headers}
