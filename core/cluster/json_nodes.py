"""Cluster-wide JSON nodes that any broker may change: a compare-and-set loop over one node."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from storage.api import BadVersion, Guard, MetadataStore, NodeExists, StorageError

_ATTEMPTS = 20


async def read_json(metadata: MetadataStore, path: str, *, latest: bool = False) -> Any:
    node = await metadata.get(path, latest=latest)
    return None if node is None else json.loads(node.value)


async def update_json(metadata: MetadataStore, path: str, change: Callable[[Any], Any], *,
                      guard: Guard | None = None) -> Any:
    """Write `change(value)` over the node's value (None if there is none), again on a lost
    compare-and-set; returns what was written. `change` may raise to give up; with `guard`, the
    write lands only while it holds (Fenced otherwise)."""
    for _ in range(_ATTEMPTS):
        node = await metadata.get(path, latest=True)
        value = change(None if node is None else json.loads(node.value))
        raw = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
        try:
            if node is None:
                await metadata.create(path, raw, guard=guard)
            else:
                await metadata.put(path, raw, node.version, guard=guard)
            return value
        except (NodeExists, BadVersion):
            continue
    raise StorageError(f"{path}: too many concurrent writers")
