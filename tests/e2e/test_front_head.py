"""The front's reading of a request head (gateway/worker/http/head_checks.py) against h11's on
the same bytes: every head h11 refuses is refused, never served; beyond h11's refusals only
the ambiguous forms and the door's request-line rules (door/head.py: 505, 501) are refused;
no input crashes it."""

from __future__ import annotations

import re

import h11
import pytest
from hypothesis import example, given, settings, strategies as st

from gateway.worker.door.head import request_problem
from gateway.worker.http.head_checks import Refused, read_head

EOLS = [b"\r\n"] * 8 + [b"\n", b"\r", b"\r\n "]
NAMES = [b"Host", b"Content-Type", b"Content-Length", b"Transfer-Encoding", b"Authorization", b"X-A",
         b"Bad Name", b"X:Colon", b"", b" Lead", b"Tr\x00ail", b"Conn\xe9", b"Upgrade", b"Connection"]
VALUES = [b"127.0.0.1", b"application/json", b"5", b"05", b"-1", b"5, 5", b"chunked", b"gzip, chunked",
          b"Bearer x", b"", b"a\x00b", b"a\x01b", b"a\x7fb", b"\xff", b" padded ", b"websocket", b"close"]


@st.composite
def heads(draw) -> bytes:
    method = draw(st.sampled_from([b"POST", b"GET", b"post", b"P OST", b"", b"PRI", b"POST\x00"]))
    target = draw(st.sampled_from([b"/", b"/x?y", b"*", b"", b"/ a", b"http://h/", b"/\x7f"]))
    version = draw(st.sampled_from([b"HTTP/1.1"] * 4
                                   + [b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 ", b"HTTP/9"]))
    lines = [draw(st.sampled_from([b"", b" ", b"\t"])) + b"%s %s %s" % (method, target, version)]
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from(NAMES) | st.binary(max_size=8))
        value = draw(st.sampled_from(VALUES) | st.binary(max_size=8))
        lines.append(name + draw(st.sampled_from([b": ", b":", b" : "])) + value)
    out = b""
    for line in lines:
        out += line + draw(st.sampled_from(EOLS))
    return out + b"\r\n"


def h11_refuses(head: bytes) -> bool:
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(head)
    try:
        return not isinstance(connection.next_event(), h11.Request)
    except h11.RemoteProtocolError:
        return True


CONTROL = re.compile(rb"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")


def ambiguous(head: bytes) -> bool:
    """The forms the front refuses though h11 may take them, found without its code."""
    if b"\x00" in head or head.count(b"\n") != head.count(b"\r\n") or head.count(b"\r") != head.count(b"\r\n"):
        return True
    if b"\r\n " in head or b"\r\n\t" in head:
        return True
    if CONTROL.search(head):  # RFC 9110 forbids them in a field; h11 takes them, llhttp does not
        return True
    names = [line.split(b":", 1)[0].strip().lower() for line in head.split(b"\r\n")[1:] if b":" in line]
    lengths = {line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")[1:]
               if line.split(b":", 1)[0].strip().lower() == b"content-length"}
    return (len(lengths) > 1 or (lengths and b"transfer-encoding" in names)
            or names.count(b"authorization") > 1)


def front(head: bytes) -> str:
    try:
        read_head(head)
    except Refused:
        return "refused"
    return "read"


def door_refuses(head: bytes) -> bool:
    """What the door refuses of a head h11 reads: its request-line rules."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(head)
    request = connection.next_event()
    return request_problem(request.method, request.http_version, request.headers) is not None


@settings(max_examples=1500, deadline=None, database=None)
@example(head=b"POST / HTTP/1.1\r\nHost: a\x01b\r\n\r\n")  # a control character h11 takes in a value
@given(head=heads() | st.binary(max_size=200).map(lambda raw: raw + b"\r\n\r\n"))
def test_the_front_refuses_what_h11_refuses_and_only_the_ambiguous_beyond(head):
    verdict = front(head)  # and it never raises anything else
    refused_by_h11 = h11_refuses(head)
    if refused_by_h11:
        assert verdict == "refused", head
    if verdict == "refused" and not refused_by_h11:
        assert ambiguous(head) or door_refuses(head), head


def test_methods_are_case_sensitive():
    """`post` is not POST: 501, as the door's rule says."""
    with pytest.raises(Refused) as refusal:
        read_head(b"post / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert refusal.value.status == 501


def test_a_method_llhttp_does_not_know_is_read_as_h11_reads_it():
    """h11 takes any token as a method; the router answers it (404, 405), as before."""
    assert read_head(b"PROPFIND /x HTTP/1.1\r\nHost: x\r\n\r\n").method == b"PROPFIND"


def test_an_upgrade_offer_is_read_as_any_header():
    head = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
    assert (b"upgrade", b"h2c") in read_head(head).headers


def test_a_body_framed_two_ways_is_refused_by_the_rule_h11s_path_applied():
    """One rule (door/head.py's framing_problem): request_problem over h11's headers says the same."""
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(head)
    request = connection.next_event()
    with pytest.raises(Refused) as refusal:
        read_head(head)
    assert request_problem(request.method, request.http_version, request.headers) == (400, refusal.value.detail)
