"""[network.authentication]: the door's tables, read and checked. Without it the door is public.

`[[network.authentication.tokens]]` holds static tokens (a name, the token's sha256, the methods
it may call, optionally `max_streams` and `expires`), read here; `[network.authentication.jwt]`
holds the key JWTs are verified with, read by gateway/config/jwt/ (`table.jwt_table`). Their
keys are declared in gateway/config/options.py (`TokenRule`, `Jwt`, `SCOPES`); the rules here
are what a token's entry must hold: a digest of 64 hex digits, scopes that name served methods,
an offset date-time, no digest twice. Every entry is read and every problem of each is a line
(--check and a rejected reload name them all), as the rest of the file's are.
"""

from __future__ import annotations

import dataclasses
import datetime
import tomllib
from typing import Any

from gateway.config.options import SCOPES, ConfigError, TokenRule
from gateway.config.file import did_you_mean, table
from gateway.config.values import file_value, parse_nonnegative_int, shown
from gateway.protocol.activation import METHODS

TOKEN_KEYS = tuple(f.name for f in dataclasses.fields(TokenRule))


def _token(entry: Any, where: str, default_name: str) -> tuple[TokenRule | None, list[str]]:
    """One entry of the token table: its rule, or None and every problem it has, one line each."""
    if not isinstance(entry, dict):
        return None, [f"{where}: must be a table"]
    problems = [f"{where} {key}: unknown setting{did_you_mean(key, TOKEN_KEYS)}; a token takes "
                f"{', '.join(TOKEN_KEYS)}"
                for key in entry if key not in TOKEN_KEYS]
    name = entry.get("name", default_name)
    if not isinstance(name, str) or not name:
        problems.append(f"{where} name: {shown(name)} is not a name; it accepts non-empty text")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or any(
            c not in "0123456789abcdef" for c in digest.lower()):
        problems.append(f"{where} sha256: must be the token's sha256 as 64 hex digits")
    scopes = entry.get("scopes")
    if not isinstance(scopes, list) or not scopes or not all(isinstance(s, str) for s in scopes):
        problems.append(f"{where} scopes: must be a non-empty array of method names, or [\"*\"]")
    else:
        problems += [f"{where} scopes: {scope!r} is not a method this gateway serves; "
                     f"it accepts \"*\" or {', '.join(METHODS)}" for scope in scopes if scope not in SCOPES]
    values: dict[str, Any] = {"max_streams": 0, "expires": None}
    for key, parse in (("max_streams", _max_streams), ("expires", parse_expires)):
        try:
            if key in entry:
                values[key] = parse(entry[key])
        except ValueError as exc:
            problems.append(f"{where} {key}: {exc}")
    if problems or not isinstance(digest, str) or not isinstance(scopes, list):  # no problems: both were checked
        return None, problems
    return TokenRule(name, digest.lower(), tuple(scopes), **values), []


def _max_streams(value: Any) -> int:
    return file_value(parse_nonnegative_int, value)


def parse_expires(value: Any, accepts: str = "a TOML date-time such as 2027-01-01T00:00:00Z, unquoted"
                  ) -> float:
    """A token's `expires`: an offset date-time (`2027-01-01T00:00:00Z`), as Unix seconds;
    `accepts` says in words what a refusal's setting takes."""
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        written = value.isoformat() if isinstance(value, (datetime.date, datetime.time)) else shown(value)
        raise ValueError(f"{written} is not a date-time with its offset; it accepts {accepts}")
    return value.timestamp()


def expires_from_text(text: str) -> float:
    """`expires` written on a command line (`token new --expires`): RFC 3339 with its offset,
    read as TOML reads the file's unquoted date-time and refused in `parse_expires`'s words."""
    try:
        value = tomllib.loads(f"expires = {text}").get("expires") if "\n" not in text else text
    except tomllib.TOMLDecodeError:
        value = text
    return parse_expires(value, "an RFC 3339 date-time such as 2027-01-01T00:00:00Z or "
                                "2027-01-01T01:00:00+01:00")


def authentication_table(data: dict) -> dict | None:
    """[network.authentication], its keys checked; None without it (a public door)."""
    if "network" not in data:
        return None
    network = table(data, "network", ("authentication",))
    if "authentication" not in network:
        return None
    return table(network, "network.authentication", ("tokens", "jwt"))


def token_rules(data: dict) -> tuple[TokenRule, ...]:
    """[[network.authentication.tokens]]: none without the table, else at least one token (or
    the jwt table); two entries may share a name (a token and its successor during a
    rotation), never a digest. Every bad entry's every problem is a line of the one
    ConfigError."""
    auth = authentication_table(data)
    if auth is None:
        return ()
    entries = auth.get("tokens")
    if isinstance(entries, dict):
        raise ConfigError("config [network.authentication.tokens]: one table, where each token is an "
                          "entry of the array [[network.authentication.tokens]] (two brackets)")
    if entries is None and "jwt" in auth:
        return ()
    if not isinstance(entries, list) or not entries:
        raise ConfigError("config [network.authentication]: declares no [[network.authentication.tokens]] "
                          "and no [network.authentication.jwt]; remove the table for a public door")
    rules: list[TokenRule] = []
    problems: list[str] = []
    for i, entry in enumerate(entries):
        rule, wrong = _token(entry, f"config [[network.authentication.tokens]] #{i + 1}", f"token{i + 1}")
        twin = next((other for other in rules if rule is not None and other.sha256 == rule.sha256), None)
        if rule is not None and twin is not None:
            wrong = [f"config [[network.authentication.tokens]] #{i + 1} ({rule.name}) "
                     f"sha256: the same token as {twin.name!r}"]
        elif rule is not None:
            rules.append(rule)
        problems += wrong
    if problems:
        raise ConfigError(*problems)
    return tuple(rules)
