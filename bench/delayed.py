"""Delayed delivery (core/delayed): memory per million pending messages, and how late releases
are at a given rate. Runs the core in-process on the embedded storage (a real data directory, real
fsyncs), holding records for a topic's partition as Kafka's deliver-at-ms does.

    python -m bench.delayed [--pending 1000000] [--rate 10000] [--seconds 10] [--memory-keys 100000] [--shuffle]
                            [--background 1000000]

memory    holds --pending messages (100-byte values) due an hour from now and reports the growth
          of the Python heap (tracemalloc: every object of the core and the storage, kept after a
          collection) and of the resident memory (which also counts the storage's file-backed
          pages), and the index's own state (keys in memory, runs on storage); the bound is
          --memory-keys keys, whatever --pending is.
lateness  holds --rate * --seconds messages due evenly over --seconds (after the holding is done)
          and watches the partition: a message counts as released when the partition's high
          watermark covers it (durable, visible to a consumer; woken at each durable append, as
          a waiting Fetch is). Reports p50/p99/max of
          (visible time - due time) and that nothing came early or twice. The target is p99 <= 100 ms.
          Also the process's CPU (every thread) while releasing, per message. With --background N,
          N messages due an hour later are held first, so the release runs with that many pending
          and (past --memory-keys) most of the index on storage.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

from core.delayed.service import partition_target
from core.names import TopicName
from core.records.batch import split_batches
from core.records.builder import Record
from core.records.decoder import decode_batch
from core.service import Core
from gateway.runtime import tune_gc
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

TOPIC = TopicName("public", "default", "timers")
VALUE = b"x" * 100


async def _open(directory: Path, memory_keys: int) -> tuple[Core, EmbeddedStorage]:
    storage = await EmbeddedStorage.open(directory, StorageConfig())
    core = Core(storage.metadata, storage.logs, delayed_memory_keys=memory_keys)
    await core.start()
    await core.create_topic(TOPIC, 1)
    return core, storage


async def _hold_all(core: Core, dues, order=None, window: int = 20_000) -> float:
    """Hold one message per due time (keyed by its index, in `order`), `window` outstanding at
    most; returns holds per second."""
    started = time.perf_counter()
    target = partition_target(TOPIC.topic, 0)
    pending = []
    for n in order if order is not None else range(len(dues)):
        pending.append(core.delayed.hold("public", "default", Record(0, str(n).encode(), VALUE), dues[n], target))
        if len(pending) >= window:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    return len(dues) / (time.perf_counter() - started)


def _due_in_an_hour(count: int) -> list[int]:
    """`count` due times spread over ten minutes, an hour from now: pending for any run here."""
    due = int(time.time() * 1000) + 3_600_000
    return [due + n % 600_000 for n in range(count)]


def _rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


async def memory(directory: Path, pending: int, memory_keys: int) -> None:
    core, storage = await _open(directory, memory_keys)
    try:
        store = core.delayed.store("public", "default")
        await store.wait_loaded()
        before = _rss()
        tracemalloc.start()
        heap_before = tracemalloc.get_traced_memory()[0]
        rate = await _hold_all(core, _due_in_an_hour(pending))
        while store._spills:
            await asyncio.sleep(0.05)
        gc.collect()
        heap = tracemalloc.get_traced_memory()[0] - heap_before
        tracemalloc.stop()
        grown = _rss() - before
        per_million = 1_000_000 / pending / 2**20
        print(f"memory: {pending:,} pending (held at {rate:,.0f}/s under tracemalloc); Python heap grew "
              f"{heap / 2**20:,.1f} MiB ({heap * per_million:,.1f} MiB per million), resident memory "
              f"{grown / 2**20:,.1f} MiB ({grown * per_million:,.1f} MiB per million); "
              f"{len(store.index):,} keys in memory (bound {memory_keys:,}), {store.index.run_count:,} runs on "
              f"storage; pending count {sum(store.pending().values()):,}")
    finally:
        await core.close()
        await storage.close()


async def lateness(directory: Path, rate: int, seconds: float, memory_keys: int, shuffle: bool,
                   background: int) -> None:
    core, storage = await _open(directory, memory_keys)
    try:
        count = int(rate * seconds)
        store = core.delayed.store("public", "default")
        await store.wait_loaded()
        if background:           # pending far beyond the window: most of the index is on storage
            await _hold_all(core, _due_in_an_hour(background))
        lead_ms = max(5_000, count * 1000 // 8_000)        # time to hold them all first
        start = int(time.time() * 1000) + lead_ms
        dues = [start + n * 1000 // rate for n in range(count)]
        order = list(range(count))
        if shuffle:              # held in random order: runs overlap in time, as real traffic makes them
            random.Random(7).shuffle(order)
        held_rate = await _hold_all(core, dues, order)
        if time.time() * 1000 > start:
            raise SystemExit(f"holding took longer than the {lead_ms} ms lead ({held_rate:,.0f}/s): lower --rate")
        partition = await core.partition(TOPIC, 0)
        await asyncio.sleep(max(0.0, start / 1000 - time.time()))
        cpu_started = time.process_time()
        visible_at: list[float] = []          # wall ms at which each offset became visible
        seen = 0
        deadline = time.time() + seconds + 30
        while seen < count and time.time() < deadline:
            end = partition.high_watermark
            if end > seen:
                now = time.time() * 1000
                visible_at += [now] * (end - seen)
                seen = end
            appended = asyncio.get_running_loop().create_future()     # woken as a waiting Fetch is
            partition.watch(appended)
            await asyncio.wait([appended], timeout=0.1)
            partition.unwatch(appended)
        cpu_per_message = (time.process_time() - cpu_started) / max(seen, 1)
        values = []
        offset = 0
        while offset < partition.high_watermark:
            result = await partition.read(offset, 8 << 20)
            for batch in split_batches(result.records):
                records = decode_batch(batch)[1]
                values += [int(record.key) for record in records]   # background keys are never released
                offset = records[-1].offset + 1
        late = sorted(visible_at[index] - dues[n] for index, n in enumerate(values))
        quantiles = statistics.quantiles(late, n=100)
        print(f"lateness at {rate:,} due/s over {seconds:g} s ({count:,} messages{' held in random order' if shuffle else ''}, "
              f"{background:,} more pending an hour later, "
              f"held at {held_rate:,.0f}/s, "
              f"{memory_keys:,} keys in memory): released {len(values):,} ({len(set(values)):,} distinct); "
              f"late p50 {quantiles[49]:.1f} ms, p99 {quantiles[98]:.1f} ms, max {late[-1]:.1f} ms, "
              f"earliest {late[0]:.1f} ms; process CPU while releasing {cpu_per_message * 1e6:.0f} us per message")
    finally:
        await core.close()
        await storage.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--memory-keys", type=int, default=100_000)
    parser.add_argument("--only", choices=("memory", "lateness"))
    parser.add_argument("--shuffle", action="store_true", help="hold in random due order")
    parser.add_argument("--background", type=int, default=0,
                        help="lateness: messages held first, due an hour later (pending during the run)")
    args = parser.parse_args()
    tune_gc()         # as the gateway process runs
    with tempfile.TemporaryDirectory(prefix="bench-delayed-") as tmp:
        if args.only in (None, "memory"):
            asyncio.run(memory(Path(tmp) / "memory", args.pending, args.memory_keys))
        if args.only in (None, "lateness"):
            asyncio.run(lateness(Path(tmp) / "lateness", args.rate, args.seconds, args.memory_keys, args.shuffle,
                                args.background))


if __name__ == "__main__":
    main()
