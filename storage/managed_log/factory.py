"""Opens managed logs by name over one ledger client and metadata store."""

from __future__ import annotations

import uuid

from storage.api import MetadataStore, NoNode, RetentionPolicy
from storage.ledger.client import LedgerClient
from storage.managed_log.ledger_list import LedgerList
from storage.managed_log.follower import LogFollower
from storage.managed_log.log import ManagedLogImpl
from storage.managed_log.tail_cache import TailCache


class ManagedLogFactoryImpl:
    def __init__(self, ledgers: LedgerClient, metadata: MetadataStore, tail_cache: TailCache | None = None,
                 writer: str | None = None) -> None:
        self._ledgers = ledgers
        self.writer = writer or uuid.uuid4().hex   # this process, as the logs' epochs name it
        self._metadata = metadata
        self.tail_cache = tail_cache if tail_cache is not None else TailCache()   # shared by every log

    async def open_log(self, name: str, policy: RetentionPolicy) -> ManagedLogImpl:
        return await ManagedLogImpl.open(name, self._ledgers, self._metadata, policy, self.tail_cache,
                                         writer=self.writer)

    async def follow_log(self, name: str) -> LogFollower:
        """Read a log another process writes, without fencing it (storage/managed_log/follower.py)."""
        return await LogFollower.open(name, self._ledgers, self._metadata, self.tail_cache)

    async def needs_recovery(self, name: str) -> bool:
        node = await self._metadata.get(f"/logs/{name}")
        return node is not None and any(r.is_open for r in LedgerList.from_json(node.value).ledgers)

    async def delete_log(self, name: str) -> None:
        """Delete a log that is not open: its ledgers, then its list."""
        node = await self._metadata.get(f"/logs/{name}")
        if node is None:
            return
        for ledger_range in LedgerList.from_json(node.value).ledgers:
            await self._ledgers.delete(ledger_range.ledger_id)
        try:
            await self._metadata.delete(f"/logs/{name}")
        except NoNode:
            pass
