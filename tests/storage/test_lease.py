"""The auditor's lease on a real private ZooKeeper: one holder works, the others stand by; a holder
whose session is lost stops working at once, before anyone else can take over."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from gateway.cluster.zookeeper import ZooKeeperServer
from storage.metadata.lease import Lease
from storage.metadata.zookeeper import ZooKeeperMetadataStore
from test_metadata_zookeeper import _expire, until

_roots = itertools.count()


class Workers:
    """Who is working when: every start and stop, and the most that ever worked at once."""

    def __init__(self) -> None:
        self.working: set[str] = set()
        self.most_at_once = 0
        self.starts: list[str] = []

    def work(self, name: str):
        async def working() -> None:
            self.working.add(name)
            self.starts.append(name)
            self.most_at_once = max(self.most_at_once, len(self.working))
            try:
                await asyncio.Event().wait()
            finally:
                self.working.discard(name)
        return working


@pytest.fixture
async def stores(zookeeper: ZooKeeperServer) -> AsyncIterator[list[ZooKeeperMetadataStore]]:
    url = f"zk://{zookeeper.address}/lease{next(_roots)}"
    opened = [await ZooKeeperMetadataStore.open(url, session_timeout_s=4.0) for _ in range(2)]
    yield opened
    for store in opened:
        await store.close()


async def test_one_holder_works_and_a_lost_session_stops_it_before_the_other_takes_over(
        zookeeper: ZooKeeperServer, stores: list[ZooKeeperMetadataStore]) -> None:
    workers = Workers()
    leases = [Lease(store, "/auditor/lock", retry_interval_s=0.1) for store in stores]
    tasks = [asyncio.create_task(lease.run(workers.work(f"w{i}"))) for i, lease in enumerate(leases)]
    try:
        await until(lambda: len(workers.starts) == 1)
        first = int(workers.starts[0][1])
        other = 1 - first
        await asyncio.sleep(0.5)   # several retries of the stand-by
        assert workers.starts == [f"w{first}"] and not leases[other].held

        await asyncio.to_thread(_expire, stores[first], zookeeper.address)
        await until(lambda: workers.starts[-1] == f"w{other}")
        assert workers.working == {f"w{other}"} and not leases[first].held
        assert workers.most_at_once == 1

        tasks[other].cancel()             # stops contending, then gives the lease up: the first one
        await asyncio.gather(tasks[other], return_exceptions=True)
        await leases[other].release()     # (in its new session) takes it back
        await until(lambda: workers.working == {f"w{first}"})
        assert workers.most_at_once == 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_suspended_session_stops_the_work_at_once_and_the_same_session_resumes_it(
        zookeeper: ZooKeeperServer) -> None:
    # The session must outlive ZooKeeper's restart: a JVM start on a busy machine (4 s was not always enough).
    store = await ZooKeeperMetadataStore.open(f"zk://{zookeeper.address}/lease{next(_roots)}",
                                              session_timeout_s=50.0)
    workers = Workers()
    lease = Lease(store, "/auditor/lock", retry_interval_s=0.1)
    task = asyncio.create_task(lease.run(workers.work("w")))
    try:
        await until(lambda: workers.working == {"w"})
        session = store.session_id
        await asyncio.to_thread(zookeeper.stop)
        try:
            await until(lambda: not lease.held)
            assert workers.working == set()
        finally:
            await asyncio.to_thread(zookeeper.start)
        await until(lambda: workers.working == {"w"}, timeout_s=60.0)
        assert store.session_id == session and lease.held and workers.starts == ["w", "w"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await store.close()
