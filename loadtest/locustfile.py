"""Locust users for the gateway's three streams: watchers, task subscribers, streaming senders.

Each user is a `FastHttpUser` that opens its stream with `stream=True` and reads it line by
line with geventhttpclient's own `readline` (`resp._response.readline(b"\\n")`), which returns
as soon as a line is buffered. `iter_content` is not used: it waits for whole blocks and
delivers slow streams late or never (design-research §4). The stream is never read inside
`catch_response`, whose request is reported only when the block exits.

One locust request event is fired per SSE event, named by its kind: the murmur frame's name
for a frame (`text`, `lagged`, `gap`, `connection-ack`, ...), the StreamResponse member
otherwise (`statusUpdate`, `task`, `artifactUpdate`, `message`), and `heartbeat`. Its response
time is the delivery latency when the event carries a time: now minus the `--sim-load` encode
time at the start of a text frame (ns), else now minus the status timestamp (ms); a heartbeat's
is its distance from the expected interval (`--heartbeat-interval`, 15 s by default). The stream
opening is its own `POST` event.

Live latency only: an event written before its stream was opened (the watch's replay of the
session's buffer, the task a subscription opens with) is fired as request type `SSE replay`,
its response time its age, so locust's `SSE` rows (and their percentiles) hold live deliveries
alone. A `WatchUser` resumes each new stream from the last id it read (`Last-Event-ID`), as a
browser's EventSource does; its first stream replays the buffer (counted apart, as above).

A door with `[network.authentication]`: `--token`/`--token-file` (one static token) or
`--jwt-key` (a JWT minted for each simulated user, `sub` `load-<n>`) (loadtest/bearer.py, the
same options as every command of the kit); the gateway is the one `--host` names, started by
whoever runs locust.

    WatchUser       murmur.WatchSession, resuming from the last id it read
    SubscribeUser   SubscribeToTask on the `--sim-load` task (the oldest working task in
                    ListTasks), activated so it receives the text frames
    SendUser        SendStreamingMessage of a new task (the default script), read to its end

Headless, bounded, with CSV output (the gateway started with `--sim-load 100`):

    locust -f loadtest/locustfile.py --headless -u 200 -r 50 -t 60s --host http://127.0.0.1:52222 \\
      --csv out/sse --only-summary --stop-timeout 5 -L WARNING
"""

from __future__ import annotations

import datetime
import itertools
import os
import re
import sys
import time

import orjson
from locust import FastHttpUser, between, events, task

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # locust runs this file by path

from loadtest import bearer  # noqa: E402

STREAM_URI = "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1"
SIM_STAMP = re.compile(r"^(\d{16,20}) ")
MAX_EVENTS_PER_STREAM = 100_000  # every read loop is bounded; a stream ends or the run stops it
_message_ids = itertools.count(1)
_users = itertools.count(1)  # each simulated user's number (its JWT's sub)
_door = bearer.Bearer()  # what every user sends: set from the options once locust has parsed them


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--heartbeat-interval", type=float, default=15.0, include_in_web_ui=False,
                        help="the gateway's heartbeat interval, to report heartbeat jitter")
    bearer.add_options(parser)


@events.init.add_listener
def _read_door(environment, **_) -> None:
    """The token options, read once (a key file, a PEM key parsed) for every user."""
    global _door
    if environment.parsed_options is not None:
        _door = bearer.from_args(environment.parsed_options)


def event_kind(result: dict) -> tuple[str, float | None]:
    """(kind, encode time in seconds since the epoch or None) of one StreamResponse."""
    member = next(iter(result), "unknown")
    body = result.get(member) or {}
    frame = (body.get("metadata") or {}).get(STREAM_URI) or {}
    if "frame" in frame:
        match = SIM_STAMP.match(frame.get("text") or "") if frame["frame"] == "text" else None
        return frame["frame"], int(match.group(1)) / 1e9 if match else None
    stamp = (body.get("status") or {}).get("timestamp")
    if stamp:
        return member, datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return member, None


