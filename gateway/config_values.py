"""How each option's text becomes its value: one parser per kind of setting.

A parser takes what the command line, the environment or the TOML file gave and answers the
value, or raises ValueError saying what is expected; `config.load` names the option and
where the value came from around that message.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import Any, Callable


def parse_hostport(text: str) -> tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError("expected HOST:PORT")
    return host.strip("[]"), int(port)


def parse_metrics_bind(text: str) -> tuple[str, int] | None:
    return None if str(text).strip().lower() == "off" else parse_hostport(text)


def parse_positive_int(text: Any) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def parse_positive_int_up_to(limit: int, why: str = "") -> Callable[[Any], int]:
    """A parser of integers from 1 to `limit`; `why` follows the refusal."""
    def parse(text: Any) -> int:
        value = parse_positive_int(text)
        if value > limit:
            raise ValueError(f"must be at most {limit}{why}")
        return value
    return parse


def parse_nonnegative_int(text: Any) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def parse_positive_float(text: Any) -> float:
    value = float(text)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return value


# orjson refuses to encode more than 254 levels; a request is re-encoded for the sequencer,
# and its params travel inside control messages and stream events that add levels of their own.
MAX_JSON_DEPTH = 200


def parse_nonnegative_float(text: Any) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError("must be 0 or more")
    return value


LOG_LEVELS = ("debug", "info", "warning", "error")


def parse_log_level(text: str) -> str:
    level = str(text).lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
    return level


def parse_on_off(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    if word not in ("on", "off"):
        raise ValueError("must be on or off")
    return word == "on"


def parse_url(text: str) -> str:
    """An upstream's http(s)://HOST[:PORT] with a host and a port that can be dialled. Nothing
    after the authority: the gateway calls the upstream's own paths (`/`, its card), so a path,
    query or fragment would be silently ignored; no user:password@, which would reach the logs
    (--upstream-token carries the credential)."""
    text = str(text).strip()
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not text.lower().startswith(parts.scheme + "://"):
        raise ValueError("must be an http:// or https:// URL")
    if "@" in parts.netloc:
        raise ValueError("must not carry credentials (user:password@): use --upstream-token")
    if not parts.hostname:
        raise ValueError("has no host (expected http(s)://HOST[:PORT])")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        raise ValueError("has no usable port (expected 1 to 65535)")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ValueError("must be only scheme://HOST[:PORT]: the gateway calls the upstream's own paths")
    return f"{parts.scheme}://{parts.netloc}"


def parse_networks(text: Any) -> tuple[str, ...]:
    """A comma-separated list of CIDR ranges (a bare address is its own /32 or /128), as the
    canonical strings of `ipaddress` networks; empty is none."""
    items = text if isinstance(text, list) else str(text).split(",")
    networks = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(f"{item!r} is not an address range (CIDR such as 10.0.0.0/8)") from None
    return tuple(networks)
