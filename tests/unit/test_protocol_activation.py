"""gateway.protocol.activation: the spec's Activation table and A2A-Extensions parsing."""

import pytest

from gateway.protocol import activation as act
from gateway.protocol.uris import DOOR_URI, OWN_TASKS_URI, STREAM_URI

pytestmark = pytest.mark.unit

OTHER_METHODS = [act.SEND_MESSAGE, act.GET_TASK, act.LIST_TASKS, act.CANCEL_TASK, act.STOP_SESSION,
                 act.GET_EXTENDED_AGENT_CARD]


def test_header_lines_are_split_trimmed_and_empties_dropped():
    assert act.parse_extensions([" a , ,b,", "", "  c  "]) == ["a", "b", "c"]
    assert act.parse_extensions([]) == []


@pytest.mark.parametrize(
    "values, activated",
    [
        ([STREAM_URI], True),
        ([f"{DOOR_URI},  {STREAM_URI} "], True),
        ([DOOR_URI, f",{STREAM_URI},"], True),
        ([STREAM_URI.upper()], False),  # the URI matches exactly, case included
        ([STREAM_URI.removesuffix("-v1")], False),
        ([STREAM_URI + "x"], False),
        ([f"{STREAM_URI};q=1"], False),
        ([DOOR_URI], False),
        ([], False),
    ],
)
def test_activation_needs_an_exact_entry(values, activated):
    assert act.is_activated(values) is activated


@pytest.mark.parametrize("method", sorted(act.TASK_STREAM_METHODS))
def test_task_streams_name_stream_only_when_activated_and_door_first(method):
    assert act.response_extensions(method, activated=True) == [STREAM_URI]
    assert act.response_extensions(method, activated=False) == []
    assert act.response_extensions(method, activated=True, door_used=True) == [DOOR_URI, STREAM_URI]
    assert act.response_extensions(method, activated=False, door_used=True) == [DOOR_URI]
    assert act.connection_activated(method, [STREAM_URI]) and not act.connection_activated(method, [])


@pytest.mark.parametrize("activated", [True, False])
def test_watch_session_always_names_door_then_stream(activated):
    assert act.response_extensions(act.WATCH_SESSION, activated=activated) == [DOOR_URI, STREAM_URI]
    assert act.connection_activated(act.WATCH_SESSION, [])
    assert act.extensions_header(act.response_extensions(act.WATCH_SESSION, activated=activated)) == (
        "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1, "
        "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1"
    )


@pytest.mark.parametrize("activated", [True, False])
def test_watch_own_tasks_names_its_own_extension_then_the_stream_never_the_door(activated):
    assert act.response_extensions(act.WATCH_OWN_TASKS, activated=activated) == [OWN_TASKS_URI, STREAM_URI]
    assert act.response_extensions(act.WATCH_OWN_TASKS, activated=activated, door_used=True) == [
        OWN_TASKS_URI, STREAM_URI]
    assert act.connection_activated(act.WATCH_OWN_TASKS, [])
    assert act.WATCH_OWN_TASKS in act.METHODS and act.WATCH_OWN_TASKS in act.STREAM_METHODS


@pytest.mark.parametrize("method", OTHER_METHODS)
def test_other_methods_never_name_the_stream(method):
    assert act.response_extensions(method, activated=True) == []
    assert act.response_extensions(method, activated=True, door_used=True) == [DOOR_URI]
    assert not act.connection_activated(method, [STREAM_URI])


def test_extensions_header_absent_when_empty():
    assert act.extensions_header([]) is None


def test_message_uses_door():
    assert act.message_uses_door({"metadata": {DOOR_URI: {"forgetSession": True}}})
    assert not act.message_uses_door({"metadata": {STREAM_URI: {}}})
    assert not act.message_uses_door({"metadata": None})
    assert not act.message_uses_door({})
