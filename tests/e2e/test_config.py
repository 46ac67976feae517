"""Configuration: command line over environment over TOML file over defaults; bad values refused."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys

import pytest

from gateway.config import options as config
from gateway.config import authentication as config_authentication
from gateway.config import file as config_file
from gateway.config import resolve as config_resolve
from helpers.gateway_harness import ROOT, judged, refused_start, start_refusal as refusal


def test_defaults_are_the_interfaces():
    cfg = config_resolve.load([], environ={})
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
    cfg = config_resolve.load(["--config", str(toml), "--workers", "2"], environ=env)
    assert cfg.workers == 2  # command line
    assert cfg.sim_load == 9  # environment over file
    assert cfg.heartbeat_interval == 3  # file over default
    assert cfg.lifecycle.conversation == "threaded"
    assert config_resolve.load([], environ={"MUR_GATEWAY_METRICS_BIND": "off"}).metrics_bind is None


def test_config_round_trips_to_child_processes(tmp_path):
    toml = tmp_path / "gw.toml"
    toml.write_text('[[network.authentication.tokens]]\nname = "ops"\nsha256 = "' + "a" * 64 +
                    '"\nscopes = ["*"]\n')
    cfg = config_resolve.load(["--config", str(toml)], environ={})
    assert config.Config.from_dict(cfg.to_dict()) == cfg


BAD_VALUES = [  # (command line, environment, a file or None, what the refusal names)
    (["--workers", "0"], {}, None, "--workers"),
    (["--bind", "nowhere"], {}, None, "--bind"),
    (["--heartbeat-interval", "-1"], {}, None, "--heartbeat-interval"),
    ([], {"MUR_GATEWAY_LOG_LEVEL": "loud"}, None, "MUR_GATEWAY_LOG_LEVEL"),
    ([], {}, "sim-load = \"fast\"\n", "config sim-load"),
    ([], {}, "[lifecycle]\ntask_acceptance = \"maybe\"\n", "task_acceptance"),
    ([], {}, "[lifecycle]\nmax_queued_tasks = -3\n", "max_queued_tasks"),
    ([], {}, "bogus = 1\n", "bogus"),
    ([], {}, "this is = not toml = \n", "not valid TOML"),
    ([], {}, "[[network.authentication.tokens]]\nsha256 = \"xyz\"\nscopes = [\"*\"]\n", "sha256"),
]


@pytest.mark.parametrize("argv, env, toml, names", BAD_VALUES)
def test_bad_values_are_refused_naming_the_setting(tmp_path, argv, env, toml, names):
    if toml is not None:
        path = tmp_path / "gw.toml"
        path.write_text(toml)
        argv = argv + ["--config", str(path)]
    with pytest.raises(config.ConfigError) as refused:
        config_resolve.load(argv, environ=env)
    assert names in str(refused.value)


def test_cli_refuses_at_start_with_one_line(tmp_path):
    assert refusal("--heartbeat-interval", "zero") == (
        "--heartbeat-interval: 'zero' is not a number of seconds; it accepts more than 0")
    assert "missing.toml" in refusal("--config", str(tmp_path / "missing.toml"))


@pytest.mark.parametrize("argv, env, line", [
    (["--workers", "two"], {}, "--workers: 'two' is not a whole number; it accepts 1 to {MAX_WORKERS}"),
    (["--bind", "127.0.0.1:99999"], {},
     "--bind: port 99999 is out of range; it accepts 1-65535, or 0 to pick one"),
    (["--bind", "nowhere"], {},
     "--bind: 'nowhere' is not HOST:PORT; it accepts an address such as 127.0.0.1:52222"),
    (["--body-timeout", "abc"], {}, "--body-timeout: 'abc' is not a number of seconds; it accepts more than 0"),
    ([], {"MUR_GATEWAY_LOG_LEVEL": "loud"},
     "MUR_GATEWAY_LOG_LEVEL: 'loud' is not a log level; it accepts debug, info, warning or error"),
    (["--watch-page", "yes"], {}, "--watch-page: 'yes' is not on or off"),
    (["--workrs", "2"], {}, "unrecognized arguments: --workrs 2"),
    (["--bind"], {}, "argument --bind: expected one argument"),
    (["--client-request-burst", "5"], {},
     "--client-request-burst: takes effect only with --client-request-rate (a rate above 0), which is not set"),
])
def test_a_value_error_is_one_line_in_words(argv, env, line):
    from gateway.common.board import MAX_WORKERS

    assert refusal(*argv, env=env) == line.format(MAX_WORKERS=MAX_WORKERS)


def test_more_workers_than_the_ring_has_control_words_for_stops_the_start():
    from gateway.common.board import MAX_WORKERS

    assert refusal("--workers", str(MAX_WORKERS + 1)) == (
        f"--workers: '{MAX_WORKERS + 1}' is out of range; it accepts 1 to {MAX_WORKERS} "
        "(the ring has control words for that many)")
    assert config_resolve.load(["--workers", str(MAX_WORKERS)], environ={}).workers == MAX_WORKERS


DIGEST = hashlib.sha256(b"ops-token").hexdigest()
TOKEN = f'name = "ops"\nsha256 = "{DIGEST}"\nscopes = ["*"]\n'


STRICT_FILES = [  # (a file, the one line that refuses it)
    (f"[[network.authentication.token]]\n{TOKEN}",
     "config [[network.authentication.token]]: unknown table (did you mean [[network.authentication.tokens]]?); "
     "[network.authentication] takes tokens, jwt"),
    (f"[[network.authenticaton.tokens]]\n{TOKEN}",
     "config [network.authenticaton]: unknown table (did you mean [network.authentication]?); "
     "[network] takes authentication"),
    (f"[network.authentication.tokens]\n{TOKEN}",
     "config [network.authentication.tokens]: one table, where each token is an entry of the array "
     "[[network.authentication.tokens]] (two brackets)"),
    ("[network.authentication]\ntokens = []\n",
     "config [network.authentication]: declares no [[network.authentication.tokens]] "
     "and no [network.authentication.jwt]; remove the table for a public door"),
    ("[network.authentication]\n",
     "config [network.authentication]: declares no [[network.authentication.tokens]] "
     "and no [network.authentication.jwt]; remove the table for a public door"),
    (f"[[network.authentication.tokens]]\n{TOKEN}expires = 2027-01-01\n",
     "config [[network.authentication.tokens]] #1 expires: 2027-01-01 is not a date-time with its "
     "offset; it accepts a TOML date-time such as 2027-01-01T00:00:00Z, unquoted"),
    (f"[[network.authentication.tokens]]\n{TOKEN}expires = 2027-01-01T00:00:00\n",
     "config [[network.authentication.tokens]] #1 expires: 2027-01-01T00:00:00 is not a date-time with "
     "its offset; it accepts a TOML date-time such as 2027-01-01T00:00:00Z, unquoted"),
    (f"[[network.authentication.tokens]]\n{TOKEN}expires = \"2027-01-01T00:00:00Z\"\n",
     "config [[network.authentication.tokens]] #1 expires: '2027-01-01T00:00:00Z' is not a date-time "
     "with its offset; it accepts a TOML date-time such as 2027-01-01T00:00:00Z, unquoted"),
    (f"[[network.authentication.tokens]]\n{TOKEN}expire = 2027-01-01T00:00:00Z\n",
     "config [[network.authentication.tokens]] #1 expire: unknown setting (did you mean expires?); "
     "a token takes name, sha256, scopes, max_streams, expires"),
    (f"[[network.authentication.tokens]]\n{TOKEN}required = true\n",
     "config [[network.authentication.tokens]] #1 required: unknown setting; "
     "a token takes name, sha256, scopes, max_streams, expires"),
    ("[network]\nfoo = 1\n", "config [network] foo: unknown setting; [network] takes authentication"),
    ("[lifecyle]\nmax_queued_tasks = 8\n",
     "config [lifecyle]: unknown table (did you mean [lifecycle]?); the file's tables are [lifecycle], "
     "[inference], [network]"),
    (f'[[network.authentication.tokens]]\nname = "ops"\nsha256 = "{DIGEST}"\nscopes = ["GetTsk"]\n',
     "config [[network.authentication.tokens]] #1 scopes: 'GetTsk' is not a method this gateway "
     'serves; it accepts "*" or SendStreamingMessage, SubscribeToTask, murmur.WatchSession, '
     "SendMessage, GetTask, ListTasks, CancelTask, murmur.StopSession, GetExtendedAgentCard, "
     "murgw.WatchOwnTasks"),
    (f'[[network.authentication.tokens]]\nname = "ops"\nsha256 = "{DIGEST}"\n',
     "config [[network.authentication.tokens]] #1 scopes: must be a non-empty array of method "
     'names, or ["*"]'),
    (f"[[network.authentication.tokens]]\n{TOKEN}[[network.authentication.tokens]]\n"
     f'name = "ops-copy"\nsha256 = "{DIGEST.upper()}"\nscopes = ["GetTask"]\n',
     "config [[network.authentication.tokens]] #2 (ops-copy) sha256: the same token as 'ops'"),
    (f"[[network.authentication.tokens]]\n{TOKEN}max_streams = -1\n",
     "config [[network.authentication.tokens]] #1 max_streams: -1 is out of range; it accepts 0 or more"),
    ("[inference]\nmax_turns = 2.5\n",
     "config [inference] max_turns: 2.5 is not a whole number; it accepts 0 or more"),
    ("[lifecycle]\nconversation = \"threads\"\n",
     "config [lifecycle] conversation: 'threads' is not stateless or threaded"),
    ("[lifecycle]\nmax_turns = 3\n",
     "config [lifecycle] max_turns: unknown setting; [lifecycle] takes task_acceptance, "
     "max_queued_tasks, max_running_tasks, conversation, max_task_reopens"),
    ("bogus = 1\n", "config bogus: unknown setting; the file takes the options by their long name "
                    "(mur-gateway --help)"),
    ("workers = true\n", "config workers: true is not a whole number; it accepts 1 to {MAX_WORKERS}"),
    ("upstream-token = 12345\n", "config upstream-token: the value is not text; write it in "
                                 "quotes (not shown: it is a credential)"),
    # A number in quotes is text, a TOML type the file never takes for a number.
    ('heartbeat-interval = "15"\n', "config heartbeat-interval: '15' is text; the file takes a number "
                                    "of seconds, more than 0, written without quotes"),
    ('max_body_bytes = "4096"\n', "config max_body_bytes: '4096' is text; the file takes a whole "
                                  "number, 1 or more, written without quotes"),
    ('[lifecycle]\nmax_queued_tasks = "8"\n', "config [lifecycle] max_queued_tasks: '8' is text; the "
                                              "file takes a whole number, 0 or more, written without quotes"),
    (f'[[network.authentication.tokens]]\n{TOKEN}max_streams = "3"\n',
     "config [[network.authentication.tokens]] #1 max_streams: '3' is text; the file takes a whole "
     "number, 0 or more, written without quotes"),
    ("trusted-proxies = [10]\n", "config trusted-proxies: 10 is not text; it accepts address ranges "
                                 'in quotes (CIDR such as "10.0.0.0/8")'),
    ("trusted-proxies = 10\n", "config trusted-proxies: 10 is not text; it accepts address ranges "
                               'in quotes (CIDR such as "10.0.0.0/8")'),
]


@pytest.mark.parametrize("toml, line", STRICT_FILES)
def test_every_table_and_key_of_the_file_is_known_or_the_start_stops(tmp_path, toml, line):
    """[claim: config-typo] A typo must never pass in silence: in [network.authentication] it would open the door."""
    from gateway.common.board import MAX_WORKERS

    path = tmp_path / "gw.toml"
    path.write_text(toml)
    assert refusal("--config", str(path)) == line.format(MAX_WORKERS=MAX_WORKERS)


THREE_PROBLEMS = 'workers = "two"\nmax-body-bytes = -5\nfrobnicate = 1\n'
THREE_LINES = [
    "mur-gateway: config frobnicate: unknown setting; the file takes the options by their long name "
    "(mur-gateway --help)",
    "mur-gateway: config workers: 'two' is text; the file takes a whole number, 1 to {MAX_WORKERS}, "
    "written without quotes",
    "mur-gateway: config max-body-bytes: -5 is out of range; it accepts 1 or more",
]


@pytest.mark.parametrize("check", [["--check"], []], ids=["check", "start"])
def test_every_problem_of_a_file_is_a_line_of_its_own(tmp_path, check):
    """--check and a start that fails name every problem they find, one line each, exit 2."""
    from gateway.common.board import MAX_WORKERS

    path = tmp_path / "gw.toml"
    path.write_text(THREE_PROBLEMS)
    run = judged if check else refused_start
    result = run(*check, "--config", str(path))
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.splitlines() == [line.format(MAX_WORKERS=MAX_WORKERS) for line in THREE_LINES]


def test_every_problem_of_a_table_is_a_line_of_its_own(tmp_path):
    path = tmp_path / "gw.toml"
    path.write_text('[lifecycle]\nmax_turns = 3\nmax_queued_tasks = "8"\nconversation = "threads"\n'
                    '[inference]\nmax_turns = -1\n')
    result = judged("--check", "--config", str(path))
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.splitlines() == [
        "mur-gateway: config [lifecycle] max_turns: unknown setting; [lifecycle] takes task_acceptance, "
        "max_queued_tasks, max_running_tasks, conversation, max_task_reopens",
        "mur-gateway: config [lifecycle] max_queued_tasks: '8' is text; the file takes a whole number, "
        "0 or more, written without quotes",
        "mur-gateway: config [lifecycle] conversation: 'threads' is not stateless or threaded",
        "mur-gateway: config [inference] max_turns: -1 is out of range; it accepts 0 or more",
    ]


def test_text_is_still_what_the_command_line_and_the_environment_give(tmp_path):
    cfg = config_resolve.load(["--heartbeat-interval", "3"], environ={"MUR_GATEWAY_WORKERS": "2"})
    assert (cfg.heartbeat_interval, cfg.workers) == (3.0, 2)


UNREADABLE_FILES = [  # (a file's bytes, how its one line begins after the path)
    ('[lifecycle]\nconversation = "stateless" # caf\u00e9\n'.encode("latin-1"),
     "not UTF-8 text (byte 0xe9 at offset 44); a TOML file is UTF-8"),
    (b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "not valid TOML: nested too deeply"),
    (b"this is = not toml\n", "not valid TOML: "),  # then tomllib's words, which vary by version
]


@pytest.mark.parametrize("content, problem", UNREADABLE_FILES)
def test_a_file_that_cannot_be_read_as_toml_is_one_line(tmp_path, content, problem):
    path = tmp_path / "gw.toml"
    path.write_bytes(content)
    assert refusal("--config", str(path)).startswith(f"--config {path}: {problem}")


def test_a_whole_file_with_every_table_loads(tmp_path):
    """Strictness refuses no key docs/configuration.md documents."""
    path = tmp_path / "gw.toml"
    path.write_text(
        'bind = "127.0.0.1:0"\nmax-body-bytes = 4096\nwatch-page = false\naccess-log = "off"\n'
        '[lifecycle]\ntask_acceptance = "none"\nmax_queued_tasks = 8\nmax_running_tasks = 2\n'
        'conversation = "threaded"\nmax_task_reopens = 0\n'
        '[inference]\ntransport = "process"\nmax_turns = 4\n'
        f'[[network.authentication.tokens]]\n{TOKEN}max_streams = 3\n'
        f'[[network.authentication.tokens]]\nname = "ops"\nsha256 = "{"b" * 64}"\n'
        'scopes = ["GetTask", "murmur.WatchSession"]\n')
    cfg = config_resolve.load(["--config", str(path)], environ={})
    assert cfg.bind == ("127.0.0.1", 0) and cfg.max_body_bytes == 4096
    assert cfg.watch_page is False and cfg.access_log is False
    assert cfg.lifecycle == config.Lifecycle("none", 8, 2, "threaded", 0)
    assert cfg.inference == config.Inference("process", 4)
    assert cfg.tokens == (config.TokenRule("ops", DIGEST, ("*",), 3),  # one name, two tokens: a rotation
                          config.TokenRule("ops", "b" * 64, ("GetTask", "murmur.WatchSession"), 0))


def test_token_rules_validate_a_file_without_the_options(tmp_path):
    """What a reload calls: the file's tokens alone, refused in the same words as at start."""
    path = tmp_path / "gw.toml"
    path.write_text(f"[[network.authentication.tokens]]\n{TOKEN}")
    rules = config_authentication.token_rules(config_file.read_file(str(path)))
    assert rules == (config.TokenRule("ops", DIGEST, ("*",)),)
    path.write_text("[network.authentication]\ntokens = []\n")
    with pytest.raises(config.ConfigError, match="declares no"):
        config_authentication.token_rules(config_file.read_file(str(path)))


