"""What only the upstream knows, asked of it as a client would ask: its JSON-RPC answers
relayed as they came, its attachment bytes, and its answer to a stream request.

A gateway in front must answer every request as the upstream itself would (a client must
not tell the two apart), so where the answer is the upstream's to give, it is the
upstream's answer: the JSON-RPC error code and message as it wrote them, a refused stream
as its one JSON body, and attachment bytes only for the (task, sha256) the upstream itself
serves.

Two answers are the gateway's own, worded for a client of the gateway: an upstream it cannot
reach (its addresses and the OS's reason would tell a client the gateway's internal topology),
and an upstream that refuses the gateway's credentials (the upstream's wording is about the
gateway's token, not the client's). Their detail goes to the gateway's log, one line each.
"""

from __future__ import annotations

import asyncio
import collections
import urllib.parse
from typing import NoReturn

import orjson

from gateway import logs
from gateway.capsule import paging
from gateway.capsule.upstream_http import Connection, Origin, UpstreamError, request
from gateway.protocol.errors import ERRORS, INTERNAL_ERROR, RpcError
from gateway.protocol.parser import SSEParser, read_stream_response

OPENING_TIMEOUT = 30.0
OPENING_BYTES = 1 << 20
UNREACHABLE = "the upstream capsule is unreachable"
CREDENTIALS_REFUSED = "the upstream refused the gateway's credentials"
CREDENTIAL_STATUSES = (401, 403)
log = logs.get("upstream")


def unreachable(what: str, exc: UpstreamError) -> RpcError:
    """The answer while the upstream cannot be asked `what`; the reason goes to the log."""
    log.warning("upstream unreachable", call=what, error=str(exc))
    return RpcError(INTERNAL_ERROR, UNREACHABLE)


def credentials_refused(what: str, status: int, payload: bytes) -> RpcError:
    """The answer when the upstream's door refuses the gateway's token; its words go to the log."""
    log.warning("upstream refused the gateway's credentials", call=what, status=status,
                answer=payload[:500].decode("utf-8", "replace"))
    return RpcError(INTERNAL_ERROR, CREDENTIALS_REFUSED)


def relayed(method: str, status: int, payload: bytes) -> object:
    """The `result` of the upstream's JSON-RPC answer, or its error raised as it came."""
    if status in CREDENTIAL_STATUSES:
        raise credentials_refused(method, status, payload)
    try:
        answer = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise RpcError(INTERNAL_ERROR, f"the upstream answered {method} with HTTP {status} "
                                       "and no JSON-RPC body") from None
    if not isinstance(answer, dict):
        raise RpcError(INTERNAL_ERROR, f"the upstream answered {method} with no JSON-RPC object")
    if "error" in answer:
        _raise_refusal(method, status, answer["error"])
    if "result" not in answer:  # a door's refusal: RFC 9457 problem details
        _raise_refusal(method, status, answer.get("detail", answer.get("title")))
    return answer["result"]


def _raise_refusal(method: str, status: int, error: object) -> NoReturn:
    """The upstream's JSON-RPC error, raised with its code (when it is one of ours) and message;
    a door's own refusal (its problem detail, or an older door's `{"error": "..."}` text) as
    what the upstream said, with its HTTP status."""
    if not isinstance(error, dict):
        raise RpcError(INTERNAL_ERROR, f"the upstream refused {method} with HTTP {status}: {error}")
    code = error.get("code")  # -32001.0 is `in ERRORS` too, but no integer code (nor a metric label)
    raise RpcError(code if type(code) is int and code in ERRORS else INTERNAL_ERROR, str(error.get("message")))


