"""Reading `params.message` as SendMessage reads it: which check answers which JSON-RPC code.

Pure: a dict in, a `UserMessage` or an RpcError out. The embedded capsule accepts a message
only after this check. The upstream link never calls it: it forwards the params as they came,
and the upstream's own check answers (relayed as it worded it, upstream_errors.py).
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.protocol.errors import CONTENT_TYPE_NOT_SUPPORTED, INVALID_PARAMS, RpcError
from gateway.tuning import MAX_MESSAGE_ID

FILE_PART_KEYS = ("raw", "url")
PART_CONTENT_KEYS = ("text", "raw", "url", "data")


class UserMessage(NamedTuple):
    message_id: str
    text: str  # the text parts joined with newlines
    task_id: str | None
    context_id: str | None
    raw: dict


def _optional_id(message: dict, key: str) -> str | None:
    value = message.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise RpcError(INVALID_PARAMS, f"params.message.{key} must be a non-empty string")
    return value


def read_message(params: object) -> UserMessage:
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    message = params.get("message")
    if not isinstance(message, dict):
        raise RpcError(INVALID_PARAMS, "params.message must be an object")
    message_id = message.get("messageId")
    if not isinstance(message_id, str) or not message_id or len(message_id) > MAX_MESSAGE_ID:
        raise RpcError(INVALID_PARAMS, "params.message.messageId must be a non-empty string")
    if message.get("role") not in ("ROLE_USER", "user"):
        raise RpcError(INVALID_PARAMS, "params.message.role must be ROLE_USER")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise RpcError(INVALID_PARAMS, "params.message.parts must be a non-empty array")
    texts = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            raise RpcError(INVALID_PARAMS, f"params.message.parts[{i}] must be an object")
        present = [key for key in PART_CONTENT_KEYS if key in part]
        if len(present) != 1:
            raise RpcError(INVALID_PARAMS,
                           f"params.message.parts[{i}] must hold exactly one of text, raw, url, data")
        if present[0] in FILE_PART_KEYS:
            raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, "file parts are not supported by this capsule")
        if present[0] == "text":
            if not isinstance(part["text"], str):
                raise RpcError(INVALID_PARAMS, f"params.message.parts[{i}].text must be a string")
            texts.append(part["text"])
    metadata = message.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise RpcError(INVALID_PARAMS, "params.message.metadata must be an object")
    return UserMessage(message_id, "\n".join(texts), _optional_id(message, "taskId"),
                       _optional_id(message, "contextId"), message)
