"""One gateway for the Pulsar compatibility tests that do not restart it (a start costs ~10 s on a
loaded machine)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("pulsar"))
    yield process
    process.stop()
