"""Builders of A2A v1.0 StreamResponse `result` dicts and of the murmur frames.

Everything here is ProtoJSON camelCase, with keys in the order the spec's examples print
them, so `orjson.dumps` of a builder's result is byte for byte the spec's example. A
Task's `history` is never written.

Frames are the objects that go under `metadata[STREAM_URI]`. Every key of a frame is
always present, in the spec's order; a key that does not apply is null, never absent.
A frame reaches the wire in a carrier (spec "Carriers"): a task's frame rides a
`statusUpdate` repeating the task's state with no `status.message`; a frame that belongs
to no task rides a `message` whose one text part names the frame. The reopen annotation
`{"reopen": n}` is the only extension object without a `frame` key, which is how a client
tells the two apart.
"""

import time

from gateway.protocol.ids import new_artifact_id, new_message_id
from gateway.protocol.states import WORKING
from gateway.protocol.uris import STREAM_URI

ROLE_AGENT = "ROLE_AGENT"
TEXT_PLAIN = "text/plain"
RESPONSE_ARTIFACT_NAME = "response"
OBSERVER_ROLE = "observer"

FRAME_TEXT = "text"
FRAME_THINKING = "thinking"
FRAME_TOOL_CALL_STARTED = "tool-call-started"
FRAME_TOOL_CALL_PROGRESS = "tool-call-progress"
FRAME_ARTIFACT = "artifact"
FRAME_QUOTA = "quota"
FRAME_SUGGESTED_PROMPT = "suggested-prompt"
FRAME_GAP = "gap"
FRAME_LAGGED = "lagged"
FRAME_CONNECTION_ACK = "connection-ack"
FRAME_CAPSULE_CLOSED = "capsule-closed"

# The card's `params.frames`, in the spec's order; a transport: process capsule's list
# has quota and suggested-prompt after artifact.
FRAME_NAMES: tuple[str, ...] = (
    FRAME_TEXT,
    FRAME_THINKING,
    FRAME_TOOL_CALL_STARTED,
    FRAME_TOOL_CALL_PROGRESS,
    FRAME_ARTIFACT,
    FRAME_GAP,
    FRAME_LAGGED,
    FRAME_CONNECTION_ACK,
    FRAME_CAPSULE_CLOSED,
)
_AFTER_ARTIFACT = FRAME_NAMES.index(FRAME_ARTIFACT) + 1
PROCESS_FRAME_NAMES: tuple[str, ...] = (
    FRAME_NAMES[:_AFTER_ARTIFACT] + (FRAME_QUOTA, FRAME_SUGGESTED_PROMPT) + FRAME_NAMES[_AFTER_ARTIFACT:]
)

# Spec "Event ids": a task's frames are numbered events that enter the replay buffer;
# the connection frames are unnumbered and written to one connection only.
TASK_FRAMES = frozenset(
    {
        FRAME_TEXT,
        FRAME_THINKING,
        FRAME_TOOL_CALL_STARTED,
        FRAME_TOOL_CALL_PROGRESS,
        FRAME_ARTIFACT,
        FRAME_QUOTA,
        FRAME_SUGGESTED_PROMPT,
    }
)
CONNECTION_FRAMES = frozenset({FRAME_GAP, FRAME_LAGGED, FRAME_CONNECTION_ACK, FRAME_CAPSULE_CLOSED})


def timestamp(t: float | None = None) -> str:
    """RFC 3339 UTC with milliseconds and `Z`: `2026-10-13T09:00:00.123Z`.

    A given `t` is rounded to the nearest millisecond, so float error never turns .123 into .122.
    """
    total_ms = time.time_ns() // 1_000_000 if t is None else round(t * 1000)
    seconds, ms = divmod(total_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ms:03d}Z"


def _text_parts(text: str) -> list[dict]:
    return [{"mediaType": TEXT_PLAIN, "text": text}]


# --- A2A objects ---


def agent_message(
    text: str, *, task_id: str | None = None, context_id: str | None = None, message_id: str | None = None
) -> dict:
    message: dict = {"messageId": message_id or new_message_id()}
    if context_id is not None:
        message["contextId"] = context_id
    if task_id is not None:
        message["taskId"] = task_id
    message["role"] = ROLE_AGENT
    message["parts"] = _text_parts(text)
    return message


def task_status(
    state: str, ts: str, text: str | None = None, *, task_id: str, context_id: str, message_id: str | None = None
) -> dict:
    """A TaskStatus; `message` (naming the task and its context) only when there is text."""
    status: dict = {"state": state}
    if text is not None:
        status["message"] = agent_message(text, task_id=task_id, context_id=context_id, message_id=message_id)
    status["timestamp"] = ts
    return status


def task(task_id: str, context_id: str, status: dict, artifacts: list[dict] | tuple[dict, ...] = ()) -> dict:
    body = {"id": task_id, "contextId": context_id, "status": status}
    if artifacts:
        body["artifacts"] = list(artifacts)
    return body


def response_artifact(text: str, artifact_id: str | None = None) -> dict:
    return {"artifactId": artifact_id or new_artifact_id(), "name": RESPONSE_ARTIFACT_NAME, "parts": _text_parts(text)}


