"""Every setting of the gateway in one place: each option declared once, as a `Config` field.

A field's declaration (`option`) holds the option's default, parser, help, whether a reload
applies it and what it needs or excludes; its flag, environment variable and TOML key follow
from its name. argparse, the environment, the file, --print-config and docs/configuration.md
are derived from these (`OPTIONS`), so an option is added with one field.

A value is taken from the command line, else from ``MUR_GATEWAY_<NAME>``, else from the
``--config`` TOML file (its key kebab-case or snake_case, not both), else the default. A value
that does not parse is a ``ConfigError`` whose message names the option and where the value
came from, and says what it accepts; the CLI prints it on one line and exits 2. The file is
strict: a table or key not known here is refused the same way, since a misspelt one would
otherwise be ignored (and in ``[network.authentication]`` a typo would open the door); so is
a ``MUR_GATEWAY_*`` variable no option reads, and an option that would take no effect.
`resolve` collects every problem (--check prints them all); `load` raises the first.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from gateway import config_found, tls, version
from gateway.config_values import (MAX_JSON_DEPTH, Parser, one_of, parse_hostport, parse_log_level,
                                   parse_metrics_bind, parse_networks, parse_nonnegative_float,
                                   parse_nonnegative_int, parse_nonnegative_seconds, parse_on_off,
                                   parse_positive_int, parse_positive_seconds, parse_secret, parse_text,
                                   parse_url, shown, whole_number)
from gateway.board import MAX_WORKERS
from gateway.protocol.activation import METHODS


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


ENV_PREFIX = "MUR_GATEWAY_"


def hostport_text(value: tuple[str, int] | None) -> str:
    """HOST:PORT as --bind takes it back (IPv6 in brackets); None: "off" (--metrics-bind)."""
    if value is None:
        return "off"
    host, port = value
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Option:
    """One option, declared once as a `Config` field (`option`): its flag `--name`, its
    environment variable, its TOML key (`name`, or `attr` in snake_case: both are read), the
    parser that turns text into its value or says in words what it accepts, and its help.
    argparse, the environment, the file, --print-config and docs/configuration.md are all
    derived from these."""

    name: str
    parse: Parser
    default: Any  # None: off, or found at start (`found` then says how)
    metavar: str
    help: str
    found: str | None = None  # a default found at start, in words (gateway/config_found.py)
    reload: bool = False  # a SIGHUP reload applies it (config_reload.py)
    needs: tuple[str, str] | None = None  # (option, what it must be): takes effect only with it
    excludes: tuple[str, str] | None = None  # (option, why): takes effect only without it
    secret: bool = False  # never shown (--print-config, refusals)
    show: Callable[[Any], Any] = lambda value: value  # the value as TOML writes it back

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper().replace("-", "_")

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    @property
    def flag(self) -> str:
        return "--" + self.name


def option(default: Any, parse: Parser, metavar: str, help: str, **more: Any) -> Any:
    """A `Config` field that is an option (no default of its own: `load` resolves it)."""
    return field(metadata={"option": dict(default=default, parse=parse, metavar=metavar, help=help,
                                          **more)})


def _setting(default: Any, parse: Parser, help: str) -> Any:
    """A TOML table's key: its default, the parser its value must pass (`_section`), its help."""
    return field(default=default, metadata={"parse": parse, "help": help})


@dataclass(frozen=True)
class Lifecycle:
    task_acceptance: str = _setting("queue", one_of(("queue", "none")),
                                    "queue, or none: streamed tasks are refused (the card says streaming: false)")
    max_queued_tasks: int = _setting(64, parse_nonnegative_int,
                                     "live tasks waiting beyond these are rejected: capsule is busy")
    max_running_tasks: int = _setting(16, parse_positive_int,
                                      "tasks the embedded capsule runs at once; the rest queue")
    conversation: str = _setting("stateless", one_of(("stateless", "threaded")),
                                 "stateless, or threaded: a context's tasks are one conversation")
    max_task_reopens: int = _setting(3, parse_nonnegative_int,
                                     "times a task may be reopened (a hook's reopen beyond it fails the task)")


@dataclass(frozen=True)
class Inference:
    transport: str = _setting("http", one_of(("http", "process")), "the tool calls' transport "
                              "(spec \"Transports\"): http or process")
    max_turns: int = _setting(20, parse_nonnegative_int, "most turns one task may take")


@dataclass(frozen=True)
class TokenRule:
    name: str
    sha256: str
    scopes: tuple[str, ...]
    max_streams: int = 0  # open streams with this token across workers; 0: no limit


RATE = "a rate above 0"


