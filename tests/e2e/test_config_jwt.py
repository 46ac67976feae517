"""`[network.authentication.jwt]` in the configuration (gateway/config/jwt/): the key file read
and fitted to each algorithm at --check and at start, one line per mistake; --print-config
shows the table and never the key; and the door's verifier with each kind of key (HMAC
secret, RSA, EdDSA), as PyJWT mints them."""

from __future__ import annotations

import hashlib
import time

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from gateway.config import options as config
from gateway.config import resolve as config_resolve
from gateway.config.jwt import keys as jwt_keys
from gateway.config.jwt import settings as jwt_settings
from gateway.worker.door.jwt import TokenProblem
from gateway.worker.door.jwt.verifier import JwtVerifier
from helpers.gateway_harness import Tally, judged, running_gateway, start_refusal
from helpers.jwt_tokens import KeyPair, jwt_table

KEYS = KeyPair()
WHERE = "config [network.authentication.jwt]"
SECRET = b"a-shared-secret-of-at-least-32-bytes!!"


def public_pem(private) -> bytes:
    return private.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)


def problems(tmp_path, table: str) -> list[str]:
    path = tmp_path / "gw.toml"
    path.write_text(table)
    return config_resolve.resolve(["--config", str(path)], environ={}).problems


def key_file(tmp_path, content: bytes, name: str = "jwt.pem"):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_check_names_a_table_without_algorithms_and_a_key_that_does_not_fit(tmp_path):
    """[claim: jwt-key-checked] As a real process: one line each, exit 2."""
    key = key_file(tmp_path, KEYS.public_pem)
    path = tmp_path / "gw.toml"
    path.write_text(f'[network.authentication.jwt]\nkey_file = "{key}"\n')
    result = judged("--check", "--config", str(path))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f"mur-gateway: {WHERE}: algorithms is required (never taken from a "
                             "token's header)\n")
    path.write_text(jwt_table(key, '["RS256"]'))
    result = judged("--check", "--config", str(path))
    assert (result.returncode, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith(f"mur-gateway: {WHERE} key_file: {key}: RS256 does not fit the file's key: ")
    path.write_text(jwt_table(key))
    assert judged("--check", "--config", str(path)).stdout == "configuration ok\n"


P384 = public_pem(ec.generate_private_key(ec.SECP384R1()))


@pytest.mark.parametrize("content, algorithms, problem", [
    (KEYS.public_pem, '["HS256"]', "HS256 takes a shared secret, and the file holds a PEM key"),
    (b"short-secret", '["HS256"]',
     "HS256 takes a secret of at least 32 bytes (RFC 7518 section 3.2); the file holds 12"),
    (SECRET, '["ES256"]', "ES256 takes a PEM public key (-----BEGIN PUBLIC KEY-----), and the file holds none"),
    (P384, '["ES256"]', "ES256 does not fit the file's key: "),
    (KEYS.private_pem, '["ES256"]', "the file holds a private key; give the gateway the public key only"),
    (b"\n", '["ES256"]', "the file is empty"),
    (public_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)), '["RS256"]',
     "RS256 takes a longer key: The RSA key is 1024 bits long, which is below the minimum recommended size"),
])
def test_a_key_that_cannot_verify_every_algorithm_stops_the_start(tmp_path, content, algorithms, problem):
    """[claim: jwt-key-checked]"""
    key = key_file(tmp_path, content)
    [line] = problems(tmp_path, jwt_table(key, algorithms))
    assert line.startswith(f"{WHERE} key_file: {key}: {problem}")


def test_a_pem_file_of_two_keys_is_refused_by_check_and_at_start(tmp_path):
    """[claim: jwt-key-set] PEM names no key, so a token could not pick one of two: the file
    is refused in one line (before, the first key was used and the second ignored)."""
    key = key_file(tmp_path, KEYS.public_pem + KeyPair().public_pem)
    path = tmp_path / "gw.toml"
    path.write_text(jwt_table(key))
    expected = (f"{WHERE} key_file: {key}: the file holds 2 PEM keys, and a PEM file holds one: publish "
                'several (a rotation) as a JWKS document ({"keys": [...]}), each with its kid')
    result = judged("--check", "--config", str(path))
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"mur-gateway: {expected}\n")
    assert start_refusal("--config", str(path)) == expected


EC_JWK = KeyPair("ec-1").jwk()
RSA_JWK = {**orjson.loads(jwt.algorithms.RSAAlgorithm.to_jwk(
    rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())), "kid": "rsa-1"}
P384_JWK = {**orjson.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP384R1()).public_key())),
            "kid": "p384"}
PRIVATE_JWK = {**orjson.loads(jwt.algorithms.ECAlgorithm.to_jwk(KEYS.private)), "kid": "signing"}


@pytest.mark.parametrize("document, problem", [
    (b'{"keys": ', "the file is not a JWKS document: not JSON"),
    ({"keys": []}, 'a JWKS document is {"keys": [...]}, a non-empty array of JWK objects'),
    ({"keys": [{**EC_JWK, "kid": None}]}, "key #1: every key of a set names its kid, the name a token picks it by"),
    ({"keys": [EC_JWK, EC_JWK]}, "key #2 (ec-1): a second key of kid 'ec-1'"),
    ({"keys": [PRIVATE_JWK]}, "key #1 (signing): a private key; publish the public key only"),
    ({"keys": [{**EC_JWK, "alg": "ES384"}]}, "key #1 (ec-1): its alg 'ES384' is not among algorithms (ES256)"),
    ({"keys": [P384_JWK]}, "key #1 (p384): fits none of the algorithms (ES256)"),
    ({"keys": [RSA_JWK]}, "key #1 (rsa-1): fits none of the algorithms (ES256)"),
    ({"keys": [{"kty": "EC", "kid": "half"}]}, "key #1 (half): not a key PyJWT reads: "),
    ({"keys": [{**EC_JWK, "kid": str(n)} for n in range(17)]}, "the set holds 17 keys; at most 16"),
])
def test_a_jwks_key_file_that_cannot_verify_is_one_line(tmp_path, document, problem):
    """[claim: jwt-key-set]"""
    key = key_file(tmp_path, document if isinstance(document, bytes) else orjson.dumps(document), "jwks.json")
    [line] = problems(tmp_path, jwt_table(key))
    assert line.startswith(f"{WHERE} key_file: {key}: {problem}")


def test_a_jwks_may_hold_keys_of_several_algorithms_each_verifying_its_own(tmp_path):
    """[claim: jwt-key-set] ES256 and RS256 configured, one key of each: each key verifies only
    the algorithm it fits (an RS256 token naming the EC key's kid is `algorithm`)."""
    key = key_file(tmp_path, orjson.dumps({"keys": [EC_JWK, RSA_JWK]}), "jwks.json")
    assert problems(tmp_path, jwt_table(key, '["ES256", "RS256"]')) == []
    keys = jwt_keys.key_set(key.read_text(), ("ES256", "RS256"))
    assert (keys.pick("ec-1").algorithms, keys.pick("rsa-1").algorithms) == (("ES256",), ("RS256",))
    assert keys.pick("other") is None and keys.pick(None) is None


@pytest.mark.parametrize("table, problem", [
    ('[network.authentication.jwt]\nalgorithms = ["ES256"]\n',
     f"{WHERE}: key_file is required (the HS secret, the PEM public key or a JWKS document), or jwks_url"),
    ('[network.authentication.jwt]\nkey_file = "KEY"\nalgorithms = ["none"]\n',
     f"{WHERE} algorithms: 'none' is a token without a signature, never accepted"),
    ('[network.authentication.jwt]\nkey_file = "KEY"\nalgorithms = "ES256"\n',
     f"{WHERE} algorithms: must be an array of algorithm names; it accepts a non-empty array of "),
    ('[network.authentication.jwt]\nkey_file = "KEY"\nalgorithms = ["ES999"]\n',
     f"{WHERE} algorithms: 'ES999' is not an algorithm; it accepts a non-empty array of "),
    ('[network.authentication.jwt]\nkey_file = "KEY"\nalgorithms = ["ES256"]\naudiences = "x"\n',
     "config [network.authentication.jwt] audiences: unknown setting (did you mean audience?); "
     "[network.authentication.jwt] takes key_file, algorithms, jwks_url, issuer, audience"),
    ('[network.authentication.jwt]\nkey_file = "KEY"\njwks_url = "https://idp.example/jwks.json"\n'
     'algorithms = ["ES256"]\n', f"{WHERE}: key_file and jwks_url are two sources of keys; give one"),
    ('[network.authentication.jwt]\njwks_url = "http://idp.example/jwks.json"\nalgorithms = ["ES256"]\n',
     f"{WHERE} jwks_url: must be an https:// URL with a host: keys are fetched over verified TLS only"),
    ('[network.authentication.jwt]\nkey_file = "NONE"\nalgorithms = ["ES256"]\n',
     f"{WHERE} key_file: NONE: No such file or directory"),
])
def test_a_jwt_table_mistake_is_one_line(tmp_path, table, problem):
    """[claim: jwt-key-checked]"""
    key = key_file(tmp_path, KEYS.public_pem)
    assert [line[:len(problem)] for line in problems(tmp_path, table.replace('"KEY"', f'"{key}"'))] == [problem]


