"""SIGHUP: what a reload of --config may change while the gateway runs, and what it may not.

Reloadable (`RELOADABLE`, an option's `reload` in gateway/config/options.py): the tokens (their scopes,
`max_streams` and `expires`), `[network.authentication.jwt]` with its key file (read again,
checked as at start), the per-client limits, the trusted proxies and the allowed origins. The supervisor
re-reads the file exactly as at start (`config_resolve.load`, same command line and environment), so a file
that does not parse or
validate raises ConfigError and changes nothing. Every other setting (bind, workers, TLS
files, upstream, ...) would need a restart: a reload names those that differ and leaves
them as they run. So does the door's kind: a reload that would turn a public door into one
with tokens, or back, keeps the tokens as they run (and names `[network.authentication]`),
since the agent card, the watch page and the streams already open were made for the door
the gateway started with; tokens, their scopes and max_streams change freely otherwise. The
settings reach the workers through the sequencer (worker/reload.py).

With TLS, a reload also re-reads --certfile/--keyfile (gateway/config/tls.py): `config_resolve.load` checks
the pair as at start, so one that does not load rejects the reload (logged, nothing changed);
one that loads makes the message to the workers carry `CERTIFICATE`, on which each loads it
again into the context it serves with. A reload that changes the JWT table's keys says which
keys are now in force (`jwt_keys_now`: a JWKS's `kid`s), as it says the certificate was reloaded.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Mapping

from gateway.config.jwt import keys as jwt_keys
from gateway.config import options as config_module
from gateway.config import resolve as config_resolve
from gateway.config.options import Config

RELOADABLE = ("tokens", "jwt") + tuple(opt.attr for opt in config_module.OPTIONS if opt.reload)
SECTIONS = tuple(config_module.SECTIONS)  # TOML tables, named as [table]
CERTIFICATE = "certificate"  # a reload message's key, no Config field: the workers load the pair again


def reread(running: Config, argv: list[str] | None) -> tuple[Config, dict, list[str]]:
    """(the config as now loaded with only the reloadable settings new, those settings as
    plain values, the restart-only settings that differ); raises ConfigError."""
    fresh = config_resolve.load(argv)
    restart_only = [f"[{f.name}]" if f.name in SECTIONS else "--" + f.name.replace("_", "-")
                    for f in dataclasses.fields(Config)
                    if f.name not in RELOADABLE and getattr(fresh, f.name) != getattr(running, f.name)]
    if fresh.authenticated != running.authenticated:
        fresh = dataclasses.replace(fresh, tokens=running.tokens, jwt=running.jwt)
        restart_only.append("[network.authentication] (public or with tokens)")
    plain = fresh.to_dict()
    settings = {name: plain[name] for name in RELOADABLE}
    applied = dataclasses.replace(running, **{name: getattr(fresh, name) for name in RELOADABLE})
    return applied, settings, restart_only


def jwt_keys_now(running: Config, applied: Config) -> list[str] | None:
    """The names of the JWT keys `applied` verifies with, when they differ from `running`'s
    (None: the same keys, or no JWT table now, or keys a `jwks_url` publishes: the sequencer
    names those as it fetches them, gateway/sequencer/jwks.py)."""
    if applied.jwt is None or not applied.jwt.key or (running.jwt is not None and running.jwt.key == applied.jwt.key):
        return None
    return list(jwt_keys.key_names(applied.jwt.key))


def config_file(argv: list[str] | None, environ: Mapping[str, str]) -> str | None:
    """The --config (or MUR_GATEWAY_CONFIG) file a reload re-reads, for its log line."""
    args = sys.argv[1:] if argv is None else argv
    for index, arg in enumerate(args):
        if arg == "--config" and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith("--config="):
            return arg.partition("=")[2]
    return environ.get("MUR_GATEWAY_CONFIG")
