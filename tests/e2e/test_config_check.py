"""`mur-gateway --check` and `--print-config`, as real processes, and docs/configuration.md.

--check of a good configuration says `configuration ok`; of a bad TLS pair or an expired
certificate, one line; of a static token past its `expires`, a warning and still ok. --print-config's TOML is taken back
by --config (the same settings,
from a pipe), names each value's origin, and never holds a secret. The docs' option table is
what the options' declarations write. (The strict-file refusals, in the start's words, are
checked in tests/e2e/test_config.py beside the start's own.)
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import subprocess
import sys

import trustme

from gateway.config import options as config
from gateway.config import resolve as config_resolve
from gateway.config.printing import EXAMPLE, markdown
from helpers.gateway_harness import ROOT, judged

UPSTREAM_SECRET = "upstream-secret-value-4f1c"
DOOR_TOKEN = "door-token-value-9b2e"
DIGEST = hashlib.sha256(DOOR_TOKEN.encode()).hexdigest()


def full_file(tmp_path, certs) -> str:
    path = tmp_path / "gw.toml"
    path.write_text(
        'workers = 2\nmax_body_bytes = 4096\nwatch-page = "off"\ntrusted-proxies = "10.0.0.0/8"\n'
        f'certfile = "{certs.certfile}"\nkeyfile = "{certs.keyfile}"\n'
        '[lifecycle]\nconversation = "threaded"\n'
        f'[[network.authentication.tokens]]\nname = "ops"\nsha256 = "{DIGEST}"\nscopes = ["*"]\n'
        'max_streams = 4\n')
    return str(path)


def test_a_good_configuration_is_ok_and_binds_nothing(tmp_path, certs):
    result = judged("--check", "--config", full_file(tmp_path, certs), "--upstream", "https://127.0.0.1:9",
                    "--upstream-cacert", certs.cafile, env={"MUR_GATEWAY_UPSTREAM_TOKEN": UPSTREAM_SECRET})
    assert (result.returncode, result.stdout, result.stderr) == (0, "configuration ok\n", "")


def test_a_key_that_is_not_the_certificate_s_is_one_line(tmp_path, certs):
    other = tmp_path / "other-key.pem"
    trustme.CA().issue_cert("127.0.0.1").private_key_pem.write_to_path(str(other))
    result = judged("--check", "--certfile", certs.certfile, "--keyfile", str(other))
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"mur-gateway: --certfile {certs.certfile} / --keyfile {other}: "
                           "not a usable PEM certificate and key")


def test_an_expired_certificate_is_one_line(tmp_path):
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    leaf = trustme.CA().issue_cert("127.0.0.1", not_before=past, not_after=past + datetime.timedelta(days=30))
    certfile, keyfile = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    leaf.cert_chain_pems[0].write_to_path(certfile)
    leaf.private_key_pem.write_to_path(keyfile)
    result = judged("--check", "--certfile", certfile, "--keyfile", keyfile)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f"mur-gateway: --certfile {certfile}: the certificate expired "
                             "2020-01-31 00:00:00 UTC; clients refuse it\n")


def test_a_static_token_past_its_expires_is_a_warning_naming_it_not_a_failure(tmp_path):
    """The file is valid (a reload would apply it), but the token opens nothing: --check says
    so, naming the entry, and still passes; a token that expires later is not named."""
    path = tmp_path / "gw.toml"
    path.write_text(f'[[network.authentication.tokens]]\nname = "ops"\nsha256 = "{DIGEST}"\nscopes = ["*"]\n'
                    "expires = 2099-01-01T00:00:00Z\n"
                    f'[[network.authentication.tokens]]\nname = "old-ops"\nsha256 = "{"c" * 64}"\n'
                    'scopes = ["*"]\nexpires = 2020-01-01T02:00:00+02:00\n')
    result = judged("--check", "--config", str(path))
    assert (result.returncode, result.stdout) == (0, "configuration ok\n"), result.stderr
    assert result.stderr == ("mur-gateway: warning: config [[network.authentication.tokens]] #2 (old-ops) "
                             "expires: 2020-01-01T00:00:00Z is past; the token opens nothing (remove the "
                             "entry, or give it a later expires)\n")


def test_print_config_round_trips_through_check_and_keeps_no_secret(tmp_path, certs):
    path = full_file(tmp_path, certs)
    env = {"MUR_GATEWAY_UPSTREAM": "http://127.0.0.1:9", "MUR_GATEWAY_UPSTREAM_TOKEN": UPSTREAM_SECRET}
    printed = judged("--print-config", "--config", path, "--max-headers", "50", env=env)
    assert printed.returncode == 0 and printed.stderr == "", printed.stderr
    text = printed.stdout
    assert UPSTREAM_SECRET not in text and DOOR_TOKEN not in text and DIGEST in text
    lines = text.splitlines()
    assert "max-headers = 50  # flag --max-headers" in lines
    assert 'upstream = "http://127.0.0.1:9"  # environment MUR_GATEWAY_UPSTREAM' in lines
    assert "# upstream-token: set, not shown (a credential)  # environment MUR_GATEWAY_UPSTREAM_TOKEN" in lines
    assert "max-body-bytes = 4096  # file" in lines and "header-timeout = 10.0  # default" in lines
    assert any(line.startswith("# max-connections = ") and "found at start" in line for line in lines)
    assert any(line.startswith("# certificate: expires ") and "days left" in line for line in lines)

    # Taken back from a pipe, with nothing else, it is the same configuration but the secret.
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MUR_GATEWAY_")}
    checked = subprocess.run([sys.executable, "-m", "gateway", "--config", "/dev/stdin", "--check"], cwd=ROOT,
                             input=text, capture_output=True, text=True, timeout=30, env=plain)
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "configuration ok\n", "")
    copy = tmp_path / "printed.toml"
    copy.write_text(text)
    original = config_resolve.load(["--config", path, "--max-headers", "50"], environ=env)
    reloaded = config_resolve.load(["--config", str(copy)], environ={})
    assert reloaded == dataclasses.replace(original, upstream_token=None)


def test_print_config_of_a_bad_configuration_is_its_problems():
    result = judged("--print-config", "--workers", "0")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("mur-gateway: --workers: '0' is out of range")


def test_the_docs_option_table_is_what_the_declarations_write():
    """docs/configuration.md is `python -m gateway.config.printing`'s output: every option, its
    variable, key, default and help, from the one declaration."""
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as fh:
        assert fh.read() == markdown(), "run: python -m gateway.config.printing > docs/configuration.md"
    for opt in config.OPTIONS:
        assert f"| `{opt.flag} " in markdown() and f"`{opt.env}`" in markdown()


def test_the_docs_example_loads(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text(EXAMPLE)
    cfg = config_resolve.load(["--config", str(path)], environ={})
    assert [rule.name for rule in cfg.tokens] == ["dashboard"] and cfg.client_request_rate == 5


def test_print_config_stands_without_check():
    """The two modules import one way only: --check prints through config_print, never back."""
    result = subprocess.run([sys.executable, "-c", "import sys, gateway.config.printing; "
                             "print('gateway.config.check' in sys.modules)"],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr
