"""Every setting of the gateway in one place: each option declared once, as a `Config` field,
and each key of the file's tables as a field of its table's class.

A field's declaration (`option`) holds the option's default, parser, help, whether a reload
applies it and what it needs or excludes; its flag, environment variable and TOML key follow
from its name. argparse, the environment, the file, --print-config and docs/configuration.md
are derived from these (`OPTIONS`), so an option is added with one field. The file's tables
([lifecycle], [inference], [network.authentication]'s tokens and jwt) declare their keys the
same way (`_setting`), with their defaults and parsers.

This module only declares. Reading the file and its tables is gateway/config/file.py,
gateway/config/authentication.py and gateway/config/jwt/; turning a command line, the
environment and the file into a `Config`, with every problem found, is gateway/config/resolve.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from gateway.config.jwt.settings import parse_algorithms, parse_jwks_url
from gateway.config.values import (MAX_JSON_DEPTH, Parser, one_of, parse_hostport,
                                   parse_log_level, parse_metrics_bind, parse_networks,
                                   parse_nonnegative_float, parse_nonnegative_int,
                                   parse_nonnegative_seconds, parse_on_off, parse_origins, parse_positive_int,
                                   parse_positive_seconds, parse_secret, parse_text, parse_url,
                                   whole_number)
from gateway.common.board import MAX_WORKERS
from gateway.protocol.activation import METHODS
from gateway.tuning import LAPPED_REPLAY_BYTES


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it. Raised with several lines when a
    part of the file has several problems: `lines` holds them all, the message the first."""

    def __init__(self, *lines: str):
        super().__init__(lines[0])
        self.lines = lines


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
    found: str | None = None  # a default found at start, in words (gateway/config/found.py)
    reload: bool = False  # a SIGHUP reload applies it (config/reload.py)
    rereads: bool = False  # a file whose path needs a restart, but which a SIGHUP reads again (the TLS pair)
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
    """A `Config` field that is an option (no default of its own: `config_resolve.resolve`
    resolves it)."""
    return field(metadata={"option": dict(default=default, parse=parse, metavar=metavar, help=help,
                                          **more)})


def _setting(default: Any, parse: Parser, help: str) -> Any:
    """A TOML table's key: its default, the parser its value must pass (`config_file.section`),
    its help."""
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


# What a token's scopes may name: every method this gateway serves, or "*" (all of them).
SCOPES = ("*",) + METHODS


@dataclass(frozen=True)
class TokenRule:
    name: str
    sha256: str
    scopes: tuple[str, ...]
    max_streams: int = 0  # open streams with this token across workers; 0: no limit
    expires: float | None = None  # when the token stops opening the door (Unix seconds); None: never


@dataclass(frozen=True)
class Jwt:
    """[network.authentication.jwt]: JWT bearer tokens the application's backend mints,
    verified against the key file's key or keys (gateway/config/jwt/keys.py). `key` is the key
    file's content, read by `jwt.table.jwt_table` (and again by a reload), never a
    TOML key and never shown."""

    key_file: str = _setting("", parse_text, "the HS256/384/512 secret, the PEM public key (RS*, PS*, "
                             "ES*, EdDSA; one key a file), or a JWKS document ({\"keys\": [...]}, each key "
                             "named by its kid, which a token's header picks) that tokens are verified "
                             "with; required, unless jwks_url")
    algorithms: tuple[str, ...] = _setting((), parse_algorithms,
                                           "the algorithms a token may be signed with, such as "
                                           "[\"ES256\"]; required, never taken from a token's header")
    jwks_url: str = _setting("", parse_jwks_url, "instead of key_file: the https:// URL of a "
                             "JWKS, fetched by the gateway at start, every 5 minutes and when a token "
                             "names a kid it lacks (at most every 5 s)")
    issuer: str = _setting("", parse_text, "when set, a token's `iss` must be this")
    audience: str = _setting("", parse_text, "when set, a token's `aud` must name this; unset, "
                             "a token that carries `aud` is refused (RFC 7519 4.1.3)")
    key: str = field(default="", repr=False)


RATE = "a rate above 0"


@dataclass(frozen=True)
class Config:
    """Every resolved setting, built by `config_resolve.resolve`; each option field declares
    itself (`option`). A None default is either off (no --upstream, no TLS) or found at start (`found`: resolved
    by gateway/config/found.py). A TOML table's keys have their defaults in Lifecycle and
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
    max_lapped_replay_bytes: int = option(
        LAPPED_REPLAY_BYTES, parse_positive_int, "BYTES",
        "per worker: what replays the ring has lapped may keep alive beyond its window; past it, "
        "the streams of the oldest lapped replays end (access reason lapped)")
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
        None, parse_text, "FILE", "PEM certificate chain: with --keyfile, serve HTTPS (ALPN h2 and http/1.1) on --bind",
        rereads=True)
    keyfile: str | None = option(None, parse_text, "FILE", "PEM private key of --certfile", rereads=True)
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
    allowed_origins: tuple[str, ...] = option(
        "", parse_origins, "ORIGIN[,ORIGIN...]",
        "web origins (https://app.example) whose pages may call the gateway from a browser (CORS); "
        "a request from any other origin is refused 403; empty: no CORS, Origin is not read",
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
    jwt: Jwt | None = None

    @property
    def authenticated(self) -> bool:
        """Whether the door asks for a bearer token (static tokens, JWTs or both)."""
        return bool(self.tokens) or self.jwt is not None

    def to_dict(self) -> dict:
        """A plain, picklable/JSON-able form for child processes."""
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> Config:
        data = dict(data)
        data["bind"] = tuple(data["bind"])
        if data["metrics_bind"] is not None:
            data["metrics_bind"] = tuple(data["metrics_bind"])
        data["lifecycle"] = Lifecycle(**data["lifecycle"])
        data["inference"] = Inference(**data["inference"])
        data["trusted_proxies"] = tuple(data["trusted_proxies"])
        data["allowed_origins"] = tuple(data["allowed_origins"])
        data["tokens"] = tuple(TokenRule(**{**t, "scopes": tuple(t["scopes"])}) for t in data["tokens"])
        if data.get("jwt") is not None:
            data["jwt"] = Jwt(**{**data["jwt"], "algorithms": tuple(data["jwt"]["algorithms"])})
        return cls(**data)


OPTIONS: tuple[Option, ...] = tuple(
    Option(f.name.replace("_", "-"), **f.metadata["option"])
    for f in dataclasses.fields(Config) if "option" in f.metadata)
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


def default_words(opt: Option) -> Any:
    """An option's default as --help and the docs say it."""
    return opt.found if opt.default is None and opt.found else opt.default


def default_value(opt: Option) -> Any:
    return None if opt.default is None else opt.parse(opt.default)

