"""Reading the entries that hold scattered offsets at once (delayed messages coming due out of order):
each entry comes back once, in log order, from a sealed ledger of another writer (searched), from
the writer's own open ledger and from its tail cache alike, and offsets outside the log are
skipped. The searches for many offsets share their reads."""

from __future__ import annotations

import random

import pytest

from core.records.builder import Record, build_batch
from storage.api import RetentionPolicy
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

NAME = "tenant/ns/topic/0"


def batch(first: int, count: int) -> bytes:
    return build_batch([Record(1000, value=b"v%d" % offset) for offset in range(first, first + count)])


async def fill(log, counts: list[int], first: int = 0) -> list[tuple[int, int]]:
    """Appends entries of `counts` records from offset `first`; (base offset, count) of each."""
    entries, offset = [], first
    for count in counts:
        assert await log.append(batch(offset, count), count, 1000) == offset
        entries.append((offset, count))
        offset += count
    return entries


def holding(entries: list[tuple[int, int]], offsets: list[int]) -> list[int]:
    return sorted({base for base, count in entries for offset in offsets if base <= offset < base + count})


@pytest.mark.parametrize("tail_cached", [True, False])
async def test_scattered_offsets_of_sealed_and_open_ledgers_read_each_entry_once_in_order(tmp_path, tail_cached) -> None:
    rng = random.Random(3)
    counts = [rng.randint(1, 12) for _ in range(600)]
    storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    if not tail_cached:       # the open ledger's entries are then found by the writer's own offsets
        storage.logs.tail_cache.per_log_bytes = 0
    try:
        log = await storage.logs.open_log(NAME, RetentionPolicy(roll_bytes=16 << 10))
        entries = await fill(log, counts)
        end = sum(counts)
        await log.close()
        log = await storage.logs.open_log(NAME, RetentionPolicy(roll_bytes=16 << 10))   # every ledger sealed
        more = await fill(log, [3, 5, 2], first=end)      # and the new open ledger
        assert len(log._list.ledgers) > 3
        for _ in range(20):
            offsets = sorted(rng.sample(range(end + 10), 60)) + [end + 10, end + 500, -1]
            found = await log.read_holding(sorted(offsets))
            assert [e.base_offset for e in found] == holding(entries + more, offsets)
            for e in found:
                assert bytes(e.payload) == batch(e.base_offset, e.record_count)
        await log.close()
    finally:
        await storage.close()


async def test_the_searches_of_many_offsets_share_their_reads(tmp_path) -> None:
    storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    try:
        log = await storage.logs.open_log(NAME, RetentionPolicy(roll_bytes=1 << 30))
        await fill(log, [4] * 5000)
        await log.close()
        log = await storage.logs.open_log(NAME, RetentionPolicy(roll_bytes=1 << 30))
        await log.append(batch(20_000, 1), 1, 1000)       # the sealed ledger is the previous one
        sealed = await log._reader(log._list.ledgers[0].ledger_id)
        requests = []
        scattered = sealed.read_scattered

        async def counted(entry_ids):
            requests.append(len(entry_ids))
            return await scattered(entry_ids)
        sealed.read_scattered = counted
        offsets = sorted(random.Random(5).sample(range(20_000), 500))
        found = await log.read_holding(offsets)
        assert [e.base_offset for e in found] == sorted({offset - offset % 4 for offset in offsets})
        assert len(requests) <= 3                 # rounds of probes, not one read per probe
        await log.close()
    finally:
        await storage.close()
