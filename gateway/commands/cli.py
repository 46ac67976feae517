"""`mur-gateway` / `python -m gateway`: resolve the configuration, then run the supervisor, or
only judge it (`--check`, `--print-config`: gateway/config/check.py); `mur-gateway token new
NAME` makes a token instead (gateway/commands/token.py)."""

from __future__ import annotations

import sys

from gateway.config import options as config_module
from gateway.config import check as config_check
from gateway.config import resolve as config_resolve


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["token"]:
        from gateway.commands import token as token_command

        return token_command.main(words[1:])
    resolution = config_resolve.resolve(argv)
    if resolution.args is not None and (resolution.args.check or resolution.args.print_config):
        return config_check.run(resolution)
    if resolution.config is None:  # every problem, one line each, as --check prints them
        return config_check.refuse(resolution.problems)
    config = resolution.config
    from gateway.supervisor import process as supervisor

    try:
        return supervisor.run(config, argv)
    except config_module.ConfigError as exc:  # an address that cannot be bound
        print(f"mur-gateway: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # no memory for the segments, ...
        print(f"mur-gateway: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # the platform check
        print(f"mur-gateway: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
