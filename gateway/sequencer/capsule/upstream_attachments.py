"""Attachment bytes the upstream serves, fetched as a client would fetch them, and kept.

The gateway serves an attachment only for the (task, sha256) the upstream itself serves:
the cache's key is that pair, so an entry never answers for another task.
"""

from __future__ import annotations

import collections
import urllib.parse

from gateway.sequencer.capsule.upstream_errors import CREDENTIAL_STATUSES, credentials_refused, unreachable
from gateway.sequencer.capsule.upstream_http import Origin, UpstreamError, request


class AttachmentCache:
    """Attachment bytes the upstream served, keyed by (task id, sha256): an entry proves the
    upstream served that hash for that task, never for another. Bounded in bytes, least
    recently used first out."""

    def __init__(self, limit_bytes: int):
        self.limit = limit_bytes
        self._entries: collections.OrderedDict[tuple[str, str], tuple[str, bytes]] = collections.OrderedDict()
        self._bytes = 0

    def get(self, task_id: str, sha256: str) -> tuple[str, bytes] | None:
        entry = self._entries.get((task_id, sha256))
        if entry is not None:
            self._entries.move_to_end((task_id, sha256))
        return entry

    def put(self, task_id: str, sha256: str, entry: tuple[str, bytes]) -> None:
        old = self._entries.pop((task_id, sha256), None)
        self._bytes += len(entry[1]) - (len(old[1]) if old else 0)
        self._entries[(task_id, sha256)] = entry
        while self._bytes > self.limit and len(self._entries) > 1:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= len(dropped)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


async def fetch_attachment(origin: Origin, headers: list[tuple[str, str]], task_id: str,
                           sha256: str) -> tuple[str, bytes] | None:
    """(media type, bytes) as the upstream serves them, or None where it answers otherwise;
    RpcError when it cannot be asked (not "no such attachment": the door answers 503). The
    task id is percent-encoded: the upstream reads the very id the client sent."""
    path = f"/attachments/{urllib.parse.quote(task_id, safe='')}/{urllib.parse.quote(sha256, safe='')}"
    try:
        status, answer_headers, body = await request(origin, "GET", path, headers)
    except UpstreamError as exc:
        raise unreachable("attachment", exc) from None
    if status in CREDENTIAL_STATUSES:
        raise credentials_refused("attachment", status, body)
    if status != 200:
        return None
    return answer_headers.get("content-type", "application/octet-stream"), body
