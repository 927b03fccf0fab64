"""The embedded default: one in-process bookie, E=Qw=Qa=1, a SQLite metadata store, one data directory.

    <data dir>/metadata.db     SQLite metadata store (storage/metadata/sqlite.py)
    <data dir>/bookie/         the bookie (storage/bookie/bookie.py)
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from storage.bookie.bookie import Bookie
from storage.config import StorageConfig
from storage.ledger.client import LedgerClient
from storage.managed_log.factory import ManagedLogFactoryImpl
from storage.metadata.sqlite import SqliteMetadataStore

log = logging.getLogger("gateway.storage")

_GC_INTERVAL_S = 60.0


class EmbeddedStorage:
    def __init__(self, metadata: SqliteMetadataStore, bookie: Bookie) -> None:
        self.metadata = metadata
        self.bookie = bookie
        self.ledgers = LedgerClient(metadata, {"local": bookie})
        self.logs = ManagedLogFactoryImpl(self.ledgers, metadata)
        self._gc_task = asyncio.create_task(self._collect_garbage(), name="bookie-gc")

    @classmethod
    async def open(cls, data_dir: Path, config: StorageConfig) -> "EmbeddedStorage":
        data_dir.mkdir(parents=True, exist_ok=True)
        metadata = await SqliteMetadataStore.open(data_dir / "metadata.db")
        try:
            bookie = await Bookie.open(data_dir / "bookie", config, metadata)
        except BaseException:
            await metadata.close()
            raise
        return cls(metadata, bookie)

    async def _collect_garbage(self) -> None:
        while True:
            await asyncio.sleep(_GC_INTERVAL_S)
            try:
                removed = await self.bookie.collect_garbage()
            except OSError as exc:
                log.warning("journal garbage collection failed: %s", exc)
                continue
            if removed:
                log.info("deleted %d journal segments no ledger uses any more", len(removed))

    async def close(self) -> None:
        self._gc_task.cancel()
        await self.bookie.close()
        await self.metadata.close()
