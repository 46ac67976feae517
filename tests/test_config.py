"""Configuration: command line over environment over TOML file over defaults; bad values refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway import config
from support import ROOT


def test_defaults_are_the_interfaces():
    cfg = config.load([], environ={})
    assert cfg.bind == ("127.0.0.1", 52222)
    assert cfg.metrics_bind == ("127.0.0.1", 9464)
    assert cfg.heartbeat_interval == 15.0 and cfg.sim_load == 0 and cfg.log_level == "info"
    assert cfg.workers >= 1 and cfg.upstream is None and cfg.tokens == ()
    assert cfg.lifecycle.task_acceptance == "queue" and cfg.lifecycle.max_queued_tasks == 64
    assert cfg.inference.max_turns == 20


def test_precedence_cli_over_env_over_file(tmp_path):
    toml = tmp_path / "gw.toml"
    toml.write_text('heartbeat-interval = 3\nsim-load = 7\nworkers = 3\n'
                    '[lifecycle]\nconversation = "threaded"\n')
    env = {"MUR_GATEWAY_SIM_LOAD": "9", "MUR_GATEWAY_WORKERS": "5"}
    cfg = config.load(["--config", str(toml), "--workers", "2"], environ=env)
    assert cfg.workers == 2  # command line
    assert cfg.sim_load == 9  # environment over file
    assert cfg.heartbeat_interval == 3  # file over default
    assert cfg.lifecycle.conversation == "threaded"
    assert config.load([], environ={"MUR_GATEWAY_METRICS_BIND": "off"}).metrics_bind is None


def test_config_round_trips_to_child_processes(tmp_path):
    toml = tmp_path / "gw.toml"
    toml.write_text('[[network.authentication.tokens]]\nname = "ops"\nsha256 = "' + "a" * 64 +
                    '"\nscopes = ["*"]\n')
    cfg = config.load(["--config", str(toml)], environ={})
    assert config.Config.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("argv, env, toml, names", [
    (["--workers", "0"], {}, None, "--workers"),
    (["--bind", "nowhere"], {}, None, "--bind"),
    (["--heartbeat-interval", "-1"], {}, None, "--heartbeat-interval"),
    ([], {"MUR_GATEWAY_LOG_LEVEL": "loud"}, None, "MUR_GATEWAY_LOG_LEVEL"),
    ([], {}, "sim-load = \"fast\"\n", "config sim-load"),
    ([], {}, "[lifecycle]\ntask_acceptance = \"maybe\"\n", "task_acceptance"),
    ([], {}, "[lifecycle]\nmax_queued_tasks = -3\n", "max_queued_tasks"),
    ([], {}, "bogus = 1\n", "bogus"),
    ([], {}, "this is = not toml = \n", "not valid TOML"),
    ([], {}, "[[network.authentication.tokens]]\nsha256 = \"xyz\"\n", "sha256"),
])
def test_bad_values_are_refused_naming_the_setting(tmp_path, argv, env, toml, names):
    if toml is not None:
        path = tmp_path / "gw.toml"
        path.write_text(toml)
        argv = argv + ["--config", str(path)]
    with pytest.raises(config.ConfigError) as refused:
        config.load(argv, environ=env)
    assert names in str(refused.value)


def test_cli_refuses_at_start_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gateway", "--heartbeat-interval", "zero"],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "mur-gateway: --heartbeat-interval: 'zero' is not valid: could not convert string to float: 'zero'"]
    result = subprocess.run([sys.executable, "-m", "gateway", "--config", str(tmp_path / "missing.toml")],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "missing.toml" in result.stderr and len(result.stderr.splitlines()) == 1


def test_more_workers_than_the_ring_has_control_words_for_stops_the_start():
    from gateway.control_words import MAX_WORKERS

    result = subprocess.run([sys.executable, "-m", "gateway", "--workers", str(MAX_WORKERS + 1),
                             "--metrics-bind", "off"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"mur-gateway: --workers: '{MAX_WORKERS + 1}' is not valid: must be at most {MAX_WORKERS} "
        "(the ring has control words for that many)"]
    assert config.load(["--workers", str(MAX_WORKERS)], environ={}).workers == MAX_WORKERS


def test_every_option_default_is_written_once():
    """OPTIONS holds each default; Config has a field for every option and no default of its own."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(config.Config)}
    for opt in config.OPTIONS:
        assert opt.attr in fields, opt.name
        assert fields[opt.attr].default is dataclasses.MISSING, opt.name
