"""The fixtures every test file shares.

`gateway` is the one module-scoped gateway a file's tests share: a real `python -m gateway`
on an ephemeral port, ended by PID with every child it has (gateway_harness.running_gateway)
once the file's last test is done, failed or not; every line it wrote to stderr must be one
JSON object, or its last test fails (gateway_harness.not_json). What it runs with is the `gateway_options`
fixture: a file whose gateway differs overrides that fixture with its own (parametrise it to
run the file's tests against each kind), and tests that need a gateway of their own start one
with `running_gateway` inside the test.

Tiers: a file marks itself `unit` (no process, no network socket: the inner loop,
`python -m pytest -m unit`, under a minute) or `env` (needs podman, Chromium or Prometheus);
every other test is `e2e` (real gateways, real processes). A `unit` test that starts a process
or binds or connects a socket fails at that call (`_unit_stays_in_process`), so the tier cannot
drift.
"""

import multiprocessing.process
import os
import signal
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers.gateway_harness import GatewayOptions, running_gateway  # noqa: E402  (the path above first)
from helpers.tls_support import Certificates  # noqa: E402


@pytest.fixture(scope="module")
def gateway_options() -> GatewayOptions:
    """The default gateway: two workers, the test heartbeat, no metrics port."""
    return GatewayOptions()


@pytest.fixture(scope="module")
def gateway(gateway_options, tmp_path_factory):
    with running_gateway(*gateway_options.args, tmp_path=tmp_path_factory.mktemp("gw"),
                         **gateway_options.options) as gw:
        yield gw


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    """A CA and a server certificate for 127.0.0.1, for the file's TLS gateways and clients."""
    return Certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def sigint_delivered():
    """SIGINT reaches the processes the test starts, as it reaches a command in a terminal. A
    suite started as a non-interactive shell's background job (`pytest &` in a script) has
    SIGINT ignored (POSIX), an ignored signal stays ignored across exec, and Python keeps it so:
    a child told to stop with SIGINT would never hear it. A handler here is reset to the
    default at the child's exec; the suite's own disposition is put back after the test."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


TIERS = ("unit", "e2e", "env")


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def _unit_stays_in_process(request, monkeypatch):
    """A `unit` test may start no process and open no network connection."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refused(*args, **kwargs):
        raise AssertionError("a unit test starts no process and binds or connects no socket: mark it e2e")

    monkeypatch.setattr(subprocess.Popen, "__init__", refused)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refused)
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refused)
