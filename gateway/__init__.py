"""murmur-gateway: a fan-out gateway for the murmur capsule streaming protocol."""

from __future__ import annotations

import os

DISTRIBUTION = "murmur-gateway"


def version() -> str:
    """The installed distribution's version; from a source tree that was never installed, the
    version its pyproject.toml declares; else "unknown"."""
    import tomllib  # here, not at the top: every process imports this package
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "pyproject.toml"), "rb") as fh:
            return str(tomllib.load(fh)["project"]["version"])
    except (OSError, ValueError, KeyError):
        return "unknown"
