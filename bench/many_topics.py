"""Many topics: create N topics of one partition each and write one batch to each, through the core.

Reports the time taken, topics/s, files open by the process, its peak RSS and the data directory's
size. A topic costs metadata rows and a ledger, not files or memory: the numbers should stay flat
per topic as N grows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from pathlib import Path

import psutil
from rich.progress import Progress

from core.names import TopicName
from core.records.builder import Record, build_batch
from core.service import Core
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def run(data_dir: Path, topics: int, concurrency: int) -> dict[str, float]:
    storage = await EmbeddedStorage.open(data_dir, StorageConfig())
    core = Core(storage.metadata, storage.logs)
    await core.start()
    batch = build_batch([Record(int(time.time() * 1000), key=b"k", value=b"v" * 100)])
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(topics):
        queue.put_nowait(i)
    start = time.perf_counter()
    with Progress(transient=True) as progress:
        bar = progress.add_task("topics", total=topics)

        async def worker() -> None:
            while not queue.empty():
                name = TopicName.of(f"topic-{queue.get_nowait():07d}")
                await core.create_topic(name, 1)
                partition = await core.partition(name, 0)
                await partition.append(batch)
                progress.advance(bar)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    process = psutil.Process()
    result = {"topics": topics, "seconds": elapsed, "topics_per_s": topics / elapsed,
              "open_files": len(process.open_files()), "fds": process.num_fds(),
              "rss_mib": process.memory_info().rss / 2**20,
              "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    await core.close()
    await storage.close()
    result["data_dir_mib"] = directory_bytes(data_dir) / 2**20
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir or Path.cwd(), prefix="bench-topics-") as directory:
        result = asyncio.run(run(Path(directory), args.topics, args.concurrency))
    print("| topics | seconds | topics/s | open files | fds | RSS MiB | peak RSS MiB | data dir MiB |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {result['topics']:,} | {result['seconds']:.1f} | {result['topics_per_s']:,.0f} | "
          f"{result['open_files']} | {result['fds']} | {result['rss_mib']:.0f} | {result['peak_rss_mib']:.0f} | "
          f"{result['data_dir_mib']:.1f} |")
    print(f"(pid {os.getpid()})")


if __name__ == "__main__":
    main()
