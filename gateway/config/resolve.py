"""A command line, the environment and the --config file made into one `Config`, with every
problem found.

A value is taken from the command line, else from ``MUR_GATEWAY_<NAME>``, else from the
``--config`` TOML file (its key kebab-case or snake_case, not both), else the default. A value
that does not parse is a problem whose line names the option and where the value came from,
and says what it accepts; the CLI prints it on one line and exits 2. So is a ``MUR_GATEWAY_*``
variable no option reads, and an option that would take no effect (its `needs`/`excludes`);
the file's own rules are gateway/config/file.py's, gateway/config/authentication.py's and
gateway/config/jwt/'s.
`resolve` collects every problem (--check and a failed start print them all, one line each);
`load` raises them in one ConfigError (its message the first, `lines` all of them).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from gateway import version
from gateway.config import found as config_found
from gateway.config import tls
from gateway.config.options import (BY_NAME, ENV_PREFIX, KNOWN_ENV, OPTIONS, SECTIONS, Config, ConfigError,
                            Option, default_value, default_words)
from gateway.config.authentication import token_rules
from gateway.config.jwt.table import jwt_table
from gateway.config.file import did_you_mean, read_file, section, unknown_settings
from gateway.config.values import file_value


class _Arguments(argparse.ArgumentParser):
    """argparse, but a command line it cannot read is a ConfigError like any other (one line,
    exit 2) instead of the usage text and argparse's own exit."""

    def error(self, message: str):
        raise ConfigError(message)


def argument_parser() -> argparse.ArgumentParser:
    parser = _Arguments(
        prog="mur-gateway",
        description="Fan-out gateway for the murmur capsule streaming protocol.",
    )
    for opt in OPTIONS:
        parser.add_argument(
            opt.flag, dest=opt.attr, metavar=opt.metavar, default=None,
            help=f"{opt.help} [env {opt.env}; default {default_words(opt)}]",
        )
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML file: the options above by long name, plus [lifecycle], "
                             "[inference] and [network.authentication] (tokens, jwt) [env MUR_GATEWAY_CONFIG]")
    parser.add_argument("--check", action="store_true",
                        help="validate the configuration (file, options, TLS files, tokens, JWT key) without "
                             "starting: 'configuration ok' and exit 0, or one line per problem and exit 2")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration as TOML that --config takes back, "
                             "each value's origin and the values found at start as comments")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    return parser


@dataclass
class Resolution:
    """What `resolve` made of a command line, the environment and the file: each option's
    value and where it came from, or the problems (one line each, in the order a start meets
    them: `load` raises them, --check prints them all)."""

    args: argparse.Namespace | None = None
    path: str | None = None  # the --config file
    values: dict[str, Any] = field(default_factory=dict)  # by Config field
    origins: dict[str, tuple[str, str]] = field(default_factory=dict)  # (kind, words) by field
    problems: list[str] = field(default_factory=list)
    config: Config | None = None


def _raw(opt: Option, args: argparse.Namespace, environ: Mapping[str, str], data: dict
         ) -> tuple[Any, tuple[str, str]]:
    """An option's text as written, and where: flag over environment over file; else None."""
    given = getattr(args, opt.attr)
    if given is not None:
        return given, ("flag", opt.flag)
    if opt.env in environ:
        return environ[opt.env], ("environment", opt.env)
    spelled = [key for key in dict.fromkeys((opt.name, opt.attr)) if key in data]
    if len(spelled) == 2:
        raise ConfigError(f"config {opt.attr}: the same setting as {opt.name}; write it once")
    if spelled:
        return data[spelled[0]], ("file", f"config {spelled[0]}")
    return None, ("default", "default")


def _rule_problems(values: dict[str, Any], origins: dict[str, tuple[str, str]]) -> list[str]:
    """An option set away from its default that takes effect only with (`needs`) or without
    (`excludes`) another: refused, rather than accepted and ignored."""
    problems = []
    for opt in OPTIONS:
        if opt.attr not in values or values[opt.attr] == default_value(opt):
            continue
        for rule, when_set in ((opt.needs, False), (opt.excludes, True)):
            if rule is None or BY_NAME[rule[0]].attr not in values:
                continue
            other, what = BY_NAME[rule[0]], f" ({rule[1]})" if rule[1] else ""
            if bool(values[other.attr]) == when_set:
                problems.append(f"{origins[opt.attr][1]}: takes effect only "
                                f"{'without' if when_set else 'with'} {other.flag}{what}, "
                                f"which is {'set' if when_set else 'not set'}")
    return problems


def _unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """MUR_GATEWAY_* variables no option reads: refused like an unknown key of the file."""
    return [f"{name}: unknown setting{did_you_mean(name, KNOWN_ENV)}; the environment takes {ENV_PREFIX} "
            "and an option's long name in capitals, - as _ (mur-gateway --help)"
            for name in sorted(environ) if name.startswith(ENV_PREFIX) and name not in KNOWN_ENV]


def resolve(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Resolution:
    """Every setting and its origin, or every problem found; reads the TOML file, the TLS
    and CA files, and nothing else (no port, no process)."""
    environ = os.environ if environ is None else environ
    result = Resolution()
    try:
        result.args = argument_parser().parse_args(argv)
        result.path = result.args.config or environ.get(ENV_PREFIX + "CONFIG")
        data = read_file(result.path) if result.path else {}
    except ConfigError as exc:
        result.problems.append(str(exc))
        return result
    result.problems += unknown_settings(data) + _unknown_environment(environ)
    values, origins = result.values, result.origins
    for opt in OPTIONS:
        try:
            raw, origins[opt.attr] = _raw(opt, result.args, environ, data)
            values[opt.attr] = (default_value(opt) if raw is None
                                else file_value(opt.parse, raw) if origins[opt.attr][0] == "file"
                                else opt.parse(raw))
        except ValueError as exc:
            words = str(exc) if isinstance(exc, ConfigError) else f"{origins[opt.attr][1]}: {exc}"
            result.problems.append(words)
    if "certfile" in values and "keyfile" in values:
        result.problems += filter(None, [tls.certificate_problem(values["certfile"], values["keyfile"])])
    if "upstream_cacert" in values:
        result.problems += filter(None, [tls.upstream_cacert_problem(values["upstream_cacert"])])
    result.problems += _rule_problems(values, origins)
    if "workers" in values and values["workers"] is None:
        values["workers"] = config_found.default_workers()
    tables: dict[str, Any] = {}
    for name in (*SECTIONS, "tokens", "jwt"):
        try:
            tables[name] = (token_rules(data) if name == "tokens" else jwt_table(data) if name == "jwt"
                            else section(data, name, SECTIONS[name]))
        except ConfigError as exc:  # [network.authentication]'s own problem is met by both its tables
            result.problems += [line for line in exc.lines if line not in result.problems]
        origins[name] = ("file", f"config [{name}]") if name in data or (
            name in ("tokens", "jwt") and "network" in data) else ("default", "default")
    if not result.problems:
        result.config = Config(**values, **tables)
    return result


def load(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Resolve every setting; raises ConfigError whose message names the first bad one and whose
    `lines` name every one (a reload logs them all). Reads the TOML file and nothing else, so it
    can run again, on a reload, to validate the file before applying it."""
    result = resolve(argv, environ)
    if result.config is None:
        raise ConfigError(*result.problems)
    return result.config
