"""A misspelt table or key is refused with the name it was probably meant to be (issue 48, item 6).

The refusal itself is tests/e2e/test_config.py's (a typo never passes in silence); here, from the
file's text to the problem lines `resolve` returns, which name the close known one, and which
name none when nothing known is alike (a suggestion must not mislead).
"""

from __future__ import annotations

import pytest

from gateway.config import resolve
from gateway.config.file import did_you_mean

pytestmark = pytest.mark.unit

SUGGESTED = [  # (the file, the one problem it has)
    ("[network.authenticaton]\n",
     "config [network.authenticaton]: unknown table (did you mean [network.authentication]?); "
     "[network] takes authentication"),
    ('[network.authentication.jwt]\nkey_file = "k"\naudiance = "x"\n',
     "config [network.authentication.jwt] audiance: unknown setting (did you mean audience?); "
     "[network.authentication.jwt] takes key_file, algorithms, jwks_url, issuer, audience"),
    ("[[network.authentication.token]]\n",
     "config [[network.authentication.token]]: unknown table (did you mean "
     "[[network.authentication.tokens]]?); [network.authentication] takes tokens, jwt"),
    ("[lifecycel]\n",
     "config [lifecycel]: unknown table (did you mean [lifecycle]?); the file's tables are [lifecycle], "
     "[inference], [network]"),
    ("heartbeat_intervall = 3\n",
     "config heartbeat_intervall: unknown setting (did you mean heartbeat_interval?); the file takes "
     "the options by their long name (mur-gateway --help)"),
    ("heartbeat-intervall = 3\n",
     "config heartbeat-intervall: unknown setting (did you mean heartbeat-interval?); the file takes "
     "the options by their long name (mur-gateway --help)"),
    ("[lifecycle]\nmax_queued_task = 3\n",
     "config [lifecycle] max_queued_task: unknown setting (did you mean max_queued_tasks?); [lifecycle] "
     "takes task_acceptance, max_queued_tasks, max_running_tasks, conversation, max_task_reopens"),
]


def problems(tmp_path, text: str) -> list[str]:
    path = tmp_path / "gw.toml"
    path.write_text(text)
    return resolve.resolve(["--config", str(path)], environ={}).problems


@pytest.mark.parametrize("text, line", SUGGESTED)
def test_a_typo_is_refused_with_the_name_it_was_meant_to_be(tmp_path, text, line):
    assert line in problems(tmp_path, text)


def test_an_environment_typo_gets_the_variable_meant():
    assert resolve.resolve([], environ={"MUR_GATEWAY_WROKERS": "2"}).problems == [
        "MUR_GATEWAY_WROKERS: unknown setting (did you mean MUR_GATEWAY_WORKERS?); the environment takes "
        "MUR_GATEWAY_ and an option's long name in capitals, - as _ (mur-gateway --help)"]


@pytest.mark.parametrize("text", ["frobnicate = 1\n", "[lifecycle]\nmax_turns = 3\n", "[network]\nfoo = 1\n",
                                  "[telemetry]\n"])
def test_a_name_like_nothing_known_gets_no_suggestion(tmp_path, text):
    """`max_turns` is nearest `max_task_reopens` (0.64 alike), but it is another word."""
    [line] = problems(tmp_path, text)
    assert "unknown" in line and "did you mean" not in line


def test_the_suggestion_is_written_as_the_file_writes_it():
    assert did_you_mean("tokns", ("tokens", "jwt"), "[[{}]]") == " (did you mean [[tokens]]?)"
    assert did_you_mean("zzz", ("tokens", "jwt")) == ""
