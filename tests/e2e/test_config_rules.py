"""Options that need another or exclude one, and the environment's names, checked at start.

An option that would take no effect is refused (exit 2, one line naming it), as
--client-request-burst without a rate always was: a value accepted and ignored is a mistake
the operator cannot see. The rules and the environment's names come from the options' one
declaration (gateway/config/options.py), so a new option gets them without a line here.
"""

from __future__ import annotations

import pytest

from gateway.config import reload as config_reload
from gateway.config import resolve as config_resolve
from helpers.gateway_harness import refused_start, start_refusal as refusal

UPSTREAM = "http://127.0.0.1:9"


@pytest.mark.parametrize("argv, env, line", [
    (["--upstream-token", "secret-value"], {},
     "--upstream-token: takes effect only with --upstream, which is not set"),
    ([], {"MUR_GATEWAY_UPSTREAM_TOKEN": "secret-value"},
     "MUR_GATEWAY_UPSTREAM_TOKEN: takes effect only with --upstream, which is not set"),
    (["--sim-load", "5", "--upstream", UPSTREAM], {},
     "--sim-load: takes effect only without --upstream (it loads the embedded capsule), which is set"),
    (["--sim-load-size", "100"], {},
     "--sim-load-size: takes effect only with --sim-load (a rate above 0), which is not set"),
    ([], {"MUR_GATEWAY_WROKERS": "2"},
     "MUR_GATEWAY_WROKERS: unknown setting (did you mean MUR_GATEWAY_WORKERS?); the environment takes "
     "MUR_GATEWAY_ and an option's long name in capitals, - as _ (mur-gateway --help)"),
])
def test_an_option_that_would_do_nothing_stops_the_start(argv, env, line):
    assert refusal(*argv, env=env) == line


def test_upstream_cacert_without_upstream_stops_the_start(certs):
    assert refusal("--upstream-cacert", certs.cafile) == (
        "--upstream-cacert: takes effect only with --upstream, which is not set")


def test_a_rule_names_where_the_value_came_from(tmp_path):
    path = tmp_path / "gw.toml"
    path.write_text('upstream-token = "secret-value"\nsim_load_size = 64\n')
    assert refused_start("--config", str(path)).stderr.splitlines() == [
        "mur-gateway: config upstream-token: takes effect only with --upstream, which is not set",
        "mur-gateway: config sim_load_size: takes effect only with --sim-load (a rate above 0), which is not set"]
    assert refusal("--config", str(path), env={"MUR_GATEWAY_UPSTREAM": UPSTREAM}) == (
        "config sim_load_size: takes effect only with --sim-load (a rate above 0), which is not set")


def test_each_option_with_what_it_needs_loads(certs):
    cfg = config_resolve.load(["--upstream", UPSTREAM, "--upstream-token", "t", "--upstream-cacert", certs.cafile],
                      environ={})
    assert (cfg.upstream, cfg.upstream_token, cfg.upstream_cacert) == (UPSTREAM, "t", certs.cafile)
    cfg = config_resolve.load(["--sim-load", "2", "--sim-load-size", "64"], environ={})
    assert (cfg.sim_load, cfg.sim_load_size) == (2, 64)
    # A value equal to the default does nothing either way, so it is not refused.
    assert config_resolve.load(["--upstream", UPSTREAM, "--sim-load", "0"], environ={}).sim_load == 0


def test_both_spellings_of_a_top_level_key_are_read_but_not_both_at_once(tmp_path):
    path = tmp_path / "gw.toml"
    path.write_text("max-body-bytes = 4096\nheartbeat_interval = 2\n")
    cfg = config_resolve.load(["--config", str(path)], environ={})
    assert (cfg.max_body_bytes, cfg.heartbeat_interval) == (4096, 2)
    path.write_text("max-body-bytes = 4096\nmax_body_bytes = 8192\n")
    assert refusal("--config", str(path)) == (
        "config max_body_bytes: the same setting as max-body-bytes; write it once")


def test_what_a_reload_applies_is_declared_with_each_option():
    assert set(config_reload.RELOADABLE) == {"tokens", "jwt", "max_streams_per_client", "client_request_rate",
                                            "client_request_burst", "trusted_proxies", "allowed_origins"}

