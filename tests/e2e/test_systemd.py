"""deploy/systemd/ and the readiness protocol the unit relies on (gateway/supervisor/sd_notify.py).

The unit passes `systemd-analyze verify` (a copy whose ExecStart names a binary that exists
here, since verify refuses a command it cannot find), and its environment file names only
variables the gateway knows. The notify exchange runs over a real datagram socket: the test
binds its own AF_UNIX socket, starts a real gateway with NOTIFY_SOCKET naming it, and reads
what the supervisor says: READY=1 once /readyz answers 200 (never while it cannot), then
RELOADING=1 and READY=1 around a SIGHUP, and STOPPING=1 on SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request

import pytest

from gateway.config import options as config_module
from gateway import tuning
from helpers.gateway_harness import ROOT, START_TIMEOUT, judged, require_tool, running_gateway

SYSTEMD = os.path.join(ROOT, "deploy", "systemd")
UNIT = os.path.join(SYSTEMD, "mur-gateway.service")
ENV_FILE = os.path.join(SYSTEMD, "mur-gateway.env")
INSTALLED = "/opt/mur-gateway/bin/mur-gateway"  # where the unit's header installs the gateway


def unit_text() -> str:
    with open(UNIT) as fh:
        return fh.read()


def directives(name: str) -> list[str]:
    return re.findall(rf"^{name}=(.*)$", unit_text(), re.MULTILINE)


def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = require_tool("systemd-analyze", "systemd")
    binary = shutil.which("true")
    assert INSTALLED in unit_text()
    copy = tmp_path / "mur-gateway.service"
    copy.write_text(unit_text().replace(INSTALLED, binary))
    run = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and not run.stderr.strip(), run.stderr


def test_the_unit_s_documentation_is_the_gateway_s_own_docs_where_its_header_installs_them():
    """Documentation= names this repository's operations, deploy and runbook pages at the path
    the header's `cp -r docs` puts them (then the protocol); each one exists here."""
    uris = " ".join(directives("Documentation")).split()
    local = [uri.removeprefix("file:///opt/mur-gateway/") for uri in uris if uri.startswith("file://")]
    assert local == ["docs/operations.md", "docs/deploy.md", "docs/runbook.md"]
    assert all(os.path.isfile(os.path.join(ROOT, path)) for path in local)
    assert "#   cp -r docs README.md /opt/mur-gateway/" in unit_text()
    assert uris[-1] == "https://docs.murmur.nexus/reference/streaming-protocol/"


def test_the_unit_is_notify_reload_checks_first_and_drops_privileges():
    assert directives("Type") == ["notify"]
    assert directives("ExecReload") == [f"{INSTALLED} --check", "/bin/kill -HUP $MAINPID"]
    for setting in ("DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes"):
        assert re.search(rf"^{setting}$", unit_text(), re.MULTILINE), setting
    # The comment's arithmetic is gateway/config/capacity.py's: the limit less its reserve, a worker's
    # connections, and the memory at which the memory share allows as many.
    nofile = int(directives("LimitNOFILE")[0])
    per_worker = nofile - tuning.FD_RESERVE
    assert f"{per_worker:,} connections" in unit_text()
    memory = per_worker * tuning.PLAN_BYTES_PER_WATCHER / tuning.MEMORY_SHARE
    assert f"about {round(memory / (1 << 30))} GiB" in unit_text()


def environment_file() -> dict[str, str]:
    """Every variable the file shows, commented out or not, with its example value."""
    with open(ENV_FILE) as fh:
        return dict(re.findall(r"^#?(MUR_GATEWAY_[A-Z_]+)=(.*)$", fh.read(), re.MULTILINE))


def test_the_environment_file_names_only_variables_the_gateway_reads():
    known = {opt.env for opt in config_module.OPTIONS} | {"MUR_GATEWAY_CONFIG"}
    named = set(environment_file())
    assert named and named <= known, named - known
    assert directives("EnvironmentFile") == ["-/etc/mur-gateway/environment"]


def test_the_environment_files_examples_pass_check_all_at_once():
    """Uncommented together, the examples are a configuration `--check` accepts (those that
    name a file, absent here, left out)."""
    examples = {name: value for name, value in environment_file().items() if not value.startswith("/")}
    checked = judged("--check", env=examples)
    assert (checked.returncode, checked.stdout) == (0, "configuration ok\n"), checked.stderr


class NotifySocket:
    """The service manager's end: a datagram socket a gateway's NOTIFY_SOCKET names."""

    def __init__(self, abstract: bool):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dir = tempfile.mkdtemp(prefix="murgw-notify-")  # short: AF_UNIX paths are at most 107 bytes
        if abstract:
            name = f"murgw-notify-{os.getpid()}-{os.path.basename(self.dir)}"
            self.sock.bind("\0" + name)
            self.name = "@" + name
        else:
            self.name = os.path.join(self.dir, "notify")
            self.sock.bind(self.name)
        self.sock.settimeout(START_TIMEOUT)

    def next(self) -> dict[str, str]:
        """The next message's fields; a gateway that says nothing fails the test at the timeout."""
        data = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.split("\n") if line)

    def until(self, key: str) -> list[dict[str, str]]:
        """Every message up to and including the first with `key`."""
        seen = [self.next()]
        while key not in seen[-1]:
            seen.append(self.next())
        return seen

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(params=["path", "abstract"])
def notify(request):
    manager = NotifySocket(abstract=request.param == "abstract")
    yield manager
    manager.close()


def readyz(port: int) -> int:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_ready_once_readyz_answers_then_reloading_ready_around_a_sighup_and_stopping(notify, tmp_path):
    with running_gateway(tmp_path=tmp_path, env={"NOTIFY_SOCKET": notify.name}, ready=False) as gw:
        assert notify.next()["READY"] == "1"
        assert readyz(gw.port) == 200

        gw.proc.send_signal(signal.SIGHUP)
        reloading = notify.next()
        assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
        assert notify.next() == {"READY": "1"}
        assert any(rec.get("event") == "config reloaded" for rec in gw.logs())

        gw.proc.send_signal(signal.SIGTERM)
        assert notify.next() == {"STOPPING": "1"}
        assert gw.proc.wait(START_TIMEOUT) == 0


def test_never_ready_while_readyz_refuses(tmp_path):
    """An upstream out of reach: /readyz says 503 and the manager hears no READY=1, only the
    STOPPING=1 of the drain."""
    notify = NotifySocket(abstract=False)
    try:
        with running_gateway("--upstream", "http://127.0.0.1:1", tmp_path=tmp_path,
                             env={"NOTIFY_SOCKET": notify.name}, ready=False) as gw:
            assert readyz(gw.port) == 503
            gw.proc.send_signal(signal.SIGTERM)
            assert notify.until("STOPPING") == [{"STOPPING": "1"}]
    finally:
        notify.close()