def test_print_config_shows_the_table_never_the_key_and_check_takes_it_back(tmp_path):
    """[claim: jwt-key-checked]"""
    key = key_file(tmp_path, SECRET * 2 + b"\n", "secret.key")  # 76 bytes: HS384 needs 48
    path = tmp_path / "gw.toml"
    path.write_text(jwt_table(key, '["HS256", "HS384"]', audience=False))
    printed = judged("--print-config", "--config", str(path))
    assert printed.returncode == 0, printed.stderr
    table = printed.stdout.partition("[network.authentication.jwt]")[2]
    assert f'key_file = "{key}"' in table and 'algorithms = ["HS256", "HS384"]' in table
    assert 'issuer = "https://app.example"' in table and 'audience = ""' in table
    assert SECRET.decode() not in printed.stdout
    back = judged("--check", "--config", "/dev/stdin", stdin=printed.stdout)
    assert (back.returncode, back.stdout) == (0, "configuration ok\n"), back.stderr


def test_a_jwt_table_alone_opens_an_authenticated_door(tmp_path):
    path = tmp_path / "gw.toml"
    path.write_text(jwt_table(key_file(tmp_path, KEYS.public_pem)))
    loaded = config_resolve.load(["--config", str(path)], environ={})
    assert loaded.tokens == () and loaded.authenticated and loaded.jwt.algorithms == ("ES256",)
    assert config.Config.from_dict(loaded.to_dict()) == loaded  # as the workers get it


def verifier(key: bytes, algorithm: str) -> JwtVerifier:
    return JwtVerifier(config.Jwt(key_file="k", algorithms=(algorithm,), key=key.decode("latin-1")), Tally())


def problem_of(door: JwtVerifier, token: str) -> str:
    with pytest.raises(TokenProblem) as refused:
        door.verify(token, hashlib.sha256(token.encode()).hexdigest())
    return refused.value.problem


@pytest.mark.parametrize("algorithm", ["HS256", "RS256", "PS256", "EdDSA"])
def test_each_kind_of_key_verifies_its_tokens_and_no_other(algorithm):
    """[claim: jwt-verified]"""
    if algorithm == "HS256":
        signing, verifying = SECRET, SECRET
    else:
        signing = ed25519.Ed25519PrivateKey.generate() if algorithm == "EdDSA" else \
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
        verifying = public_pem(signing)
    door = verifier(verifying, algorithm)
    claims = {"sub": "app", "scope": "ListTasks *", "exp": int(time.time()) + 60, "max_streams": 2}
    token = jwt.encode(claims, signing, algorithm=algorithm)
    rule = door.verify(token, hashlib.sha256(token.encode()).hexdigest())
    assert (rule.name, rule.scopes, rule.max_streams, rule.expires) == ("app", ("ListTasks", "*"), 2,
                                                                        claims["exp"])
    assert problem_of(door, jwt.encode(claims, KEYS.private, algorithm="ES256")) == "algorithm"
    for bad in ({"max_streams": -1}, {"max_streams": True}, {"sub": ""}, {"sub": "x" * 257}, {"scope": ["*"]}):
        assert problem_of(door, jwt.encode({**claims, **bad}, signing, algorithm=algorithm)) == "claims", bad


def test_the_algorithm_names_are_pyjwts_less_none():
    """config/jwt/settings.py writes the names out so that reading a configuration loads no PyJWT."""
    assert set(jwt_settings.ALGORITHMS) == set(jwt.algorithms.get_default_algorithms()) - {"none"}


def cryptography_mapped(pid: int) -> bool:
    with open(f"/proc/{pid}/maps", encoding="utf-8") as fh:
        return "/cryptography/" in fh.read()


def test_only_a_door_that_takes_jwts_loads_cryptography(tmp_path):
    """PyJWT's cryptography costs each process about 11 MiB (RESULTS run 12): a gateway
    without the JWT table maps none of it in any process; one with it, in its workers."""
    with running_gateway(workers=1, tmp_path=tmp_path) as gw:
        processes = [gw.pid, *gw.children()]
        assert set(gw.worker_pids().values()) <= set(processes)
        assert not any(cryptography_mapped(pid) for pid in processes)
    path = tmp_path / "gw.toml"
    path.write_text(jwt_table(key_file(tmp_path, KEYS.public_pem)))
    with running_gateway("--config", str(path), workers=1, tmp_path=tmp_path) as gw:
        assert all(cryptography_mapped(pid) for pid in gw.worker_pids().values())