# --- StreamResponse members ---


def task_event(task: dict) -> dict:
    return {"task": task}


def status_update(task_id: str, context_id: str, status: dict, metadata: dict | None = None) -> dict:
    update = {"taskId": task_id, "contextId": context_id, "status": status}
    if metadata is not None:
        update["metadata"] = metadata
    return {"statusUpdate": update}


def artifact_update(task_id: str, context_id: str, artifact: dict) -> dict:
    return {"artifactUpdate": {"taskId": task_id, "contextId": context_id, "artifact": artifact, "lastChunk": True}}


def message_event(message: dict) -> dict:
    return {"message": message}


# --- Frames: the objects under metadata[STREAM_URI] ---


def text_frame(text: str, final: bool) -> dict:
    return {"frame": FRAME_TEXT, "text": text, "final": final}


def thinking_frame(text: str) -> dict:
    return {"frame": FRAME_THINKING, "text": text, "final": False}


def tool_call_started_frame(tool_call_id: str, tool_name: str) -> dict:
    return {"frame": FRAME_TOOL_CALL_STARTED, "toolCallId": tool_call_id, "toolName": tool_name}


def tool_call_progress_frame(tool_call_id: str, input_bytes: int) -> dict:
    return {"frame": FRAME_TOOL_CALL_PROGRESS, "toolCallId": tool_call_id, "inputBytes": input_bytes}


def artifact_frame(
    *,
    tool_name: str,
    content: str,
    fence_source: str | None,
    tool_call_id: str | None,
    is_error: bool,
    duration_ms: int | None,
    exit_code: int | None,
    truncated: bool,
    attachments: list[dict],
) -> dict:
    return {
        "frame": FRAME_ARTIFACT,
        "toolName": tool_name,
        "content": content,
        "fenceSource": fence_source,
        "toolCallId": tool_call_id,
        "isError": is_error,
        "durationMs": duration_ms,
        "exitCode": exit_code,
        "truncated": truncated,
        "attachments": list(attachments),
    }


def attachment(media_type: str, size_bytes: int, sha256: str, url: str) -> dict:
    return {"mediaType": media_type, "sizeBytes": size_bytes, "sha256": sha256, "url": url}


def quota_window(
    name: str,
    *,
    used: float | None = None,
    resets_at_ms: int | None = None,
    window_minutes: int | None = None,
    state: str | None = None,
) -> dict:
    """One `windows[]` entry; unlike frame keys, a value the harness did not report is absent."""
    window: dict = {"name": name}
    for key, value in (("used", used), ("resetsAtMs", resets_at_ms), ("windowMinutes", window_minutes),
                       ("state", state)):
        if value is not None:
            window[key] = value
    return window


def quota_frame(windows: list[dict]) -> dict:
    return {"frame": FRAME_QUOTA, "windows": list(windows)}


def suggested_prompt_frame(text: str) -> dict:
    return {"frame": FRAME_SUGGESTED_PROMPT, "text": text}


def gap_frame(first_available_id: int) -> dict:
    return {"frame": FRAME_GAP, "firstAvailableId": first_available_id}


def lagged_frame(missed: int) -> dict:
    return {"frame": FRAME_LAGGED, "missed": missed}


def connection_ack_frame(conversation_mode: str) -> dict:
    return {"frame": FRAME_CONNECTION_ACK, "role": OBSERVER_ROLE, "conversationMode": conversation_mode}


def capsule_closed_frame() -> dict:
    return {"frame": FRAME_CAPSULE_CLOSED}


# --- Carriers ---


def task_frame_event(task_id: str, context_id: str, frame: dict, *, state: str = WORKING,
                     ts: str | None = None) -> dict:
    """A task's frame: a statusUpdate repeating `state`, no `status.message`, stamped now."""
    status = {"state": state, "timestamp": ts or timestamp()}
    return status_update(task_id, context_id, status, {STREAM_URI: frame})


def taskless_frame_event(frame: dict, message_id: str | None = None) -> dict:
    """A frame of no task: an agent message, no contextId or taskId, its text the frame's name."""
    message = {
        "messageId": message_id or new_message_id(),
        "role": ROLE_AGENT,
        "parts": _text_parts(frame["frame"]),
        "metadata": {STREAM_URI: frame},
    }
    return message_event(message)


def reopen_status_update(task_id: str, context_id: str, status: dict, ordinal: int) -> tuple[dict, dict]:
    """The reopen boundary status: (activated form with `{"reopen": n}`, plain form)."""
    activated = status_update(task_id, context_id, status, {STREAM_URI: {"reopen": ordinal}})
    return activated, plain_form(activated)


def plain_form(result: dict) -> dict:
    """What a connection that did not activate the stream extension is written of an annotated
    event: the same StreamResponse without the STREAM_URI metadata (other metadata kept)."""
    ((member, body),) = result.items()
    stripped = {k: v for k, v in body.items() if k != "metadata"}
    metadata = body.get("metadata")
    rest = {k: v for k, v in metadata.items() if k != STREAM_URI} if isinstance(metadata, dict) else {}
    if rest:
        stripped["metadata"] = rest
    return {member: stripped}
