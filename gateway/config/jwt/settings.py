"""The JWT table's settings that name no key: the algorithms a token may use, and where a
JWKS is published. Written here rather than asked of PyJWT, so that declaring the options
loads no PyJWT (tests/e2e/test_config_jwt.py keeps the names equal to PyJWT's).

The algorithms a token may use are the configuration's, never its header's; `none` is never
one. A `jwks_url` is fetched over verified TLS only, by the sequencer (gateway/sequencer/jwks.py).
"""

from __future__ import annotations

import urllib.parse
from typing import Any

# Every algorithm PyJWT (with cryptography) verifies, but `none` (a token with no signature).
ALGORITHMS = ("HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
              "ES256", "ES256K", "ES384", "ES512", "ES521", "EdDSA")


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


def parse_jwks_url(value: Any) -> str:
    """An https:// URL with a host (and a path, a query): where the JWKS is published; empty:
    none (the keys are key_file's)."""
    if not isinstance(value, str):
        raise ValueError("must be text: an https:// URL")
    if not value.strip():
        return ""
    parts = urllib.parse.urlsplit(value.strip())
    if "@" in parts.netloc:
        raise ValueError("a URL must not carry credentials (user:password@)")
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError("must be an https:// URL with a host: keys are fetched over verified TLS only")
    try:
        parts.port  # noqa: B018 -- raises ValueError for a port out of range
    except ValueError:
        raise ValueError("has no usable port; it accepts 1-65535") from None
    return value.strip()
