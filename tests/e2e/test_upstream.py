"""Upstream mode: gateway B in front of gateway A (A on its embedded capsule), real processes."""

from __future__ import annotations

import os
import signal
import urllib.request

import orjson

from gateway.protocol.lag import LAG_LIMIT
from gateway.protocol.uris import OWN_TASKS_URI
from helpers.gateway_harness import front_of, running_gateway, scrape, upstream_ready, wait_for
from helpers.http_client import rpc, upstream_card, user_message
from helpers.sse_reading import (SSEStream, WATCH, describe, is_terminal_event, item, task_id_of,
                         watching_b_after_a_burst)


def results_until_terminal(stream: SSEStream, task_id: str) -> list[tuple[int | None, bytes]]:
    out = []
    for event in stream.events():
        if task_id_of(event) == task_id:
            out.append((event.id, orjson.dumps(orjson.loads(event.data)["result"])))
            if is_terminal_event(event):
                return out
    raise AssertionError("stream ended early")


SCENARIOS = ["hello", "/scenario reopen", "/scenario tools n=2", "/scenario fail", "/scenario image"]


def test_b_serves_exactly_what_a_serves(tmp_path):
    with running_gateway(tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        for text in SCENARIOS:
            with SSEStream(a.port, WATCH, {}, last_event_id=str(2**40)) as on_a, \
                    SSEStream(b.port, WATCH, {}, last_event_id=str(2**40)) as on_b:
                task_id = rpc(b.port, "SendMessage", user_message(text))[2]["result"]["task"]["id"]
                assert results_until_terminal(on_a, task_id) == results_until_terminal(on_b, task_id), text
        _, _, on_a = rpc(a.port, "ListTasks", {})
        _, _, on_b = rpc(b.port, "ListTasks", {})
        assert on_a["result"] == on_b["result"]


def test_task_streams_through_b(tmp_path):
    with running_gateway(tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        with SSEStream(b.port, "SendStreamingMessage", user_message("/scenario input prompt=Which?"),
                       activate=True) as first:
            events = list(first.events())
        task = item(events[0]).body
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        assert describe(events[-1]) == "input_required:Which?"
        with SSEStream(b.port, "SubscribeToTask", {"id": task["id"]}) as sub:
            assert item(sub.next()).body["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            rpc(b.port, "SendMessage", user_message("x.txt", taskId=task["id"]))
            rest = [describe(e) for e in sub.events()]
        assert rest[0] == "working:resumed" and rest[-1] == "completed:task completed"
        _, _, got = rpc(b.port, "GetTask", {"id": task["id"]})
        assert got["result"]["artifacts"][0]["parts"][0]["text"] == "x.txt"
        assert rpc(b.port, "GetTask", {"id": "tsk_none"})[2]["error"]["code"] == -32001


def test_replicas_agree_and_a_watcher_resumes_on_another(tmp_path):
    with running_gateway(tmp_path=tmp_path) as a, front_of(a, tmp_path) as b1, front_of(a, tmp_path) as b2:
        with SSEStream(b1.port, WATCH, {}, last_event_id=str(2**40)) as on_b1:
            task_id = rpc(a.port, "SendMessage", user_message("/scenario burst n=200"))[2]["result"]["task"]["id"]
            part = []
            for event in on_b1.events():
                if event.id is not None:
                    part.append((event.id, event.data))
                if len(part) == 50:
                    break
        last = part[-1][0]
        wait_for(lambda: rpc(a.port, "GetTask", {"id": task_id})[2]["result"]["status"]["state"]
                 == "TASK_STATE_COMPLETED", what="the burst")
        with SSEStream(b2.port, WATCH, {}, last_event_id=str(last)) as on_b2:
            rest = [(e.id, e.data) for e in on_b2.read_until(is_terminal_event) if e.id is not None]
        with SSEStream(a.port, WATCH, {}, last_event_id=str(part[0][0] - 1)) as on_a:
            truth = [(e.id, e.data) for e in on_a.read_until(is_terminal_event) if e.id is not None]
        assert part + rest == truth  # same ids, same bytes (each stream used rpc id 1)


def test_a_link_lagged_at_the_upstream_resumes_from_its_replay(tmp_path):
    """B's link falling behind A's lag limit loses nothing: A's only worker is held stopped
    while A's capsule writes past the limit, so A's next pass writes the link a `lagged` frame;
    B resumes from its last id at once and A's replay brings back every skipped event."""
    with running_gateway("--sim-load", "150", workers=1, metrics=True, tmp_path=tmp_path) as a, \
            front_of(a, tmp_path, metrics=True) as b:
        def head(gw) -> int:
            return int(scrape(gw.metrics_port)["murgw_ring_head_id"])

        wait_for(lambda: head(b) > 0, what="B to follow A")
        worker = a.worker_pids()[0]
        start = head(a)
        os.kill(worker, signal.SIGSTOP)
        try:
            wait_for(lambda: head(a) > start + LAG_LIMIT + 20, what="A to write past its lag limit")
        finally:
            os.kill(worker, signal.SIGCONT)
        target = start + LAG_LIMIT + 30
        wait_for(lambda: head(b) >= target, what="B to catch up")
        with SSEStream(b.port, WATCH, {}, last_event_id=str(start)) as replay:
            seen = replay.read_until(lambda e: e.id is not None and e.id >= target)
    assert [e.data for e in seen if e.id is None and "lagged" in e.data] == []
    assert [e.id for e in seen if e.id is not None] == list(range(start + 1, target + 1))


def test_upstream_paused_then_resumed_loses_nothing(tmp_path):
    with running_gateway(tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        with SSEStream(b.port, WATCH, {}, last_event_id=str(2**40)) as watcher:
            sent = rpc(b.port, "SendMessage", user_message("/scenario slow turns=3 delay=0.3"))
            task_id = sent[2]["result"]["task"]["id"]
            watcher.read_until(lambda e: describe(e) == "working:inference turn 1")
            pids = [a.pid] + a.children()
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                beats = 0
                for event in watcher.events(heartbeats=True):
                    if event.data is None:
                        beats += 1
                    if beats == 3:
                        break
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
            seen = [describe(e) for e in watcher.read_until(is_terminal_event) if task_id_of(e) == task_id]
        assert seen[-1] == "completed:task completed"
        assert "text:turn 3 done" in seen


def test_upstream_restart_is_a_new_session(tmp_path):
    with watching_b_after_a_burst(tmp_path, 30) as (a, b, watcher, last):
        a.stop()
        wait_for(lambda: not upstream_ready(b.port), what="B to notice the upstream is gone")
        with running_gateway("--bind", f"127.0.0.1:{a.port}", tmp_path=tmp_path) as a2:
            wait_for(lambda: upstream_ready(b.port), what="B to reconnect to the new A")
            rpc(a2.port, "SendMessage", user_message("/scenario burst n=3"))
            rest = list(watcher.events())
            assert item(rest[-1]).frame == {"frame": "capsule-closed"}
            # the new session's first event is in B's buffer (an empty buffer replays nothing, no gap)
            with SSEStream(b.port, WATCH, {}, last_event_id="0") as fresh:
                assert fresh.read_until(lambda e: e.id is not None)[-1].id == 1
            with SSEStream(b.port, WATCH, {}, last_event_id=str(last)) as again:
                assert item(again.next()).frame["frame"] == "connection-ack"
                gap = again.next()
                assert item(gap).frame == {"frame": "gap", "firstAvailableId": 1}
                assert again.next().id == 1


def test_a_sees_one_upstream_stream_per_b(tmp_path):
    with running_gateway(metrics=True, tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        watchers = [SSEStream(b.port, WATCH, {}) for _ in range(20)]
        try:
            for w in watchers:
                w.next()
            text = urllib.request.urlopen(f"http://127.0.0.1:{a.metrics_port}/metrics").read().decode()
            line = next(row for row in text.splitlines()
                        if row.startswith('murgw_connections_open{endpoint="murmur.WatchSession"}'))
            assert float(line.split()[-1]) == 1
        finally:
            for w in watchers:
                w.close()


def test_card_is_the_upstreams_with_the_gateways_address(tmp_path):
    with running_gateway(tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        card_a = orjson.loads(urllib.request.urlopen(f"http://127.0.0.1:{a.port}/.well-known/agent-card.json").read())
        card_b = orjson.loads(urllib.request.urlopen(f"http://127.0.0.1:{b.port}/.well-known/agent-card.json").read())
        assert card_b["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{b.port}/"
        assert upstream_card(card_b) == upstream_card(card_a)
        assert OWN_TASKS_URI in str(card_a) and OWN_TASKS_URI not in str(card_b)
        assert rpc(b.port, "GetExtendedAgentCard", {})[2]["error"]["code"] == -32007  # forwarded
