"""HTTP/1.1 for the tests over a plain socket with h11 (`Http`), so a test reads the exact
bytes the server wrote: the request heads, the JSON-RPC bodies, and the checks of a refusal's
problem details and of a result against the A2A SDK's protobuf types."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time

import h11
import orjson
from a2a.types import a2a_pb2
from google.protobuf import json_format

from gateway.protocol.uris import STREAM_URI
from gateway.protocol.uris import OWN_TASKS_URI


def headers_for(*, version: str | None = "1.0", last_event_id: str | None = None,
                activate: bool = False, token: str | None = None,
                content_type: str | None = "application/json", extra: list | None = None) -> list:
    headers = []
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    if version is not None:
        headers.append(("A2A-Version", version))
    if last_event_id is not None:
        headers.append(("Last-Event-ID", last_event_id))
    if activate:
        headers.append(("A2A-Extensions", STREAM_URI))
    if token is not None:
        headers.append(("Authorization", f"Bearer {token}"))
    return headers + list(extra or [])


def rpc_body(method: str, params: dict | None = None, rpc_id=1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}})


def user_message(text: str, **extra) -> dict:
    return {"message": {"messageId": f"msg-{time.monotonic_ns()}", "role": "ROLE_USER",
                        "parts": [{"text": text}], **extra}}


class Http:
    """One HTTP/1.1 connection over a raw socket (TLS with `tls`), parsed with h11."""

    def __init__(self, port: int, *, rcvbuf: int | None = None, timeout: float = 10.0,
                 tls: ssl.SSLContext | None = None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.conn = h11.Connection(h11.CLIENT)
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.raw_headers: list[tuple[str, str]] = []

    def send_request(self, method: str, path: str, headers: list = (), body: bytes = b"") -> None:
        all_headers = [("Host", "127.0.0.1"), *headers]
        if method != "GET" or body:
            all_headers.append(("Content-Length", str(len(body))))
        self.sock.sendall(self.conn.send(h11.Request(method=method, target=path, headers=all_headers)))
        if body:
            self.sock.sendall(self.conn.send(h11.Data(data=body)))
        self.sock.sendall(self.conn.send(h11.EndOfMessage()))

    def _next_event(self):
        """The next h11 event; a connection cut mid-body raises ConnectionError."""
        try:
            return self._next_h11_event()
        except h11.RemoteProtocolError as exc:
            raise ConnectionError(str(exc)) from exc

    def _next_h11_event(self):
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = self.sock.recv(65536)
                self.conn.receive_data(data)
                continue
            return event

    def read_head(self) -> int:
        event = self._next_event()
        assert isinstance(event, h11.Response), event
        self.status = event.status_code
        self.raw_headers = [(k.decode(), v.decode()) for k, v in event.headers]
        self.headers = {k.lower(): v for k, v in self.raw_headers}
        return self.status

    def read_chunk(self) -> bytes | None:
        """The next body bytes; None at the end of the response."""
        event = self._next_event()
        if isinstance(event, h11.Data):
            return bytes(event.data)
        if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return None
        raise AssertionError(f"unexpected {event!r}")

    def read_body(self) -> bytes:
        chunks = []
        while (chunk := self.read_chunk()) is not None:
            chunks.append(chunk)
        return b"".join(chunks)

    def request(self, method: str, path: str, headers: list = (), body: bytes = b""):
        try:
            self.send_request(method, path, headers, body)
            status = self.read_head()
            return status, self.headers, self.read_body()
        finally:
            self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def rpc(port: int, method: str, params: dict | None = None, *, rpc_id=1, **header_options):
    """A non-streaming JSON-RPC call: (HTTP status, headers, decoded JSON body)."""
    status, headers, body = Http(port).request("POST", "/", headers_for(**header_options),
                                               rpc_body(method, params, rpc_id))
    return status, headers, orjson.loads(body) if body else None


# RFC 9110's reason phrases, written out here so the tests do not share the server's table.
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout", 413: "Content Too Large",
           429: "Too Many Requests", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
           501: "Not Implemented", 503: "Service Unavailable", 505: "HTTP Version Not Supported"}


def problem_detail(status: int, headers: dict, body: bytes | dict) -> str:
    """The `detail` of a door refusal, checked to be exactly the RFC 9457 problem details
    the door sends (gateway/worker/problem.py): content-type application/problem+json, type,
    title, status, detail."""
    assert headers["content-type"] == "application/problem+json", headers
    problem = orjson.loads(body) if isinstance(body, (bytes, str)) else body
    assert list(problem) == ["type", "title", "status", "detail"], problem
    assert problem["type"] == "about:blank" and problem["title"] == REASONS[status], problem
    assert problem["status"] == status and isinstance(problem["detail"], str) and problem["detail"], problem
    return problem["detail"]


def a2a_check(data: str) -> dict:
    """The event's JSON-RPC response; its result parsed by the A2A SDK as a StreamResponse."""
    response = orjson.loads(data)
    if "result" in response:
        json_format.Parse(orjson.dumps(response["result"]), a2a_pb2.StreamResponse(),
                          ignore_unknown_fields=False)
    return response


def upstream_card(card: dict) -> dict:
    """A gateway's card as a gateway in front of it serves it: its interfaces' addresses left
    out (each names the gateway that answered) and, where A served it, the own-tasks extension,
    which upstream mode does not serve."""
    capabilities = card.get("capabilities", {})
    extensions = [e for e in capabilities.get("extensions", []) if e.get("uri") != OWN_TASKS_URI]
    return {**card, "capabilities": {**capabilities, "extensions": extensions},
            "supportedInterfaces": [{k: v for k, v in i.items() if k != "url"} for i in card["supportedInterfaces"]]}
