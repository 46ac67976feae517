"""`jwks_url`: the JWT keys a URL publishes, fetched by the sequencer and handed to the workers.

Workers verify; one process fetches, so an identity provider sees one gateway, not one
client per worker, and every worker verifies with the same keys. The sequencer already hands
the workers reloaded settings (the `config_generation` word, gateway/worker/reload.py), so a
fetched set travels the same way: the JWT table's `key` becomes the set's text, and each
worker makes its keys of it as after a SIGHUP (its verified tokens forgotten with the old
keys).

When it fetches: at start, every `tuning.JWKS_REFRESH_SECONDS`, after a reload that names a
`jwks_url`, and when a worker met a token whose `kid` names no key it has (`Op.JWKS_STALE`),
then at most once per `tuning.JWKS_STALE_SECONDS` (a flood of made-up `kid`s costs the
provider one fetch per period). Each fetch is bounded: HTTPS verified against the system's
CAs (`SSL_CERT_FILE` may name others), `tuning.JWKS_FETCH_SECONDS` in all, at most a key
file's `tuning.MAX_KEY_BYTES`, checked by gateway/config/jwt/keys.py's `key_set` as a key file
is. A fetch that fails, or a set that does not check, changes nothing: the keys in use stay,
and a warning says why. A set that differs from the one in use is announced with its `kid`s.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from typing import Callable

from gateway import logs
from gateway.config.jwt import keys as jwt_keys
from gateway.sequencer.capsule.upstream_http import Origin, UpstreamError, request
from gateway.tuning import JWKS_FETCH_SECONDS, JWKS_REFRESH_SECONDS, JWKS_STALE_SECONDS, MAX_KEY_BYTES

log = logs.get("sequencer")
ACCEPT = [("Accept", "application/jwk-set+json, application/json")]


class JwksFetcher:
    """Fetches the set `url` publishes whenever it is due, and hands each new one to `publish`."""

    def __init__(self, publish: Callable[[str, str], None]):
        self.publish = publish  # (url, the set's text) -> the workers get it
        self.url, self.algorithms = "", ()
        self.text = ""  # the set in use
        self.fetched_at = -JWKS_STALE_SECONDS  # monotonic
        self.due = asyncio.Event()

    def follow(self, jwt: dict | None) -> str:
        """Take the JWT table now in force (plain, as the settings carry it); a new URL is
        fetched at once. Answers the set in use for that table ("" when none yet)."""
        url = (jwt or {}).get("jwks_url") or ""
        if url != self.url:
            self.url, self.text = url, ""
        self.algorithms = tuple((jwt or {}).get("algorithms") or ())
        if url:
            self.due.set()
        return self.text

    def stale(self) -> None:
        """A worker met a `kid` no key of the set names: fetch again, when the rate allows."""
        if self.url:
            self.due.set()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.due.wait(), JWKS_REFRESH_SECONDS)
            except TimeoutError:
                pass
            wait = self.fetched_at + JWKS_STALE_SECONDS - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.due.clear()
            if self.url:
                await self.fetch()

    async def fetch(self) -> None:
        url = self.url
        self.fetched_at = time.monotonic()
        try:
            text = await self._get(url)
            if not jwt_keys.is_key_set(text):
                raise ValueError('the answer is not a JWKS document ({"keys": [...]})')
            jwt_keys.key_set(text, self.algorithms)
        except (UpstreamError, ValueError) as exc:
            log.warning("JWT keys not fetched; the keys in use stay", jwks_url=url, problem=str(exc),
                        jwt_keys=list(jwt_keys.key_names(self.text)) if self.text else [])
            return
        if url == self.url and text != self.text:
            self.text = text
            self.publish(url, text)
            log.info("JWT keys fetched", jwks_url=url, jwt_keys=list(jwt_keys.key_names(text)))

    @staticmethod
    async def _get(url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        status, _headers, body = await request(Origin(url, None), "GET", target, ACCEPT,
                                               timeout=JWKS_FETCH_SECONDS, limit=MAX_KEY_BYTES)
        if status != 200:
            raise UpstreamError(f"answered {status}")
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the set is not UTF-8 text") from None
