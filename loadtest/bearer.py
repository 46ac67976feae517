"""The bearer token a simulated user sends: none, one static token, or a JWT minted for each user.

The commands of the kit that open streams on a gateway that may have a door (driver, storm,
soak and bench through the driver, locust's users) take the same options, added by
`add_options`; idle20k and crowd start a public gateway of their own:

- `--token TOKEN` or `--token-file FILE` (its first line; `$MUR_TOKEN` when neither is given,
  as `mur watch` reads it): one static token every user sends;
- `--jwt-key FILE` with `--jwt-algorithm` (HS256 by default): a JWT minted for each simulated
  user, as an application's backend would: `sub` the user (`load-<n>`), `scope`, `exp` now plus
  `--jwt-lifetime`, and `iss`/`aud` when given. FILE holds the HMAC secret (the same file the
  gateway's `key_file` names) or the PEM *private* key whose public half the gateway verifies with.

`Bearer.header(user)` is the `Authorization` header line for user number `user` (b"" without a
token); a JWT is minted when asked for, so a reconnecting user gets a fresh `exp`.
"""

from __future__ import annotations

import os
import time

ENV_TOKEN = "MUR_TOKEN"
HMAC = ("HS256", "HS384", "HS512")


class Bearer:
    """What each simulated user sends: nothing, `token`, or a JWT signed with `jwt_key`."""

    def __init__(self, token: str | None = None, jwt_key: bytes | None = None, algorithm: str = "HS256",
                 scope: str = "*", lifetime: float = 900.0, issuer: str | None = None,
                 audience: str | None = None, prefix: str = "load"):
        self.token, self.algorithm, self.scope, self.lifetime = token, algorithm, scope, lifetime
        self.issuer, self.audience, self.prefix = issuer, audience, prefix
        self.key = None
        if jwt_key is not None:
            self.key = jwt_key if algorithm in HMAC else _private_key(jwt_key)

    @property
    def mode(self) -> str:
        """none, static or jwt (what a report records beside its figures)."""
        return "jwt" if self.key is not None else "static" if self.token else "none"

    def token_for(self, user: int) -> str | None:
        if self.key is None:
            return self.token
        import jwt

        claims = {"sub": f"{self.prefix}-{user}", "scope": self.scope, "exp": int(time.time() + self.lifetime)}
        if self.issuer:
            claims["iss"] = self.issuer
        if self.audience:
            claims["aud"] = self.audience
        return jwt.encode(claims, self.key, algorithm=self.algorithm)

    def header(self, user: int) -> bytes:
        """b"Authorization: Bearer ...\\r\\n" for user number `user`, or b"" without a token."""
        token = self.token_for(user)
        return f"Authorization: Bearer {token}\r\n".encode() if token else b""


def _private_key(pem: bytes):
    from cryptography.hazmat.primitives import serialization

    return serialization.load_pem_private_key(pem, password=None)


def add_options(parser) -> None:
    """The token options, the same on every command (locust's parser takes them too)."""
    group = parser.add_argument_group("bearer token (a door with [network.authentication])")
    group.add_argument("--token", help=f"a static bearer token every simulated user sends (else ${ENV_TOKEN})")
    group.add_argument("--token-file", metavar="FILE", help="read the static token from FILE's first line")
    group.add_argument("--jwt-key", metavar="FILE",
                       help="mint a JWT for each simulated user, signed with FILE: the HMAC secret, or the PEM "
                            "private key whose public key the gateway's key_file holds")
    group.add_argument("--jwt-algorithm", default="HS256", help="the JWTs' algorithm (default HS256)")
    group.add_argument("--jwt-scope", default="*", help='the JWTs\' scope claim (default "*")')
    group.add_argument("--jwt-lifetime", type=float, default=900.0, metavar="SECONDS",
                       help="each JWT's exp, from its minting (default 900: 15 minutes)")
    group.add_argument("--jwt-issuer", help="the JWTs' iss claim (the table's issuer, when it names one)")
    group.add_argument("--jwt-audience", help="the JWTs' aud claim (the table's audience, when it names one)")


def from_args(args) -> Bearer:
    """The Bearer the parsed options describe; raises SystemExit with the reason when one is unusable."""
    token = getattr(args, "token", None)
    token_file, jwt_key = getattr(args, "token_file", None), getattr(args, "jwt_key", None)
    if sum(bool(x) for x in (token, token_file, jwt_key)) > 1:
        raise SystemExit("--token, --token-file and --jwt-key: give one")
    try:
        if token_file:
            with open(token_file) as fh:
                token = fh.readline().strip()
        key = None
        if jwt_key:
            with open(jwt_key, "rb") as fh:
                key = fh.read().rstrip(b"\r\n")
    except OSError as exc:
        raise SystemExit(f"{exc.filename}: {exc.strerror}") from None
    if not (token or key):
        token = os.environ.get(ENV_TOKEN) or None
    try:
        return Bearer(token, key, args.jwt_algorithm, args.jwt_scope, args.jwt_lifetime, args.jwt_issuer,
                      args.jwt_audience)
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"--jwt-key {jwt_key}: not a PEM private key for {args.jwt_algorithm}: {exc}") from None


def argv(args) -> list[str]:
    """The options again, for a driver subprocess (bench, soak) to send the same token."""
    out = []
    for name in ("token", "token_file", "jwt_key", "jwt_issuer", "jwt_audience"):
        if getattr(args, name, None):
            out += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if getattr(args, "jwt_key", None):
        out += ["--jwt-algorithm", args.jwt_algorithm, "--jwt-scope", args.jwt_scope,
                "--jwt-lifetime", str(args.jwt_lifetime)]
    return out