@dataclass(frozen=True)
class Config:
    """Every resolved setting, built by `load`; each option field declares itself (`option`).
    A None default is either off (no --upstream, no TLS) or found at start (`found`: resolved
    by gateway/config_found.py). A TOML table's keys have their defaults in Lifecycle and
    Inference."""

    bind: tuple[str, int] = option(
        "127.0.0.1:52222", parse_hostport, "HOST:PORT", "where clients connect; port 0 picks a free port",
        show=hostport_text)
    workers: int = option(
        None, whole_number(1, MAX_WORKERS, " (the ring has control words for that many)"), "N",
        f"worker processes, at most {MAX_WORKERS}", found="CPUs")
    metrics_bind: tuple[str, int] | None = option(
        "127.0.0.1:9464", parse_metrics_bind, "HOST:PORT", "the Prometheus /metrics endpoint, or 'off'",
        show=hostport_text)
    heartbeat_interval: float = option(15.0, parse_positive_seconds, "SECONDS", "heartbeat period")
    upstream: str | None = option(None, parse_url, "URL", "front a real capsule at URL")
    upstream_token: str | None = option(
        None, parse_secret, "TOKEN", "bearer token presented upstream", needs=("upstream", ""),
        secret=True)
    sim_load: float = option(
        0.0, parse_nonnegative_float, "RATE", "embedded capsule: text frames per second on a long-lived task",
        excludes=("upstream", "it loads the embedded capsule"))
    sim_load_size: int = option(
        0, parse_nonnegative_int, "BYTES", "pad each load frame to BYTES", needs=("sim-load", RATE))
    log_level: str = option("info", parse_log_level, "LEVEL", "debug, info, warning or error")
    max_body_bytes: int = option(
        1 << 20, parse_positive_int, "BYTES", "largest JSON-RPC request body accepted (413 beyond)")
    max_header_bytes: int = option(
        16384, parse_positive_int, "BYTES",
        "largest request head: target plus header names and values (431 beyond)")
    max_headers: int = option(100, parse_positive_int, "N", "most request header lines (431 beyond)")
    max_json_depth: int = option(
        32, whole_number(1, MAX_JSON_DEPTH), "LEVELS",
        "deepest nesting of a JSON-RPC request's arrays and objects (-32600 beyond)")
    max_rpc_id_chars: int = option(256, parse_positive_int, "CHARS", "longest JSON-RPC string id (-32600 beyond)")
    max_connections: int | None = option(
        None, parse_positive_int, "N",
        "requests in progress per worker, open streams included (503 with Retry-After beyond)",
        found="from RLIMIT_NOFILE and memory")
    listen_backlog: int | None = option(
        None, parse_positive_int, "N",
        "accept queue of the listening socket: connections the kernel holds until a worker "
        "accepts one (never more than net.core.somaxconn)", found="net.core.somaxconn")
    header_timeout: float = option(
        10.0, parse_positive_seconds, "SECONDS",
        "a connection that has not sent a whole request head (slow headers, idle keep-alive) "
        "is closed after this")
    body_timeout: float = option(
        30.0, parse_positive_seconds, "SECONDS", "a request body not received in full within this is answered 408")
    worker_stall_timeout: float = option(
        5.0, parse_nonnegative_seconds, "SECONDS",
        "a worker whose event loop has not turned for this long of its own time (its waits "
        "for a CPU not counted) is killed and replaced (0: never; a stopped worker, SIGSTOP, is left alone)")
    certfile: str | None = option(
        None, parse_text, "FILE", "PEM certificate chain: with --keyfile, serve HTTPS (ALPN h2 and http/1.1) on --bind")
    keyfile: str | None = option(None, parse_text, "FILE", "PEM private key of --certfile")
    watch_page: bool = option("on", parse_on_off, "on|off", "serve the live watch page at GET /watch")
    access_log: bool = option(
        "on", parse_on_off, "on|off", "one JSON line per request and per stream's end, on stderr")
    upstream_cacert: str | None = option(
        None, parse_text, "FILE",
        "PEM CA certificates an https:// upstream must chain to (default: the system store)",
        found="system store", needs=("upstream", ""))
    max_streams_per_client: int = option(
        0, parse_nonnegative_int, "N",
        "open streams per client address (IPv4 /32, IPv6 /64) across workers; 0: no limit (429 beyond)",
        reload=True)
    client_request_rate: float = option(
        0.0, parse_nonnegative_float, "R",
        "requests a second per client address to POST / and attachments; 0: off (429 beyond)", reload=True)
    client_request_burst: float | None = option(
        None, parse_nonnegative_float, "B", "the per-client request bucket's size",
        found="2 x --client-request-rate", reload=True, needs=("client-request-rate", RATE))
    trusted_proxies: tuple[str, ...] = option(
        "", parse_networks, "CIDR[,CIDR...]", "peers whose X-Forwarded-For or Forwarded: for= names the client",
        reload=True)
    public_url: str | None = option(
        None, parse_url, "URL",
        "the address the agent card names (http(s)://HOST[:PORT]); default: the address each client reached")
    h2c_upgrade: bool = option(
        "off", parse_on_off, "on|off",
        "accepted, no effect: a plain HTTP/1.1 request with Upgrade: h2c is answered over HTTP/1.1 "
        "either way (HTTP/2 is prior knowledge or TLS ALPN h2)")
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    inference: Inference = field(default_factory=Inference)
    tokens: tuple[TokenRule, ...] = ()

    def to_dict(self) -> dict:
        """A plain, picklable/JSON-able form for child processes."""
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "Config":
        data = dict(data)
        data["bind"] = tuple(data["bind"])
        if data["metrics_bind"] is not None:
            data["metrics_bind"] = tuple(data["metrics_bind"])
        data["lifecycle"] = Lifecycle(**data["lifecycle"])
        data["inference"] = Inference(**data["inference"])
        data["trusted_proxies"] = tuple(data["trusted_proxies"])
        data["tokens"] = tuple(
            TokenRule(t["name"], t["sha256"], tuple(t["scopes"]), t["max_streams"])
            for t in data["tokens"]
        )
        return cls(**data)


