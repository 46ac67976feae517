"""murmur.WatchSession end to end: the real multi-process gateway over real sockets.

Every event read here is also parsed by the A2A SDK's StreamResponse (sse_reading.SSEStream).
"""

from __future__ import annotations

import os
import signal

import pytest

from gateway.protocol.uris import DOOR_URI, STREAM_URI
from helpers.gateway_harness import gone, running_gateway, session_memory, stopped, wait_for
from helpers.http_client import rpc, user_message
from helpers.sse_reading import (CADENCE_TURNS, SSEStream, WATCH, describe, heartbeats_among_events,
                         is_terminal_event, item, send, task_events, task_id_of, watch)


def test_head_is_exactly_the_specs(gateway):
    with SSEStream(gateway.port, WATCH, {}) as stream:
        assert stream.status == 200
        assert [k.lower() for k, _ in stream.http.raw_headers if k.lower() != "transfer-encoding"] == [
            "content-type", "cache-control", "connection", "a2a-extensions"]
        assert stream.headers["content-type"] == "text/event-stream"
        assert stream.headers["cache-control"] == "no-cache"
        assert stream.headers["connection"] == "keep-alive"
        assert stream.headers["a2a-extensions"] == f"{DOOR_URI}, {STREAM_URI}"
        ack = stream.next()
        assert ack.id is None
        frame = item(ack).frame
        assert frame == {"frame": "connection-ack", "role": "observer", "conversationMode": "stateless"}
        assert item(ack).body["parts"] == [{"mediaType": "text/plain", "text": "connection-ack"}]
        assert "contextId" not in item(ack).body


DEFAULT_ORDER = [
    "working:inference turn 1", "thinking", "text:Let me look ", "text:at that.",
    "tool-call-started", "tool-call-progress", "text!:", "artifact",
    "working:inference turn 2", "text:Done: ", "text:hello there", "text!:",
    "artifactUpdate", "completed:task completed",
]

SCENARIO_ORDERS = {
    "/scenario fail": ["working:inference turn 1", "text:Starting", "text!:",
                       "failed:task failed (driver_error): simulated driver failure"],
    "/scenario reopen": ["working:inference turn 1", "text:First draft", "text!:",
                         "working:reopened by hook review-gate", "working:inference turn 2",
                         "text:Reviewed answer", "text!:", "artifactUpdate", "completed:task completed"],
    "/scenario reopen hook=lint": ["working:inference turn 1", "text:First draft", "text!:",
                                   "working:reopened by hook lint", "working:inference turn 2",
                                   "text:Reviewed answer", "text!:", "artifactUpdate",
                                   "completed:task completed"],
    "/scenario slow turns=2 delay=0.05": ["working:inference turn 1", "text:turn 1 done", "text!:",
                                          "working:inference turn 2", "text:turn 2 done", "text!:",
                                          "artifactUpdate", "completed:task completed"],
    "/scenario image": ["working:inference turn 1", "tool-call-started", "tool-call-progress",
                        "artifact", "working:inference turn 2", "text:Took a screenshot.", "text!:",
                        "artifactUpdate", "completed:task completed"],
    "/scenario tools n=3": ["working:inference turn 1"] + ["tool-call-started", "tool-call-progress"] * 3
                           + ["artifact"] * 3 + ["working:inference turn 2", "text:Ran 3 tool calls.",
                                                 "text!:", "artifactUpdate", "completed:task completed"],
    "/scenario quiet seconds=0.1": ["working:inference turn 1", "text!:Quiet work finished.",
                                    "artifactUpdate", "completed:task completed"],
    "/scenario burst n=5": ["working:inference turn 1"] + [f"text:burst {i} " for i in range(1, 6)]
                           + ["text!:", "artifactUpdate", "completed:task completed"],
}


