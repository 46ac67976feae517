"""`POST /`: the door's checks in their order, then each JSON-RPC method's answer or its stream.

`POST /` is a raw ASGI endpoint (streams need one batched send per wake-up, which
Starlette's StreamingResponse does not give). Every request first passes `Admission`:
503 + Retry-After (the worker's open requests at --max-connections; the probes have a bound
of their own) and 431 (more than
--max-headers lines, or a head over --max-header-bytes). Then, on `POST /`:
429 (the client's request bucket, --client-request-rate, is empty) -> 404 (no JSON content type) or 401 (no token, or
one the door does not know), both decided
from the head: the body is then only drained, never parsed (nor read when its client waits
for `100 Continue`: the connection closes after the refusal) -> 413 (body over
--max-body-bytes) -> 408 (body not in within --body-timeout) -> 404 (empty body) -> -32700
(not JSON) -> -32600 (nested deeper than --max-json-depth, a top-level member named twice, not a JSON-RPC request, id
longer than --max-rpc-id-chars) -> -32601 (method) -> 403 (the token lacks the method's scope) ->
-32009 (A2A-Version) -> 429 (a stream over --max-streams-per-client or its token's
max_streams, limits.py) -> the method's own errors. Every JSON-RPC error is one JSON body with
HTTP 200; the door's own refusals carry their HTTP status and RFC 9457 problem details
(problem.py), and the ones that leave a request unread (408, 431, 503) also close the
connection. SECURITY.md says what each limit defends. A stream method is handed to its
opening (opening.py), and the stream it opens is served from here by the hub (hub.py).
"""

from __future__ import annotations

import asyncio
from typing import Callable

import orjson

from gateway.config.options import Config, TokenRule
from gateway.common.control import ControlClient, Op
from gateway.common.metrics import Counters
from gateway.protocol import activation, sse
from gateway.protocol.activation import (CANCEL_TASK, GET_TASK, LIST_TASKS, METHODS, SEND_MESSAGE,
                                         STOP_SESSION, WATCH_SESSION)
from gateway.protocol.errors import (EXTENDED_AGENT_CARD_NOT_CONFIGURED, INTERNAL_ERROR,
                                     INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
                                     PUSH_NOTIFICATION_NOT_SUPPORTED, RpcError, check_version,
                                     error_body)
from gateway.worker.access_log import AccessLog, Exchange, exchange_of
from gateway.worker.card import agent_card, with_own_address
from gateway.worker.door import (BODY_KEY, CLOSE, HEAD_KEY, JSON_HEAD, Caller, Door, Refused, duplicate_member,
                                 head_of, is_json_content_type, nests_deeper, refuse, respond, rpc_id_of,
                                 rpc_id_problem)
from gateway.worker.door.asgi_http import answer_messages, put_all, send_all
from gateway.worker.door.refusal import Answered, refusal_messages
from gateway.worker.delivery.drivers import Served
from gateway.worker.delivery.hub import Hub
from gateway.worker.door.limits import ClientLimits
from gateway.worker.opening import Openings
from gateway.worker.delivery.sink import Sink

# A2A's push-notification config methods: this door declares pushNotifications false.
PUSH_CONFIG_METHODS = ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
                       "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig")
WATCH_SESSION_BYTES = f'"{WATCH_SESSION}"'.encode()  # the method's name as a JSON string, unescaped
SinkFactory = Callable[..., Sink]  # (scope, send, receive) -> the stream's sink, from the server adapter


class Unanswerable(Exception):
    """A request the JSON-RPC checks refuse: the error, and the id its answer echoes."""

    def __init__(self, rpc_id, error: RpcError):
        super().__init__(error)
        self.rpc_id, self.error = rpc_id, error


