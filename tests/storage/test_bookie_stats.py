"""A bookie counts its work for the metrics endpoint: every flush's fsync in the histogram, the
records and bytes it made durable, entries added and read."""

from __future__ import annotations

import pytest

from storage.bookie.bookie import Bookie
from storage.bookie.stats import FSYNC_BUCKETS_S, BookieStats
from storage.config import StorageConfig
from storage.metadata.sqlite import SqliteMetadataStore


def test_fsyncs_fall_into_their_buckets():
    stats = BookieStats()
    for seconds in (0.0001, 0.0005, 0.003, 99.0):
        stats.synced(seconds, records=2, size=100)
    assert stats.fsync_buckets[0] == 2                    # the bound itself counts as below it
    assert stats.fsync_buckets[FSYNC_BUCKETS_S.index(0.005)] == 1
    assert stats.fsync_buckets[-1] == 1                   # above every bound
    assert (stats.flushes, stats.flushed_records, stats.flushed_bytes) == (4, 8, 400)
    assert stats.fsync_seconds == pytest.approx(99.0036)


async def test_a_bookie_counts_entries_added_flushed_and_read(tmp_path):
    metadata = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    bookie = await Bookie.open(tmp_path / "bookie", StorageConfig(), metadata)
    try:
        for entry_id in range(10):
            await bookie.add(7, entry_id, b"x" * 100, entry_id - 1)
        stats = bookie.stats
        assert stats.entries_added == 10
        assert stats.flushes == sum(stats.fsync_buckets) == sum(bookie.flush_counts.values()) >= 1
        assert stats.flushed_records >= 10 and stats.flushed_bytes >= 1000
        assert await bookie.read(7, 3) == b"x" * 100
        assert len(await bookie.read_range(7, 0, 9, 1 << 20)) == 10
        assert (stats.entries_read, stats.bytes_read) == (11, 1100)
        assert bookie.ledger_count == 1
    finally:
        await bookie.close()
        await metadata.close()
