"""`mur-gateway token new` (gateway/token_command.py): the entry it prints loads as the config
file's tokens do, and the token it printed once authenticates against a real gateway with
exactly the scopes asked for; bad scopes are refused, exit 2."""

from __future__ import annotations

import subprocess
import sys

from gateway_harness import ROOT, running_gateway
from http_client import rpc


def token_new(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "token", "new", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)


def test_the_printed_entry_loads_and_the_printed_token_authenticates(tmp_path):
    done = token_new("ops", "--scopes", "murmur.WatchSession", "ListTasks")
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    token, toml = lines[1], done.stdout[done.stdout.index("[[network.authentication.tokens]]"):]
    assert token not in toml and len(token) >= 43
    config = tmp_path / "door.toml"
    config.write_text(toml)
    with running_gateway("--config", str(config), workers=1, tmp_path=tmp_path) as gw:
        assert rpc(gw.port, "ListTasks", {}, token=token)[0] == 200
        assert rpc(gw.port, "GetTask", {"id": "x"}, token=token)[0] == 403  # not a scope asked for
        assert rpc(gw.port, "ListTasks", {}, token=token + "x")[0] == 401
    assert token_new("ops").stdout.splitlines()[1] != token  # fresh each time


def test_a_scope_the_gateway_does_not_serve_is_refused_exit_2():
    """[claim: config-typo]"""
    done = token_new("ops", "--scopes", "Bogus")
    assert done.returncode == 2 and done.stdout == ""
    assert "--scopes: 'Bogus' is not a method this gateway serves" in done.stderr
