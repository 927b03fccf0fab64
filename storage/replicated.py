"""Replicated storage: ledgers on bookie servers (`gateway bookie`), metadata in ZooKeeper.

What a gateway process holds: a ZooKeeper session, the registry of bookies, a ledger client with the
configured quorum sizes (E, Qw, Qa, per namespace where configured) and the managed logs on top. No
entry data lives in the gateway's process or directory.
"""

from __future__ import annotations

from storage.config import StorageConfig
from storage.ledger.client import LedgerClient
from storage.ledger.registered import RegisteredBookies
from storage.managed_log.factory import ManagedLogFactoryImpl
from storage.metadata.open import open_metadata_store


class ReplicatedStorage:
    def __init__(self, metadata, bookies: RegisteredBookies, config: StorageConfig) -> None:
        self.metadata = metadata
        self.bookies = bookies
        self.ledgers = LedgerClient(metadata, bookies, ensemble_size=config.ensemble_size,
                                    write_quorum=config.write_quorum, ack_quorum=config.ack_quorum,
                                    min_racks_per_write_quorum=config.min_racks_per_write_quorum,
                                    quorum_for=config.quorum_for,
                                    speculative_read_timeout_s=config.speculative_read_ms / 1000)
        self.logs = ManagedLogFactoryImpl(self.ledgers, metadata)

    @classmethod
    async def open(cls, config: StorageConfig) -> "ReplicatedStorage":
        metadata = await open_metadata_store(config.metadata,
                                             session_timeout_s=config.zookeeper_session_timeout_ms / 1000)
        bookies = RegisteredBookies(metadata, config.secret.encode(), request_timeout_s=config.bookie_timeout_ms / 1000)
        try:
            await bookies.start()
        except BaseException:
            await metadata.close()
            raise
        return cls(metadata, bookies, config)

    async def close(self) -> None:
        await self.bookies.close()
        await self.metadata.close()
