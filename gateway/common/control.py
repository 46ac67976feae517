"""The one narrow channel from workers back to the sequencer.

A Unix stream socket; each message is a 4-byte big-endian length then one orjson object.
A call is ``{"i": n, "op": name, "p": params}``; its answer ``{"i": n, "ok": result}`` or
``{"i": n, "err": {"code": c, "message": m}}`` (a JSON-RPC error the worker passes on as is).
Calls are multiplexed on one connection per worker, so a slow call never blocks another.

`Op` is the table of calls: each one's wire name and the parameters it carries. A worker
calls `ControlClient.call(Op.GET, id=...)`; the sequencer reads the name back into an `Op`
and hands it to its capsule's table of operations (sequencer/capsule/embedded.py, sequencer/capsule/upstream.py).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import os
import socket
import struct
from typing import Any, Awaitable, Callable, NamedTuple

import orjson

from gateway.protocol.errors import INTERNAL_ERROR, RpcError
from gateway.tuning import CONTROL_MAX_MESSAGE


class Caller(NamedTuple):
    """Who a task call is for: the owner name tasks are recorded under, and whether it sees
    every task. It fails closed: a call whose params name no caller (`of`) sees no task at
    all, and a caller with no owner sees only when it sees every task."""

    owner: str | None
    sees_all: bool

    @classmethod
    def of(cls, params: dict) -> Caller:
        """The caller a call's params name (`params()` wrote them); none named: a caller
        that sees nothing."""
        owner = params.get("owner")
        return cls(owner if isinstance(owner, str) else None, params.get("sees_all") is True)

    def sees(self, task_owner: str | None) -> bool:
        """Whether this caller sees a task recorded under `task_owner`."""
        return self.sees_all or (self.owner is not None and task_owner == self.owner)

    def params(self) -> dict:
        return {"owner": self.owner, "sees_all": self.sees_all}


# Anyone at a public door, and the gateway's own look at a task a stream already follows
# (the stream passed the door when it opened).
EVERY_TASK = Caller(None, True)
WHO = Caller._fields  # the params a task call names its caller with


class Op(enum.Enum):
    """Every control call: (wire name, the parameters it takes)."""

    SEND = "send", ("params", "streaming", *WHO)  # SendMessage / SendStreamingMessage
    GET = "get", ("id", *WHO)  # GetTask, and a lost task stream's check
    SUBSCRIBE = "subscribe", ("id", *WHO)  # SubscribeToTask's opening task
    LIST = "list", ("params", *WHO)  # ListTasks
    CANCEL = "cancel", ("id", *WHO)  # CancelTask
    STOP = "stop", ()  # murmur.StopSession
    OWNER_CODE = "owner_code", WHO  # murgw.WatchOwnTasks: the code its caller's tasks carry in the ring
    ATTACHMENT = "attachment", ("task_id", "sha256", *WHO)  # /attachments/<task>/<sha256>
    CARD = "card", ()  # the upstream's public agent card (upstream mode)
    EXTENDED_CARD = "extended_card", ()  # GetExtendedAgentCard (upstream mode)
    # The door's limits (sequencer/client_ledger.py): answered by the sequencer itself, not its capsule.
    ACQUIRE = "acquire", ("client", "client_limit", "token", "token_limit")  # a stream's places
    RELEASE = "release", ("client", "token")  # its end (sent with `tell`: no answer awaited)
    TAKE = "take", ("client", "rate", "burst")  # one request from the client's bucket
    RELOAD = "reload", ("settings",)  # the supervisor, after SIGHUP: the reloadable settings
    SETTINGS = "settings", ()  # a worker that saw the generation word move fetches them
    JWKS_STALE = "jwks_stale", ()  # a worker met a JWT whose kid names no key (sequencer/jwks.py)

    def __init__(self, wire: str, params: tuple[str, ...]):
        self.wire = wire
        self.params = frozenset(params)

    @classmethod
    def named(cls, wire: object) -> Op | None:
        return _BY_WIRE.get(wire) if isinstance(wire, str) else None


_BY_WIRE = {op.wire: op for op in Op}
_LEN = struct.Struct(">I")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def encode(obj: Any) -> bytes:
    body = orjson.dumps(obj)
    return _LEN.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> Any:
    """The next message, or None at a clean end of stream."""
    try:
        head = await reader.readexactly(_LEN.size)
    except asyncio.IncompleteReadError:
        return None
    (size,) = _LEN.unpack(head)
    if size > CONTROL_MAX_MESSAGE:
        raise ValueError(f"control message of {size} bytes exceeds {CONTROL_MAX_MESSAGE}")
    return orjson.loads(await reader.readexactly(size))


Handler = Callable[[object, dict], Awaitable[Any]]


def peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The user id of the process at the other end of a Unix socket (SO_PEERCRED)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return uid


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           handler: Handler) -> None:
    """Answer one worker's calls, each in its own task so calls run concurrently.

    An abstract socket has no file whose permissions could keep other users out: any process
    in the network namespace can connect to it. So a peer that does not run as this process's
    user (or root) is closed at once, unanswered; the door's tokens stay the only way in."""
    if peer_uid(writer) not in (os.geteuid(), 0):
        writer.close()
        return

    async def answer(call: dict) -> None:
        try:
            reply = {"i": call["i"], "ok": await handler(call.get("op"), call.get("p") or {})}
        except RpcError as err:
            reply = {"i": call["i"], "err": {"code": err.code, "message": err.message}}
        except Exception as exc:  # a bug must answer the call, not hang the worker
            reply = {"i": call["i"], "err": {"code": INTERNAL_ERROR, "message": f"internal error: {exc}"}}
        if not writer.is_closing():
            writer.write(encode(reply))

    pending: set[asyncio.Task] = set()
    try:
        while (call := await read_message(reader)) is not None:
            task = asyncio.create_task(answer(call))
            pending.add(task)
            task.add_done_callback(pending.discard)
    except (ConnectionError, ValueError, asyncio.IncompleteReadError):
        pass
    finally:
        for task in pending:
            task.cancel()
        writer.close()


