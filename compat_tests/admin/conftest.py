"""A gateway with SASL on and an administrator, and an HTTP client for its admin API."""

from __future__ import annotations

import httpx
import pytest

ADMIN = ("root", "root-secret")

CONFIG = """
retention_check_interval_ms = 200    # backlog quotas are enforced by this sweep

[kafka]
sasl_mechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
# The users these tests create at runtime may do anything: the tests are about logging in.
super_users = "User:carol,User:dave,User:erin,User:writer"

[[users]]
name = "root"
password = "root-secret"
tags = ["administrator"]

[[users]]
name = "plain"
password = "plain-secret"
"""


@pytest.fixture(scope="module")
def admin_gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("admin")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG)
    gateway = start_gateway(tmp, "--config", str(config))
    yield gateway
    gateway.stop()


@pytest.fixture
def api(admin_gateway):
    """An httpx client on /api/v1, logged in as the administrator."""
    with httpx.Client(base_url=f"{admin_gateway.admin_url}/api/v1", auth=ADMIN, timeout=30) as client:
        yield client
