"""Reads at random offsets of a sealed ledger (what delayed messages coming due in no order, seeking
consumers and redeliveries cost), through the managed log of the embedded default.

Writes `--batches` batches of 4 records, closes and reopens the log (so its ledger is one this
process did not write: offsets are found by searching entries, storage/managed_log/positions.py),
then reads the batch holding each of `--reads` random offsets: one read per offset, 64 at a time;
then the same offsets in groups of 2,000 (`read_holding`, as released delayed messages are read),
on a fresh reopen so that neither finds positions the other learned.

    python -m bench.random_reads [--batches 50000] [--reads 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

from core.records.builder import Record, build_batch
from gateway.runtime import tune_gc
from storage.api import RetentionPolicy
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

RECORDS_PER_BATCH = 4
CONCURRENT = 64
GROUP = 2_000


async def run(batches: int, reads: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="random-reads-") as tmp:
        storage = await EmbeddedStorage.open(Path(tmp), StorageConfig())
        policy = RetentionPolicy(-1, -1, 1 << 30, 1 << 40)
        try:
            log = await storage.logs.open_log("bench/reads/t/0", policy)
            pending = []
            for n in range(batches):
                batch = build_batch([Record(1000, value=b"v%d" % (n * RECORDS_PER_BATCH + k))
                                     for k in range(RECORDS_PER_BATCH)])
                pending.append(log.append(batch, RECORDS_PER_BATCH, 1000))
                if len(pending) >= 2000:
                    await asyncio.gather(*pending)
                    pending = []
            await asyncio.gather(*pending)
            await log.close()
            log = await storage.logs.open_log("bench/reads/t/0", policy)
            offsets = [random.randrange(batches * RECORDS_PER_BATCH) for _ in range(reads)]
            room = asyncio.Semaphore(CONCURRENT)

            async def read(offset: int) -> None:
                async with room:
                    entries = await log.read(offset, 1)
                    assert entries[0].base_offset <= offset < entries[0].next_offset

            started = time.perf_counter()
            await asyncio.gather(*(read(offset) for offset in offsets))
            one_by_one = reads / (time.perf_counter() - started)
            await log.close()
            log = await storage.logs.open_log("bench/reads/t/0", policy)
            started = time.perf_counter()
            for start in range(0, reads, GROUP):
                group = sorted(offsets[start:start + GROUP])
                entries = await log.read_holding(group)
                assert len(entries) == len({offset // RECORDS_PER_BATCH for offset in group})
            return one_by_one, reads / (time.perf_counter() - started)
        finally:
            await storage.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=50_000)
    parser.add_argument("--reads", type=int, default=4000)
    args = parser.parse_args(argv)
    tune_gc()        # as the gateway process runs
    one_by_one, grouped = asyncio.run(run(args.batches, args.reads))
    print(f"{args.reads} reads at random offsets of a sealed ledger of {args.batches} entries: "
          f"{one_by_one:,.0f} reads/s one by one, {grouped:,.0f} reads/s in groups of {GROUP:,}")


if __name__ == "__main__":
    main()