class SSEUser(FastHttpUser):
    abstract = True
    network_timeout = 60.0  # longer than a heartbeat interval
    connection_timeout = 10.0
    wait_time = between(0.5, 1.0)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.number = next(_users)
        self.last_id: bytes | None = None  # the last event id this user read
        self.opened_at = 0.0  # when the current stream was asked for (epoch seconds)

    def fire(self, name: str, response_time_ms: float, length: int, exception=None, kind: str = "SSE") -> None:
        self.environment.events.request.fire(request_type=kind, name=name, response_time=response_time_ms,
                                             response_length=length, exception=exception, context={})

    def post_headers(self) -> dict:
        token = _door.token_for(self.number)
        return {"Content-Type": "application/json", "A2A-Version": "1.0",
                **({"Authorization": f"Bearer {token}"} if token else {})}

    def stream(self, method: str, params: dict, headers: dict | None = None) -> None:
        """Open one stream, fire an event per SSE event, return when it ends."""
        body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        opened = time.monotonic()
        self.opened_at = time.time()
        resp = self.client.request(
            "POST", "/", data=body, stream=True, name=method,  # type: ignore[arg-type]  # locust's stubs: bytes work
            headers={**self.post_headers(), **(headers or {})})
        content_type = resp.headers.get("content-type", "") if resp.headers is not None else ""
        if resp.status_code != 200 or not str(content_type).startswith("text/event-stream"):
            return
        interval = self.environment.parsed_options.heartbeat_interval if self.environment.parsed_options else 15.0
        last_beat = opened
        data, size = None, 0
        reader = resp._response  # geventhttpclient's response: readline returns per buffered line
        assert reader is not None  # a response was read: its status is above
        for _ in range(MAX_EVENTS_PER_STREAM * 4):
            line = reader.readline(b"\n")
            if not line:
                return
            size += len(line)
            if line.startswith(b"data: "):
                data = line[6:]
            elif line.startswith(b"id: "):
                self.last_id = line[4:].strip()
            elif line.startswith(b":"):
                now = time.monotonic()
                self.fire("heartbeat", abs(now - last_beat - interval) * 1000, size)
                last_beat, size = now, 0
            elif line == b"\n":
                if data is not None:
                    self._fire_event(data, size)
                data, size = None, 0

    def _fire_event(self, data: bytes, size: int) -> None:
        try:
            response = orjson.loads(data)
            kind, encoded_at = event_kind(response.get("result") or {"error": response.get("error")})
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            self.fire("unparsable", 0, size, exc)
            return
        now = time.time()
        if encoded_at is not None and encoded_at < self.opened_at:  # written before the stream: a replay
            self.fire(kind, (now - encoded_at) * 1000, size, kind="SSE replay")
            return
        self.fire(kind, max(0.0, (now - encoded_at) * 1000) if encoded_at else 0, size)


class WatchUser(SSEUser):
    weight = 8

    @task
    def watch(self) -> None:
        resume = {"Last-Event-ID": self.last_id.decode()} if self.last_id else {}
        self.stream("murmur.WatchSession", {}, resume)


class SubscribeUser(SSEUser):
    weight = 1

    def load_task_id(self) -> str | None:
        """The `--sim-load` task: the oldest working task (ids are time-ordered)."""
        body = orjson.dumps({"jsonrpc": "2.0", "id": "list", "method": "ListTasks", "params": {}})
        resp = self.client.request("POST", "/", data=body, name="ListTasks",  # type: ignore[arg-type]  # as above
                                   headers=self.post_headers())
        tasks = ((orjson.loads(resp.content or b"{}").get("result") or {}).get("tasks")) or []
        working = [t["id"] for t in tasks if t["status"]["state"] == "TASK_STATE_WORKING"]
        return min(working) if working else None

    @task
    def subscribe(self) -> None:
        task_id = self.load_task_id()
        if task_id is not None:
            self.stream("SubscribeToTask", {"id": task_id}, {"A2A-Extensions": STREAM_URI})


class SendUser(SSEUser):
    weight = 1

    @task
    def send(self) -> None:
        message = {"messageId": f"locust-{next(_message_ids)}-{time.monotonic_ns()}", "role": "ROLE_USER",
                   "parts": [{"text": "Summarise README.md"}]}
        self.stream("SendStreamingMessage", {"message": message}, {"A2A-Extensions": STREAM_URI})
