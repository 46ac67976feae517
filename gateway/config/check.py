"""`mur-gateway --check` and `--print-config`: the configuration judged without starting.

`--check` validates everything a start validates (the file, every option and value, the TLS
pair, the upstream's URL and CA file, the token table: `config_resolve.resolve`) and binds no
port and starts no process, so an operator can run it from `ExecReload` or an init container
before the real reload. It adds one thing a start does not refuse: a certificate past its
notAfter, which every client would refuse. Each problem is one line, as the start prints it
(`refuse`: every problem found, not only the first). A static token whose `expires` is past
is a warning, not a problem: the file is valid and a reload would apply it, but the token
opens nothing, which an operator who just pasted the entry wants to hear.
"""

from __future__ import annotations

import sys
import time

from gateway.config import tls
from gateway.config.options import Config
from gateway.config.printing import print_config, toml_datetime
from gateway.config.resolve import Resolution


def problems(resolution: Resolution, now: float) -> list[str]:
    """Every problem a start would meet, then an expired certificate."""
    config = resolution.config
    if config is None:
        return resolution.problems
    if tls.enabled(config.certfile, config.keyfile):
        expires = tls.not_after(config.certfile)
        if expires is not None and expires <= now:
            return [f"--certfile {config.certfile}: the certificate "
                    f"{tls.expiry_words(config.certfile, now)}; clients refuse it"]
    return []


def warnings(config: Config, now: float) -> list[str]:
    """What is valid but likely a mistake: each static token already past its `expires`."""
    return [f"config [[network.authentication.tokens]] #{number} ({rule.name}) expires: "
            f"{toml_datetime(rule.expires)} is past; the token opens nothing (remove the entry, "
            "or give it a later expires)"
            for number, rule in enumerate(config.tokens, 1) if rule.expires is not None and rule.expires <= now]


def refuse(found: list[str]) -> int:
    """Each problem on stderr, one line each whatever its message quoted; the exit status 2."""
    for line in found:
        print("mur-gateway: " + " ".join(line.splitlines()), file=sys.stderr)
    return 2


def run(resolution: Resolution) -> int:
    """--check or --print-config: print, and answer the exit status (0, or 2 with problems)."""
    now = time.time()
    found = problems(resolution, now)
    if found:
        return refuse(found)
    assert resolution.config is not None and resolution.args is not None  # resolved, with no problems
    for line in warnings(resolution.config, now):
        print("mur-gateway: warning: " + line, file=sys.stderr)
    if resolution.args.print_config:
        sys.stdout.write(print_config(resolution))
    else:
        print("configuration ok")
    return 0
