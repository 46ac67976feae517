"""[network.authentication.jwt] read from the file: its settings (declared as
gateway/config/options.py's `Jwt`), its key file read and fitted to its algorithms (keys.py).
A table that could verify nothing is a ConfigError, at --check, at start and at a reload."""

from __future__ import annotations

import dataclasses

from gateway.config.authentication import authentication_table
from gateway.config.file import section
from gateway.config.jwt.keys import key_problem
from gateway.config.options import ConfigError, Jwt


def jwt_table(data: dict) -> Jwt | None:
    """[network.authentication.jwt], its key file read and fitted to its algorithms; None without it."""
    auth = authentication_table(data)
    if auth is None or "jwt" not in auth:
        return None
    settings = section(auth, "network.authentication.jwt", Jwt)
    key, problem = key_problem(settings.key_file, settings.algorithms, settings.jwks_url)
    if problem is not None:
        raise ConfigError(problem)
    return dataclasses.replace(settings, key=key)
