"""`[network.authentication.jwt]`'s keys, as the configuration checks them and the door verifies with them.

The door verifies JWT bearer tokens with PyJWT (gateway/worker/door/jwt/) against the key
file: an HMAC secret (HS256/384/512: the file's bytes, a trailing newline dropped), one PEM
public key (RS*, PS*, ES*, EdDSA), or a JWKS document (`{"keys": [...]}`, RFC 7517), whose
keys a token picks by its header's `kid`: a set publishes the old key and the new one
together while tokens of both are alive, so keys rotate with overlap. A PEM file of two keys
is refused (PEM names no key, so a token could not pick one; the set is the way to publish two).

A single key must fit each configured algorithm (ES256 a P-256 key, RS256 an RSA key of 2048
bits or more, HS256 a secret of at least 32 bytes, as RFC 7518 section 3.2 asks, so PyJWT has
no short key to warn of on stderr at each token); a set's key must fit at least one, and
verifies only those (and only its own `alg`, when it names one). So a table that could verify
nothing stops the start and `--check`, rather than refusing every token at run time. A
private key is refused: the gateway only verifies, and a key that can sign has no place on it.

Or the keys are a JWKS fetched over HTTPS (`settings.parse_jwks_url`): the sequencer fetches
it (gateway/sequencer/jwks.py) and hands its text to the workers as a reload would, checked
by `key_set` as a file's is.

`read_key` answers the file as text (a secret's bytes as Latin-1, lossless), which travels
to the workers inside the configuration, the same bytes a reload checked (`key_problem`);
each worker makes its `KeySet` of it once per reload (`key_set`). `key_names` says which keys
a file holds, for the reload's log line: a set's `kid`s, a PEM key's fingerprint. PyJWT and
`cryptography` are imported inside the functions that prepare a key, never at import.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from gateway.tuning import MAX_KEY_BYTES, MAX_SET_KEYS

HMAC_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}  # RFC 7518 3.2: at least the hash's size
PEM = b"-----BEGIN "


def key_bytes(key: str) -> bytes:
    return key.encode("latin-1")


def verifying_key(key: str, algorithm: str) -> Any:
    """What PyJWT verifies `algorithm` with: the secret's bytes, or the public key object;
    raises ValueError saying why the key does not fit."""
    from cryptography.hazmat.primitives import serialization

    raw = key_bytes(key)
    if algorithm in HMAC_BYTES:
        if raw.startswith(PEM):
            raise ValueError(f"{algorithm} takes a shared secret, and the file holds a PEM key")
        return _fitted(raw, algorithm)
    try:
        public = serialization.load_pem_public_key(raw)
    except (ValueError, TypeError):
        raise ValueError(f"{algorithm} takes a PEM public key (-----BEGIN PUBLIC KEY-----), and "
                         "the file holds none") from None
    return _fitted(public, algorithm)


def _fitted(loaded: Any, algorithm: str) -> Any:
    """`loaded` (a secret's bytes, or a public key object) when it verifies `algorithm`;
    raises ValueError saying why not."""
    import jwt

    if algorithm in HMAC_BYTES:
        if not isinstance(loaded, bytes):
            raise ValueError(f"{algorithm} takes a shared secret, and the key is a public key")
        if len(loaded) < HMAC_BYTES[algorithm]:
            raise ValueError(f"{algorithm} takes a secret of at least {HMAC_BYTES[algorithm]} bytes "
                             f"(RFC 7518 section 3.2); the file holds {len(loaded)}")
        return loaded
    if isinstance(loaded, bytes):
        raise ValueError(f"{algorithm} takes a public key, and the key is a shared secret")
    verifier = jwt.get_algorithm_by_name(algorithm)
    try:
        prepared = verifier.prepare_key(loaded)
    except (jwt.InvalidKeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{algorithm} does not fit the file's key: {exc}") from None
    short = verifier.check_key_length(prepared)  # else PyJWT warns on stderr at each verification
    if short:
        raise ValueError(f"{algorithm} takes a longer key: {short}")
    return loaded


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
    if raw.count(PEM) > 1:
        raise ValueError(f"the file holds {raw.count(PEM)} PEM keys, and a PEM file holds one: publish "
                         "several (a rotation) as a JWKS document ({\"keys\": [...]}), each with its kid")
    return raw.decode("latin-1")


def key_problem(key_file: str, algorithms: tuple[str, ...], jwks_url: str = "") -> tuple[str, str | None]:
    """(the key as text, None), or ("", the problem in words, naming the setting). With
    `jwks_url`, the key is "" (the sequencer fetches it)."""
    where = "config [network.authentication.jwt]"
    if key_file and jwks_url:
        return "", f"{where}: key_file and jwks_url are two sources of keys; give one"
    if not key_file and not jwks_url:
        return "", (f"{where}: key_file is required (the HS secret, the PEM public key or a JWKS "
                    "document), or jwks_url")
    if not algorithms:
        return "", f"{where}: algorithms is required (never taken from a token's header)"
    if jwks_url:
        return "", None
    try:
        key = read_key(key_file)
        key_set(key, algorithms)
    except ValueError as exc:
        return "", f"{where} key_file: {key_file}: {exc}"
    return key, None


@dataclasses.dataclass(frozen=True)
class VerifyingKey:
    """One key as PyJWT verifies with it, and the configured algorithms it verifies."""

    kid: str | None
    key: Any
    algorithms: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class KeySet:
    """The keys a token may be verified with: `only`, a key file's one key (a token's `kid`
    is not read), or a set's keys by `kid` (a token with no `kid` takes a set of one)."""

    only: VerifyingKey | None
    by_kid: dict[str, VerifyingKey]

    def pick(self, kid: Any) -> VerifyingKey | None:
        if self.only is not None:
            return self.only
        if kid is None and len(self.by_kid) == 1:
            return next(iter(self.by_kid.values()))
        return self.by_kid.get(kid) if isinstance(kid, str) else None


