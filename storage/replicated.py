"""Replicated storage: ledgers on bookie servers (`gateway bookie`), metadata in ZooKeeper.

What a gateway process holds: a ZooKeeper session, the registry of bookies, a ledger client with the
configured quorum sizes (E, Qw, Qa, per namespace where configured), the managed logs on top, and an
auditor (storage/ledger/auditor.py) that re-replicates the data of lost bookies while this gateway
holds the cluster's auditor lease. No entry data lives in the gateway's process or directory.
"""

from __future__ import annotations

from pathlib import Path

from storage.config import StorageConfig
from storage.ledger.auditor import Auditor, AuditorSettings
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
                                    speculative_read_timeout_s=config.speculative_read_ms / 1000,
                                    explicit_lac_s=config.explicit_lac_ms / 1000)
        self.logs = ManagedLogFactoryImpl(self.ledgers, metadata)
        self.auditor = Auditor(metadata, self.ledgers, AuditorSettings(
            grace_s=config.lost_bookie_grace_ms / 1000, interval_s=config.audit_interval_ms / 1000,
            bytes_per_s=config.rereplication_bytes_per_s)) if config.auditor else None

    @classmethod
    async def open(cls, config: StorageConfig, *, session_file: Path | None = None) -> "ReplicatedStorage":
        metadata = await open_metadata_store(config.metadata, session_file=session_file,
                                             session_timeout_s=config.zookeeper_session_timeout_ms / 1000)
        bookies = RegisteredBookies(metadata, config.secret.encode(), request_timeout_s=config.bookie_timeout_ms / 1000,
                                    tls=config.node_tls)
        try:
            await bookies.start()
        except BaseException:
            await metadata.close()
            raise
        storage = cls(metadata, bookies, config)
        if storage.auditor is not None:
            storage.auditor.start()
        return storage

    async def close(self) -> None:
        if self.auditor is not None:
            await self.auditor.close()
        await self.bookies.close()
        await self.metadata.close()
