"""gateway.protocol.errors: every code's body, its ErrorInfo, and the A2A-Version rule."""

import orjson
import pytest

from gateway.protocol import errors

pytestmark = pytest.mark.unit

TABLE = [
    (-32700, "JSONParseError", "PARSE_ERROR"),
    (-32600, "InvalidRequestError", "INVALID_REQUEST"),
    (-32601, "MethodNotFoundError", "METHOD_NOT_FOUND"),
    (-32602, "InvalidParamsError", "INVALID_PARAMS"),
    (-32603, "InternalError", "INTERNAL_ERROR"),
    (-32001, "TaskNotFoundError", "TASK_NOT_FOUND"),
    (-32002, "TaskNotCancelableError", "TASK_NOT_CANCELABLE"),
    (-32003, "PushNotificationNotSupportedError", "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    (-32004, "UnsupportedOperationError", "UNSUPPORTED_OPERATION"),
    (-32005, "ContentTypeNotSupportedError", "CONTENT_TYPE_NOT_SUPPORTED"),
    (-32007, "ExtendedAgentCardNotConfiguredError", "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    (-32009, "VersionNotSupportedError", "VERSION_NOT_SUPPORTED"),
]


def test_table_and_constants():
    assert [(code, kind.name, kind.reason) for code, kind in errors.ERRORS.items()] == TABLE
    assert all(getattr(errors, reason) == code for code, _name, reason in TABLE)
    assert errors.ERRORS[errors.PARSE_ERROR].message == "invalid JSON"


@pytest.mark.parametrize("code, name, reason", TABLE)
def test_every_code_body_shape(code, name, reason):
    err = errors.RpcError(code)
    body = orjson.loads(errors.error_body("r1", err))
    assert body == {
        "jsonrpc": "2.0",
        "id": "r1",
        "error": {
            "code": code,
            "message": errors.ERRORS[code].message,
            "data": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org",
                 "metadata": {}}
            ],
        },
    }
    assert list(body) == ["jsonrpc", "id", "error"] and list(body["error"]) == ["code", "message", "data"]


def test_message_metadata_and_null_id():
    err = errors.RpcError(errors.TASK_NOT_FOUND, "task tsk_x not found", {"taskId": "tsk_x"})
    assert (err.code, err.message, str(err)) == (-32001, "task tsk_x not found", "task tsk_x not found")
    response = errors.error_response(None, err)
    assert response["id"] is None and response["error"]["data"][0]["metadata"] == {"taskId": "tsk_x"}
    assert errors.error_body(7, err).startswith(b'{"jsonrpc":"2.0","id":7,"error":{"code":-32001,')


def test_unknown_code_is_a_programming_error():
    with pytest.raises(KeyError):
        errors.RpcError(-1)


@pytest.mark.parametrize("value", ["1.0", "1.2", " 1.0 ", "1.10"])
def test_check_version_accepts_1_x(value):
    assert errors.check_version(value) is None


@pytest.mark.parametrize("value, problem", [
    (None, "the A2A-Version header is missing"),
    ("", "the A2A-Version header is empty"),
    (" ", "the A2A-Version header is empty"),
    *((value, f"A2A-Version {value.strip()!r} is not supported")
      for value in ["2.0", "0.3", "abc", "1", "1.", "1.x", "1.0.1", "11.0", " 2.0 "]),
])
def test_check_version_refuses_others_saying_what_it_speaks(value, problem):
    with pytest.raises(errors.RpcError) as raised:
        errors.check_version(value)
    assert raised.value.code == -32009
    assert raised.value.message == f"{problem}; this server speaks 1.0 (send A2A-Version: 1.0)"
