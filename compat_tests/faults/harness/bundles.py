"""Bundles as a running cluster has them: its layouts (split or not) read from ZooKeeper and
followed by this process, so that partition_bundle and its kin name the cluster's bundles."""

from __future__ import annotations

import asyncio
import json

from core.cluster.bundles import LAYOUTS, Layouts, follow, partition_bundle
from storage.metadata.zookeeper import ZooKeeperMetadataStore


async def follow_layouts(store) -> Layouts:
    node = await store.get(LAYOUTS, latest=True)
    layouts = Layouts(None if node is None else json.loads(node.value))
    follow(layouts)
    return layouts


async def _partition_holders(cluster, topic: str, partitions) -> dict[int, tuple[str, int | None]]:
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        await follow_layouts(store)
        found = {}
        for index in partitions:
            bundle = partition_bundle("public", "default", topic, index).path
            lease = await store.get(f"/cluster/leases/{bundle}")
            found[index] = (bundle, None if lease is None else json.loads(lease.value)["broker"])
        return found
    finally:
        await store.close()


def partition_holders(cluster, topic: str, partitions) -> dict[int, tuple[str, int | None]]:
    """Partition of public/default/`topic` -> (its bundle now, the broker holding that bundle's lease)."""
    return asyncio.run(_partition_holders(cluster, topic, partitions))