def test_version_is_the_installed_distribution():
    from importlib import metadata

    expected = f"mur-gateway {metadata.version('murmur-gateway')}\n"
    script = os.path.join(os.path.dirname(sys.executable), "mur-gateway")
    for cmd in ([sys.executable, "-m", "gateway", "--version"], [script, "--version"]):
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert (result.returncode, result.stdout, result.stderr) == (0, expected, "")


def test_every_option_default_is_written_once():
    """OPTIONS holds each default; Config has a field for every option and no default of its own."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(config.Config)}
    for opt in config.OPTIONS:
        assert opt.attr in fields, opt.name
        assert fields[opt.attr].default is dataclasses.MISSING, opt.name


@pytest.fixture
def listener():
    """A port already listening: --check must leave it alone (it binds nothing)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock
        with socket.create_connection(sock.getsockname(), timeout=5):
            accepted, _ = sock.accept()  # still the only listener there, and working
            accepted.close()


def checked(path, listener, *argv: str) -> list[str]:
    """`mur-gateway --check` of the file at `path` on `listener`'s port, in a process that binds
    nothing and starts nothing: exit 2, nothing on stdout, its stderr lines without the prefix."""
    port = listener.getsockname()[1]
    result = judged("--check", "--config", str(path), "--bind", f"127.0.0.1:{port}", *argv)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("mur-gateway: ") for line in lines), result.stderr
    return [line[len("mur-gateway: "):] for line in lines]


