"""The fixtures every test file shares.

`gateway` is the one module-scoped gateway a file's tests share: a real `python -m gateway`
on an ephemeral port, ended by PID with every child it has (support.running_gateway) once the
file's last test is done, failed or not. What it runs with is the `gateway_options` fixture: a
file whose gateway differs overrides that fixture with its own (parametrise it to run the
file's tests against each kind), and tests that need a gateway of their own start one with
`running_gateway` inside the test.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from support import GatewayOptions, running_gateway  # noqa: E402  (the path above first)
from tls_support import Certificates  # noqa: E402


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
