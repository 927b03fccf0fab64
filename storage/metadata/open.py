"""Choosing the metadata store: SQLite for a file path, ZooKeeper for a zk:// URL."""

from __future__ import annotations

from pathlib import Path

from storage.api import MetadataStore


async def open_metadata_store(location: str | Path, *, session_timeout_s: float = 10.0,
                              session_file: Path | None = None) -> MetadataStore:
    """`location` is a SQLite file (embedded, one node) or zk://host:port[,host:port]/root (a cluster).
    `session_file`: where a ZooKeeper session is noted for the next run of this process to end
    (storage/metadata/session_file.py)."""
    if isinstance(location, str) and location.startswith("zk://"):
        from storage.metadata.zookeeper import ZooKeeperMetadataStore  # kazoo only where it is used
        return await ZooKeeperMetadataStore.open(location, session_timeout_s=session_timeout_s,
                                                 session_file=session_file)
    from storage.metadata.sqlite import SqliteMetadataStore
    return await SqliteMetadataStore.open(Path(location))
