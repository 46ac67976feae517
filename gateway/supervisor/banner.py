"""The start-up banner: one log line that says what this gateway is.

An operator reads from its first line which build runs, whether it serves the embedded
capsule or fronts one (and which), how many watchers it can hold and what bounds that
(descriptors or memory: docs/sizing.md says what to raise), whether the door is public,
whether it speaks TLS and where its metrics are. Nothing secret goes in it: the upstream's
URL is only scheme://HOST:PORT (config_values.parse_url refuses credentials), and tokens are
only counted.
"""

from __future__ import annotations

from gateway import version
from gateway.config import tls
from gateway.config.options import Config


def door(config: Config) -> str:
    """"public", or how many tokens the door knows, and "jwt" with its algorithms."""
    if not config.authenticated:
        return "public"
    count = len(config.tokens)
    kinds = [f"{count} token{'s' if count != 1 else ''}"] if count else []
    if config.jwt is not None:
        kinds.append("jwt " + "/".join(config.jwt.algorithms))
    return ", ".join(kinds)


def fields(config: Config, *, listening: str, metrics: str | None, capacity_bound: str,
           descriptors: int) -> dict:
    """The banner's fields. `config.max_connections` is resolved (per worker); `capacity_bound`
    says what set it: "descriptors", "memory" or "--max-connections"."""
    mode = {"mode": "embedded"} if config.upstream is None else {
        "mode": "upstream", "upstream": config.upstream}
    return {
        "version": version(),
        **mode,
        "listening": listening,
        "workers": config.workers,
        "max_connections_per_worker": config.max_connections,
        "capacity": config.workers * (config.max_connections or 0),  # resolved: never None here
        "capacity_bound": capacity_bound,
        "descriptors": descriptors,
        "backlog": config.listen_backlog,
        "door": door(config),
        "tls": "on" if tls.enabled(config.certfile, config.keyfile) else "off",
        "metrics": metrics or "off",
    }
