"""How each option's text becomes its value: one parser per kind of setting.

A parser takes what the command line, the environment or the TOML file gave and answers the
value, or raises ValueError whose message says, in words, what is wrong with the value and
what the setting accepts (``'two' is not a whole number; it accepts 1 to 64``); `config_resolve`
puts the option's name in front. The embedded capsule's `/scenario` options use the same
parsers, so a value is refused in the same words wherever it is written.
"""

from __future__ import annotations

import ipaddress
import math
import urllib.parse
from typing import Any, Callable

Parser = Callable[[Any], Any]
PORTS = "1-65535, or 0 to pick one"


def shown(value: Any) -> str:
    """A value as the operator wrote it: text quoted, TOML's booleans as TOML spells them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def _bounds(low: float, high: float | None, low_included: bool = True) -> str:
    """What a numeric setting accepts, in words: "1 to 64", "0 or more", "more than 0"."""
    def spelled(n: float) -> str:
        return str(n) if isinstance(n, int) else f"{n:g}"
    if high is not None:
        return f"{spelled(low)} to {spelled(high)}"
    return f"{spelled(low)} or more" if low_included else f"more than {spelled(low)}"


def whole_number(low: int = 0, high: int | None = None, why: str = "") -> Parser:
    """Integers from `low` to `high` (None: no limit), given as text or a TOML integer (never a
    boolean or a fraction); `why` follows a refusal of one too large."""
    accepts = _bounds(low, high)

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"{shown(value)} is not a whole number; it accepts {accepts}")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{shown(value)} is not a whole number; it accepts {accepts}") from None
        if number < low:
            raise ValueError(f"{shown(value)} is out of range; it accepts {accepts}")
        if high is not None and number > high:
            raise ValueError(f"{shown(value)} is out of range; it accepts {accepts}{why}")
        return number
    return _numeric(parse, f"a whole number, {accepts}")


def number(unit: str = "", low: float = 0.0, low_included: bool = True,
           high: float | None = None) -> Parser:
    """Finite numbers from `low` (or above it, when not `low_included`) to `high`, as text or a
    TOML number; `unit` names what they count ("seconds")."""
    kind = f"a number of {unit}" if unit else "a number"
    accepts = _bounds(low, high, low_included)

    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"{shown(value)} is not {kind}; it accepts {accepts}")
        try:
            result = float(value)
        except ValueError:
            raise ValueError(f"{shown(value)} is not {kind}; it accepts {accepts}") from None
        if not math.isfinite(result):
            raise ValueError(f"{shown(value)} is not {kind}; it accepts {accepts}")
        if result < low or (result == low and not low_included) or (high is not None and result > high):
            raise ValueError(f"{shown(value)} is out of range; it accepts {accepts}")
        return result
    return _numeric(parse, f"{kind}, {accepts}")


def _numeric(parse: Parser, kind: str) -> Parser:
    """Mark `parse` as a number's (`file_value`), `kind` saying which in words: text is what
    the command line and the environment give, never what a file writes for a number."""
    parse.toml_kind = kind  # type: ignore[attr-defined]
    return parse


def file_value(parse: Parser, value: Any) -> Any:
    """A TOML file's `value` through `parse`, refused first when it is text where the setting
    is a number: `heartbeat-interval = "15"` is a quoted string, a TOML type mistake that would
    hide a typo such as "1O"; any other wrong type is the parser's own refusal."""
    if isinstance(value, str) and hasattr(parse, "toml_kind"):
        raise ValueError(f"{shown(value)} is text; the file takes {parse.toml_kind}, "
                         "written without quotes")
    return parse(value)


parse_positive_int = whole_number(1)
parse_nonnegative_int = whole_number(0)
parse_positive_seconds = number("seconds", 0.0, low_included=False)
parse_nonnegative_seconds = number("seconds")
parse_nonnegative_float = number()


def parse_port(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"port {shown(text)} is not a number; it accepts {PORTS}")
    port = int(text)
    if port > 65535:
        raise ValueError(f"port {port} is out of range; it accepts {PORTS}")
    return port


def parse_hostport(value: Any, also: str = "") -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets); `also` adds to what a refusal says it accepts."""
    host, sep, port = (value if isinstance(value, str) else "").rpartition(":")
    if not sep or not host.strip("[]"):
        raise ValueError(f"{shown(value)} is not HOST:PORT; it accepts an address such as "
                         f"127.0.0.1:52222{also}")
    return host.strip("[]"), parse_port(port)


def parse_metrics_bind(value: Any) -> tuple[str, int] | None:
    if isinstance(value, str) and value.strip().lower() == "off":
        return None
    return parse_hostport(value, ", or off")


def one_of(words: tuple[str, ...], kind: str = "") -> Parser:
    """One of `words`, matched without regard to case or surrounding space; `kind` names them
    ("a log level")."""
    accepts = ", ".join(words[:-1]) + f" or {words[-1]}"

    def parse(value: Any) -> str:
        word = value.strip().lower() if isinstance(value, str) else None
        if word not in words:
            raise ValueError(f"{shown(value)} is not {kind}; it accepts {accepts}" if kind
                             else f"{shown(value)} is not {accepts}")
        return word
    return parse


LOG_LEVELS = ("debug", "info", "warning", "error")
parse_log_level = one_of(LOG_LEVELS, "a log level")
_on_off = one_of(("on", "off"))


def parse_on_off(value: Any) -> bool:
    """on or off, or a TOML boolean."""
    return value if isinstance(value, bool) else _on_off(value) == "on"


def parse_text(value: Any) -> str:
    """A file name or a token: text only (a TOML number or array is a mistake, not a name)."""
    if not isinstance(value, str):
        raise ValueError(f"{shown(value)} is not text; write it in quotes")
    return value


def parse_secret(value: Any) -> str:
    """A credential (--upstream-token): text only, like `parse_text`, but its refusal never
    shows the value: the line reaches stderr at start, and the supervisor's log at a reload."""
    if not isinstance(value, str):
        raise ValueError("the value is not text; write it in quotes (not shown: it is a credential)")
    return value


def parse_url(value: Any) -> str:
    """An upstream's http(s)://HOST[:PORT] with a host and a port that can be dialled. Nothing
    after the authority: the gateway calls the upstream's own paths (`/`, its card), so a path,
    query or fragment would be silently ignored; no user:password@, which would reach the logs
    (--upstream-token carries the credential), and which is never echoed back."""
    text = parse_text(value).strip()
    accepts = "it accepts http(s)://HOST[:PORT]"
    parts = urllib.parse.urlsplit(text)
    if "@" in parts.netloc:  # before any refusal that would show the URL, credentials included
        raise ValueError("a URL must not carry credentials (user:password@): use --upstream-token")
    if parts.scheme not in ("http", "https") or not text.lower().startswith(parts.scheme + "://"):
        raise ValueError(f"{shown(text)} is not an http:// or https:// URL; {accepts}")
    if not parts.hostname:
        raise ValueError(f"{shown(text)} has no host; {accepts}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        raise ValueError(f"{shown(text)} has no usable port; it accepts 1-65535")
    if parts.path.strip("/") or parts.query or parts.fragment:  # not shown: a query may hold a key
        raise ValueError(f"{shown(parts.scheme + '://' + parts.netloc + '/...')} must be only "
                         "scheme://HOST[:PORT] (what follows the port is not shown): the gateway "
                         "calls the upstream's own paths")
    return f"{parts.scheme}://{parts.netloc}"


# orjson refuses to encode more than 254 levels; a request is re-encoded for the sequencer,
# and its params travel inside control messages and stream events that add levels of their own.
MAX_JSON_DEPTH = 200


def _text_items(text: Any, accepts: str) -> list[str]:
    """The items of a comma-separated list or a TOML array, stripped, empty ones dropped; an
    item that is not text is refused (`accepts`: what the list holds, in words)."""
    items = text if isinstance(text, list) else text.split(",") if isinstance(text, str) else [text]
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{shown(item)} is not text; it accepts {accepts}")
    return [item.strip() for item in items if item.strip()]


DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_origins(text: Any) -> tuple[str, ...]:
    """A comma-separated list of web origins (scheme://host[:port], as a browser's `Origin`
    header names a page's), or a TOML array of them, each as a browser serializes it (lower
    case, no default port) so that the door compares them with the header byte for byte;
    empty is none. "*" and "null" are refused: every origin is named."""
    origins: list[str] = []
    for item in _text_items(text, 'origins in quotes (such as "https://app.example")'):
        accepts = "an origin is scheme://host[:port], such as https://app.example"
        parts = urllib.parse.urlsplit(item)
        if parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
            raise ValueError(f"{shown(item)} is not an http:// or https:// origin; {accepts}")
        if parts.path not in ("", "/") or parts.query or parts.fragment or item.endswith("?") or item.endswith("#"):
            raise ValueError(f"{shown(item)} has a path, query or fragment; {accepts}")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"{shown(item)} has no valid port; {accepts}") from None
        scheme, host = parts.scheme.lower(), parts.hostname.lower()
        if ":" in host:
            host = f"[{host}]"
        origin = f"{scheme}://{host}" if port in (None, DEFAULT_PORTS[scheme]) else f"{scheme}://{host}:{port}"
        if origin not in origins:
            origins.append(origin)
    return tuple(origins)


def parse_networks(text: Any) -> tuple[str, ...]:
    """A comma-separated list of CIDR ranges (a bare address is its own /32 or /128), or a TOML
    array of them, as the canonical strings of `ipaddress` networks; empty is none."""
    networks = []
    for item in _text_items(text, 'address ranges in quotes (CIDR such as "10.0.0.0/8")'):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(f"{item!r} is not an address range (CIDR such as 10.0.0.0/8)") from None
    return tuple(networks)