@pytest.mark.parametrize("argv, env, toml, names", [case for case in BAD_VALUES if case[2] is not None])
def test_check_refuses_each_bad_value_of_a_file(tmp_path, listener, argv, env, toml, names):
    path = tmp_path / "gw.toml"
    path.write_text(toml)
    [line] = checked(path, listener, *argv)
    assert names in line


@pytest.mark.parametrize("toml, line", STRICT_FILES)
def test_check_refuses_each_strict_file_in_the_start_s_words(tmp_path, listener, toml, line):
    from gateway.common.board import MAX_WORKERS

    path = tmp_path / "gw.toml"
    path.write_text(toml)
    assert checked(path, listener) == [line.format(MAX_WORKERS=MAX_WORKERS)]


@pytest.mark.parametrize("content, problem", UNREADABLE_FILES)
def test_check_refuses_each_unreadable_file_in_the_start_s_words(tmp_path, listener, content, problem):
    path = tmp_path / "gw.toml"
    path.write_bytes(content)
    [line] = checked(path, listener)
    assert line.startswith(f"--config {path}: {problem}")


def test_check_says_every_problem_one_line_each(tmp_path, listener):
    from gateway.common.board import MAX_WORKERS

    path = tmp_path / "gw.toml"
    path.write_text('heartbeat-interval = "zero"\n[inference]\nmax_turns = 2.5\n')
    assert checked(path, listener, "--workers", "0", "--sim-load-size", "8") == [
        f"--workers: '0' is out of range; it accepts 1 to {MAX_WORKERS}",
        "config heartbeat-interval: 'zero' is text; the file takes a number of seconds, more than 0, "
        "written without quotes",
        "--sim-load-size: takes effect only with --sim-load (a rate above 0), which is not set",
        "config [inference] max_turns: 2.5 is not a whole number; it accepts 0 or more",
    ]


