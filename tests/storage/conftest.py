"""A private ZooKeeper server per test module that asks for one (Debian's zookeeper package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.cluster.zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
