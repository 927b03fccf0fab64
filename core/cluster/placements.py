"""Placements: bundles an operator put on a chosen broker (a Kafka partition reassignment).

    /cluster/placements   {"bundles": {"<tenant>/<namespace>/<i>": {"broker": id, "from": id or null}}}

The leader puts a placed bundle on its broker and keeps it there (assignment.py); load shedding
leaves it alone (load.py). A placement is in progress until its broker holds the bundle's lease.
Moving a bundle is a logical-queue move: no data moves. The old owner closes the bundle's
partitions (each sealing its ledger, which stays readable until retention removes it) and gives the
lease up; the new owner opens each partition on a new ledger, its offsets going on from where the
old ledger ended, so consumers read across the boundary. Cancelling a placement still in progress
places the bundle back on the broker it came from (`from`), as Kafka's cancel restores the replicas
a partition had.

Any broker may write a placement (compare-and-set on the one node); the leader watches it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from storage.api import BadVersion, MetadataStore, NodeExists, StorageError

PLACEMENTS = "/cluster/placements"
_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class Placement:
    broker: int
    source: int | None = None    # the bundle's owner when it was placed (None: nobody, or unknown)


async def read_placements(metadata: MetadataStore) -> dict[str, Placement]:
    node = await metadata.get(PLACEMENTS)
    return {} if node is None else _decode(node.value)


async def update_placements(metadata: MetadataStore, changes: Mapping[str, Placement | None]) -> None:
    """Apply `changes` (a bundle path -> its new placement, or None to drop it) in one write."""
    if not changes:
        return
    for _ in range(_ATTEMPTS):
        node = await metadata.get(PLACEMENTS)
        placements = {} if node is None else _decode(node.value)
        for bundle, placement in changes.items():
            if placement is None:
                placements.pop(bundle, None)
            else:
                placements[bundle] = placement
        value = json.dumps({"bundles": {bundle: {"broker": p.broker, "from": p.source}
                                        for bundle, p in sorted(placements.items())}},
                           separators=(",", ":")).encode()
        try:
            if node is None:
                await metadata.create(PLACEMENTS, value)
            else:
                await metadata.put(PLACEMENTS, value, node.version)
            return
        except (NodeExists, BadVersion):
            continue
    raise StorageError(f"{PLACEMENTS}: too many concurrent writers")


def _decode(raw: bytes) -> dict[str, Placement]:
    return {bundle: Placement(int(value["broker"]), None if value.get("from") is None else int(value["from"]))
            for bundle, value in json.loads(raw)["bundles"].items()}
