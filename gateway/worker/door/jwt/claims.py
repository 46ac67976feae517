"""A JWT's payload, read strictly: what its claims must be before the door takes its rule.

The payload is the client's: its signature says a key signed it, not that it is sound. So it
is read here with no leniency, as the door reads a JSON-RPC body: JSON that orjson parses
(numbers out of a double's range, NaN and lone surrogates are not JSON it takes: `malformed`),
one object naming no member twice (`{"sub":"a","sub":"b"}` is neither: `claims`, as a
duplicate JSON-RPC member is -32600), `exp` (required), `nbf` and `iat` JSON numbers within
`TIMES` (RFC 7519 NumericDate; a string is refused: `claims`), `sub` (required) a string of 1
to `JWT_MAX_SUBJECT` characters, `scope` a string, `max_streams` a whole number, `iss` a string,
`aud` a string or an array of strings. Then the checks in time and of the table (no leeway):
`exp` past is `expired`; `nbf` or `iat` ahead is `not_yet_valid`; `iss` other than the
configured issuer `issuer`; `aud` not naming the configured audience, or naming one where none
is configured (RFC 7519 4.1.3), `audience`. Each answer is a word of
gateway/common/metrics.py's `TOKEN_PROBLEMS`, for the operator; the client's 401 is the same
for all (door/auth.py).
"""

from __future__ import annotations

import dataclasses
import json

import orjson

from gateway.config.options import SCOPES, TokenRule
from gateway.tuning import JWT_MAX_SCOPE_WORDS, JWT_MAX_SUBJECT

TIMES = (0, 253402300799)  # 1970 to 9999-12-31T23:59:59Z: a NumericDate a clock can reach
TIME_CLAIMS = ("exp", "nbf", "iat")


@dataclasses.dataclass(frozen=True)
class JwtRule(TokenRule):
    """The rule a verified JWT makes: `sha256` is empty (no digest to find it by again, and
    none to find it among static tokens), `expires` its `exp`."""


class TokenProblem(Exception):
    """Why a token does not open the door: `problem` (a word of `TOKEN_PROBLEMS`) and, for
    the operator's debug line, `detail`."""

    def __init__(self, problem: str, detail: str):
        super().__init__(detail)
        self.problem, self.detail = problem, detail


def claims_of(payload: bytes) -> dict:
    """The payload as one JSON object, every claim the door reads of the right type; raises
    TokenProblem."""
    try:
        claims = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise TokenProblem("malformed", f"the payload is not JSON orjson takes: {exc}") from None
    if not isinstance(claims, dict):
        raise TokenProblem("malformed", "the payload is not a JSON object")
    if len(json.loads(payload, object_pairs_hook=list)) != len(claims):
        raise TokenProblem("claims", "the payload names a member more than once")
    for name in TIME_CLAIMS:
        if name in claims:
            value = claims[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not TIMES[0] <= value <= TIMES[1]:
                raise TokenProblem("claims", f"{name} is not a NumericDate within {TIMES[0]}..{TIMES[1]}")
    for name in ("exp", "sub"):
        if name not in claims:
            raise TokenProblem("claims", f"no {name}")
    subject = claims["sub"]
    if not isinstance(subject, str) or not 0 < len(subject) <= JWT_MAX_SUBJECT:
        raise TokenProblem("claims", f"sub is not a string of 1 to {JWT_MAX_SUBJECT} characters")
    if not isinstance(claims.get("scope", ""), str) or not isinstance(claims.get("iss", ""), str):
        raise TokenProblem("claims", "scope or iss is not a string")
    max_streams = claims.get("max_streams", 0)
    if isinstance(max_streams, bool) or not isinstance(max_streams, int) or not 0 <= max_streams < 1 << 31:
        raise TokenProblem("claims", "max_streams is not a whole number below 2**31")
    audience = claims.get("aud")
    if audience is not None and not isinstance(audience, str) and not (
            isinstance(audience, list) and all(isinstance(a, str) for a in audience)):
        raise TokenProblem("claims", "aud is not a string or an array of strings")
    return claims


def check(claims: dict, now: float, issuer: str, audience: str) -> None:
    """The checks in time and against the table; raises TokenProblem."""
    if claims["exp"] <= now:
        raise TokenProblem("expired", f"exp {claims['exp']} is past")
    for name in ("nbf", "iat"):
        if claims.get(name, 0) > now:
            raise TokenProblem("not_yet_valid", f"{name} {claims[name]} is ahead")
    if issuer and claims.get("iss") != issuer:
        raise TokenProblem("issuer", "iss is not the configured issuer")
    named = claims.get("aud") or []
    named = [named] if isinstance(named, str) else named
    if audience and audience not in named:
        raise TokenProblem("audience", "aud does not name the configured audience")
    if not audience and named:
        raise TokenProblem("audience", "aud names an audience where none is configured")


def rule_of(claims: dict) -> JwtRule:
    """The rule a verified token's claims make: `sub` the caller, the scopes this gateway
    serves (others ignored: a token minted for several services may name theirs)."""
    scopes = tuple(word for word in claims.get("scope", "").split()[:JWT_MAX_SCOPE_WORDS] if word in SCOPES)
    return JwtRule(claims["sub"], "", scopes, claims.get("max_streams", 0), float(claims["exp"]))
