"""The nesting bound (gateway/worker/door/rpc_checks.py `nests_deeper`): the two byte counts
over the body's text answer as the walk over the parsed value does."""

from __future__ import annotations

import orjson
import pytest

from gateway.worker.door.rpc_checks import nests_deeper

pytestmark = pytest.mark.unit

BODIES = [
    b'{"jsonrpc":"2.0","id":1,"method":"murmur.WatchSession","params":{}}',
    b'{"a":[[[[1]]]]}',
    b'{"a":[[[1]]]}',
    b'{"a":{"b":{"c":{"d":{}}}}}',
    b'{"id":"[[[[{{{{","params":{}}',  # brackets in a string: not nesting
    b'[{"a":[{"b":[]}]},[],{}]',
    b'"not a container"',
    b"[]",
    b"{}",
]


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 32])
def test_the_count_over_the_text_answers_as_the_walk(body, limit):
    value = orjson.loads(body)
    assert nests_deeper(value, limit, body) == nests_deeper(value, limit)

