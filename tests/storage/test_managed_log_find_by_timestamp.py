"""A time lookup (Kafka ListOffsets by timestamp) never answers below the log start, even when the
ledger it is reading is rolled under it: a produce fills the open ledger and its roll finishes while
the lookup waits for its first read from that ledger."""

from storage.api import RetentionPolicy
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from storage.managed_log.ledger_list import ENTRY_HEADER

NAME = "tenant/ns/topic/0"
PAYLOAD = b"x" * 100
ROLL_BYTES = 4 * (ENTRY_HEADER.size + len(PAYLOAD))   # the fourth entry fills the ledger


async def test_a_roll_during_a_time_lookup_does_not_expose_entries_below_the_log_start(tmp_path) -> None:
    storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    try:
        log = await storage.logs.open_log(NAME, RetentionPolicy(roll_bytes=ROLL_BYTES))
        for i in range(3):
            assert await log.append(PAYLOAD, 1, 1_000 + i) == i
        assert await log.delete_before(1) == 1     # inside the open ledger: entry 0 stays stored
        open_ledger = log._writer
        read = open_ledger.read
        rolled = []

        async def read_after_a_roll(*args, **kwargs):
            if not rolled:
                assert await log.append(PAYLOAD, 1, 1_003) == 3
                if log._rolling is not None:
                    await log._rolling
                rolled.append(log._writer.ledger_id)
            return await read(*args, **kwargs)

        open_ledger.read = read_after_a_roll
        found = await log.find_by_timestamp(0)
        assert rolled and rolled[0] != open_ledger.ledger_id, "the forged roll did not happen"
        assert (found.base_offset, found.max_timestamp_ms) == (1, 1_001)
        del open_ledger.read
        assert [(e.base_offset, e.max_timestamp_ms) for e in await log.read(1, 1 << 20)] == [
            (1, 1_001), (2, 1_002), (3, 1_003)]
        assert (await log.find_by_timestamp(0)).base_offset == 1
        assert (await log.find_by_timestamp(1_003)).base_offset == 3
        await log.close()
    finally:
        await storage.close()
