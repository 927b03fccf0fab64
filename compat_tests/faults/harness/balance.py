"""Waiting for a local cluster's bundles to settle: every broker registered, the bundles spread
over all of them, and every bundle's lease held by the broker it is assigned to.

Brokers join one after another, and each join moves bundles: a client that starts before the last
move is done may meet a bundle changing hands (a declare refused with CONNECTION_FORCED, a Kafka
request sent back with NOT_LEADER_OR_FOLLOWER). Tests that are not about joins wait for this first.
"""

from __future__ import annotations

import asyncio
import json
import time

from storage.metadata.zookeeper import ZooKeeperMetadataStore

DEADLINE_S = 90.0


async def balanced(cluster) -> bool:
    """Whether the bundles of `cluster` (a LocalCluster) have settled over all its brokers."""
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        live = {int(name) for name in await store.children("/cluster/brokers")}
        node = await store.get("/cluster/assignment")
        if node is None:
            return False
        assignment = json.loads(node.value)["bundles"]
        if set(assignment.values()) != live or len(live) != len(cluster.brokers):
            return False
        for bundle, broker in assignment.items():
            lease = await store.get(f"/cluster/leases/{bundle}")
            if lease is None or json.loads(lease.value)["broker"] != broker:
                return False
        return True
    finally:
        await store.close()


def wait_until_balanced(cluster, deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not asyncio.run(balanced(cluster)):
        assert time.monotonic() < deadline, "the bundles never settled over every broker"
        time.sleep(0.3)