class RpcEndpoint:
    """`POST /`: every JSON-RPC method."""

    def __init__(self, config: Config, hub: Hub, control: ControlClient, counters: Counters,
                 sink_for: SinkFactory, access: AccessLog):
        self.config = config
        self.access = access
        self.hub = hub
        self.sink_for = sink_for
        self.control = control
        self.counters = counters
        self.telling: set[asyncio.Task] = set()  # `_keys_stale`'s calls in flight
        self.door = Door(config, counters, self._keys_stale)
        self.limits = ClientLimits(config, control)
        self.openings = Openings(config, hub, control, counters, self.limits)

    async def _read_body(self, scope: dict, receive, keep: bool = True) -> bytes | None:
        """The whole body (b"" when not `keep`, read only so the answer is not cut off by a
        reset); None when the client went away."""
        read = scope.pop(BODY_KEY, None)
        if read is not None:
            return read if keep else b""
        head = head_of(scope)
        if not keep and (head.get(b"expect") or "").lower() == "100-continue":
            return b""  # its client waits to be asked for its body, and is not: the refusal, then the close
        limit = self.config.max_body_bytes
        length = head.get(b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > limit:
            raise Refused(413, f"request body exceeds {limit} bytes")
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.config.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise Refused(413, f"request body exceeds {limit} bytes")
                    if keep:
                        chunks.append(chunk)
                    if not message.get("more_body"):
                        return b"".join(chunks)
        except TimeoutError:
            raise Refused(408, f"the request body did not arrive within {self.config.body_timeout:g} "
                               "seconds", [CLOSE]) from None

    def _keys_stale(self) -> None:
        """The door met a `kid` the published JWT keys lack: the sequencer fetches the set
        again (sequencer/jwks.py), which bounds how often. Nothing waits for it; a later
        request verifies with it. One call in flight at a time: a flood of kids is one call."""
        if self.telling:
            return
        task = asyncio.get_running_loop().create_task(self._tell_keys_stale())
        self.telling.add(task)
        task.add_done_callback(self.telling.discard)

    async def _tell_keys_stale(self) -> None:
        try:
            await self.control.call(Op.JWKS_STALE)
        except (ConnectionError, RpcError):
            pass  # the session is ending, or the next unknown kid asks again

    def _admit(self, scope: dict) -> TokenRule | None:
        """The refusals decided from the head alone; the caller's token rule."""
        head = head_of(scope)
        if not is_json_content_type(head.get(b"content-type")):
            raise Refused(404, "not found: POST / takes a JSON body with content-type application/json")
        return self.door.authenticate(head.get(b"authorization"))

    async def __call__(self, scope, receive, send) -> None:
        exchange = exchange_of(scope)
        try:
            try:
                await self.limits.check_rate(scope)
                rule = self._admit(scope)
            except Refused:
                if await self._read_body(scope, receive, keep=False) is None:
                    return
                raise
            if rule is not None:
                exchange.caller = rule.name
            body = await self._read_body(scope, receive)
            if body is None:
                return
            if not body.strip():
                raise Refused(404, "not found: POST / takes a non-empty JSON body")
            served = await self._dispatch(scope, receive, send, body, rule, exchange)
        except Refused as refusal:
            exchange.refused(refusal)
            await refuse(send, refusal, self.counters)
            return
        if served is not None:
            # Served from here, not from inside `_dispatch`: while it is open, nothing of the
            # request (body, parsed JSON, params, the opening's parts, those coroutine frames)
            # stays alive with it.
            del body
            scope["headers"] = []  # read for the last time when the stream opened
            scope.pop(HEAD_KEY, None)
            sink = self.sink_for(scope, send, receive)
            self.access.stream_opened(exchange, served)
            # Its end is the hub's to report (`Hub.on_end`: `Admission.stream_over`), whether
            # `carry` returns at once (the front's) or when the stream is over (the ASGI sink's).
            self.hub.serve(served, sink)
            await sink.carry()

    def at_once(self, body: bytes) -> dict | None:
        """The parsed request when this `POST /` (its body whole) can be answered with no wait:
        a WatchSession's opening that no limit asks the sequencer about (its wait for the pace
        is its caller's); None: it may wait, and `__call__` serves it (parsing the body again).
        A body that does not hold the method's name as it is written (`WATCH_SESSION_BYTES`) is
        not parsed here: every other request is parsed once, by `__call__` (a name written with
        JSON escapes takes that path too, and is answered the same)."""
        if (self.limits.rate or self.limits.max_streams or self.door.counts_streams
                or WATCH_SESSION_BYTES not in body):
            return None
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        return request if isinstance(request, dict) and request.get("method") == WATCH_SESSION else None

    def admit_now(self, scope: dict, body: bytes, request: dict, put) -> TokenRule | None | Answered:
        """`__call__`'s checks for a request `at_once` took, in the same order and before the
        pace, as there: the caller's token rule when its stream may open (`open_now`, on its
        turn), else ANSWERED: its refusal or JSON-RPC error was `put` at once (the front's
        `Cycle.put`)."""
        exchange = exchange_of(scope)
        try:
            rule = self._admit(scope)  # no rate to check: `at_once` saw none set
            if rule is not None:
                exchange.caller = rule.name
            self._checked(scope, body, request, rule, exchange)  # a watcher's caller sees every event
        except Refused as refusal:
            exchange.refused(refusal)
            put_all(put, refusal_messages(refusal, self.counters))
            return Answered.ANSWERED
        except Unanswerable as bad:
            put_all(put, self._error(exchange, bad.rpc_id, bad.error))
            return Answered.ANSWERED
        return rule

    def open_now(self, scope: dict, request: dict, rule: TokenRule | None, put, sink: Sink) -> None:
        """The stream `admit_now` let through, opened on its pace's turn (its head `put`) and
        handed to the hub with the front as its sink (`Front.on_disconnect`)."""
        served = self.openings.watch_now(scope, put, request["id"], rule)
        self.access.stream_opened(exchange_of(scope), served)
        self.hub.serve(served, sink)  # it writes at once: the hub drives it by callbacks

    async def _dispatch(self, scope, receive, send, body: bytes, rule: TokenRule | None,
                        exchange: Exchange) -> Served | None:
        """Answer the request, or open its stream and hand it back for `__call__` to serve."""
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            await send_all(send, self._error(exchange, None, RpcError(PARSE_ERROR, "the body is not valid JSON")))
            return None
        try:
            rpc_id, method, params, caller = self._checked(scope, body, request, rule, exchange)
        except Unanswerable as bad:
            await send_all(send, self._error(exchange, bad.rpc_id, bad.error))
            return None
        try:
            if method in activation.STREAM_METHODS:
                return await self.openings.open(scope, send, method, request["id"], params, caller, rule)
            result = await self._call(method, params, caller, scope)
        except RpcError as err:
            await send_all(send, self._error(exchange, rpc_id, err))
            return None
        except ConnectionError:
            await send_all(send, self._error(exchange, rpc_id,
                                             RpcError(INTERNAL_ERROR, "the sequencer is not reachable")))
            return None
        await respond(send, 200, sse.json_rpc_result(request["id"], result))
        return None

    def _checked(self, scope, body: bytes, request: object, rule: TokenRule | None,
                 exchange: Exchange) -> tuple[object, str, dict, Caller]:
        """The parsed request's checks in their order, none of which waits: its id, method,
        params and caller; raises Unanswerable (a JSON-RPC error) or Refused (403)."""
        max_depth = self.config.max_json_depth
        rpc_id = rpc_id_of(request, self.config.max_rpc_id_chars)
        try:
            if nests_deeper(request, max_depth, body):
                raise RpcError(INVALID_REQUEST, f"the request nests arrays and objects deeper than "
                                                f"{max_depth} levels")
            twice = duplicate_member(body) if isinstance(request, dict) else None
            if twice is not None:
                if twice == "id":
                    rpc_id = None  # which one the client meant is what is ambiguous
                raise RpcError(INVALID_REQUEST, f"the request names its {twice!r} member more than once")
            method = exchange.method = self._check_request(request)
            caller = self.door.authorize(rule, method)
            check_version(head_of(scope).get(b"a2a-version"))
            assert isinstance(request, dict)  # _check_request says so
            params = request.get("params")
            if params is None:
                params = {}
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
        except RpcError as err:
            raise Unanswerable(rpc_id, err) from None
        return rpc_id, method, params, caller

    def _check_request(self, request: object) -> str:
        if not isinstance(request, dict) or request.get("jsonrpc") != "2.0":
            raise RpcError(INVALID_REQUEST, 'the body must be a JSON-RPC 2.0 request object ("jsonrpc": "2.0")')
        problem = rpc_id_problem(request.get("id"), self.config.max_rpc_id_chars)
        if problem is not None:
            raise RpcError(INVALID_REQUEST, problem)
        method = request.get("method")
        if not isinstance(method, str):
            raise RpcError(INVALID_REQUEST, "method must be a string")
        if method in PUSH_CONFIG_METHODS:
            raise RpcError(PUSH_NOTIFICATION_NOT_SUPPORTED, "this door does not support push notifications")
        if method not in METHODS:
            raise RpcError(METHOD_NOT_FOUND, f"method {method[:100]!r} not found")
        return METHODS[METHODS.index(method)]  # the constant: a stream keeps it as its endpoint

    def _error(self, exchange: Exchange, rpc_id, err: RpcError) -> tuple[dict, dict]:
        """A JSON-RPC error, counted and noted: its answer's messages."""
        self.counters.add("jsonrpc_errors", label=str(err.code))
        exchange.code = err.code
        return answer_messages(200, error_body(rpc_id, err), JSON_HEAD)

    async def _call(self, method: str, params: dict, caller: Caller, scope: dict) -> object:
        who = caller.params()
        if method == SEND_MESSAGE:
            answer = await self.control.call(Op.SEND, params=params, streaming=False, **who)
            if "message" in answer:  # a capsule may answer a message with a message
                return {"message": answer["message"]}
            return {"task": answer.get("task") or answer["rejected"]}
        if method == GET_TASK:
            return (await self.control.call(Op.GET, id=params.get("id"), **who))["task"]
        if method == LIST_TASKS:
            return await self.control.call(Op.LIST, params=params, **who)
        if method == CANCEL_TASK:
            return await self.control.call(Op.CANCEL, id=params.get("id"), **who)
        if method == STOP_SESSION:
            await self.control.call(Op.STOP)
            return {}
        if self.config.upstream:
            return with_own_address(await self.control.call(Op.EXTENDED_CARD), scope, self.config)
        if self.door.public:
            raise RpcError(EXTENDED_AGENT_CARD_NOT_CONFIGURED,
                           "this door declares no network.authentication, so it has no extended card")
        return agent_card(self.config, scope, extended=True)
