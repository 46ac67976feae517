"""JSON-RPC errors as A2A v1.0 answers them.

`ERRORS` is the table: code -> (A2A error name, ErrorInfo reason, default message). Every
error body carries, as `data`, one `google.rpc.ErrorInfo` in the `a2a-protocol.org` domain
(our decision for `error.data`, docs/architecture.md); the body is served with HTTP 200
and `content-type: application/json`.
"""

import re
from typing import NamedTuple

import orjson

from gateway.protocol.states import murmur_word
from gateway.protocol.uris import A2A_VERSION

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
EXTENDED_AGENT_CARD_NOT_CONFIGURED = -32007
VERSION_NOT_SUPPORTED = -32009

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
ERROR_DOMAIN = "a2a-protocol.org"


class ErrorKind(NamedTuple):
    name: str
    reason: str
    message: str


ERRORS: dict[int, ErrorKind] = {
    PARSE_ERROR: ErrorKind("JSONParseError", "PARSE_ERROR", "invalid JSON"),
    INVALID_REQUEST: ErrorKind("InvalidRequestError", "INVALID_REQUEST", "invalid JSON-RPC request"),
    METHOD_NOT_FOUND: ErrorKind("MethodNotFoundError", "METHOD_NOT_FOUND", "method not found"),
    INVALID_PARAMS: ErrorKind("InvalidParamsError", "INVALID_PARAMS", "invalid params"),
    INTERNAL_ERROR: ErrorKind("InternalError", "INTERNAL_ERROR", "internal error"),
    TASK_NOT_FOUND: ErrorKind("TaskNotFoundError", "TASK_NOT_FOUND", "task not found"),
    TASK_NOT_CANCELABLE: ErrorKind("TaskNotCancelableError", "TASK_NOT_CANCELABLE", "task cannot be canceled"),
    PUSH_NOTIFICATION_NOT_SUPPORTED: ErrorKind(
        "PushNotificationNotSupportedError", "PUSH_NOTIFICATION_NOT_SUPPORTED", "push notifications are not supported"
    ),
    UNSUPPORTED_OPERATION: ErrorKind(
        "UnsupportedOperationError", "UNSUPPORTED_OPERATION", "this operation is not supported"
    ),
    CONTENT_TYPE_NOT_SUPPORTED: ErrorKind(
        "ContentTypeNotSupportedError", "CONTENT_TYPE_NOT_SUPPORTED", "content type not supported"
    ),
    EXTENDED_AGENT_CARD_NOT_CONFIGURED: ErrorKind(
        "ExtendedAgentCardNotConfiguredError", "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        "this door has no extended agent card"
    ),
    VERSION_NOT_SUPPORTED: ErrorKind("VersionNotSupportedError", "VERSION_NOT_SUPPORTED", "A2A version not supported"),
}


class RpcError(Exception):
    """A JSON-RPC error to answer with; `code` must be a row of ERRORS."""

    def __init__(self, code: int, message: str | None = None, metadata: dict | None = None):
        kind = ERRORS[code]
        self.code = code
        self.message = kind.message if message is None else message
        self.metadata = {} if metadata is None else metadata
        super().__init__(self.message)

    @property
    def kind(self) -> ErrorKind:
        return ERRORS[self.code]

    def error_dict(self) -> dict:
        error_info = {"@type": ERROR_INFO_TYPE, "reason": self.kind.reason, "domain": ERROR_DOMAIN,
                      "metadata": self.metadata}
        return {"code": self.code, "message": self.message, "data": [error_info]}


def task_ended(code: int, task_id: str, state: str) -> RpcError:
    """The refusal of a call a task that has ended cannot take (a message, a subscription, a
    cancel), naming its final state in murmur's word."""
    return RpcError(code, f"task {task_id} has ended ({murmur_word(state)})")


def error_response(rpc_id: object, err: RpcError) -> dict:
    """`rpc_id` None (unknown, e.g. unparsable request) is written as `"id": null`."""
    return {"jsonrpc": "2.0", "id": rpc_id, "error": err.error_dict()}


def error_body(rpc_id: object, err: RpcError) -> bytes:
    return orjson.dumps(error_response(rpc_id, err))


# Our decision: 1.x is accepted (the major version is what matters); absent, empty or
# another major is refused.
_SUPPORTED_VERSION = re.compile(r"1\.[0-9]+")


def check_version(value: str | None) -> None:
    """Refuse, with -32009, a request whose A2A-Version header is absent, empty or not 1.x."""
    if value is not None and _SUPPORTED_VERSION.fullmatch(value.strip()):
        return
    if value is None:
        problem = "the A2A-Version header is missing"
    elif not value.strip():
        problem = "the A2A-Version header is empty"
    else:
        problem = f"A2A-Version {value.strip()!r} is not supported"
    raise RpcError(VERSION_NOT_SUPPORTED, f"{problem}; this server speaks {A2A_VERSION} "
                                          f"(send A2A-Version: {A2A_VERSION})")
