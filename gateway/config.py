"""Every setting of the gateway in one place: option, environment variable, TOML key, default.

A value is taken from the command line, else from ``MUR_GATEWAY_<NAME>``, else from the
``--config`` TOML file, else the default (README "Options"). A value that does not parse is a
``ConfigError`` whose message names the option and where the value came from; the CLI prints
it on one line and exits 2.
"""

from __future__ import annotations

import argparse
import os
import socket
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from gateway import tls
from gateway.config_values import (MAX_JSON_DEPTH, parse_hostport, parse_log_level,
                                   parse_metrics_bind, parse_nonnegative_float,
                                   parse_nonnegative_int, parse_on_off, parse_positive_float,
                                   parse_positive_int, parse_positive_int_up_to, parse_networks,
                                   parse_url)
from gateway.control_words import MAX_WORKERS


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
    Option("workers", parse_positive_int_up_to(MAX_WORKERS, " (the ring has control words for that many)"),
           None, "N", f"worker processes, at most {MAX_WORKERS}"),
    Option("metrics-bind", parse_metrics_bind, "127.0.0.1:9464", "HOST:PORT",
           "the Prometheus /metrics endpoint, or 'off'"),
    Option("heartbeat-interval", parse_positive_float, 15.0, "SECONDS", "heartbeat period"),
    Option("upstream", parse_url, None, "URL", "front a real capsule at URL"),
    Option("upstream-token", str, None, "TOKEN", "bearer token presented upstream"),
    Option("sim-load", parse_nonnegative_float, 0.0, "RATE",
           "embedded capsule: text frames per second on a long-lived task"),
    Option("sim-load-size", parse_nonnegative_int, 0, "BYTES", "pad each load frame to BYTES"),
    Option("log-level", parse_log_level, "info", "LEVEL", "debug, info, warning or error"),
    Option("max-body-bytes", parse_positive_int, 1 << 20, "BYTES",
           "largest JSON-RPC request body accepted (413 beyond)"),
    Option("max-header-bytes", parse_positive_int, 16384, "BYTES",
           "largest request head: target plus header names and values (431 beyond)"),
    Option("max-headers", parse_positive_int, 100, "N", "most request header lines (431 beyond)"),
    Option("max-json-depth", parse_positive_int_up_to(MAX_JSON_DEPTH), 32, "LEVELS",
           "deepest nesting of a JSON-RPC request's arrays and objects (-32600 beyond)"),
    Option("max-rpc-id-chars", parse_positive_int, 256, "CHARS",
           "longest JSON-RPC string id (-32600 beyond)"),
    Option("max-connections", parse_positive_int, None, "N",
           "requests in progress per worker, open streams included (503 with Retry-After beyond)"),
    Option("listen-backlog", parse_positive_int, None, "N",
           "accept queue of the listening socket: connections the kernel holds until a worker "
           "accepts one (never more than net.core.somaxconn)"),
    Option("header-timeout", parse_positive_float, 10.0, "SECONDS",
           "a connection that has not sent a whole request head (slow headers, idle keep-alive) "
           "is closed after this"),
    Option("body-timeout", parse_positive_float, 30.0, "SECONDS",
           "a request body not received in full within this is answered 408"),
    Option("worker-stall-timeout", parse_nonnegative_float, 5.0, "SECONDS",
           "a worker whose event loop has not turned for this long is killed and replaced "
           "(0: never; a stopped worker, SIGSTOP, is left alone)"),
    Option("certfile", str, None, "FILE",
           "PEM certificate chain: with --keyfile, serve HTTPS (ALPN h2 and http/1.1) on --bind"),
    Option("keyfile", str, None, "FILE", "PEM private key of --certfile"),
    Option("watch-page", parse_on_off, "on", "on|off", "serve the live watch page at GET /watch"),
    Option("access-log", parse_on_off, "on", "on|off",
           "one JSON line per request and per stream's end, on stderr"),
    Option("upstream-cacert", str, None, "FILE",
           "PEM CA certificates an https:// upstream must chain to (default: the system store)"),
    Option("max-streams-per-client", parse_nonnegative_int, 0, "N",
           "open streams per client address (IPv4 /32, IPv6 /64) across workers; 0: no limit (429 beyond)"),
    Option("client-request-rate", parse_nonnegative_float, 0.0, "R",
           "requests a second per client address to POST / and attachments; 0: off (429 beyond)"),
    Option("client-request-burst", parse_nonnegative_float, None, "B",
           "the per-client request bucket's size"),
    Option("trusted-proxies", parse_networks, "", "CIDR[,CIDR...]",
           "peers whose X-Forwarded-For or Forwarded: for= names the client"),
)


@dataclass(frozen=True)
class Lifecycle:
    task_acceptance: str = "queue"
    max_queued_tasks: int = 64
    max_running_tasks: int = 16
    conversation: str = "stateless"
    max_task_reopens: int = 3


