"""The embedded capsule's `/scenario` options over a real gateway (docs/scenarios.md): a quoted
value keeps its spaces, and an option that does not parse fails the task naming it, never a
silent default. The failure is the spec's `task failed (<cause>): <reason>`."""

from __future__ import annotations

import pytest

from helpers.gateway_harness import GatewayOptions, wait_for
from helpers.http_client import rpc, user_message

TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions(workers=1)


def send(port: int, text: str) -> str:
    status, _, body = rpc(port, "SendMessage", user_message(text))
    assert status == 200, body
    return body["result"]["task"]["id"]


def status_when(port: int, task_id: str, states: set[str]) -> dict:
    """The task's status (GetTask) once it is in one of `states`."""
    def status():
        _, _, body = rpc(port, "GetTask", {"id": task_id})
        found = body["result"]["status"]
        return found if found["state"] in states else None
    return wait_for(status, what=f"task {task_id} in {states}")


def text_of(status: dict) -> str:
    return status["message"]["parts"][0]["text"]


@pytest.mark.parametrize("text, reason", [
    ("/scenario slow turns=abc", "/scenario slow turns: 'abc' is not a whole number; it accepts 1 to 1000"),
    ("/scenario slow delay=-1", "/scenario slow delay: '-1' is out of range; it accepts 0 to 3600"),
    ("/scenario burst n=-1", "/scenario burst n: '-1' is out of range; it accepts 0 to 1000000"),
    ("/scenario quiet seconds=soon",
     "/scenario quiet seconds: 'soon' is not a number of seconds; it accepts 0 to 3600"),
    ("/scenario slow turn=3", "/scenario slow: 'turn' is not an option of it; it takes turns=, delay="),
    ("/scenario fail now=1", "/scenario fail: 'now' is not an option of it; it takes no options"),
    ("/scenario input prompt=Which file now?",
     "/scenario input: 'file' is not key=value; quote a value that has spaces (it takes prompt=)"),
    ('/scenario input prompt="Which file', "/scenario: no closing quotation"),
    ("/scenario slow turns=40", "/scenario slow turns: 40 is more than inference.max_turns (20), "
                                "the capsule's cap on a task's turns"),
])
def test_an_option_that_does_not_parse_fails_the_task_naming_it(gateway, text, reason):
    final = status_when(gateway.port, send(gateway.port, text), TERMINAL)
    assert final["state"] == "TASK_STATE_FAILED"
    assert text_of(final) == f"task failed (scenario_error): {reason}"


@pytest.mark.parametrize("quoted", ['"Which file now?"', "'Which file now?'"])
def test_a_quoted_prompt_keeps_its_spaces(gateway, quoted):
    task_id = send(gateway.port, f"/scenario input prompt={quoted}")
    waiting = status_when(gateway.port, task_id, {"TASK_STATE_INPUT_REQUIRED"} | TERMINAL)
    assert (waiting["state"], text_of(waiting)) == ("TASK_STATE_INPUT_REQUIRED", "Which file now?")
    status, _, body = rpc(gateway.port, "SendMessage", user_message("notes.txt", taskId=task_id))
    assert status == 200 and "result" in body, body
    assert status_when(gateway.port, task_id, TERMINAL)["state"] == "TASK_STATE_COMPLETED"


def test_good_options_are_taken(gateway):
    task_id = send(gateway.port, "/scenario slow turns=2 delay=0")
    final = status_when(gateway.port, task_id, TERMINAL)
    assert final["state"] == "TASK_STATE_COMPLETED"
    _, _, body = rpc(gateway.port, "GetTask", {"id": task_id})
    assert body["result"]["artifacts"][0]["parts"][0]["text"] == "turn 2 done"
