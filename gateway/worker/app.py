"""The worker's HTTP surface: its routes, each to the module that answers it.

`POST /` is every JSON-RPC method (dispatch.py: the door's checks in their order, the answers,
and the streams, opened by opening.py and served by hub.py); the agent card (card.py),
attachments (attachments.py), the probes (below: `/healthz` answers while the process
serves, `/readyz` while it can serve a stream) and the watch page (watch_page.py). Every
request first passes `Admission` (door/admission.py).
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.config.options import Config
from gateway.common.control import ControlClient
from gateway.common.metrics import Counters
from gateway.worker.access_log import AccessLog
from gateway.worker.attachments import AttachmentEndpoint
from gateway.worker.card import CardRoute
from gateway.worker.dispatch import RpcEndpoint, SinkFactory
from gateway.worker.door import Admission, http_error_handler
from gateway.worker.delivery.hub import Hub
from gateway.worker.watch_page import routes as watch_page_routes


def create_app(config: Config, hub: Hub, control: ControlClient, counters: Counters,
               sink_for: SinkFactory) -> Admission:
    access = AccessLog(config.access_log)
    rpc = RpcEndpoint(config, hub, control, counters, sink_for, access)
    access.client_of = rpc.limits.client  # the client behind trusted proxies, as the limits see it

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "serving", "pid": os.getpid()})

    async def readyz(request: Request) -> Response:
        ready = (hub.board.sequencer_pid and hub.board.upstream_connected
                 and not hub.board.session_closed and not hub.closing)
        return JSONResponse({"ready": bool(ready)}, 200 if ready else 503)

    app = Starlette(routes=[
        Route("/", rpc, methods=["POST"]),
        Route("/.well-known/agent-card.json", CardRoute(config, control, counters).respond, methods=["GET"]),
        Route("/attachments/{task_id}/{sha256}", AttachmentEndpoint(rpc.door, rpc.limits, control, counters)),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        *watch_page_routes(config),
    ], exception_handlers=dict.fromkeys((HTTPException, Exception), http_error_handler(counters)))
    app.router.redirect_slashes = False  # a redirect would echo the client's Host header
    admission = Admission(app, config, counters, access, rpc=rpc)
    hub.on_end = admission.stream_over
    return admission
