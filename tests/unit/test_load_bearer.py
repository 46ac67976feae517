"""The token a simulated user of the load kit sends (loadtest/bearer.py), read by the gateway's own
verifier: a static token as given, a JWT per user that the door's JwtVerifier takes (HS256 from
the secret file the gateway names, ES256 from the private key whose public half it holds), and
options that cannot work refused before a client starts."""

from __future__ import annotations

import hashlib

import argparse

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gateway.config.options import Jwt
from gateway.worker.door.jwt.verifier import JwtVerifier
from helpers.gateway_harness import Tally
from loadtest import bearer

pytestmark = pytest.mark.unit

SECRET = b"a-load-test-secret-of-at-least-32-bytes"


def door(tmp_path, *argv: str) -> bearer.Bearer:
    parser = argparse.ArgumentParser()
    bearer.add_options(parser)
    return bearer.from_args(parser.parse_args([arg.replace("TMP", str(tmp_path)) for arg in argv]))


def test_a_static_token_is_every_users_and_no_token_sends_no_header(tmp_path, monkeypatch):
    monkeypatch.delenv(bearer.ENV_TOKEN, raising=False)
    assert door(tmp_path, "--token", "t0k").header(7) == b"Authorization: Bearer t0k\r\n"
    (tmp_path / "token").write_text("from-a-file\nsecond line ignored\n")
    assert door(tmp_path, "--token-file", "TMP/token").token_for(1) == "from-a-file"
    assert door(tmp_path).header(1) == b"" and door(tmp_path).mode == "none"
    monkeypatch.setenv(bearer.ENV_TOKEN, "from-env")
    assert door(tmp_path).token_for(3) == "from-env"


def verify(verifier: JwtVerifier, token: str):
    return verifier.verify(token, hashlib.sha256(token.encode()).hexdigest())


def test_each_user_gets_a_jwt_of_its_own_that_the_door_verifies(tmp_path):
    (tmp_path / "hs.secret").write_bytes(SECRET + b"\n")
    minted = door(tmp_path, "--jwt-key", "TMP/hs.secret", "--jwt-scope", "murmur.WatchSession",
                  "--jwt-audience", "murmur-gateway")
    verifier = JwtVerifier(Jwt(algorithms=("HS256",), audience="murmur-gateway", key=SECRET.decode("latin-1")), Tally())
    first, second = verify(verifier, minted.token_for(1)), verify(verifier, minted.token_for(2))
    assert (first.name, second.name) == ("load-1", "load-2") and first.scopes == ("murmur.WatchSession",)
    assert minted.mode == "jwt"


def test_an_es256_jwt_is_signed_with_the_private_key_the_gateway_holds_the_public_half_of(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "app.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    minted = door(tmp_path, "--jwt-key", "TMP/app.pem", "--jwt-algorithm", "ES256", "--jwt-issuer", "https://app")
    rule = verify(JwtVerifier(Jwt(algorithms=("ES256",), issuer="https://app", key=public),
                       Tally()), minted.token_for(9))
    assert rule is not None and rule.name == "load-9" and rule.scopes == ("*",)


@pytest.mark.parametrize("argv, why", [
    (["--token", "a", "--jwt-key", "TMP/hs.secret"], "give one"),
    (["--token-file", "TMP/absent"], "No such file"),
    (["--jwt-key", "TMP/hs.secret", "--jwt-algorithm", "ES256"], "not a PEM private key"),
])
def test_options_that_cannot_work_stop_before_any_client(tmp_path, argv, why):
    (tmp_path / "hs.secret").write_bytes(SECRET)
    with pytest.raises(SystemExit, match=why):
        door(tmp_path, *argv)
