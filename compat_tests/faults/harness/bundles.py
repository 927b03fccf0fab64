"""Bundles as a running cluster has them: its layouts (split or not) read from ZooKeeper and
followed by this process, so that partition_bundle and its kin name the cluster's bundles."""

from __future__ import annotations

import json

from core.cluster.bundles import LAYOUTS, Layouts, follow


async def follow_layouts(store) -> Layouts:
    node = await store.get(LAYOUTS, latest=True)
    layouts = Layouts(None if node is None else json.loads(node.value))
    follow(layouts)
    return layouts