def test_default_scenario_in_spec_order(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        task_id = send(gateway.port, "hello there")
        assert [describe(e) for e in task_events(stream, task_id)] == DEFAULT_ORDER


@pytest.mark.parametrize("text", sorted(SCENARIO_ORDERS))
def test_scenario_order(gateway, text):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        task_id = send(gateway.port, text)
        assert [describe(e) for e in task_events(stream, task_id)] == SCENARIO_ORDERS[text]


def test_tools_scenario_refused_tool(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        task_id = send(gateway.port, "/scenario tools n=2")
        frames = [item(e).frame for e in task_events(stream, task_id) if describe(e) == "artifact"]
    assert frames[0]["isError"] is False and frames[0]["exitCode"] == 0
    assert frames[0]["fenceSource"] == "tool:bash"
    assert frames[1] == {"frame": "artifact", "toolName": "no-such-tool",
                         "content": "tool 'no-such-tool' is not declared in manifest allowlist",
                         "fenceSource": None, "toolCallId": "toolu_02", "isError": True,
                         "durationMs": 0, "exitCode": None, "truncated": False, "attachments": []}


def test_input_scenario_resumes_with_reply(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        task_id = send(gateway.port, "/scenario input prompt=Which?")
        seen = stream.read_until(lambda e: describe(e).startswith("input_required"))
        assert describe(seen[-1]) == "input_required:Which?"
        status, _, body = rpc(gateway.port, "SendMessage", user_message("README.md", taskId=task_id))
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        rest = [describe(e) for e in task_events(stream, task_id)]
    assert rest[0] == "working:resumed"
    assert rest[-2:] == ["artifactUpdate", "completed:task completed"]


def test_timeout_and_maxturns_fail(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        timeout_id = send(gateway.port, "/scenario timeout")
        assert describe(task_events(stream, timeout_id)[-1]) == "failed:input-timeout"
        maxturns_id = send(gateway.port, "/scenario maxturns")
        last = describe(task_events(stream, maxturns_id)[-1])
    assert last.startswith("failed:max_turns exceeded") and "inference.max_turns" in last


def test_final_status_equals_get_task(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        task_id = send(gateway.port, "quick")
        final = item(task_events(stream, task_id)[-1]).body["status"]
    _, _, body = rpc(gateway.port, "GetTask", {"id": task_id})
    assert body["result"]["status"] == final
    assert body["result"]["artifacts"][0]["name"] == "response"


def test_ids_contiguous_across_concurrent_tasks(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        ids = [send(gateway.port, f"/scenario burst n={n}") for n in (30, 40, 50)]
        ended, seen = set(), []
        for event in stream.events():
            if event.id is None:
                assert item(event).frame["frame"] in ("gap", "connection-ack")
                continue
            seen.append(event.id)
            if is_terminal_event(event):
                ended.add(task_id_of(event))
            if set(ids) <= ended:
                break
    assert seen == list(range(seen[0], seen[0] + len(seen)))


def test_replay_tables(tmp_path):
    """Each row of the spec's replay table on a fresh session: empty, never issued, evicted, normal."""
    with running_gateway(tmp_path=tmp_path) as gw:
        with watch(gw.port, last_event_id="5") as stream:  # empty buffer: nothing, no gap
            send(gw.port, "/scenario burst n=3")
            first = stream.next()
            assert first.id == 1
        with watch(gw.port) as stream:  # absent: from 0, every event from id 1
            events = stream.read_until(is_terminal_event)
            assert [e.id for e in events] == list(range(1, 8))
        with watch(gw.port, last_event_id="not-a-number") as stream:  # from 0 too
            assert stream.next().id == 1
        with watch(gw.port, last_event_id="4") as stream:  # normal: ids above 4
            assert [e.id for e in stream.read_until(is_terminal_event)] == [5, 6, 7]
        with watch(gw.port, last_event_id="8") as stream:  # never issued: gap naming oldest, all
            gap = stream.next()
            assert item(gap).frame == {"frame": "gap", "firstAvailableId": 1} and gap.id is None
            assert stream.next().id == 1
        with watch(gw.port, last_event_id="7") as stream:
            send(gw.port, "/scenario burst n=700")  # 704 more events: 1..199 evicted
            stream.read_until(lambda e: e.id == 711)
        with watch(gw.port, last_event_id="100") as stream:  # evicted: gap, then the buffer
            gap = stream.next()
            oldest = item(gap).frame["firstAvailableId"]
            assert oldest == 711 - 512 + 1
            ids = [e.id for e in stream.read_until(lambda e: e.id == 711)]
            assert ids == list(range(oldest, 712))
        with watch(gw.port, last_event_id=str(oldest - 1)) as stream:  # exactly at the edge: no gap
            assert stream.next().id == oldest


def test_lagged_reader_keeps_connection_and_every_hole_is_announced(tmp_path):
    with running_gateway(tmp_path=tmp_path, workers=1) as gw:
        slow = watch(gw.port, last_event_id=str(2**40), rcvbuf=4096)
        fast = watch(gw.port, last_event_id=str(2**40))
        try:
            # The slow reader reads nothing until the burst is over, so it falls past the lag
            # limit whatever the box does. The fast one reads all along: it loses nothing while
            # its worker keeps within 128 events of the head (50 frames a millisecond here), and
            # a worker the box holds back lags it too. Either way each reader keeps its
            # connection and every hole in its ids is a `lagged` frame's.
            task_id = send(gw.port, "/scenario burst n=3000")
            for stream in (fast, slow):
                events = list(stream.read_until(is_terminal_event))
                lagged = [item(e).frame for e in events if item(e).frame and item(e).frame["frame"] == "lagged"]
                assert all(f["missed"] >= 1 for f in lagged)
                numbered = [e.id for e in events if e.id is not None]
                assert numbered == sorted(set(numbered))
                assert len(numbered) + sum(f["missed"] for f in lagged) == 3004
                assert task_id_of(events[-1]) == task_id and is_terminal_event(events[-1])
                if stream is slow:
                    assert lagged
        finally:
            slow.close()
            fast.close()
        assert "SSE broadcast lagged by" in gw.stderr()


def test_heartbeat_cadence_never_reset_by_events(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        task_id = send(gateway.port, f"/scenario slow turns={CADENCE_TURNS} delay=0.1")
        order = []
        for event in stream.events(heartbeats=True):
            if event.data is None:
                assert event.comments == ("heartbeat",)
                order.append("hb")
            elif task_id_of(event) == task_id:
                order.append("event")
                if is_terminal_event(event):
                    break
    assert heartbeats_among_events(order) >= 2, order


def test_heartbeat_alone_while_quiet(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        task_id = send(gateway.port, "/scenario quiet seconds=1")
        kinds = []
        for event in stream.events(heartbeats=True):
            if event.data is None:
                kinds.append("hb")
            elif task_id_of(event) == task_id:
                kinds.append(describe(event))
                if is_terminal_event(event):
                    break
    assert kinds[0] == "working:inference turn 1"
    assert kinds[1:3] == ["hb", "hb"]
    assert kinds[-3:] == ["text!:Quiet work finished.", "artifactUpdate", "completed:task completed"]


def test_stop_session_sends_capsule_closed(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gw:
        queued = [send(gw.port, "/scenario slow turns=3 delay=5") for _ in range(1)]
        with watch(gw.port) as stream:
            status, _, body = rpc(gw.port, "murmur.StopSession", {})
            assert status == 200 and body["result"] == {}
            events = list(stream.events())
            assert stream.ended
        assert item(events[-1]).frame == {"frame": "capsule-closed"}
        assert describe(events[-2]) == "canceled:task canceled"
        _, _, body = rpc(gw.port, "SendMessage", user_message("after"))
        assert body["result"]["task"]["status"]["message"]["parts"][0]["text"] == \
            "task rejected: the session is closing"
        with watch(gw.port) as stream:  # a new watcher: ack, replay, capsule-closed
            events = list(stream.events())
        assert item(events[-1]).frame == {"frame": "capsule-closed"}
        assert queued


def test_killed_worker_is_replaced_while_other_streams_continue(tmp_path):
    with running_gateway(tmp_path=tmp_path, workers=2) as gw:
        before = wait_for(lambda: len(gw.worker_pids()) == 2 and gw.worker_pids(), what="2 workers")
        streams = []
        try:
            # An idle gateway may hand every new connection to the same worker (one shared
            # accept queue): open two, then two more while that worker is stopped, so the
            # other one accepts them.
            streams += [watch(gw.port, last_event_id=str(2**40)) for _ in range(2)]
            busy = streams[0].worker_pid
            os.kill(busy, signal.SIGSTOP)
            try:
                streams += [watch(gw.port, last_event_id=str(2**40)) for _ in range(2)]
            finally:
                os.kill(busy, signal.SIGCONT)
            victims = [s for s in streams if s.worker_pid == before[0]]
            survivors = [s for s in streams if s.worker_pid == before[1]]
            assert victims and survivors
            os.kill(before[0], signal.SIGKILL)
            after = wait_for(lambda: gw.worker_pids().get(0) != before[0] and gw.worker_pids(),
                             what="the replacement worker")
            assert after[1] == before[1]
            for stream in victims:  # the killed worker's connections are gone
                try:
                    while stream.next() is not None:
                        pass
                except OSError:
                    pass
            task_id = send(gw.port, "/scenario burst n=20")
            for stream in survivors:  # the other worker's streams continue unbroken
                events = task_events(stream, task_id)
                assert [e.id for e in events] == list(range(events[0].id, events[0].id + 24))
            os.kill(before[1], signal.SIGSTOP)  # the one accept queue left to the new worker
            try:
                wait_for(lambda: stopped(before[1]), what="the other worker to stop")
                with watch(gw.port) as fresh:  # a new connection is served, by the new worker
                    assert fresh.worker_pid == after[0]
            finally:
                os.kill(before[1], signal.SIGCONT)
        finally:
            for stream in streams:
                stream.close()
        assert "worker died; replacing it" in gw.stderr()


def test_sigterm_leaves_no_process_and_no_shm(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gw:
        stream = watch(gw.port)
        children = gw.children()
        assert len(children) >= 3
        assert gw.stop() == 0
        try:
            assert list(stream.events()) == []  # the stream was ended by the drain
        except OSError:
            pass  # or the connection was closed under it
        stream.close()
        wait_for(lambda: all(gone(pid) for pid in children), what="every child gone")
    assert not session_memory(gw.pid)  # nothing of this gateway's is left


def test_light_load_is_written_at_once_not_at_a_heartbeat(tmp_path):
    """One watcher, heartbeats an hour apart: a task's every event still arrives, so the pass
    runs on the sequencer's wake-up (the adaptive delay stays 0 under light load), never at a
    heartbeat. A stream that waited for one would trip the client's 10 s socket timeout."""
    with running_gateway(workers=1, heartbeat=3600, tmp_path=tmp_path) as gw:
        with watch(gw.port) as stream:
            task_id = send(gw.port, "hello there")
            assert [describe(e) for e in task_events(stream, task_id)] == DEFAULT_ORDER
