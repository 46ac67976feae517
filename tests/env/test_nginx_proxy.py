"""deploy/nginx/murmur-gateway.conf with a real nginx (docs/browsers.md: the gateway on the web
application's origin): a stream through it gets each heartbeat as the gateway writes it
(nginx buffers nothing), and a task stream left and resumed through it with SubscribeToTask
and Last-Event-ID gets exactly the task's events it missed, each once. The sample runs as
written, with only its two addresses (nginx's listen, the gateway's) made this test's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers.gateway_harness import ROOT, require_tool, running_gateway
from helpers.http_client import user_message
from helpers.sse_reading import SSEStream, is_terminal_event, item, task_id_of
from loadtest.servers import free_port, scratch_nginx, stop, wait_for_port

pytestmark = pytest.mark.env

SAMPLE = Path(ROOT) / "deploy" / "nginx" / "murmur-gateway.conf"
WATCH = "murmur.WatchSession"
LIVE = str(2**40)
CONF = """{scratch}events {{ worker_connections 256; }}
http {{
{scratch_http}  include {dir}/murmur-gateway.conf;
}}
"""


def sample_for(gateway_port: int, port: int) -> str:
    text = SAMPLE.read_text()
    for written, here in (("server 127.0.0.1:52222;", f"server 127.0.0.1:{gateway_port};"),
                          ("listen 80;", f"listen 127.0.0.1:{port};")):
        assert text.count(written) == 1, written
        text = text.replace(written, here)
    return text


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """(the gateway, nginx's port) with the sample in front of the gateway."""
    nginx = require_tool("nginx", "nginx")
    tmp_path = tmp_path_factory.mktemp("nginx")
    with running_gateway(workers=1, tmp_path=tmp_path) as gateway:
        port = free_port()
        (tmp_path / "murmur-gateway.conf").write_text(sample_for(gateway.port, port))
        (tmp_path / "nginx.conf").write_text(CONF.format(dir=tmp_path, **scratch_nginx(str(tmp_path))))
        proc = subprocess.Popen([nginx, "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for_port(port, proc)
            yield gateway, port
        finally:
            stop(proc)


def test_a_stream_through_nginx_gets_each_heartbeat_as_it_is_written(proxied):
    """The heartbeats (12 bytes each, every 0.3 s here) come through one by one while nothing
    else is written: none waits in nginx for more bytes to fill a buffer."""
    _, port = proxied
    with SSEStream(port, WATCH, {}, path="/gateway/", last_event_id=LIVE) as stream:
        assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
        blocks = [stream.next() for _ in range(4)]
        assert blocks[0].data is not None  # connection-ack
        assert all(block.data is None for block in blocks[1:])  # three heartbeats, nothing else


def test_a_task_stream_resumed_through_nginx_misses_nothing(proxied):
    gateway, port = proxied
    with SSEStream(gateway.port, WATCH, {}, last_event_id=LIVE) as reference:  # straight to the gateway
        first = SSEStream(port, "SendStreamingMessage", user_message("/scenario slow turns=4 delay=0.3"),
                          path="/gateway/")
        opening = first.read_until(lambda e: e.id is not None)
        task_id = task_id_of(opening[-1])
        first.close()  # the page leaves, as at a token refresh
        resumed = SSEStream(port, "SubscribeToTask", {"id": task_id}, path="/gateway/",
                            last_event_id=str(opening[-1].id))
        rest = resumed.read_until(is_terminal_event)
        resumed.close()
        watched = reference.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))
    expected = [e.id for e in watched if task_id_of(e) == task_id and e.id is not None and item(e).frame is None]
    got = [e.id for e in (*opening, *rest) if e.id is not None]
    assert got == expected and len(set(got)) == len(got)
    assert rest[0].id is None and item(rest[0]).kind == "task"  # the resumed stream's opening task
