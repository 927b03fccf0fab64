"""Deleting what a bookie holds for ledgers that no longer exist.

A ledger is deleted by removing its metadata and asking each of its bookies to drop it; a bookie
that was unreachable then keeps the entries. Each bookie therefore compares, now and then, the
ledgers it holds with the ledgers the metadata store lists, and drops those missing from it on two
passes in a row (a ledger's metadata is created before its first entry is written, so a ledger
without metadata was deleted; the second pass leaves room for a listing read mid-creation).
"""

from __future__ import annotations

import logging

from storage.api import MetadataStore
from storage.bookie.bookie import Bookie

log = logging.getLogger("gateway.storage.bookie.orphans")

LEDGERS = "/ledgers"


class OrphanCollector:
    def __init__(self, bookie: Bookie, metadata: MetadataStore) -> None:
        self._bookie = bookie
        self._metadata = metadata
        self._suspects: set[int] = set()

    async def collect(self) -> list[int]:
        """One pass; returns the ledgers dropped."""
        held = set(self._bookie.ledger_ids())
        if not held:
            self._suspects = set()
            return []
        listed = {int(name) for name in await self._metadata.children(LEDGERS) if name.isdigit()}
        missing = held - listed
        dropped = sorted(missing & self._suspects)
        for ledger_id in dropped:
            await self._bookie.delete_ledger(ledger_id)
        if dropped:
            log.info("dropped %d ledgers deleted while this bookie was away: %s", len(dropped),
                     ", ".join(map(str, dropped[:20])))
        self._suspects = missing - set(dropped)
        return dropped
