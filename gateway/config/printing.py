"""What the options' declarations print: `--print-config`'s TOML and docs/configuration.md.

Both are derived from the one declaration of each option (gateway/config/options.py), so a new
option appears in both without a line here. `--print-config` writes the configuration a
start would run with as TOML that `--config` takes back: each value with its origin as a
comment, the values found at start (workers, connections, listen backlog) as comments, token
digests but never a token (`--upstream-token` is named, not shown), the JWT table's key file
but never its key.

``python -m gateway.config.printing`` writes docs/configuration.md (tests/e2e/test_config_check.py
checks the file is what this writes).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import resource
import sys
import time
from typing import Any

from gateway import version
from gateway.config import found as config_found
from gateway.config import tls
from gateway.config.options import OPTIONS, SECTIONS, Jwt, Option, TokenRule, default_words
from gateway.config.authentication import TOKEN_KEYS
from gateway.config.resolve import Resolution


def toml_value(value: Any) -> str:
    """A value as TOML writes it: strings as basic strings (JSON's escapes are TOML's, DEL
    aside), arrays of those."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_datetime(seconds: float) -> str:
    """Unix seconds as a TOML offset date-time in UTC (`2027-01-01T00:00:00Z`)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat().replace("+00:00", "Z")


def _token_lines(rule: TokenRule) -> list[str]:
    """A token's entry, `expires` only when it has one."""
    return ["[[network.authentication.tokens]]  # file"] + [
        f"{key} = {toml_datetime(value) if key == 'expires' else toml_value(value)}"
        for key in TOKEN_KEYS if (value := getattr(rule, key)) is not None]


JWT_KEYS = tuple(f for f in dataclasses.fields(Jwt) if "parse" in f.metadata)  # its TOML keys (not `key`)


def _origin(kind: str, words: str) -> str:
    return kind if kind in ("default", "file") else f"{kind} {words}"


def _option_line(opt: Option, value: Any, origin: tuple[str, str], found: dict[str, str]) -> str:
    where = _origin(*origin)
    if opt.secret and value is not None:
        return f"# {opt.name}: set, not shown (a credential)  # {where}"
    if opt.attr in found and origin[0] == "default":
        return f"# {opt.name} = {found[opt.attr]}  # default, found at start: {opt.found}"
    if value is None and opt.default is None:
        return f"# {opt.name}: not set  # {where}" + (f" ({opt.found})" if opt.found else "")
    return f"{opt.name} = {toml_value(opt.show(value))}  # {where}"


