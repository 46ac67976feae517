"""The client side: an incremental SSE parser and a reader of one event's JSON-RPC response.

`SSEParser.feed` takes bytes as they arrive, split anywhere (inside a UTF-8 sequence, a
`\\r\\n`, a field name), and returns the events completed so far. Lines end with `\\n`
(a preceding `\\r` is dropped). A blank line dispatches the event collected since the
last one: its `id` (a decimal id, else None), its `data` lines joined with `\\n` (None
when it had none), and its comment lines. A heartbeat is therefore an event with data
None and the comment "heartbeat". Unknown fields are ignored, as SSE requires.

`read_stream_response` follows the spec's "Unknown frames and keys": an unknown
StreamResponse member gives no item, an unknown frame is returned for the caller to
ignore, and unknown keys simply stay in the dicts.
"""

from typing import Any, NamedTuple

import orjson

from gateway.protocol.events import PROCESS_FRAME_NAMES
from gateway.protocol.uris import STREAM_URI

KNOWN_FRAMES = frozenset(PROCESS_FRAME_NAMES)
STREAM_RESPONSE_MEMBERS: tuple[str, ...] = ("task", "statusUpdate", "artifactUpdate", "message")


class SSEEvent(NamedTuple):
    id: int | None
    data: str | None
    comments: tuple[str, ...]


class SSEParser:
    def __init__(self) -> None:
        self._pending = b""
        self._reset()

    def _reset(self) -> None:
        self._id: int | None = None
        self._data: list[str] = []
        self._comments: list[str] = []
        self._seen = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        events = []
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if self._seen:
                    data = "\n".join(self._data) if self._data else None
                    events.append(SSEEvent(self._id, data, tuple(self._comments)))
                self._reset()
            else:
                self._read_line(line.decode("utf-8", "replace"))
        return events

    def _read_line(self, line: str) -> None:
        self._seen = True
        if line.startswith(":"):
            self._comments.append(line[1:])
            return
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "id":
            self._id = int(value) if value.isascii() and value.isdigit() else None


class StreamItem(NamedTuple):
    kind: str  # "task" | "statusUpdate" | "artifactUpdate" | "message"
    body: dict
    frame: dict | None  # the object under metadata[STREAM_URI] when it has a "frame" key
    reopen: int | None  # metadata[STREAM_URI]["reopen"] on a reopen boundary status


def _extension_object(body: dict) -> dict | None:
    metadata = body.get("metadata")
    extension = metadata.get(STREAM_URI) if isinstance(metadata, dict) else None
    return extension if isinstance(extension, dict) else None


def read_stream_response(data: str | bytes) -> tuple[Any, StreamItem | None, dict | None]:
    """(rpc id, the StreamResponse's known member or None, the JSON-RPC error or None).

    Raises ValueError when `data` is not a JSON object.
    """
    response = orjson.loads(data)
    if not isinstance(response, dict):
        raise ValueError("a JSON-RPC response is a JSON object")
    rpc_id = response.get("id")
    error = response.get("error")
    if error is not None:
        return rpc_id, None, error
    result = response.get("result")
    if not isinstance(result, dict):
        return rpc_id, None, None
    for kind in STREAM_RESPONSE_MEMBERS:
        body = result.get(kind)
        if isinstance(body, dict):
            extension = _extension_object(body)
            frame = extension if extension is not None and "frame" in extension else None
            reopen = extension.get("reopen") if extension is not None and frame is None else None
            return rpc_id, StreamItem(kind, body, frame, reopen), None
    return rpc_id, None, None