async def stream_opening(origin: Origin, headers: list[tuple[str, str]], method: str, params: dict) -> dict:
    """The task the upstream opens a `method` stream with (the stream is then closed: the
    gateway serves it from its ring); the upstream's refusal, a JSON body, raised as it came."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    conn = Connection(origin)
    try:
        async with asyncio.timeout(OPENING_TIMEOUT):
            head = await conn.open("POST", "/", headers, body)
            kind = dict((k.lower(), v) for k, v in head.headers).get(b"content-type", b"")
            if not kind.startswith(b"text/event-stream"):
                return _no_stream(method, head.status_code, await conn.read_body())
            parser, seen = SSEParser(), 0
            async for chunk in conn.chunks():
                seen += len(chunk)
                for event in parser.feed(chunk):
                    if event.data is not None:
                        return _opening_task(method, event.data)
                if seen > OPENING_BYTES:
                    break
    except TimeoutError:
        raise RpcError(INTERNAL_ERROR, f"the upstream did not open {method} within {OPENING_TIMEOUT:g} s") from None
    except UpstreamError as exc:
        raise unreachable(method, exc) from None
    finally:
        conn.close()
    raise RpcError(INTERNAL_ERROR, f"the upstream opened {method} without its task")


def opening_now(params: dict) -> dict:
    """SendMessage params that answer with the task as it opens, as SendStreamingMessage does
    (A2A's `returnImmediately`; a capsule may otherwise answer once the task settles)."""
    configuration = params.get("configuration", {})
    if not isinstance(configuration, dict):
        return params  # the upstream refuses it as it would refuse the stream request
    return {**params, "configuration": {**configuration, "returnImmediately": True}}


def _no_stream(method: str, status: int, payload: bytes) -> dict:
    relayed(method, status, payload)  # raises the refusal it holds
    raise RpcError(INTERNAL_ERROR, f"the upstream answered {method} with no stream and no error")


def _opening_task(method: str, data: str) -> dict:
    try:
        _, item, error = read_stream_response(data)
    except ValueError:
        item = error = None
    if error is not None:
        _raise_refusal(method, 200, error)
    if item is None or item.kind != "task":
        raise RpcError(INTERNAL_ERROR, f"the upstream opened {method} without its task")
    return item.body


async def listed_tasks(call, params: dict, keep) -> list[dict]:
    """Every task the upstream lists under `params`' filters that `keep` accepts, most recent
    first, each once: read page by page (`call` is the forwarding one), so a gateway can page
    one caller's tasks itself."""
    query = {k: v for k, v in params.items() if k not in ("pageSize", "pageToken")}
    found: dict[str, dict | None] = {}
    token = ""
    while True:
        answer = await call("ListTasks", {**query, "pageSize": paging.PAGE_MAX, **({"pageToken": token} if token else {})})
        tasks = answer.get("tasks") if isinstance(answer, dict) else None
        if not isinstance(tasks, list):
            raise RpcError(INTERNAL_ERROR, "the upstream answered ListTasks without a task list")
        before = len(found)
        for task in tasks:
            if isinstance(task, dict) and isinstance(task.get("id"), str) and task["id"] not in found:
                found[task["id"]] = task if keep(task) else None
        token = answer.get("nextPageToken") or ""
        if not token or len(found) == before:  # the last page, or one that brought nothing new
            return [task for task in found.values() if task is not None]


class AttachmentCache:
    """Attachment bytes the upstream served, keyed by (task id, sha256): an entry proves the
    upstream served that hash for that task, never for another. Bounded in bytes, least
    recently used first out."""

    def __init__(self, limit_bytes: int):
        self.limit = limit_bytes
        self._entries: collections.OrderedDict[tuple[str, str], tuple[str, bytes]] = collections.OrderedDict()
        self._bytes = 0

    def get(self, task_id: str, sha256: str) -> tuple[str, bytes] | None:
        entry = self._entries.get((task_id, sha256))
        if entry is not None:
            self._entries.move_to_end((task_id, sha256))
        return entry

    def put(self, task_id: str, sha256: str, entry: tuple[str, bytes]) -> None:
        old = self._entries.pop((task_id, sha256), None)
        self._bytes += len(entry[1]) - (len(old[1]) if old else 0)
        self._entries[(task_id, sha256)] = entry
        while self._bytes > self.limit and len(self._entries) > 1:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= len(dropped)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


async def fetch_attachment(origin: Origin, headers: list[tuple[str, str]], task_id: str,
                           sha256: str) -> tuple[str, bytes] | None:
    """(media type, bytes) as the upstream serves them, or None where it answers otherwise;
    RpcError when it cannot be asked (not "no such attachment": the door answers 503). The
    task id is percent-encoded: the upstream reads the very id the client sent."""
    path = f"/attachments/{urllib.parse.quote(task_id, safe='')}/{urllib.parse.quote(sha256, safe='')}"
    try:
        status, answer_headers, body = await request(origin, "GET", path, headers)
    except UpstreamError as exc:
        raise unreachable("attachment", exc) from None
    if status in CREDENTIAL_STATUSES:
        raise credentials_refused("attachment", status, body)
    if status != 200:
        return None
    return answer_headers.get("content-type", "application/octet-stream"), body