def print_config(resolution: Resolution) -> str:
    """The effective configuration as TOML (`resolution` has no problems)."""
    config, origins = resolution.config, resolution.origins
    assert config is not None
    at_start = config_found.at_start(config.workers, config.max_connections, config.listen_backlog,
                                     resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    found = {"workers": str(config.workers), "max_connections": str(at_start.max_connections),
             "listen_backlog": str(at_start.listen_backlog),
             "client_request_burst": toml_value(config_found.request_burst(
                 config.client_request_rate, config.client_request_burst))}
    lines = [f"# mur-gateway {version()}: the effective configuration (mur-gateway --print-config);",
             "# --config takes it back. Each value's origin follows it: default, file, environment, flag.",
             f"# --config: {resolution.path or 'none'}",
             f"# found at start: workers {config.workers}, {at_start.max_connections} connections per "
             f"worker (bound by {at_start.capacity_bound}; {at_start.descriptors} descriptors), capacity "
             f"{at_start.capacity(config.workers)}, listen backlog {at_start.listen_backlog}"]
    if tls.enabled(config.certfile, config.keyfile):
        lines.append(f"# certificate: {tls.expiry_words(config.certfile, time.time())}")
    lines.append("")
    lines += [_option_line(opt, getattr(config, opt.attr), origins[opt.attr], found) for opt in OPTIONS]
    for name in SECTIONS:
        lines += ["", f"[{name}]  # {origins[name][0]}"]
        lines += [f"{f.name} = {toml_value(getattr(getattr(config, name), f.name))}"
                  for f in dataclasses.fields(SECTIONS[name])]
    lines.append("")
    if not config.authenticated:
        lines.append("# [network.authentication]: none, the door is public")
    if config.jwt is not None:
        lines += ["[network.authentication.jwt]  # file; the key itself is never shown"]
        lines += [f"{f.name} = {toml_value(getattr(config.jwt, f.name))}" for f in JWT_KEYS]
    for rule in config.tokens:
        lines += _token_lines(rule)
    return "\n".join(lines) + "\n"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|")


def _option_row(opt: Option) -> str:
    meaning = opt.help
    for rule, word in ((opt.needs, "with"), (opt.excludes, "without")):
        if rule is not None:
            meaning += f"; takes effect only {word} `--{rule[0]}`" + (f" ({rule[1]})" if rule[1] else "")
    default = default_words(opt)
    shown = "none" if default in (None, "") else (default if opt.found and opt.default is None
                                            else f"`{default}`")
    return (f"| `{opt.flag} {_cell(opt.metavar)}` | `{opt.env}` | `{opt.name}` | {_cell(shown)} | "
            f"{'yes' if opt.reload else 'the file' if opt.rereads else 'no'} | {_cell(meaning)} |")


INTRO = """\
# Configuration

<!-- Written by `python -m gateway.config.printing` from the options' declarations in
gateway/config/options.py; tests/e2e/test_config_check.py checks this file is what it writes. -->

Every option is a command-line flag, an environment variable and a key of the TOML file given
with `--config` (or `MUR_GATEWAY_CONFIG`). The command line wins over the environment, which
wins over the file, which wins over the default. A top-level key of the file may be written in
kebab-case (`max-body-bytes`) or snake_case (`max_body_bytes`); writing both for one setting
stops the start. The tables' keys (`[lifecycle]`, `[inference]`, a token) are snake_case.

Every mistake stops the start with one line naming the setting and what it accepts, one line
per mistake found, exit 2: a value that does not parse, a value of the wrong TOML type (a
number in quotes, `heartbeat-interval = "15"`, is text; the command line and the environment
give text), a key, table or `MUR_GATEWAY_*` variable the gateway does not know, and an option
that would take no effect (one that takes effect only with another, which is not set, or only
without one, which is).

- `mur-gateway --check [--config FILE] [options]` validates all of this, the TLS files (the
  pair loads, the key matches, the certificate has not expired), the upstream's CA file, the
  token table and the JWT key, without binding a port or starting a process: it prints `configuration ok`
  (exit 0) or one line per problem (exit 2).
- `mur-gateway --print-config [--config FILE] [options]` prints the configuration a start would
  run with, as TOML that `--config` takes back, each value's origin as a comment, and the values
  found at start (workers, connections per worker, listen backlog) as comments. Token digests
  are shown; `--upstream-token` and the JWT key never are.
- "reload": a `SIGHUP` applies the new value without a restart (the token table too); any other
  setting that differs is named in the `config reloaded` line and needs a restart. "the file":
  a new path needs a restart, but a `SIGHUP` reads the file the path names again: a renewed
  TLS certificate and key, written over the old ones, are served to new connections without a
  restart (open connections keep theirs; a pair that does not load rejects the reload and the
  one in use stays).
"""


def markdown() -> str:
    """docs/configuration.md."""
    lines = [INTRO, "## Options", "",
             "| option | environment | TOML key | default | reload | meaning |",
             "|---|---|---|---|---|---|"]
    lines += [_option_row(opt) for opt in OPTIONS]
    lines += ["", "`--config FILE` (`MUR_GATEWAY_CONFIG`) names the file; `--version` prints the "
              "version."]
    for name in SECTIONS:
        lines += ["", f"## `[{name}]`", "", "| key | default | meaning |", "|---|---|---|"]
        lines += [f"| `{f.name}` | `{toml_value(f.default)}` | {_cell(f.metadata['help'])} |"
                  for f in dataclasses.fields(SECTIONS[name])]
    lines += ["", "## `[[network.authentication.tokens]]`", "",
              "Each entry is one token the door accepts (`Authorization: Bearer <token>`); with no "
              "`[network.authentication]` the door is public. A reload applies the table.", "",
              "| key | meaning |", "|---|---|"]
    lines += [f"| `{key}` | {_cell(words)} |" for key, words in TOKEN_WORDS.items()]
    lines += ["", "## `[network.authentication.jwt]`", "", JWT_INTRO, "", "| key | default | meaning |",
              "|---|---|---|"]
    lines += [f"| `{f.name}` | {'none' if not f.default else f'`{toml_value(f.default)}`'} | "
              f"{_cell(f.metadata['help'])} |" for f in JWT_KEYS]
    lines += ["", "## An example", "",
              "A token's digest: `printf %s \"$TOKEN\" | sha256sum` (no newline after the token). "
              "Check the file before a start or a reload with `mur-gateway --check --config "
              "gateway.toml`.", "", "```toml", EXAMPLE.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


# docs/configuration.md's example (tests/e2e/test_config_check.py loads it).
EXAMPLE = """\
bind = "0.0.0.0:52222"
max-streams-per-client = 8
client-request-rate = 5
trusted-proxies = "10.0.0.0/8"

[lifecycle]
max_running_tasks = 32

[[network.authentication.tokens]]
name = "dashboard"
sha256 = "8e4edbd86d2ff37462b261515423d9a2a9338d1b956be49043e83189361ea6c5"
scopes = ["murmur.WatchSession", "GetTask", "ListTasks"]
max_streams = 100
"""


JWT_INTRO = """\
JWT bearer tokens that the application's backend mints, beside the static tokens (or alone):
a token no `[[network.authentication.tokens]]` entry matches is verified as a JWT with the
key file (a secret file's trailing newline is not part of the secret), or with the key of a
JWKS (`key_file` holding `{"keys": [...]}`, or `jwks_url`) that the token's `kid` names, and
only the configured algorithms (never the token's header's, never `none`).
`exp` and `sub` are required; `nbf`, `iss` and `aud` are checked as RFC 7519 says, with no leeway.
`sub` is the caller, as a static token's `name` is (task visibility, limits, the access
log); a token whose `sub` is a static token's `name` is refused as an unknown one (with one
warning line naming the clash), so the two never share a caller; `scope` holds the methods it may call, space-separated,
or `*`; an optional `max_streams` claim limits its open streams as a token's `max_streams` does. A token that
fails any check, or whose `exp` has passed, is answered 401 as an unknown token (the access
line's `token_problem` tells the operator why); an open
stream ends when its token's `exp` comes. A reload reads the key file again; streams
already open keep going until their `exp`. `--check` reads the key and fits it to each
algorithm; `--print-config` names the file, never the key."""


TOKEN_WORDS = {
    "name": "what the access log and the limits call it (default `tokenN`); two entries may share "
            "one during a rotation",
    "sha256": "the token's sha256 as 64 hex digits (`printf %s TOKEN | sha256sum`); the token "
              "itself is never written down",
    "scopes": 'the methods it may call, or `["*"]`',
    "max_streams": "open streams with this token across workers; `0`: no limit (429 beyond)",
    "expires": "optional: a TOML date-time with its offset (`2027-01-01T00:00:00Z`, unquoted); from "
               "then the token is answered 401 as an unknown one, and its open streams end; `--check` "
               "warns of one already past",
}
if tuple(TOKEN_WORDS) != TOKEN_KEYS:
    raise AssertionError("a token key without its words in docs/configuration.md")


if __name__ == "__main__":
    sys.stdout.write(markdown())
