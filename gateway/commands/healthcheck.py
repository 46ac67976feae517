"""`python -m gateway.commands.healthcheck`: exit 0 when the gateway in this container is ready.

The image's HEALTHCHECK runs it. It resolves the listening address exactly as the gateway
does (``MUR_GATEWAY_BIND``, else the ``MUR_GATEWAY_CONFIG`` file, else the default), so a
container moved to another port stays healthy without editing the image; an address given
only as a command-line flag is not seen here, so containers set the port by environment.
A wildcard bind is probed on loopback. Exit 1 (with one line on stderr) when ``/readyz``
does not answer 200 within the timeout.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from gateway.config import options as config_module
from gateway.config import resolve as config_resolve
from gateway.tuning import HEALTHCHECK_SECONDS

WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def readyz_url(bind: tuple[str, int]) -> str:
    host, port = bind
    host = WILDCARDS.get(host, host)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/readyz"


def main() -> int:
    try:
        url = readyz_url(config_resolve.load([]).bind)
        with urllib.request.urlopen(url, timeout=HEALTHCHECK_SECONDS) as answer:
            status = answer.status
    except config_module.ConfigError as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"healthcheck: {url} answered {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
