"""The A2A SDK's own client (`a2a.client`, unmodified) against the real gateway.

The raw-socket tests check the bytes; this file checks that an ordinary A2A v1.0 client
built from the agent card can use the door: the SDK resolves `/.well-known/agent-card.json`,
picks the JSON-RPC interface, sends `A2A-Version: 1.0` by itself, parses every SSE event with
its own parser into a `StreamResponse`, and maps the door's JSON-RPC errors to its own
exception types (gateway/protocol/errors.py: the error codes). Extensions are requested the way the SDK
documents, with `with_a2a_extensions` in the call's service parameters.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import AsyncIterator

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.extensions.common import find_extension_by_uri
from a2a.types import a2a_pb2
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
from google.protobuf import json_format

from gateway.protocol.uris import A2A_VERSION, CAPSULE_URI, DOOR_URI, OWN_TASKS_URI, STREAM_URI

pytestmark = pytest.mark.anyio

STREAM_TIMEOUT = 15.0
_message_numbers = itertools.count()


@pytest.fixture
def anyio_backend():
    return "asyncio"


def base_url(gateway) -> str:
    return f"http://127.0.0.1:{gateway.port}"


@contextlib.asynccontextmanager
async def sdk_client(gateway, *, streaming: bool = True) -> AsyncIterator[Client]:
    """A client the SDK's factory builds from the card it resolves; `streaming=False` sends
    SendMessage where `streaming=True` sends SendStreamingMessage."""
    client = await ClientFactory(ClientConfig(streaming=streaming)).create_from_url(base_url(gateway))
    async with client:
        yield client


def request(text: str, **message_fields) -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(
        message_id=f"sdk-msg-{next(_message_numbers)}", role=a2a_pb2.ROLE_USER,
        parts=[a2a_pb2.Part(text=text)], **message_fields))


async def collect(events: AsyncIterator[a2a_pb2.StreamResponse]) -> list[a2a_pb2.StreamResponse]:
    """Every event the SDK yields until the server ends the stream."""
    with anyio.fail_after(STREAM_TIMEOUT):
        return [event async for event in events]


async def started_task(gateway, text: str) -> str:
    """A task sent with the SDK's non-streaming SendMessage, once GetTask reports it working."""
    async with sdk_client(gateway, streaming=False) as client:
        [answer] = await collect(client.send_message(request(text)))
        task_id = answer.task.id
        with anyio.fail_after(STREAM_TIMEOUT):
            while (await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))).status.state \
                    != a2a_pb2.TASK_STATE_WORKING:
                await anyio.sleep(0.02)
    return task_id


def state_word(state: int) -> str:
    return a2a_pb2.TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def murmur_frame(event: a2a_pb2.StreamResponse) -> dict | None:
    if not event.HasField("status_update"):
        return None
    return json_format.MessageToDict(event.status_update.metadata).get(STREAM_URI)


