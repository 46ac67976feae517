"""Test support for TLS and HTTP/2: a throwaway CA (trustme) and a raw HTTP/2 client.

`Certificates` writes a CA, and a server certificate it signed for 127.0.0.1, to PEM files.
`H2Connection` speaks HTTP/2 over one verified TLS connection with the `h2` state machine,
so tests read each stream's exact DATA bytes, open many streams on one connection, and hold
back one stream's flow-control window (`stall`) the way a reader that stops reading would.
"""

from __future__ import annotations

import socket
import ssl

import h2.config
import h2.connection
import h2.events
import trustme

from gateway.protocol.parser import SSEEvent, SSEParser
from helpers.http_client import headers_for, rpc_body
from helpers.sse_reading import item


WIDE_WINDOW = 16 << 20


class Certificates:
    def __init__(self, directory):
        self.ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.certfile, self.keyfile, self.cafile = (str(directory / n) for n in ("cert.pem", "key.pem", "ca.pem"))
        server.cert_chain_pems[0].write_to_path(self.certfile)
        for pem in server.cert_chain_pems[1:]:
            pem.write_to_path(self.certfile, append=True)
        server.private_key_pem.write_to_path(self.keyfile)
        self.ca.cert_pem.write_to_path(self.cafile)

    @property
    def args(self) -> tuple[str, ...]:
        return ("--certfile", self.certfile, "--keyfile", self.keyfile)

    def client_context(self, alpn: list[str] | None = None) -> ssl.SSLContext:
        """A verifying client context that trusts only this CA."""
        context = ssl.create_default_context(cafile=self.cafile)
        if alpn:
            context.set_alpn_protocols(alpn)
        return context


class H2Stream:
    def __init__(self, stream_id: int):
        self.id = stream_id
        self.status: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.raw = bytearray()
        self.parser = SSEParser()
        self.events: list[SSEEvent] = []
        self.ended = False
        self.stalled = False
        self.held = 0  # bytes received but not yet given back to the stream's window


class H2Connection:
    """One HTTP/2 connection (ALPN h2, verified TLS) and its streams."""

    def __init__(self, port: int, context: ssl.SSLContext, timeout: float = 10.0):
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        assert self.sock.selected_alpn_protocol() == "h2"
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(WIDE_WINDOW)  # the connection's own window
        self.sock.sendall(self.conn.data_to_send())
        self.streams: dict[int, H2Stream] = {}

    def post(self, method: str, params: dict | None = None, *, rpc_id=1, wide: bool = True,
             **header_options) -> H2Stream:
        """Open a stream; `wide`: give it a 16 MiB window (as browsers do), else the default 64 KiB."""
        body = rpc_body(method, params, rpc_id)
        stream_id = self.conn.get_next_available_stream_id()
        head = [(b":method", b"POST"), (b":path", b"/"), (b":scheme", b"https"), (b":authority", b"127.0.0.1"),
                (b"content-length", str(len(body)).encode())]
        head += [(k.lower().encode(), v.encode()) for k, v in headers_for(**header_options)]
        self.conn.send_headers(stream_id, head)
        self.conn.send_data(stream_id, body, end_stream=True)
        if wide:
            self.conn.increment_flow_control_window(WIDE_WINDOW, stream_id=stream_id)
        self.sock.sendall(self.conn.data_to_send())
        stream = self.streams[stream_id] = H2Stream(stream_id)
        return stream

    def stall(self, stream: H2Stream, stalled: bool = True) -> None:
        """Stop (or resume) giving `stream` back its window; the connection's stays open."""
        stream.stalled = stalled
        if not stalled and stream.held:
            self.conn.increment_flow_control_window(stream.held, stream_id=stream.id)
            stream.held = 0
            self.sock.sendall(self.conn.data_to_send())

    def pump(self) -> None:
        """Read once from the socket and apply what arrived."""
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        for event in self.conn.receive_data(data):
            stream = self.streams.get(getattr(event, "stream_id", None))
            if isinstance(event, h2.events.ResponseReceived):
                stream.headers = dict(event.headers)
                stream.status = int(stream.headers[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                stream.raw += event.data
                stream.events.extend(stream.parser.feed(event.data))
                length = event.flow_controlled_length
                if not length:
                    continue
                self.conn.increment_flow_control_window(length)  # the connection's window, always
                if stream.stalled:
                    stream.held += length
                else:
                    self.conn.increment_flow_control_window(length, stream_id=stream.id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                stream.ended = True
        self.sock.sendall(self.conn.data_to_send())

    def pump_until(self, predicate, what: str = "condition", limit: int = 100_000) -> None:
        """Pump until `predicate()`; the socket's timeout bounds each wait."""
        for _ in range(limit):
            if predicate():
                return
            self.pump()
        raise AssertionError(f"no {what} after {limit} reads")

    def close(self) -> None:
        try:
            self.conn.close_connection()
            self.sock.sendall(self.conn.data_to_send())
        except OSError:
            pass
        self.sock.close()


def lagged_frames(events: list[SSEEvent]) -> list[dict]:
    return [item(e).frame for e in events
            if e.data is not None and item(e).frame and item(e).frame["frame"] == "lagged"]


def accounted(events: list[SSEEvent], total: int) -> bool:
    """Ids ascend, and `total` live events are each received or named missed by a `lagged` frame
    (a stalled reader, or a test client slower than a burst on a loaded box)."""
    ids = [e.id for e in events if e.id is not None]
    lagged = lagged_frames(events)
    return (ids == sorted(set(ids)) and all(f["missed"] >= 1 for f in lagged)
            and len(ids) + sum(f["missed"] for f in lagged) == total)
