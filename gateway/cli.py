"""`mur-gateway` / `python -m gateway`: resolve the configuration, then run the supervisor."""

from __future__ import annotations

import sys

from gateway import config as config_module


def main(argv: list[str] | None = None) -> int:
    try:
        config = config_module.load(argv)
    except config_module.ConfigError as exc:
        print(f"mur-gateway: {exc}", file=sys.stderr)
        return 2
    from gateway import supervisor

    try:
        return supervisor.run(config, argv)
    except OSError as exc:  # the address is taken, no memory for the segments, ...
        print(f"mur-gateway: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # the platform check
        print(f"mur-gateway: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
