"""A JWT bearer token, verified once: the rule it makes, as a static token's entry would be.

The token picks its key from the table's key set by its header's `kid` (a PEM or secret key
file has one key, and reads no `kid`; a JWKS's key is the one of that `kid`: none is
`unknown_key`). PyJWT's JWS checks the signature with that key and only the algorithms both
the table and the key allow (never the header's alone, never `none`: `algorithm`; a bad
signature: `signature`; a token that does not parse as a JWS: `malformed`). Then the payload
is read strictly and checked (claims.py). Any failure raises `TokenProblem`: the door
answers it exactly as an unknown token, and tells the operator its word.

A token that verified is kept by its sha256 (the digest the door computed to look for a
static token) until its `exp`, at most `tuning.JWT_VERIFIED_KEPT` a worker, the oldest going
first: a reconnect, or a page's next call, costs a dictionary lookup instead of a signature
(an ES256 check is most of a JWT opening's CPU). A kept token past its `exp` is refused as
`expired`. The verifier is made anew at each reload (door/auth.py), so what it keeps never
outlives the keys that verified it. `jwt_verifications_total` counts the signatures checked.
"""

from __future__ import annotations

import time

import jwt

from gateway.common.metrics import Counters
from gateway.config.jwt.keys import key_set
from gateway.config.options import Jwt
from gateway.tuning import JWT_VERIFIED_KEPT
from gateway.worker.door.jwt.claims import JwtRule, TokenProblem, check, claims_of, rule_of

JWS = jwt.PyJWS(options={"verify_signature": True})


class JwtVerifier:
    """One `[network.authentication.jwt]` table: its keys prepared once, the tokens they verified."""

    def __init__(self, settings: Jwt, counters: Counters):
        self.settings, self.counters = settings, counters
        self.keys = key_set(settings.key, settings.algorithms)
        self.kept: dict[str, tuple[float, JwtRule]] = {}  # by the token's sha256 hex: (its exp, its rule)

    def verify(self, token: str, digest: str) -> JwtRule:
        """The rule of `token` (whose sha256 hex is `digest`); raises TokenProblem."""
        kept = self.kept.get(digest)
        if kept is None:
            rule, expires = self._verify(token)
            if len(self.kept) >= JWT_VERIFIED_KEPT:
                del self.kept[next(iter(self.kept))]  # the oldest
            self.kept[digest] = (expires, rule)
            return rule
        if time.time() >= kept[0]:
            del self.kept[digest]
            raise TokenProblem("expired", "exp is past (a token verified before)")
        return kept[1]

    def _verify(self, token: str) -> tuple[JwtRule, float]:
        try:
            header = JWS.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenProblem("malformed", str(exc)) from None
        key = self.keys.pick(header.get("kid"))
        if key is None:
            raise TokenProblem("unknown_key", "its kid names no key of the set")
        self.counters.add("jwt_verifications")
        try:
            payload = JWS.decode_complete(token, key.key, algorithms=list(key.algorithms))["payload"]
        except jwt.InvalidAlgorithmError as exc:
            raise TokenProblem("algorithm", str(exc)) from None
        except jwt.InvalidSignatureError as exc:
            raise TokenProblem("signature", str(exc)) from None
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise TokenProblem("malformed", str(exc) or type(exc).__name__) from None
        claims = claims_of(payload)
        check(claims, time.time(), self.settings.issuer, self.settings.audience)
        return rule_of(claims), float(claims["exp"])
