"""The byte layout of one server-sent event, with a hole for the JSON-RPC request id.

Every event is an optional `id:` line, one `data:` line holding a JSON-RPC response, and a
blank line (spec "Event form"). The response's `id` is each connection's own request id,
so the ring stores only the `result` JSON, encoded once, and each worker splices it
between its connection's prefix and the tail:

    id: 3\\ndata: {"jsonrpc":"2.0","id":"r1","result":<result_json>}\\n\\n
    '--- head ---''------------ rpc_prefix ----------'             '- EVENT_TAIL

`join_event` is the only place that layout is joined: `frame_event` builds one event from
its parts, and a worker joins a ring event's cached head and result with each connection's
prefix through it.
"""

import orjson

HEARTBEAT = b":heartbeat\n\n"
EVENT_TAIL = b"}\n\n"
UNNUMBERED_HEAD = b"data: "  # the head of an event with no id (a connection frame)


def rpc_prefix(rpc_id_json: bytes) -> bytes:
    """`rpc_id_json` is the request's id as verbatim JSON: `orjson.dumps(rpc_id)`."""
    return b'{"jsonrpc":"2.0","id":' + rpc_id_json + b',"result":'


def event_head(event_id: int | None) -> bytes:
    return UNNUMBERED_HEAD if event_id is None else b"id: %d\ndata: " % event_id


def join_event(head: bytes, prefix: bytes, result_json: bytes) -> bytes:
    """One whole event: `head` from `event_head`, `prefix` from `rpc_prefix`."""
    return b"".join((head, prefix, result_json, EVENT_TAIL))


def frame_event(event_id: int | None, rpc_id_json: bytes, result_json: bytes) -> bytes:
    return join_event(event_head(event_id), rpc_prefix(rpc_id_json), result_json)


def json_rpc_result(rpc_id: object, result: object) -> bytes:
    """A whole JSON-RPC response body, for the methods that answer without a stream."""
    return b"".join((rpc_prefix(orjson.dumps(rpc_id)), orjson.dumps(result), b"}"))
