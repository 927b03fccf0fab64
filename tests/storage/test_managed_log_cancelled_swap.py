"""A caller cancelled while the managed log swaps its ledger list (a queue deleted while its
cursor flush was dropping consumed ledgers) must not leave the log with a stale list version: the
write lands in the metadata store anyway, and the close that follows must still seal the ledger
with its compare-and-set instead of losing it ("could not seal its ledger on close")."""

import asyncio
import json
import logging

from storage.api import RetentionPolicy
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

NAME = "tenant/ns/topic/0"


async def test_a_cancelled_delete_before_keeps_the_list_version_for_close(tmp_path, caplog, monkeypatch) -> None:
    storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    try:
        log = await storage.logs.open_log(NAME, RetentionPolicy(roll_bytes=1))   # one ledger per entry
        for i in range(3):
            await log.append(b"entry %d" % i, 1, 1_000 + i)
        submitted = asyncio.Event()
        put = storage.metadata.put

        async def put_in_flight(path, value, *args, **kwargs):
            # as the store's writer thread does: once submitted, the write happens whoever waits
            write = asyncio.ensure_future(put(path, value, *args, **kwargs))
            if path.startswith("/logs/") and json.loads(value)["log_start_offset"] == 2:
                submitted.set()     # the list without the first two ledgers
            return await write

        monkeypatch.setattr(storage.metadata, "put", put_in_flight)
        deleting = asyncio.ensure_future(log.delete_before(2))
        await submitted.wait()
        deleting.cancel()
        await asyncio.gather(deleting, return_exceptions=True)
        monkeypatch.undo()
        with caplog.at_level(logging.WARNING, logger="gateway.storage"):
            await log.close()
        assert not [r for r in caplog.records if "could not seal" in r.getMessage()]
        reopened = await storage.logs.open_log(NAME, RetentionPolicy(roll_bytes=1))
        assert (reopened.log_start_offset, reopened.high_watermark) == (2, 3)
        assert [bytes(e.payload) for e in await reopened.read(2, 1 << 20)] == [b"entry 2"]
        await reopened.close()
    finally:
        await storage.close()