# A token table whose every entry is wrong, several ways at once, and --check's line for each.
BAD_TOKENS = (f'[[network.authentication.tokens]]\nname = "ops"\nsha256 = "{DIGEST}"\nscopes = ["*"]\n'
              '[[network.authentication.tokens]]\nname = ""\nsha256 = "abc"\nscopes = ["GetTsk", "Bogus"]\n'
              'max_streams = -1\nexpire = 2027-01-01T00:00:00Z\n'
              f'[[network.authentication.tokens]]\nname = "twin"\nsha256 = "{DIGEST.upper()}"\nscopes = ["*"]\n'
              '[[network.authentication.tokens]]\nname = "late"\nscopes = []\nexpires = 2027-01-01\n')
ENTRY = "config [[network.authentication.tokens]] #"
SERVED = ('it accepts "*" or SendStreamingMessage, SubscribeToTask, murmur.WatchSession, SendMessage, '
          "GetTask, ListTasks, CancelTask, murmur.StopSession, GetExtendedAgentCard, murgw.WatchOwnTasks")
BAD_TOKEN_LINES = [
    f"{ENTRY}2 expire: unknown setting (did you mean expires?); a token takes name, sha256, scopes, max_streams, "
    "expires",
    f"{ENTRY}2 name: '' is not a name; it accepts non-empty text",
    f"{ENTRY}2 sha256: must be the token's sha256 as 64 hex digits",
    f"{ENTRY}2 scopes: 'GetTsk' is not a method this gateway serves; {SERVED}",
    f"{ENTRY}2 scopes: 'Bogus' is not a method this gateway serves; {SERVED}",
    f"{ENTRY}2 max_streams: -1 is out of range; it accepts 0 or more",
    f"{ENTRY}3 (twin) sha256: the same token as 'ops'",
    f"{ENTRY}4 sha256: must be the token's sha256 as 64 hex digits",
    f'{ENTRY}4 scopes: must be a non-empty array of method names, or ["*"]',
    f"{ENTRY}4 expires: 2027-01-01 is not a date-time with its offset; it accepts a TOML date-time "
    "such as 2027-01-01T00:00:00Z, unquoted",
]


