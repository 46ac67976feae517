"""`/attachments/<task-id>/<sha256>` (spec "Attachment bytes"), reached by every method so
each gets the spec's row. The bytes live in the sequencer's task registry (or, upstream, a
cache keyed by task and hash): no file system path is ever formed from the request."""

from __future__ import annotations

import base64
import re

from gateway.common.control import ControlClient, Op
from gateway.common.metrics import Counters
from gateway.protocol.activation import GET_TASK
from gateway.protocol.errors import RpcError
from gateway.worker.access_log import exchange_of
from gateway.worker.door.asgi_http import NOSNIFF, RETRY_AFTER, respond_bytes
from gateway.worker.door.auth import Door
from gateway.worker.door.refusal import Refused, refuse
from gateway.worker.door.request_head import head_of
from gateway.worker.door.limits import ClientLimits

SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class AttachmentEndpoint:
    def __init__(self, door: Door, limits: ClientLimits, control: ControlClient, counters: Counters):
        self.door, self.limits, self.control, self.counters = door, limits, control, counters

    async def __call__(self, scope, receive, send) -> None:
        if scope["method"] != "GET":
            await respond_bytes(send, 405, b"", [(b"allow", b"GET"), NOSNIFF])
            return
        try:
            await self.limits.check_rate(scope)
            rule = self.door.authenticate(head_of(scope).get(b"authorization"))
            if rule is not None:
                exchange_of(scope).caller = rule.name
            caller = self.door.authorize(rule, GET_TASK)
        except Refused as refusal:
            exchange_of(scope).refused(refusal)
            await refuse(send, refusal, self.counters)
            return
        task_id, sha256 = scope["path_params"]["task_id"], scope["path_params"]["sha256"]
        found = None
        if SHA256_HEX.fullmatch(sha256):
            try:
                found = await self.control.call(Op.ATTACHMENT, task_id=task_id, sha256=sha256, **caller.params())
            except (ConnectionError, RpcError) as exc:  # the sequencer, or (upstream mode) the upstream
                message = str(exc) if isinstance(exc, RpcError) else "the sequencer is not reachable"
                await refuse(send, Refused(503, message, [RETRY_AFTER], counted=False), self.counters)
                return
        if found is None:
            await respond_bytes(send, 404, b"", [NOSNIFF])
            return
        await respond_bytes(send, 200, base64.b64decode(found["data"]),
                            [(b"content-type", found["mediaType"].encode()), NOSNIFF])
