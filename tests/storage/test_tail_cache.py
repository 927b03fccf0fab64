"""The managed log's in-memory tail: bounded memory, and reads identical to the bookie's."""

from pathlib import Path

from storage.api import LogEntry, RetentionPolicy
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from storage.managed_log.tail_cache import TailCache


def entry(base: int, size: int, count: int = 1) -> LogEntry:
    return LogEntry(base, count, 0, bytes([base % 256]) * size)


def test_a_tail_serves_from_the_entry_holding_the_offset_within_max_bytes():
    cache = TailCache()
    tail = cache.new_tail()
    for base in (0, 10, 20):
        cache.add(tail, 7, entry(base, 100, count=10))
    assert [e.base_offset for e in tail.read(7, 15, 150)] == [10, 20]
    assert [e.base_offset for e in tail.read(7, 15, 1)] == [10]      # at least one entry
    assert tail.read(7, 30, 100) is None                              # past the newest entry
    assert tail.read(8, 15, 100) is None                              # another ledger


def test_a_tail_keeps_at_most_per_log_bytes_dropping_the_oldest():
    cache = TailCache(budget_bytes=10_000, per_log_bytes=250)
    tail = cache.new_tail()
    for base in range(5):
        cache.add(tail, 1, entry(base, 100))
    assert tail.size == 200 and cache.used == 200
    assert tail.read(1, 2, 1000) is None
    assert [e.base_offset for e in tail.read(1, 3, 1000)] == [3, 4]


def test_the_shared_budget_is_taken_from_the_log_appended_to_least_recently():
    cache = TailCache(budget_bytes=300, per_log_bytes=300)
    idle, busy = cache.new_tail(), cache.new_tail()
    cache.add(idle, 1, entry(0, 100))
    cache.add(busy, 2, entry(0, 100))
    cache.add(busy, 2, entry(1, 100))
    cache.add(busy, 2, entry(2, 100))
    assert cache.used <= 300 and len(idle) == 0 and len(busy) == 3
    cache.add(busy, 2, entry(3, 100))
    assert cache.used == 300 and busy.read(2, 0, 10) is None


def test_a_new_ledger_replaces_the_previous_ones_entries():
    cache = TailCache()
    tail = cache.new_tail()
    cache.add(tail, 1, entry(0, 100))
    cache.add(tail, 2, entry(1, 50))
    assert tail.read(1, 0, 100) is None and cache.used == 50


def test_an_entry_larger_than_the_budget_empties_the_tail_instead():
    cache = TailCache(budget_bytes=1000, per_log_bytes=100)
    tail = cache.new_tail()
    cache.add(tail, 1, entry(0, 50))
    cache.add(tail, 1, entry(1, 500))
    assert len(tail) == 0 and cache.used == 0


async def test_reads_of_the_newest_entries_need_no_bookie_and_match_it(tmp_path: Path):
    storage = await EmbeddedStorage.open(tmp_path, StorageConfig())
    try:
        log = await storage.logs.open_log("t/n/topic/0", RetentionPolicy())
        payloads = [bytes([i]) * (100 + i) for i in range(20)]
        for payload in payloads:
            await log.append(payload, 2, 1000)
        writer = log._writer
        real_read = writer.read

        async def no_bookie(*args, **kwargs):
            raise AssertionError("read went to the bookie")
        writer.read = no_bookie
        cached = await log.read(7, 1 << 20)
        assert [e.base_offset for e in cached] == list(range(6, 40, 2))
        writer.read = real_read
        storage.logs.tail_cache.forget(log._tail)
        from_bookie = await log.read(7, 1 << 20)
        assert [(e.base_offset, e.record_count, bytes(e.payload)) for e in cached] == \
            [(e.base_offset, e.record_count, bytes(e.payload)) for e in from_bookie]
        await log.close()
    finally:
        await storage.close()


async def test_dropping_the_cached_ledger_frees_its_entries(tmp_path: Path):
    storage = await EmbeddedStorage.open(tmp_path, StorageConfig())
    try:
        log = await storage.logs.open_log("t/n/topic/0", RetentionPolicy(roll_bytes=300))
        for i in range(2):
            await log.append(bytes([i]) * 200, 1, 1000)   # the second one rolls the ledger
        if log._rolling is not None:
            await log._rolling
        assert storage.logs.tail_cache.used == 400   # the closed ledger's entries are still served
        assert [bytes(e.payload) for e in await log.read(1, 1 << 20)] == [bytes([1]) * 200]
        assert await log.delete_before(2) == 2
        assert storage.logs.tail_cache.used == 0
        assert await log.read(2, 100) == []
        await log.close()
    finally:
        await storage.close()
