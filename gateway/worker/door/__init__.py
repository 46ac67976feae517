"""The door: what every request must pass, one module a concept.

- `admission`: the worker's open-request limit (503), the head limits (431), the probes'
  own bound, and no WebSocket (403), before any route;
- `auth`: who is asking (bearer tokens as sha256, scopes) and the `Caller` that makes;
- `jwt/`: a JWT bearer token verified, and the rule its claims make;
- `refusal`: `Refused`, and `refuse`, the one way a refusal leaves (count, then send);
- `head`: what makes a request head ambiguous (smuggling, two Authorization headers), pure;
- `rpc_checks`: what a JSON-RPC request on `POST /` must be (content type, id, depth, no member twice);
- `error_handler`: Starlette's own refusals (404, 405, a bug's 500) made the door's;
- `request_head`: the one view of a request's head every check reads (headers read once);
- `limits` and `client_address`: the per-client and per-token limits, and who the client is
  behind trusted proxies;
- `asgi_http`: sending a whole answer over raw ASGI.

The names the worker's app uses are gathered here.
"""

from gateway.common.control import Caller
from gateway.worker.door.admission import PROBE_PATHS, PROBES_IN_FLIGHT, Admission
from gateway.worker.door.asgi_http import BODY_KEY, CLOSE, JSON_HEAD, NOSNIFF, RETRY_AFTER, respond, respond_bytes
from gateway.worker.door.auth import Door
from gateway.worker.door.error_handler import http_error_handler
from gateway.worker.door.refusal import INTERNAL_REFUSAL, Refused, refuse
from gateway.worker.door.request_head import HEAD_KEY, head_of
from gateway.worker.door.rpc_checks import (duplicate_member, is_json_content_type, nests_deeper, rpc_id_of,
                                            rpc_id_problem)

__all__ = ["BODY_KEY", "CLOSE", "HEAD_KEY", "INTERNAL_REFUSAL", "JSON_HEAD", "NOSNIFF", "PROBES_IN_FLIGHT",
           "PROBE_PATHS", "RETRY_AFTER", "Admission", "Caller", "Door", "Refused", "duplicate_member", "head_of",
           "http_error_handler", "is_json_content_type", "nests_deeper", "refuse", "respond",
           "respond_bytes", "rpc_id_of", "rpc_id_problem"]
