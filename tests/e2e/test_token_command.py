"""`mur-gateway token new` (gateway/commands/token.py): the entry it prints loads as the config
file's tokens do, and the token it printed once authenticates against a real gateway with
exactly the scopes asked for; bad scopes are refused, exit 2. `--expires` is read as the
file's `expires` is and printed as its line; a bad or past one is refused, exit 2."""

from __future__ import annotations

import subprocess
import sys

from gateway.config.resolve import load
from helpers.gateway_harness import ROOT, running_gateway
from helpers.http_client import rpc


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


def test_expires_is_printed_as_the_entry_s_line_and_loads_as_the_file_s(tmp_path):
    done = token_new("ops", "--scopes", "ListTasks", "--expires", "2099-06-01T02:30:00+02:00")
    assert done.returncode == 0 and done.stderr == ""
    toml = done.stdout[done.stdout.index("[[network.authentication.tokens]]"):]
    assert toml.splitlines()[-1] == "expires = 2099-06-01T00:30:00Z"  # the same instant, in UTC
    config = tmp_path / "door.toml"
    config.write_text(toml)
    [rule] = load(["--config", str(config)], {}).tokens
    config.write_text(toml.replace("2099-06-01T00:30:00Z", "2099-06-01T02:30:00+02:00"))  # as given
    assert rule.expires == load(["--config", str(config)], {}).tokens[0].expires
    assert rule.name == "ops" and rule.scopes == ("ListTasks",)


def test_a_bad_or_past_expires_is_refused_exit_2():
    """The command line's `--expires` is refused in the file's words (one parser), and one
    already past is refused: its token would open nothing."""
    for given, words in [
        ("2099-06-01", "--expires: 2099-06-01 is not a date-time with its offset"),
        ("2099-06-01T00:00:00", "--expires: 2099-06-01T00:00:00 is not a date-time with its offset"),
        ("next week", "--expires: 'next week' is not a date-time with its offset"),
        ("2099-06-01T00:00:00Z\nname = 1", "is not a date-time with its offset"),
        ("2020-01-01T00:00:00Z", "--expires: 2020-01-01T00:00:00Z is past; the token would open nothing"),
    ]:
        done = token_new("ops", "--expires", given)
        assert done.returncode == 2 and done.stdout == "", given
        assert words in done.stderr, done.stderr
