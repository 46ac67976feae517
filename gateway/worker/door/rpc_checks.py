"""What a JSON-RPC request on `POST /` must be, as pure functions of its head or body.

`dispatch.py` applies them in the order its docstring gives; each answers why a request fails
(or whether it does), and the caller turns that into the refusal or JSON-RPC error.
"""

from __future__ import annotations

import json

MEMBERS = ("jsonrpc", "id", "method", "params")  # a JSON-RPC request's own, at its top level
_JSONRPC, _ID, _METHOD, _PARAMS = (f'"{name}"'.encode() for name in MEMBERS)  # four counts, no loop


def is_json_content_type(value: str | None) -> bool:
    if not value:
        return False
    media = value.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def rpc_id_problem(rpc_id: object, max_chars: int) -> str | None:
    """Why `rpc_id` is not an id this door answers to; None when it is one."""
    if rpc_id is None or isinstance(rpc_id, bool) or not isinstance(rpc_id, (str, int)):
        return "the request id must be a string or an integer"
    if isinstance(rpc_id, int) and not -(1 << 63) <= rpc_id < 1 << 64:
        return "the request id is out of range"
    if isinstance(rpc_id, str) and len(rpc_id) > max_chars:
        return f"the request id is longer than {max_chars} characters"
    return None


def rpc_id_of(request: object, max_chars: int):
    """The id an error answer echoes: the request's, when it is a valid one, else null."""
    if isinstance(request, dict) and rpc_id_problem(request.get("id"), max_chars) is None:
        return request["id"]
    return None


def nests_deeper(value: object, limit: int, text: bytes | None = None) -> bool:
    """Whether arrays and objects in `value` nest more than `limit` levels (`{}` is one).
    `text`, the JSON `value` was parsed from, answers most requests in two byte counts: each
    level opens with a bracket, so no more brackets than `limit` is no deeper (the walk
    below is for the rest)."""
    if text is not None and text.count(b"{") + text.count(b"[") <= limit:
        return False
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
    return False


def duplicate_member(body: bytes) -> str | None:
    """The JSON-RPC member that a request object (`body`, already parsed as one object) names
    twice at its top level, or None. orjson keeps the last of two, a log or filter may read the
    first: `{"method":"GetTask","method":"murmur.StopSession"}` must be neither. The common body
    costs four byte counts: only one where a member's quoted name occurs twice (anywhere, a
    nested `"id"` too) or that escapes a character (`"\\u006dethod"` is `"method"`) is parsed
    again, with the top object's members kept in order."""
    if (b"\\u" not in body and body.count(_JSONRPC) < 2 and body.count(_ID) < 2 and body.count(_METHOD) < 2
            and body.count(_PARAMS) < 2):
        return None
    names = [name for name, _ in json.loads(body, object_pairs_hook=list)]
    return next((name for name in MEMBERS if names.count(name) > 1), None)
