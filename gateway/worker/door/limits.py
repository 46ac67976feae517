"""The door's per-client and per-token limits, as a worker applies them.

The counts live in the sequencer (gateway/sequencer/client_ledger.py), exact across workers; this asks
it, and only when a limit is set, so with every limit at 0 a request costs no call at all.

- `check_rate`: one request from the client's token bucket (--client-request-rate, -burst),
  for `POST /` and the attachment endpoint. Over it: 429, Retry-After the whole seconds
  until the bucket holds a request again.
- `hold_stream`: a place for a new stream under --max-streams-per-client and its token's
  `max_streams`, taken before anything streams. Over either: 429, Retry-After 1 (a place
  frees when any of those streams ends). `release` gives it back when the stream ends, at
  once and without waiting for an answer. A limit a reload sets counts the streams opened
  after it.

Every 429 is counted in murgw_requests_limited_total{limit=...}, as it is sent (`refuse`,
door/refusal.py). `apply` takes a reload's settings. The client is
`client_address.client_of` (trusted proxies), keyed by `client_key` (IPv4 /32, IPv6 /64).
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.config.options import Config, TokenRule
from gateway.config.found import request_burst
from gateway.common.control import ControlClient, Op
from gateway.worker.door.client_address import client_key, client_of
from gateway.worker.door.asgi_http import RETRY_AFTER
from gateway.worker.door.refusal import Refused

UNREACHABLE = "the sequencer is not reachable"


class Holding(NamedTuple):
    """The places one open stream holds: its client key and its token name (None: not counted)."""

    client: str | None
    token: str | None


class ClientLimits:
    def __init__(self, config: Config, control: ControlClient):
        self.control = control
        self.apply(config)

    def apply(self, config: Config) -> None:
        self.max_streams = config.max_streams_per_client
        self.rate = config.client_request_rate
        self.burst = request_burst(self.rate, config.client_request_burst)
        self.trusted = config.trusted_proxies

    def client(self, scope: dict) -> str:
        """The request's client under the trusted proxies now in force (the access log's too)."""
        return client_of(scope, self.trusted)

    def _key(self, scope: dict) -> str:
        return client_key(self.client(scope))

    @staticmethod
    def _limited(limit: str, detail: str, retry_after: int) -> Refused:
        return Refused(429, detail, [(b"retry-after", str(retry_after).encode())], limit=limit)

    async def check_rate(self, scope: dict) -> None:
        """Raises Refused (429) when the client's bucket is empty."""
        if not self.rate:
            return
        try:
            answer = await self.control.call(Op.TAKE, client=self._key(scope), rate=self.rate, burst=self.burst)
        except ConnectionError:
            raise Refused(503, UNREACHABLE, [RETRY_AFTER], counted=False) from None
        if answer["retry_after"]:
            raise self._limited("client_rate", f"this client sends more than {self.rate:g} requests a second "
                                               f"(a burst of {self.burst:g})", answer["retry_after"])

    async def hold_stream(self, scope: dict, rule: TokenRule | None) -> Holding | None:
        """The stream's places (None when no limit counts it); raises Refused (429) over one."""
        client = self._key(scope) if self.max_streams else None
        token = rule.name if rule is not None and rule.max_streams else None
        if client is None and token is None:
            return None
        token_limit = rule.max_streams if rule is not None and token else 0
        try:
            answer = await self.control.call(Op.ACQUIRE, client=client, client_limit=self.max_streams,
                                             token=token, token_limit=token_limit)
        except ConnectionError:
            raise Refused(503, UNREACHABLE, [RETRY_AFTER], counted=False) from None
        if answer["refused"] == "client_streams":
            raise self._limited("client_streams", f"this client has {self.max_streams} open streams, "
                                                  "as many as it may", 1)
        if answer["refused"] == "token_streams":
            raise self._limited("token_streams", f"the token has {token_limit} open streams, "
                                                 "as many as it may", 1)
        return Holding(client, token)

    def release(self, holding: Holding | None) -> None:
        if holding is not None:
            self.control.tell(Op.RELEASE, client=holding.client, token=holding.token)
