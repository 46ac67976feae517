"""`mur-gateway token new NAME [--scopes SCOPE ...] [--max-streams N] [--expires DATETIME]`: a
fresh bearer token.

Prints a random token (32 bytes, URL-safe base64) once, then the
`[[network.authentication.tokens]]` entry that admits it: the token's sha256, never the token,
which the gateway keeps nowhere. Paste the entry into the --config file and reload (SIGHUP);
hand the token to its holder. As `centrifugo gentoken` does, so that no operator has to put a
token together from a shell one-liner. Scopes are checked against the methods this gateway
serves (gateway/config/options.py `SCOPES`), and `--expires` (RFC 3339 with its offset) is
read, as the config file's are (gateway/config/authentication.py); an `--expires` already past
is refused, since its token would open nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import sys
import time

from gateway.config.authentication import expires_from_text
from gateway.config.options import SCOPES
from gateway.config.printing import toml_datetime
from gateway.tuning import TOKEN_BYTES


def entry(name: str, digest: str, scopes: list[str], max_streams: int, expires: float | None = None) -> str:
    """The TOML entry for a token whose sha256 is `digest` (JSON strings are TOML basic strings)."""
    lines = ["[[network.authentication.tokens]]", f"name = {json.dumps(name)}", f'sha256 = "{digest}"',
             f"scopes = {json.dumps(scopes)}"]
    if max_streams:
        lines.append(f"max_streams = {max_streams}")
    if expires is not None:
        lines.append(f"expires = {toml_datetime(expires)}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mur-gateway token", description="bearer tokens for the door")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="print a fresh random token and its config entry",
                              description="Print a fresh random token once, and the "
                                          "[[network.authentication.tokens]] entry with its sha256.")
    new.add_argument("name", help="the entry's name: owns the tasks the token creates")
    new.add_argument("--scopes", nargs="+", default=["*"], metavar="SCOPE",
                     help='methods the token may call, or "*" for all (default "*")')
    new.add_argument("--max-streams", type=int, default=0, metavar="N",
                     help="open streams with this token across workers; 0: no limit (default 0)")
    new.add_argument("--expires", metavar="DATETIME",
                     help="when the token stops opening the door, RFC 3339 with its offset "
                          "(2027-01-01T00:00:00Z); default: never")
    args = parser.parse_args(argv)
    if not args.name.strip():
        parser.error("NAME must not be empty")
    unknown = [scope for scope in args.scopes if scope not in SCOPES]
    if unknown:
        parser.error(f"--scopes: {unknown[0]!r} is not a method this gateway serves; one of {', '.join(SCOPES)}")
    if args.max_streams < 0:
        parser.error("--max-streams must be 0 or more")
    if args.expires is not None:
        try:
            args.expires = expires_from_text(args.expires)
        except ValueError as exc:
            parser.error(f"--expires: {exc}")
        if args.expires <= time.time():
            parser.error(f"--expires: {toml_datetime(args.expires)} is past; the token would open nothing")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    digest = hashlib.sha256(token.encode()).hexdigest()
    sys.stdout.write(f"# the token for {args.name!r}: shown this once, kept nowhere (the gateway keeps its sha256)\n"
                     f"{token}\n\n"
                     f"# add to the --config file, then reload: kill -HUP <supervisor pid>\n"
                     + entry(args.name, digest, args.scopes, args.max_streams, args.expires))
    return 0
