"""`[network.authentication.jwt]`'s key and algorithms, as the configuration checks them.

The door verifies JWT bearer tokens with PyJWT (gateway/worker/door/bearer_jwt.py) against
one key file: an HMAC secret (HS256/384/512: the file's bytes, a trailing newline dropped)
or a PEM public key (RS*, PS*, ES*, EdDSA). The algorithms a token may use are the
configuration's, never its header's; `none` is never one. Each configured algorithm must fit
the key (ES256 a P-256 key, RS256 an RSA key, HS256 a secret of at least 32 bytes, as RFC
7518 section 3.2 asks), so a table that could verify nothing stops the start and `--check`,
rather than refusing every token at run time. A private key is refused: the gateway only
verifies, and a key that can sign has no place on it.

`read_key` answers the key as text (a secret's bytes as Latin-1, lossless), which travels
to the workers inside the configuration, the same bytes a reload checked (`key_problem`).

PyJWT and `cryptography` are imported only when a key is checked or prepared: a gateway
without the table never loads them (about 11 MiB in each of its processes, RESULTS run 12),
while the algorithm names, which every configuration's declarations read, are written here
(tests/e2e/test_config_jwt.py keeps them equal to PyJWT's).
"""

from __future__ import annotations

from typing import Any

# Every algorithm PyJWT (with cryptography) verifies, but `none` (a token with no signature).
ALGORITHMS = ("HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
              "ES256", "ES256K", "ES384", "ES512", "ES521", "EdDSA")
HMAC_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}  # RFC 7518 3.2: at least the hash's size
MAX_KEY_BYTES = 64 * 1024
PEM = b"-----BEGIN "


def parse_algorithms(value: Any) -> tuple[str, ...]:
    """A non-empty array of algorithm names, as JWS spells them."""
    accepts = "it accepts a non-empty array of " + ", ".join(ALGORITHMS)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"must be an array of algorithm names; {accepts}")
    for name in value:
        if name.lower() == "none":
            raise ValueError("'none' is a token without a signature, never accepted")
        if name not in ALGORITHMS:
            raise ValueError(f"{name!r} is not an algorithm; {accepts}")
    return tuple(dict.fromkeys(value))


def key_bytes(key: str) -> bytes:
    return key.encode("latin-1")


def verifying_key(key: str, algorithm: str) -> Any:
    """What PyJWT verifies `algorithm` with: the secret's bytes, or the public key object;
    raises ValueError saying why the key does not fit."""
    import jwt
    from cryptography.hazmat.primitives import serialization

    raw = key_bytes(key)
    if algorithm in HMAC_BYTES:
        if raw.startswith(PEM):
            raise ValueError(f"{algorithm} takes a shared secret, and the file holds a PEM key")
        if len(raw) < HMAC_BYTES[algorithm]:
            raise ValueError(f"{algorithm} takes a secret of at least {HMAC_BYTES[algorithm]} bytes "
                             f"(RFC 7518 section 3.2); the file holds {len(raw)}")
        return raw
    try:
        public = serialization.load_pem_public_key(raw)
    except (ValueError, TypeError):
        raise ValueError(f"{algorithm} takes a PEM public key (-----BEGIN PUBLIC KEY-----), and "
                         "the file holds none") from None
    try:
        jwt.get_algorithm_by_name(algorithm).prepare_key(public)
    except (jwt.InvalidKeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{algorithm} does not fit the file's key: {exc}") from None
    return public


def read_key(path: str) -> str:
    """The key file's content as text; raises ValueError (unreadable, empty, too large)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    if len(raw) > MAX_KEY_BYTES:
        raise ValueError(f"larger than {MAX_KEY_BYTES} bytes: not a key")
    raw = raw.rstrip(b"\r\n")
    if not raw:
        raise ValueError("the file is empty")
    if b"PRIVATE KEY-----" in raw:
        raise ValueError("the file holds a private key; give the gateway the public key only "
                         "(it verifies, it never signs)")
    return raw.decode("latin-1")


def key_problem(key_file: str, algorithms: tuple[str, ...]) -> tuple[str, str | None]:
    """(the key as text, None), or ("", the problem in words, naming the setting)."""
    where = "config [network.authentication.jwt]"
    if not key_file:
        return "", f"{where}: key_file is required (the HS secret or the PEM public key)"
    if not algorithms:
        return "", f"{where}: algorithms is required (never taken from a token's header)"
    try:
        key = read_key(key_file)
    except ValueError as exc:
        return "", f"{where} key_file: {key_file}: {exc}"
    for algorithm in algorithms:
        try:
            verifying_key(key, algorithm)
        except ValueError as exc:
            return "", f"{where} key_file: {key_file}: {exc}"
    return key, None
