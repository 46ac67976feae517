"""How the door compares a presented token with the configured ones (gateway/worker/door/auth.py):
only digests are held, and every rule is compared, so timing says nothing of which matched."""

from __future__ import annotations

import hashlib
import hmac
from types import SimpleNamespace

import pytest

from gateway.config.options import TokenRule
from gateway.worker.door.auth import Door
from gateway.worker.door.refusal import Refused

pytestmark = pytest.mark.unit

RULES = [TokenRule(name, hashlib.sha256(token.encode()).hexdigest(), ("*",))
         for name, token in (("alice", "tok-a"), ("bob", "tok-b"), ("carol", "tok-c"))]


@pytest.mark.parametrize("token", ["tok-a", "tok-c", "tok-unknown"])
def test_security_claim_every_rule_is_compared_in_constant_time(monkeypatch, token):
    """[claim: constant-time-tokens] The first rule matching, the last, or none: the presented
    token's sha256 meets every rule's digest through `hmac.compare_digest`, never `==`, and
    the token itself is compared with nothing."""
    compared = []
    real = hmac.compare_digest

    def counting(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    door = Door(SimpleNamespace(tokens=RULES, jwt=None), counters=None)
    try:
        rule = door.authenticate(f"Bearer {token}")
    except Refused as refusal:
        assert refusal.status == 401
        rule = None
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert compared == [(r.sha256, digest) for r in RULES]
    assert (rule.name if rule else None) == {"tok-a": "alice", "tok-c": "carol"}.get(token)
