"""JWT bearer tokens at the door, in one place: a token no static entry matches is verified
here (`[network.authentication.jwt]`), and the rule its claims make is the door's as a
static token's entry would be.

- `claims`: the payload read strictly and checked in time and against the table; `JwtRule`,
  and `TokenProblem`, the word the operator is told;
- `verifier`: `JwtVerifier`, the key picked by `kid`, the signature checked with PyJWT, the
  tokens that verified kept until their `exp`.

PyJWT and `cryptography` load only where a door takes JWTs (`verifier_for`, at start and at
each reload), never in a worker whose door has no JWT table (about 11 MiB a process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.common.metrics import Counters
from gateway.config.options import Jwt
from gateway.worker.door.jwt.claims import JwtRule, TokenProblem

if TYPE_CHECKING:
    from gateway.worker.door.jwt.verifier import JwtVerifier

__all__ = ["JwtRule", "TokenProblem", "verifier_for"]


def verifier_for(settings: Jwt, counters: Counters) -> JwtVerifier:
    """The verifier of one JWT table: its keys prepared once (PyJWT is imported here first)."""
    from gateway.worker.door.jwt.verifier import JwtVerifier

    return JwtVerifier(settings, counters)
