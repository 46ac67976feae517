"""A JWT bearer token, verified: the rule it makes, as a static token's entry would be.

PyJWT checks the signature with the configured key and only the configured algorithms
(never the header's, never `none`), `exp` (required), `nbf`, and `iss` and `aud` when the
table names them (a token that carries `aud` where none is configured is refused, RFC 7519
4.1.3); no leeway. Then the claims the door reads, each bounded, since the token is the
client's: `sub` the caller (1 to `MAX_SUBJECT` characters), `scope` the space-separated
methods or `*` (others ignored: a token minted for several services may name theirs),
`max_streams` a whole number. Any failure is `None`: the door answers it exactly as an
unknown token.
"""

from __future__ import annotations

import jwt

from gateway.config.options import Jwt
from gateway.config.authentication import SCOPES, JwtRule
from gateway.config.jwt_keys import verifying_key

MAX_SUBJECT = 256
MAX_SCOPE_WORDS = 64
REQUIRED = ["exp", "sub"]


class JwtVerifier:
    """One `[network.authentication.jwt]` table, its key prepared once per algorithm."""

    def __init__(self, settings: Jwt):
        self.settings = settings
        # One key fits every configured algorithm (config checked it); PyJWT takes the one of
        # the token's algorithm, among those allowed.
        self.key = verifying_key(settings.key, settings.algorithms[0])
        self.algorithms = list(settings.algorithms)

    def verify(self, token: str) -> JwtRule | None:
        settings = self.settings
        try:
            claims = jwt.decode(token, self.key, algorithms=self.algorithms, leeway=0,
                                issuer=settings.issuer or None, audience=settings.audience or None,
                                options={"require": REQUIRED})
        except (jwt.PyJWTError, ValueError, TypeError):
            return None
        subject, scope, max_streams = claims.get("sub"), claims.get("scope", ""), claims.get("max_streams", 0)
        if not isinstance(subject, str) or not 0 < len(subject) <= MAX_SUBJECT or not isinstance(scope, str):
            return None
        if isinstance(max_streams, bool) or not isinstance(max_streams, int) or not 0 <= max_streams < 1 << 31:
            return None
        scopes = tuple(word for word in scope.split()[:MAX_SCOPE_WORDS] if word in SCOPES)
        return JwtRule(subject, "", scopes, max_streams, float(claims["exp"]))