def is_key_set(key: str) -> bool:
    return key.lstrip().startswith("{")


def key_set(key: str, algorithms: tuple[str, ...]) -> KeySet:
    """The keys `key` (a key file's text) holds, each fitted to the algorithms; raises
    ValueError saying why one does not fit (a single key: each algorithm; a set's: one).
    No text: no key (a `jwks_url` not fetched yet)."""
    if not key:
        return KeySet(None, {})
    if not is_key_set(key):
        return KeySet(VerifyingKey(None, _single(key, algorithms), algorithms), {})
    try:
        document = json.loads(key)
    except ValueError:
        raise ValueError("the file is not a JWKS document: not JSON") from None
    jwks = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(jwks, list) or not jwks or not all(isinstance(jwk, dict) for jwk in jwks):
        raise ValueError('a JWKS document is {"keys": [...]}, a non-empty array of JWK objects')
    if len(jwks) > MAX_SET_KEYS:
        raise ValueError(f"the set holds {len(jwks)} keys; at most {MAX_SET_KEYS}")
    by_kid: dict[str, VerifyingKey] = {}
    for number, jwk in enumerate(jwks, 1):
        kid = jwk.get("kid")
        named = f"key #{number}" + (f" ({kid})" if isinstance(kid, str) else "")
        if not isinstance(kid, str) or not kid:
            raise ValueError(f"{named}: every key of a set names its kid, the name a token picks it by")
        if kid in by_kid:
            raise ValueError(f"{named}: a second key of kid {kid!r}")
        by_kid[kid] = _jwk(jwk, named, algorithms)
    return KeySet(None, by_kid)


def _single(key: str, algorithms: tuple[str, ...]) -> Any:
    verifying = None
    for algorithm in algorithms:
        verifying = verifying_key(key, algorithm)
    return verifying


def _jwk(jwk: dict, named: str, algorithms: tuple[str, ...]) -> VerifyingKey:
    """One JWK of a set, as the algorithms it fits of those configured."""
    import jwt

    if "d" in jwk:
        raise ValueError(f"{named}: a private key; publish the public key only (the gateway verifies, "
                         "it never signs)")
    own = jwk.get("alg")
    if own is not None and own not in algorithms:
        raise ValueError(f"{named}: its alg {own!r} is not among algorithms ({', '.join(algorithms)})")
    try:
        loaded = jwt.PyJWK(jwk).key
    except (jwt.PyJWTError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{named}: not a key PyJWT reads: {exc}") from None
    fits = []
    for algorithm in algorithms if own is None else (own,):
        try:
            _fitted(loaded, algorithm)
        except ValueError:
            continue
        fits.append(algorithm)
    if not fits:
        raise ValueError(f"{named}: fits none of the algorithms ({', '.join(algorithms)})")
    return VerifyingKey(jwk["kid"], loaded, tuple(fits))


def key_names(key: str) -> tuple[str, ...]:
    """Which keys a key file's text holds, as a log line names them: a set's `kid`s, a PEM
    key's `sha256:` fingerprint (its first 16 hex digits), or `secret` (never a hash of one)."""
    if is_key_set(key):
        try:
            return tuple(jwk.get("kid", "") for jwk in json.loads(key)["keys"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return ()
    if key.startswith(PEM.decode()):
        return ("sha256:" + hashlib.sha256(key_bytes(key)).hexdigest()[:16],)
    return ("secret",)