OPTIONS: tuple[Option, ...] = tuple(
    Option(f.name.replace("_", "-"), **f.metadata["option"])
    for f in dataclasses.fields(Config) if "option" in f.metadata)
# Where the worker's serving and the tests found them before gateway/config_found.py held them.
somaxconn = config_found.somaxconn
effective_listen_backlog = config_found.effective_listen_backlog
BY_NAME = {opt.name: opt for opt in OPTIONS}
SECTIONS = {"lifecycle": Lifecycle, "inference": Inference}  # TOML tables of plain settings
KNOWN_ENV = {opt.env for opt in OPTIONS} | {ENV_PREFIX + "CONFIG"}


def _check_rules() -> None:
    """Each `needs`/`excludes` names an option that exists (checked at import)."""
    for opt in OPTIONS:
        for rule in (opt.needs, opt.excludes):
            if rule is not None and rule[0] not in BY_NAME:
                raise AssertionError(f"--{opt.name} names --{rule[0]}, which is not an option")


_check_rules()


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
                             "[inference] and [network.authentication] [env MUR_GATEWAY_CONFIG]")
    parser.add_argument("--check", action="store_true",
                        help="validate the configuration (file, options, TLS files, tokens) without "
                             "starting: 'configuration ok' and exit 0, or one line per problem and exit 2")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration as TOML that --config takes back, "
                             "each value's origin and the values found at start as comments")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    return parser


def default_words(opt: Option) -> Any:
    """An option's default as --help and the docs say it."""
    return opt.found if opt.default is None and opt.found else opt.default


TABLES = ("lifecycle", "inference", "network")  # the TOML file's tables besides the options


def read_file(path: str) -> dict:
    """The TOML file at `path`, every table and key checked against what the gateway knows
    (a misspelt one would otherwise be ignored without a word)."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config {path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
                          f"offset {exc.start}); a TOML file is UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ConfigError(f"--config {path}: not valid TOML: nested too deeply") from None
    options = {opt.name for opt in OPTIONS} | {opt.attr for opt in OPTIONS}
    for key, value in data.items():
        if key in TABLES or key in options:
            continue
        if _is_table(value):
            raise ConfigError(f"config {_spelled(key, value)}: unknown table; the file's tables are "
                              + ", ".join(f"[{t}]" for t in TABLES))
        raise ConfigError(f"config {key}: unknown setting; the file takes the options by their "
                          "long name (mur-gateway --help)")
    return data


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and bool(value)
                                       and all(isinstance(v, dict) for v in value))


def _spelled(path: str, value: Any) -> str:
    """A table as the file wrote it: [path], or [[path]] for an array of tables."""
    return f"[{path}]" if isinstance(value, dict) else f"[[{path}]]"


def _table(data: dict, path: str, known: tuple[str, ...]) -> dict:
    """The table at dotted `path` (its last part a key of `data`), whose keys are all `known`."""
    raw = data[path.rpartition(".")[2]]
    if not isinstance(raw, dict):
        raise ConfigError(f"config [{path}]: must be a table")
    for name, value in raw.items():
        if name in known:
            continue
        what = (f"{_spelled(path + '.' + name, value)}: unknown table" if _is_table(value)
                else f"[{path}] {name}: unknown setting")
        raise ConfigError(f"config {what}; [{path}] takes {', '.join(known)}")
    return raw


def _section(data: dict, key: str, cls: type) -> Any:
    """[lifecycle] or [inference]: each key's value through the parser its field names."""
    if key not in data:
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for name, value in _table(data, key, tuple(fields)).items():
        try:
            values[name] = fields[name].metadata["parse"](value)
        except ValueError as exc:
            raise ConfigError(f"config [{key}] {name}: {exc}") from None
    return cls(**values)


