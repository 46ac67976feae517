"""The agent card this door serves: its own, or (upstream mode) the upstream's with this
gateway's address in every interface. `capabilities.extensions` lists the door, capsule and
stream extensions in that order, then the gateway's own (murgw.WatchOwnTasks), which upstream
mode does not serve and its card does not name."""

from __future__ import annotations

import email.utils
import hashlib
import time
from collections.abc import Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.config.options import Config
from gateway.common.control import ControlClient, Op
from gateway.common.metrics import Counters
from gateway.protocol import events
from gateway.protocol.errors import RpcError
from gateway.protocol.activation import WATCH_OWN_TASKS
from gateway.protocol.uris import A2A_VERSION, CAPSULE_URI, DOOR_URI, OWN_TASKS_URI, STREAM_URI
from gateway.worker.door.asgi_http import RETRY_AFTER
from gateway.worker.door.refusal import Refused
from gateway.tuning import CARD_CACHED_HOSTS, CARD_MAX_AGE_SECONDS


def own_url(config: Config, scope: Mapping) -> str:
    """`--public-url`, else the address the client reached (the connection's own socket
    address, never the `:0` of --bind). Never the request's Host: a card kept for its max-age
    by shared caches must not name whatever host a client wrote."""
    if config.public_url:
        return config.public_url.rstrip("/") + "/"
    host, port = scope.get("server") or config.bind
    # scope["scheme"] is "https" on a TLS connection (--certfile), whatever the HTTP version
    return "{}://{}:{:d}/".format(scope.get("scheme", "http"), f"[{host}]" if ":" in host else host, port)


def with_own_address(card: dict, scope: Mapping, config: Config) -> dict:
    """The upstream's card, every interface pointing at this gateway instead, the security
    fields saying what this gateway's own door asks (it enforces its own tokens), and not the
    gateway's own extension, which upstream mode does not serve."""
    interfaces = card.get("supportedInterfaces")
    if isinstance(interfaces, list):
        card = {**card, "supportedInterfaces": [
            {**i, "url": own_url(config, scope)} if isinstance(i, dict) else i for i in interfaces]}
    card = {k: v for k, v in card.items() if k not in ("securitySchemes", "securityRequirements")}
    return {**without_own_tasks(card), **door_fields(config)}


def without_own_tasks(card: dict) -> dict:
    """The card less OWN_TASKS_URI: an upstream (another gateway) may serve it, this gateway in
    upstream mode does not."""
    capabilities = card.get("capabilities")
    if not isinstance(capabilities, dict) or not isinstance(capabilities.get("extensions"), list):
        return card
    extensions = capabilities["extensions"]
    kept = [e for e in extensions if not (isinstance(e, dict) and e.get("uri") == OWN_TASKS_URI)]
    return {**card, "capabilities": {**capabilities, "extensions": kept}}


def door_fields(config: Config) -> dict:
    """The card's security fields: a bearer token when the door declares network.authentication."""
    if not config.authenticated:
        return {}
    return {"securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
            "securityRequirements": [{"schemes": {"bearer": {"list": []}}}]}


def agent_card(config: Config, scope: Mapping, extended: bool = False) -> dict:
    frames = list(events.PROCESS_FRAME_NAMES if config.inference.transport == "process" else events.FRAME_NAMES)
    streaming = config.lifecycle.task_acceptance != "none"
    card = {
        "name": "murmur-gateway",
        "description": "A murmur capsule served through murmur-gateway.",
        "supportedInterfaces": [{"url": own_url(config, scope), "protocolBinding": "JSONRPC",
                                 "protocolVersion": A2A_VERSION}],
        "version": "0.1.0",
        "capabilities": {
            "streaming": streaming,
            "pushNotifications": False,
            "extensions": [
                {"uri": DOOR_URI, "description": "The murmur door: session control and forgetSession.",
                 "required": False},
                {"uri": CAPSULE_URI, "description": "The murmur capsule's session and task model.",
                 "required": False},
                {"uri": STREAM_URI,
                 "description": "The murmur frames this capsule writes in addition to the A2A v1.0 events: "
                                "sent on SendStreamingMessage and SubscribeToTask when the request's "
                                "A2A-Extensions header names this URI, and always on murmur.WatchSession. "
                                "Each is carried in a StreamResponse under metadata keyed by this URI.",
                 "required": False, "params": {"frames": frames}},
                {"uri": OWN_TASKS_URI,
                 "description": f"{WATCH_OWN_TASKS}: murmur.WatchSession's stream of the caller's own tasks "
                                "only (those its token created), with the frames of no task; a token "
                                "needs this method's scope, never murmur.WatchSession's.",
                 "required": False, "params": {"methods": [WATCH_OWN_TASKS]}},
            ],
            "extendedAgentCard": config.authenticated,
        },
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "capsule", "name": "capsule", "description": "Runs tasks sent as messages.",
                    "tags": ["murmur"]}],
    }
    return {**card, **door_fields(config)}


class CardRoute:
    """`GET /.well-known/agent-card.json`, built once per Host header (the card names it) and
    kept for its max-age, with an ETag a client may revalidate with."""

    def __init__(self, config: Config, control: ControlClient, counters: Counters):
        self.config, self.control, self.counters = config, control, counters
        self.cache: dict[str, tuple[bytes, str, str, float]] = {}

    async def _build(self, request: Request) -> bytes | Response:
        if not self.config.upstream:
            return orjson.dumps(agent_card(self.config, request.scope))
        try:
            found = await self.control.call(Op.CARD)
        except (RpcError, ConnectionError) as exc:
            return Refused(503, f"the upstream's agent card is not available: {exc}", [RETRY_AFTER],
                           counted=False).response(self.counters)
        return orjson.dumps(with_own_address(found, request.scope, self.config))

    async def respond(self, request: Request) -> Response:
        cache, host = self.cache, request.headers.get("host", "")
        if host in cache and time.monotonic() - cache[host][3] > CARD_MAX_AGE_SECONDS:
            del cache[host]  # an upstream's card may change: read it again after max-age
        if host not in cache:
            if len(cache) > CARD_CACHED_HOSTS:
                cache.clear()
            body = await self._build(request)
            if isinstance(body, Response):
                return body
            cache[host] = (body, f'"{hashlib.sha256(body).hexdigest()[:32]}"',
                           email.utils.formatdate(usegmt=True), time.monotonic())
        body, etag, built, _ = cache[host]
        headers = {"cache-control": f"public, max-age={CARD_MAX_AGE_SECONDS}", "etag": etag, "last-modified": built,
                   "vary": "host"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type="application/json", headers=headers)