@dataclass(frozen=True)
class Inference:
    transport: str = "http"
    max_turns: int = 20


@dataclass(frozen=True)
class TokenRule:
    name: str
    sha256: str
    scopes: tuple[str, ...]
    max_streams: int = 0  # open streams with this token across workers; 0: no limit


@dataclass(frozen=True)
class Config:
    """Every resolved setting. The options' defaults live in OPTIONS alone: `load` builds this."""

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


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    return parser


def _load_toml(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML: {exc}") from None


def _section(data: dict, key: str, cls: type, choices: dict[str, tuple]) -> Any:
    raw = data.get(key, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"config [{key}]: must be a table")
    defaults = cls()
    values = {}
    for name, value in raw.items():
        if not hasattr(defaults, name):
            raise ConfigError(f"config [{key}] {name}: unknown setting")
        expected = type(getattr(defaults, name))
        if expected is int and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ConfigError(f"config [{key}] {name}: must be a non-negative integer")
        if expected is str and not isinstance(value, str):
            raise ConfigError(f"config [{key}] {name}: must be a string")
        if name in choices and value not in choices[name]:
            raise ConfigError(f"config [{key}] {name}: must be one of {', '.join(choices[name])}")
        values[name] = value
    return cls(**values)


def _tokens(data: dict) -> tuple[TokenRule, ...]:
    network = data.get("network", {})
    auth = network.get("authentication") if isinstance(network, dict) else None
    if auth is None:
        return ()
    entries = auth.get("tokens", []) if isinstance(auth, dict) else None
    if not isinstance(entries, list):
        raise ConfigError("config [network.authentication] tokens: must be an array of tables")
    rules = []
    for i, entry in enumerate(entries):
        where = f"config [[network.authentication.tokens]] #{i + 1}"
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if not isinstance(digest, str) or len(digest) != 64 or any(
            c not in "0123456789abcdef" for c in digest.lower()
        ):
            raise ConfigError(f"{where} sha256: must be 64 hex digits")
        scopes = entry.get("scopes", [])
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise ConfigError(f"{where} scopes: must be an array of strings")
        max_streams = entry.get("max_streams", 0)
        if not isinstance(max_streams, int) or isinstance(max_streams, bool) or max_streams < 0:
            raise ConfigError(f"{where} max_streams: must be a whole number, 0 or more")
        rules.append(TokenRule(str(entry.get("name", f"token{i + 1}")), digest.lower(), tuple(scopes),
                               max_streams))
    return tuple(rules)


def load(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Resolve every setting; raises ConfigError naming the bad one."""
    environ = os.environ if environ is None else environ
    args = argument_parser().parse_args(argv)
    path = args.config or environ.get("MUR_GATEWAY_CONFIG")
    data = _load_toml(path) if path else {}
    known = {opt.name for opt in OPTIONS} | {opt.attr for opt in OPTIONS}
    for key, value in data.items():
        if not isinstance(value, dict) and key not in known:
            raise ConfigError(f"config {key}: unknown setting")
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
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{origin}: {raw!r} is not valid: {exc}") from None
    problem = (tls.certificate_problem(values["certfile"], values["keyfile"])
               or tls.upstream_cacert_problem(values["upstream_cacert"]))
    if problem is not None:
        raise ConfigError(problem)
    if values["workers"] is None:
        values["workers"] = min(os.cpu_count() or 1, MAX_WORKERS)
    lifecycle = _section(data, "lifecycle", Lifecycle, {
        "task_acceptance": ("queue", "none"), "conversation": ("stateless", "threaded")})
    inference = _section(data, "inference", Inference, {"transport": ("http", "process")})
    return Config(**values, lifecycle=lifecycle, inference=inference, tokens=_tokens(data))


# Adaptive write coalescing (gateway/worker/coalesce.py): when the hub's pass over its open
# streams fills a large share of the time between passes, the next pass waits a little so
# each write carries more events; the wait falls back to 0 when the share drops. The cap
# bounds the latency it adds (nchan's p99 is about 100 ms at 1,000 watchers x 100 events/s).
COALESCE_BUSY_SHARE = 0.30   # pass / interval at or above which the delay grows
COALESCE_IDLE_SHARE = 0.10   # at or below which it shrinks
COALESCE_STEP_SECONDS = 0.001  # added per busy pass
COALESCE_DECAY = 0.5         # the delay kept per light pass
COALESCE_FLOOR_SECONDS = 0.0005  # a shrunk delay under this is 0: light loads go out at once
COALESCE_MAX_SECONDS = 0.015  # never more
# A wake-up finding this many events not yet copied passes at once, delay or not: a burst
# must not carry a stream toward the 128-event lag limit (or the ring's end) while it waits.
COALESCE_MAX_EVENTS = 32
# A worker hands glibc's free heap back every this many seconds (gateway/worker/heap.py).
HEAP_TRIM_SECONDS = 5.0
