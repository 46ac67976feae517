"""Every setting of the gateway in one place: option, environment variable, TOML key, default.

A value is taken from the command line, else from ``MUR_GATEWAY_<NAME>``, else from the
``--config`` TOML file, else the default (README "Options"). A value that does not parse is a
``ConfigError`` whose message names the option and where the value came from, and says what it
accepts; the CLI prints it on one line and exits 2. The file is strict: a table or key not
known here is refused the same way, since a misspelt one would otherwise be ignored (and in
``[network.authentication]`` a typo would open the door).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from gateway import tls, version
from gateway.config_values import (MAX_JSON_DEPTH, Parser, one_of, parse_hostport, parse_log_level,
                                   parse_metrics_bind, parse_networks, parse_nonnegative_float,
                                   parse_nonnegative_int, parse_nonnegative_seconds, parse_on_off,
                                   parse_positive_int, parse_positive_seconds, parse_secret, parse_text,
                                   parse_url, shown, whole_number)
from gateway.board import MAX_WORKERS
from gateway.protocol.activation import METHODS


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


@dataclass(frozen=True)
class Option:
    name: str
    parse: Callable[[Any], Any]
    default: Any
    metavar: str
    help: str

    @property
    def env(self) -> str:
        return "MUR_GATEWAY_" + self.name.upper().replace("-", "_")

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("bind", parse_hostport, "127.0.0.1:52222", "HOST:PORT",
           "where clients connect; port 0 picks a free port"),
    Option("workers", whole_number(1, MAX_WORKERS, " (the ring has control words for that many)"),
           None, "N", f"worker processes, at most {MAX_WORKERS}"),
    Option("metrics-bind", parse_metrics_bind, "127.0.0.1:9464", "HOST:PORT",
           "the Prometheus /metrics endpoint, or 'off'"),
    Option("heartbeat-interval", parse_positive_seconds, 15.0, "SECONDS", "heartbeat period"),
    Option("upstream", parse_url, None, "URL", "front a real capsule at URL"),
    Option("upstream-token", parse_secret, None, "TOKEN", "bearer token presented upstream"),
    Option("sim-load", parse_nonnegative_float, 0.0, "RATE",
           "embedded capsule: text frames per second on a long-lived task"),
    Option("sim-load-size", parse_nonnegative_int, 0, "BYTES", "pad each load frame to BYTES"),
    Option("log-level", parse_log_level, "info", "LEVEL", "debug, info, warning or error"),
    Option("max-body-bytes", parse_positive_int, 1 << 20, "BYTES",
           "largest JSON-RPC request body accepted (413 beyond)"),
    Option("max-header-bytes", parse_positive_int, 16384, "BYTES",
           "largest request head: target plus header names and values (431 beyond)"),
    Option("max-headers", parse_positive_int, 100, "N", "most request header lines (431 beyond)"),
    Option("max-json-depth", whole_number(1, MAX_JSON_DEPTH), 32, "LEVELS",
           "deepest nesting of a JSON-RPC request's arrays and objects (-32600 beyond)"),
    Option("max-rpc-id-chars", parse_positive_int, 256, "CHARS",
           "longest JSON-RPC string id (-32600 beyond)"),
    Option("max-connections", parse_positive_int, None, "N",
           "requests in progress per worker, open streams included (503 with Retry-After beyond)"),
    Option("listen-backlog", parse_positive_int, None, "N",
           "accept queue of the listening socket: connections the kernel holds until a worker "
           "accepts one (never more than net.core.somaxconn)"),
    Option("header-timeout", parse_positive_seconds, 10.0, "SECONDS",
           "a connection that has not sent a whole request head (slow headers, idle keep-alive) "
           "is closed after this"),
    Option("body-timeout", parse_positive_seconds, 30.0, "SECONDS",
           "a request body not received in full within this is answered 408"),
    Option("worker-stall-timeout", parse_nonnegative_seconds, 5.0, "SECONDS",
           "a worker whose event loop has not turned for this long of its own time (its waits "
           "for a CPU not counted) is killed and replaced "
           "(0: never; a stopped worker, SIGSTOP, is left alone)"),
    Option("certfile", parse_text, None, "FILE",
           "PEM certificate chain: with --keyfile, serve HTTPS (ALPN h2 and http/1.1) on --bind"),
    Option("keyfile", parse_text, None, "FILE", "PEM private key of --certfile"),
    Option("watch-page", parse_on_off, "on", "on|off", "serve the live watch page at GET /watch"),
    Option("access-log", parse_on_off, "on", "on|off",
           "one JSON line per request and per stream's end, on stderr"),
    Option("upstream-cacert", parse_text, None, "FILE",
           "PEM CA certificates an https:// upstream must chain to (default: the system store)"),
    Option("max-streams-per-client", parse_nonnegative_int, 0, "N",
           "open streams per client address (IPv4 /32, IPv6 /64) across workers; 0: no limit (429 beyond)"),
    Option("client-request-rate", parse_nonnegative_float, 0.0, "R",
           "requests a second per client address to POST / and attachments; 0: off (429 beyond)"),
    Option("client-request-burst", parse_nonnegative_float, None, "B",
           "the per-client request bucket's size"),
    Option("trusted-proxies", parse_networks, "", "CIDR[,CIDR...]",
           "peers whose X-Forwarded-For or Forwarded: for= names the client"),
    Option("public-url", parse_url, None, "URL",
           "the address the agent card names (http(s)://HOST[:PORT]); default: the address each client reached"),
    Option("h2c-upgrade", parse_on_off, "off", "on|off",
           "switch a plain HTTP/1.1 request with Upgrade: h2c to HTTP/2 (off: answered over HTTP/1.1; "
           "HTTP/2 prior knowledge is served either way)"),
)


def _setting(default: Any, parse: Parser) -> Any:
    """A TOML table's key: its default, and the parser its value must pass (`_section`)."""
    return field(default=default, metadata={"parse": parse})