class ControlClient:
    """A worker's multiplexed connection to the sequencer."""

    def __init__(self, path: str):
        self._path = path
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._lock:
            if self._writer is None or self._writer.is_closing():
                # Connected by hand: uvloop refuses an abstract address (a leading NUL, what
                # the supervisor uses so that no socket file can outlive the session).
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.setblocking(False)
                try:
                    await asyncio.get_running_loop().sock_connect(sock, self._path)
                except BaseException:
                    sock.close()
                    raise
                reader, self._writer = await asyncio.open_unix_connection(sock=sock)
                self._reader_task = asyncio.create_task(self._read_answers(reader))
            return self._writer

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while (reply := await read_message(reader)) is not None:
                future = self._waiting.pop(reply["i"], None)
                if future is not None and not future.done():
                    future.set_result(reply)
        except (ConnectionError, ValueError):
            pass
        finally:
            waiting, self._waiting = self._waiting, {}
            for future in waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("sequencer connection lost"))

    async def call(self, op: Op, **params: Any) -> Any:
        """The call's result; raises RpcError for an error answer, ConnectionError when down."""
        if not params.keys() <= op.params:
            raise TypeError(f"control call {op.wire} takes no {sorted(params.keys() - op.params)}")
        writer = await self._connect()
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = future
        writer.write(encode({"i": call_id, "op": op.wire, "p": params}))
        reply = await future
        if "err" in reply:
            raise RpcError(reply["err"]["code"], reply["err"]["message"])
        return reply["ok"]

    def tell(self, op: Op, **params: Any) -> None:
        """A call whose answer nobody waits for (id 0 is no waiting call's; its answer is
        dropped), written at once and synchronously, so it leaves even from a cancelled
        task's cleanup. Not connected: nothing to tell (a closed connection released all)."""
        writer = self._writer
        if writer is not None and not writer.is_closing():
            writer.write(encode({"i": 0, "op": op.wire, "p": params}))

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()


def call_blocking(path: str, op: Op, timeout: float, **params: Any) -> Any:
    """One call from a process with no event loop (the supervisor); raises OSError, RpcError."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(encode({"i": 1, "op": op.wire, "p": params}))
        data = b""
        while len(data) < _LEN.size or len(data) < _LEN.size + _LEN.unpack(data[:_LEN.size])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the sequencer closed the control connection")
            data += chunk
    reply = orjson.loads(data[_LEN.size:])
    if "err" in reply:
        raise RpcError(reply["err"]["code"], reply["err"]["message"])
    return reply["ok"]
