"""`GET /watch`: the live watch page, and its script and style sheet (gateway/static/).

The page is static: the browser opens `murmur.WatchSession` itself with a streaming fetch to
`POST /` on the same origin, so it passes the door like any other client (its token, when
the door declares authentication, is typed into the page and kept in memory only). Nothing
is loaded from anywhere else. Every response carries a Content-Security-Policy that allows
only this origin's script, style sheet and fetches, and no inline script or style at all:
task content is untrusted, and the script only ever sets it as text, but should something
ever reach the page as markup, it still cannot run. `--watch-page off` removes the routes.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.config.options import Config
from gateway.protocol.uris import STREAM_URI

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                           "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"content-security-policy": CONTENT_SECURITY_POLICY, "x-content-type-options": "nosniff",
           "referrer-policy": "no-referrer", "cache-control": "no-cache", "x-frame-options": "DENY"}
FILES = (("/watch", "watch.html", "text/html; charset=utf-8"),
         ("/watch/app.js", "watch.js", "text/javascript; charset=utf-8"),
         ("/watch/app.css", "watch.css", "text/css; charset=utf-8"))


def page_bytes(name: str, config: Config) -> bytes:
    text = resources.files("gateway").joinpath("static", name).read_text(encoding="utf-8")
    if name == "watch.html":
        auth = "required" if config.authenticated else "none"
        text = text.replace("{stream_uri}", STREAM_URI).replace("{auth}", auth)
    return text.encode()


def routes(config: Config) -> list[Route]:
    """The page's three routes (read once, at start), or none with --watch-page off."""
    if not config.watch_page:
        return []

    def serve(body: bytes, media_type: str):
        async def endpoint(request: Request) -> Response:
            return Response(body, media_type=media_type, headers=HEADERS)
        return endpoint

    return [Route(path, serve(page_bytes(name, config), media_type), methods=["GET"])
            for path, name, media_type in FILES]
