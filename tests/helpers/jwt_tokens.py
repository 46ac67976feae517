"""Keys and JWTs for the tests of `[network.authentication.jwt]`: minted here as an
application's backend would, with PyJWT, or by hand where PyJWT refuses to make the attack
(`alg: none`, an HS256 token keyed with the gateway's public key)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from pathlib import Path

import jwt
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

AUDIENCE = "murmur-gateway"
ISSUER = "https://app.example"
WATCH = "murmur.WatchSession"


class KeyPair:
    """An ES256 (P-256) key pair: the private key mints, the PEM public key (or its JWK, named
    `kid`) verifies. With a `kid`, each token it mints names it in its header."""

    def __init__(self, kid: str | None = None):
        self.kid = kid
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.public_pem = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        self.private_pem = self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())

    def mint(self, sub: str = "app-user", scope: str = WATCH, expires_in: float = 300, **claims) -> str:
        """A token as the application would mint it; `claims` add or replace (None drops one)."""
        body = {"sub": sub, "scope": scope, "exp": int(time.time() + expires_in), "iss": ISSUER,
                "aud": AUDIENCE, **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, self.private, algorithm="ES256",
                          headers=self.header())

    def header(self) -> dict | None:
        return {"kid": self.kid} if self.kid is not None else None

    def signed(self, payload: bytes) -> str:
        """A token whose payload is `payload`, byte for byte, signed (a payload PyJWT would not
        write: a member twice, a number out of range)."""
        return jwt.PyJWS().encode(payload, self.private, algorithm="ES256", headers=self.header())

    def jwk(self) -> dict:
        """The public key as a JWK of a JWKS document, named by `kid`."""
        return {**orjson.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key())),
                "kid": self.kid, "use": "sig"}


def jwks(*pairs: KeyPair) -> bytes:
    """A JWKS document publishing the public keys of `pairs`."""
    return orjson.dumps({"keys": [pair.jwk() for pair in pairs]})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header: dict, claims: dict, key: bytes | None) -> str:
    """A compact JWS signed with HMAC-SHA256 over `key`, or with no signature (None)."""
    signing_input = f"{_b64(orjson.dumps(header))}.{_b64(orjson.dumps(claims))}"
    signature = b"" if key is None else hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def standard_claims(expires_in: float = 300) -> dict:
    return {"sub": "app-user", "scope": WATCH, "exp": int(time.time() + expires_in), "iss": ISSUER,
            "aud": AUDIENCE}


def jwt_table(key_file: Path, algorithms: str = '["ES256"]', issuer: bool = True, audience: bool = True) -> str:
    return (f'[network.authentication.jwt]\nkey_file = "{key_file}"\nalgorithms = {algorithms}\n'
            + (f'issuer = "{ISSUER}"\n' if issuer else "") + (f'audience = "{AUDIENCE}"\n' if audience else ""))

