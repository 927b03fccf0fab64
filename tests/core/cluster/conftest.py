"""Two (or three) brokers of one cluster in one process, on one embedded (SQLite) store, each with its peer
link listening (core/cluster/peers.py)."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest

from core.cluster.broker_cluster import BrokerCluster
from core.cluster.bundles import Layouts, follow
from core.cluster.peers import PeerService
from core.clock import SystemClock
from core.queues.service import QueueService
from core.registry import Registry
from core.service import Core
from tests.core.cluster.test_cluster_membership import POLL_S, broker, split_evenly, storage, until  # noqa: F401

SECRET = b"test-secret"


@pytest.fixture(autouse=True)
def first_layouts_after():
    """A test that split bundles leaves this process's layouts (core/cluster/bundles.py) as they
    were: the next one's brokers, or a test computing bundles without a broker, start from the first."""
    yield
    follow(Layouts())


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def _cluster(storage, count: int):  # noqa: F811 (the fixture imported above)
    """([BrokerCluster] * count, [QueueService] * count) on one store, the bundles split evenly."""
    await Registry(storage.metadata, SystemClock()).start()
    peers, members = [], []
    for i in range(1, count + 1):
        sock, service = listening(), PeerService(SECRET)
        await service.start(sock)
        peers.append(service)
        members.append(BrokerCluster(storage.metadata, replace(broker(i), peer=f"127.0.0.1:{sock.getsockname()[1]}"),
                                     poll_s=POLL_S))
    cores = [Core(storage.metadata, storage.logs, cluster=member, peers=service)
             for member, service in zip(members, peers)]
    services = [QueueService(core) for core in cores]
    for core, member in zip(cores, members):
        await core.start()
        await member.start()
    await until(lambda: split_evenly(*members))
    yield members, services
    for core, member, service in zip(cores, members, peers):
        await member.close()
        await core.close()
        await service.close()


@pytest.fixture
async def brokers(storage):  # noqa: F811 (the fixture imported above)
    """Two brokers."""
    async for cluster in _cluster(storage, 2):
        yield cluster


@pytest.fixture
async def three_brokers(storage):  # noqa: F811 (the fixture imported above)
    async for cluster in _cluster(storage, 3):
        yield cluster