@dataclass(frozen=True)
class Lifecycle:
    task_acceptance: str = _setting("queue", one_of(("queue", "none")))
    max_queued_tasks: int = _setting(64, parse_nonnegative_int)
    max_running_tasks: int = _setting(16, parse_positive_int)
    conversation: str = _setting("stateless", one_of(("stateless", "threaded")))
    max_task_reopens: int = _setting(3, parse_nonnegative_int)


@dataclass(frozen=True)
class Inference:
    transport: str = _setting("http", one_of(("http", "process")))
    max_turns: int = _setting(20, parse_nonnegative_int)


@dataclass(frozen=True)
class TokenRule:
    name: str
    sha256: str
    scopes: tuple[str, ...]
    max_streams: int = 0  # open streams with this token across workers; 0: no limit


@dataclass(frozen=True)
class Config:
    """Every resolved setting, built by `load`. A flag's default is its row in OPTIONS. A None
    there is either off (no --upstream, no TLS) or a value found at start, by `load` (workers)
    or where it is used (max-connections: gateway.capacity; listen-backlog:
    `effective_listen_backlog`; client-request-burst: worker/limits.py; upstream-cacert:
    gateway.tls), and DEFAULT_WORDS names it for --help. A TOML table's keys have their
    defaults in Lifecycle and Inference."""

    bind: tuple[str, int]
    workers: int
    metrics_bind: tuple[str, int] | None
    heartbeat_interval: float
    upstream: str | None
    upstream_token: str | None
    sim_load: float
    sim_load_size: int
    log_level: str
    max_body_bytes: int
    max_header_bytes: int
    max_headers: int
    max_json_depth: int
    max_rpc_id_chars: int
    max_connections: int | None  # None: from RLIMIT_NOFILE and memory (gateway.capacity)
    listen_backlog: int | None  # None: net.core.somaxconn (see effective_listen_backlog)
    header_timeout: float
    body_timeout: float
    worker_stall_timeout: float
    certfile: str | None
    keyfile: str | None
    watch_page: bool
    access_log: bool
    upstream_cacert: str | None
    max_streams_per_client: int
    client_request_rate: float
    client_request_burst: float | None  # None: 2 x client_request_rate
    trusted_proxies: tuple[str, ...]
    public_url: str | None
    h2c_upgrade: bool
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


DEFAULT_WORDS = {"workers": "CPUs", "listen-backlog": "net.core.somaxconn",
                 "client-request-burst": "2 x --client-request-rate", "upstream-cacert": "system store",
                 "max-connections": "from RLIMIT_NOFILE and memory"}  # defaults found at start
SOMAXCONN_PATH = "/proc/sys/net/core/somaxconn"


def somaxconn() -> int:
    """The kernel's cap on any listen backlog (Linux: net.core.somaxconn)."""
    try:
        with open(SOMAXCONN_PATH) as fh:
            return max(1, int(fh.read().split()[0]))
    except (OSError, ValueError, IndexError):
        return socket.SOMAXCONN


def effective_listen_backlog(configured: int | None) -> int:
    """The accept queue a listen() gets: the configured value, or net.core.somaxconn when
    none is, never more than net.core.somaxconn (the kernel would cap it silently)."""
    limit = somaxconn()
    return limit if configured is None else min(configured, limit)


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
        default = DEFAULT_WORDS.get(opt.name) if opt.default is None else opt.default
        parser.add_argument(
            "--" + opt.name, dest=opt.attr, metavar=opt.metavar, default=None,
            help=f"{opt.help} [env {opt.env}; default {default}]",
        )
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML file: the options above by long name, plus [lifecycle], "
                             "[inference] and [network.authentication] [env MUR_GATEWAY_CONFIG]")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    return parser


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


def load(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Resolve every setting; raises ConfigError naming the bad one. Reads the TOML file and
    nothing else, so it can run again, on a reload, to validate the file before applying it."""
    environ = os.environ if environ is None else environ
    args = argument_parser().parse_args(argv)
    path = args.config or environ.get("MUR_GATEWAY_CONFIG")
    data = read_file(path) if path else {}
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw, origin = getattr(args, opt.attr), f"--{opt.name}"
        if raw is None and opt.env in environ:
            raw, origin = environ[opt.env], opt.env
        if raw is None:
            for key in (opt.name, opt.attr):
                if key in data:
                    raw, origin = data[key], f"config {key}"
        if raw is None:
            values[opt.attr] = None if opt.default is None else opt.parse(opt.default)
            continue
        try:
            values[opt.attr] = opt.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
    problem = (tls.certificate_problem(values["certfile"], values["keyfile"])
               or tls.upstream_cacert_problem(values["upstream_cacert"]))
    if problem is not None:
        raise ConfigError(problem)
    if values["client_request_burst"] is not None and not values["client_request_rate"]:
        raise ConfigError("--client-request-burst: takes effect only with --client-request-rate "
                          "(a rate above 0), which is not set")
    if values["workers"] is None:
        values["workers"] = min(os.cpu_count() or 1, MAX_WORKERS)
    return Config(**values, lifecycle=_section(data, "lifecycle", Lifecycle),
                  inference=_section(data, "inference", Inference), tokens=token_rules(data))