def describe(event: a2a_pb2.StreamResponse) -> str:
    """A short name for an event the SDK parsed, for exact-order assertions."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        return f"task:{state_word(event.task.status.state)}"
    if kind == "artifact_update":
        update = event.artifact_update
        return f"artifact:{update.artifact.name}{':last' if update.last_chunk else ''}"
    if kind == "status_update":
        if (frame := murmur_frame(event)) is not None:
            return f"frame:{frame['frame']}"
        status = event.status_update.status
        text = status.message.parts[0].text if status.message.parts else ""
        return f"{state_word(status.state)}:{text}" if text else state_word(status.state)
    return kind


def task_ids(events: list[a2a_pb2.StreamResponse]) -> set[str]:
    ids = set()
    for event in events:
        kind = event.WhichOneof("payload")
        ids.add(event.task.id if kind == "task" else getattr(event, kind).task_id)
    return ids


async def test_sdk_resolves_the_agent_card_to_the_jsonrpc_interface(gateway):
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, base_url(gateway)).get_agent_card()
    [interface] = card.supported_interfaces
    assert interface.protocol_binding == "JSONRPC"
    assert interface.protocol_version == A2A_VERSION
    assert interface.url == base_url(gateway) + "/"
    assert card.capabilities.streaming
    assert [ext.uri for ext in card.capabilities.extensions] == [DOOR_URI, CAPSULE_URI, STREAM_URI, OWN_TASKS_URI]
    stream_extension = find_extension_by_uri(card, STREAM_URI)
    assert not stream_extension.required
    assert "text" in json_format.MessageToDict(stream_extension.params)["frames"]


async def test_streaming_send_yields_every_event_in_order(gateway):
    async with sdk_client(gateway) as client:
        events = await collect(client.send_message(request("summarise README.md")))
        task = await client.get_task(a2a_pb2.GetTaskRequest(id=events[0].task.id))
    assert [describe(e) for e in events] == [
        "task:submitted", "working:inference turn 1", "working:inference turn 2",
        "artifact:response:last", "completed:task completed"]
    opening = events[0].task
    assert opening.id.startswith("tsk_") and not opening.status.HasField("message")
    assert not opening.history
    assert task_ids(events) == {opening.id}
    assert {e.status_update.context_id for e in events[1:] if e.HasField("status_update")} == {opening.context_id}
    # The ending is what GetTask reports afterwards: the same status and response artifact.
    assert events[-1].status_update.status == task.status
    assert [events[-2].artifact_update.artifact] == list(task.artifacts)
    assert task.artifacts[0].parts[0].text


async def test_streaming_input_flow_ends_at_input_required_and_reply_resumes(gateway):
    async with sdk_client(gateway) as client:
        first = await collect(client.send_message(request("/scenario input prompt=Which")))
        assert [describe(e) for e in first][0] == "task:submitted"
        assert describe(first[-1]) == "input_required:Which"
        assert all(not d.startswith(("input_required", "completed"))
                   for d in map(describe, first[1:-1]))
        task_id = first[0].task.id

        second = await collect(client.send_message(request("notes.txt", task_id=task_id)))
    assert task_ids(second) == {task_id}
    assert describe(second[0]) == "task:working"
    assert [describe(e) for e in second[1:]][0] == "working:resumed"
    assert [describe(e) for e in second][-2:] == ["artifact:response:last", "completed:task completed"]
    assert second[-2].artifact_update.artifact.parts[0].text == "notes.txt"


async def test_reply_stream_opens_with_working_task_without_message(gateway):
    async with sdk_client(gateway) as client:
        first = await collect(client.send_message(request("/scenario input")))
        task_id = first[0].task.id
        second = await collect(client.send_message(request("a.txt", task_id=task_id)))
    assert second[0].task.status.state == a2a_pb2.TASK_STATE_WORKING
    assert not second[0].task.status.HasField("message")


async def test_subscribe_to_a_task_sent_with_send_message_runs_to_completed(gateway):
    task_id = await started_task(gateway, "/scenario slow turns=3 delay=0.2")
    async with sdk_client(gateway) as client:
        events = await collect(client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task_id)))
        task = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))
    assert task_ids(events) == {task_id}
    assert describe(events[0]) == "task:working"
    described = [describe(e) for e in events[1:]]
    assert described[-2:] == ["artifact:response:last", "completed:task completed"]
    assert all(d.startswith("working:inference turn ") for d in described[:-2])
    assert events[-1].status_update.status == task.status
    assert [events[-2].artifact_update.artifact] == list(task.artifacts)


async def test_activated_stream_delivers_murmur_frames_the_sdk_parses(gateway):
    activate = ClientCallContext(
        service_parameters=ServiceParametersFactory.create([with_a2a_extensions([STREAM_URI])]))
    async with sdk_client(gateway) as client:
        events = await collect(client.send_message(request("list files"), context=activate))
    described = [describe(e) for e in events]
    assert described[:3] == ["task:submitted", "working:inference turn 1", "frame:thinking"]
    assert described[-2:] == ["artifact:response:last", "completed:task completed"]
    frames = [murmur_frame(e) for e in events if murmur_frame(e) is not None]
    assert {"text", "tool-call-started", "artifact"} <= {f["frame"] for f in frames}
    assert all(e.status_update.status.state == a2a_pb2.TASK_STATE_WORKING
               for e in events if murmur_frame(e) is not None)


async def test_cancel_task_ends_a_subscribed_slow_task_canceled(gateway):
    task_id = await started_task(gateway, "/scenario slow turns=20 delay=0.5")
    async with sdk_client(gateway) as client:
        subscription = client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task_id))
        with anyio.fail_after(STREAM_TIMEOUT):
            opening = await subscription.__anext__()
        assert describe(opening) == "task:working"
        canceled = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task_id))
        rest = await collect(subscription)
        task = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))
    assert describe(a2a_pb2.StreamResponse(task=canceled)) == "task:canceled"
    assert canceled.status.message.parts[0].text == "task canceled"
    assert describe(rest[-1]) == "canceled:task canceled"
    assert rest[-1].status_update.status == task.status == canceled.status
    assert not task.artifacts


async def test_sdk_raises_its_own_errors_for_the_door_refusals(gateway):
    task_id = await started_task(gateway, "/scenario slow turns=20 delay=0.5")
    async with sdk_client(gateway) as client:
        await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task_id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task_id))
        with pytest.raises(UnsupportedOperationError):
            await collect(client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task_id)))
        with pytest.raises(UnsupportedOperationError):
            await collect(client.send_message(request("too late", task_id=task_id)))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(a2a_pb2.GetTaskRequest(id="tsk_unknown"))
