"""The door's one view of a request head (gateway/worker/door/request_head.py): read once, in
one pass, with the same answers the per-lookup scans gave."""

import pytest

from gateway.worker.door.request_head import HEAD_KEY, RequestHead, head_of

pytestmark = pytest.mark.unit


def scope(headers, raw_path=b"/", query=b""):
    return {"headers": headers, "raw_path": raw_path, "query_string": query}


def test_names_match_whatever_their_case_and_values_stay_as_sent():
    head = RequestHead(scope([(b"Content-Type", b"application/json"), (b"AUTHORIZATION", b"Bearer \xe9t"),
                              (b"a2a-extensions", b"a, b"), (b"A2A-Extensions", b"c")]))
    assert head.get(b"content-type") == "application/json"
    assert head.get(b"authorization") == "Bearer \xe9t"  # Latin-1, as HTTP field values are read
    assert head.all(b"a2a-extensions") == ["a, b", "c"] and head.count(b"a2a-extensions") == 2
    assert head.get(b"last-event-id") is None and head.all(b"last-event-id") == [] and head.count(b"a2a-version") == 0


def test_lines_and_size_count_every_header_the_path_and_the_query():
    headers = [(b"host", b"x"), (b"x-other", b"12345"), (b"authorization", b"Bearer t")]
    head = RequestHead(scope(headers, raw_path=b"/abc", query=b"q=1"))
    assert head.lines == 3
    assert head.size == len(b"/abc") + len(b"q=1") + sum(len(n) + len(v) for n, v in headers)


def test_two_authorization_lines_are_counted_for_the_ambiguity_rule():
    head = RequestHead(scope([(b"authorization", b"Bearer a"), (b"Authorization", b"Bearer b")]))
    assert head.count(b"authorization") == 2 and head.get(b"authorization") == "Bearer a"


def test_a_header_the_door_does_not_read_is_a_mistake_not_a_miss():
    with pytest.raises(ValueError):
        RequestHead(scope([(b"x-other", b"1")])).get(b"x-other")


def test_the_view_is_made_once_and_kept_in_the_scope():
    request = scope([(b"content-type", b"application/json")])
    head = head_of(request)
    assert request[HEAD_KEY] is head and head_of(request) is head
