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

from collections.abc import Mapping
from dataclasses import dataclass

from core.cluster.bundles import Bundle
from core.cluster.json_nodes import read_json, update_json
from storage.api import MetadataStore

PLACEMENTS = "/cluster/placements"


@dataclass(frozen=True, slots=True)
class Placement:
    broker: int
    source: int | None = None    # the bundle's owner when it was placed (None: nobody, or unknown)


async def read_placements(metadata: MetadataStore) -> dict[str, Placement]:
    return _decode(await read_json(metadata, PLACEMENTS))


async def update_placements(metadata: MetadataStore, changes: Mapping[str, Placement | None]) -> None:
    """Apply `changes` (a bundle path -> its new placement, or None to drop it) in one write."""
    if not changes:
        return

    def changed(value) -> dict:
        placements = _decode(value)
        for bundle, placement in changes.items():
            if placement is None:
                placements.pop(bundle, None)
            else:
                placements[bundle] = placement
        return {"bundles": {bundle: {"broker": p.broker, "from": p.source} for bundle, p in placements.items()}}

    await update_json(metadata, PLACEMENTS, changed)


def _decode(value) -> dict[str, Placement]:
    if value is None:
        return {}
    # Paths as this version writes them (earlier versions named a bundle by its index).
    return {Bundle.parse(bundle).path: Placement(int(entry["broker"]), None if entry.get("from") is None
                                                 else int(entry["from"]))
            for bundle, entry in value["bundles"].items()}