SCOPES = ("*",) + METHODS
TOKEN_KEYS = tuple(f.name for f in dataclasses.fields(TokenRule))


def _token(entry: Any, where: str, default_name: str) -> TokenRule:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table")
    for name in entry:
        if name not in TOKEN_KEYS:
            raise ConfigError(f"{where} {name}: unknown setting; a token takes {', '.join(TOKEN_KEYS)}")
    name = entry.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where} name: {shown(name)} is not a name; it accepts non-empty text")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or any(
            c not in "0123456789abcdef" for c in digest.lower()):
        raise ConfigError(f"{where} sha256: must be the token's sha256 as 64 hex digits")
    scopes = entry.get("scopes")
    if not isinstance(scopes, list) or not scopes or not all(isinstance(s, str) for s in scopes):
        raise ConfigError(f"{where} scopes: must be a non-empty array of method names, or [\"*\"]")
    for scope in scopes:
        if scope not in SCOPES:
            raise ConfigError(f"{where} scopes: {scope!r} is not a method this gateway serves; "
                              f"it accepts \"*\" or {', '.join(METHODS)}")
    try:
        max_streams = parse_nonnegative_int(entry.get("max_streams", 0))
    except ValueError as exc:
        raise ConfigError(f"{where} max_streams: {exc}") from None
    return TokenRule(name, digest.lower(), tuple(scopes), max_streams)


def token_rules(data: dict) -> tuple[TokenRule, ...]:
    """[[network.authentication.tokens]]: none without the table, else at least one token; two
    entries may share a name (a token and its successor during a rotation), never a digest."""
    if "network" not in data:
        return ()
    network = _table(data, "network", ("authentication",))
    if "authentication" not in network:
        return ()
    auth = _table(network, "network.authentication", ("tokens",))
    entries = auth.get("tokens")
    if isinstance(entries, dict):
        raise ConfigError("config [network.authentication.tokens]: one table, where each token is an "
                          "entry of the array [[network.authentication.tokens]] (two brackets)")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("config [network.authentication]: declares no [[network.authentication.tokens]]; "
                          "remove the table for a public door")
    rules: list[TokenRule] = []
    for i, entry in enumerate(entries):
        rule = _token(entry, f"config [[network.authentication.tokens]] #{i + 1}", f"token{i + 1}")
        for other in rules:
            if other.sha256 == rule.sha256:
                raise ConfigError(f"config [[network.authentication.tokens]] #{i + 1} ({rule.name}) "
                                  f"sha256: the same token as {other.name!r}")
        rules.append(rule)
    return tuple(rules)


@dataclass
class Resolution:
    """What `resolve` made of a command line, the environment and the file: each option's
    value and where it came from, or the problems (one line each, in the order a start meets
    them: `load` raises the first, --check prints them all)."""

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


def default_value(opt: Option) -> Any:
    return None if opt.default is None else opt.parse(opt.default)


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
    return [f"{name}: unknown setting; the environment takes {ENV_PREFIX} and an option's long "
            "name in capitals, - as _ (mur-gateway --help)"
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
    result.problems += _unknown_environment(environ)
    values, origins = result.values, result.origins
    for opt in OPTIONS:
        try:
            raw, origins[opt.attr] = _raw(opt, result.args, environ, data)
            values[opt.attr] = default_value(opt) if raw is None else opt.parse(raw)
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
    for name in (*SECTIONS, "tokens"):
        try:
            tables[name] = token_rules(data) if name == "tokens" else _section(data, name, SECTIONS[name])
        except ConfigError as exc:
            result.problems.append(str(exc))
        origins[name] = ("file", f"config [{name}]") if name in data or (
            name == "tokens" and "network" in data) else ("default", "default")
    if not result.problems:
        result.config = Config(**values, **tables)
    return result


def load(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Resolve every setting; raises ConfigError naming the first bad one. Reads the TOML file
    and nothing else, so it can run again, on a reload, to validate the file before applying it."""
    result = resolve(argv, environ)
    if result.config is None:
        raise ConfigError(result.problems[0])
    return result.config
