"""Who is asking: a bearer token's rule, and the `Caller` its scopes make.

Static tokens are kept only as sha256 and compared in constant time; a token's `name` owns
the tasks it creates, so a rotated token keeps them. A token past its `expires` is refused as
an unknown one. With `[network.authentication.jwt]`, a token no static entry matches is
verified as a JWT (door/jwt/): its `sub` is the rule's name, its `exp` the rule's expiry.
A JWT whose `sub` is a static token's name is refused as an unknown one: else it would own,
and see, that token's tasks and draw on its stream places (one warning line names the clash).

Every such 401 is byte for byte an unknown token's; why it was refused is the operator's
alone: the refusal carries `token_problem` (gateway/common/metrics.py's `TOKEN_PROBLEMS`) to
the access line, counts in `tokens_refused{problem}`, and a debug line says what the check
found (never the token).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import TYPE_CHECKING, Callable

from gateway import logs
from gateway.config.options import Config, TokenRule
from gateway.common.control import EVERY_TASK, Caller
from gateway.common.metrics import Counters
from gateway.protocol.activation import WATCH_SESSION
from gateway.worker.door.jwt import JwtRule, TokenProblem, verifier_for
from gateway.worker.door.refusal import Refused

if TYPE_CHECKING:  # a name for the annotations; PyJWT loads only where JWTs are taken (`verifier_for`)
    from gateway.worker.door.jwt.verifier import JwtVerifier

log = logs.get("worker")
SUB_CLASH = "a JWT's sub is a static token's name; refused as an unknown token"


def unknown_token(token_problem: str | None = None) -> Refused:
    """One 401 for every token that does not open the door: unknown, expired, or a JWT that
    fails any check (its body says nothing of which; `token_problem` is the operator's)."""
    return Refused(401, "the bearer token is not valid for this door",
                   [(b"www-authenticate", b'Bearer error="invalid_token"')], why="unknown token",
                   token_problem=token_problem)


class Door:
    """`[network.authentication]`: bearer tokens kept as sha256, compared in constant time.

    Two steps, because the first needs only the request head: `authenticate` finds the token's
    rule (401 when there is none), `authorize` checks its scope for the method (403). A task
    belongs to the name of the rule whose token created it.
    """

    def __init__(self, config: Config, counters: Counters, keys_stale: Callable[[], None] = lambda: None):
        self.counters = counters
        self.keys_stale = keys_stale  # asks the sequencer to fetch a `jwks_url`'s set again
        self.apply(config)

    def apply(self, config: Config) -> None:
        """The tokens in force (at start, and at each reload)."""
        self.rules = config.tokens
        self.static_names = frozenset(rule.name for rule in config.tokens)
        self.jwt: JwtVerifier | None = None
        if config.jwt is not None:  # PyJWT and cryptography load only where JWTs are taken
            self.jwt = verifier_for(config.jwt, self.counters)
        # whether a token may carry `max_streams` (a JWT's claim may): its streams ask the sequencer
        self.counts_streams = self.jwt is not None or any(rule.max_streams for rule in self.rules)

    @property
    def public(self) -> bool:
        return not self.rules and self.jwt is None

    def authenticate(self, authorization: str | None) -> TokenRule | None:
        """The rule the bearer token matches; None on a public door."""
        if self.public:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(401, "this door requires Authorization: Bearer <token>",
                          [(b"www-authenticate", b"Bearer")], why="no token")
        token = token.strip()
        digest = hashlib.sha256(token.encode()).hexdigest()
        match = None
        for rule in self.rules:  # every rule is compared, so timing says nothing of which
            if hmac.compare_digest(rule.sha256, digest):
                match = rule
        if match is None and self.jwt is not None:
            match = self._verified(self.jwt, token, digest)
        if match is None:
            raise unknown_token()
        if match.expires is not None and time.time() >= match.expires:
            raise self._refused("expired", "past its expires")
        return match

    def _verified(self, verifier: JwtVerifier, token: str, digest: str) -> TokenRule:
        try:
            rule = verifier.verify(token, digest)
        except TokenProblem as problem:
            if problem.problem == "unknown_key" and verifier.settings.jwks_url:
                self.keys_stale()  # the set may have changed (the sequencer bounds its fetches)
            raise self._refused(problem.problem, problem.detail) from None
        if rule.name in self.static_names:
            log.warning(SUB_CLASH, sub=rule.name)
            raise self._refused("claims", SUB_CLASH)
        return rule

    def _refused(self, token_problem: str, detail: str) -> Refused:
        """The unknown token's 401 for a token refused for `token_problem`, counted and told."""
        self.counters.add("tokens_refused", label=token_problem)
        log.debug("bearer token refused", token_problem=token_problem, detail=detail)
        return unknown_token(token_problem)

    def authorize(self, rule: TokenRule | None, method: str) -> Caller:
        """The caller `rule` makes for `method` (a public door's sees every task); 403 when
        its token lacks the method's scope."""
        if rule is None:
            return EVERY_TASK
        if "*" not in rule.scopes and method not in rule.scopes:
            raise Refused(403, f"the token does not hold the {method} scope")
        return Caller(rule.name, "*" in rule.scopes or WATCH_SESSION in rule.scopes)

    def now_in_force(self, rule: TokenRule) -> TokenRule | None:
        """The rule that admits the token behind `rule` (a stream opened under it) now (a
        reload may have replaced the rules): a static token's entry of the same digest, a
        JWT's own rule while the door still takes JWTs (a key reloaded leaves the tokens it
        verified to their `exp`, as a reloaded certificate leaves open connections); None."""
        if isinstance(rule, JwtRule):
            return rule if self.jwt is not None else None
        return next((r for r in self.rules if hmac.compare_digest(r.sha256, rule.sha256)), None)

    def still_admits(self, rule: TokenRule, method: str) -> bool:
        """Whether the token behind `rule` still holds `method`'s scope in the rules now in force."""
        now = self.now_in_force(rule)
        return now is not None and ("*" in now.scopes or method in now.scopes)