def test_check_names_every_problem_of_every_token_entry_one_line_each(tmp_path, listener):
    """The token table does not stop at its first bad entry, nor an entry at its first bad key."""
    path = tmp_path / "gw.toml"
    path.write_text("max-body-bytes = -5\n" + BAD_TOKENS)
    assert checked(path, listener) == [
        "config max-body-bytes: -5 is out of range; it accepts 1 or more", *BAD_TOKEN_LINES]
    start = refused_start("--config", str(path))  # a start refuses it in the same lines
    assert (start.returncode, start.stdout) == (2, "")
    assert start.stderr.splitlines() == ["mur-gateway: config max-body-bytes: -5 is out of range; it "
                                         "accepts 1 or more", *("mur-gateway: " + line for line in BAD_TOKEN_LINES)]


@pytest.mark.parametrize("opt", config.OPTIONS, ids=lambda opt: opt.name)
def test_every_option_refuses_a_value_of_the_wrong_toml_type(tmp_path, opt):
    """A number's option refuses text ("1"); any other option refuses a TOML integer (1)."""
    wrong = '"1"' if hasattr(opt.parse, "toml_kind") else "1"
    path = tmp_path / "gw.toml"
    path.write_text(f"{opt.name} = {wrong}\n")
    problems = config_resolve.resolve(["--config", str(path)], environ={}).problems
    assert any(line.startswith(f"config {opt.name}: ") for line in problems), problems


def test_the_configuration_s_modules_each_hold_one_part_and_stay_short():
    """gateway/config/options.py declares (every option, table key and default in one place) and reads
    nothing: the file's reading, the door's tables and the resolution import it, never the
    reverse; and none of the modules grows past 400 lines."""
    import ast
    import glob

    modules = sorted(glob.glob(os.path.join(ROOT, "gateway", "config", "**", "*.py"), recursive=True))
    for path in modules:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().count("\n")
        assert lines <= 400, f"{os.path.relpath(path, ROOT)} has {lines} lines"
    with open(os.path.join(ROOT, "gateway", "config", "options.py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names} | {node.module for node in ast.walk(tree)
                                            if isinstance(node, ast.ImportFrom)}
    assert modules, "gateway/config/ holds the configuration's modules"
    readers = {"file", "authentication", "resolve", "jwt.table"}
    assert not imported & (readers | {f"gateway.config.{name}" for name in readers})
    declared = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    assert {"Config", "Option", "Lifecycle", "Inference", "TokenRule", "Jwt"} <= declared
