"""Storage engine appends with fsync on, beside a plain write + fsync loop on the same disk.

Each writer is a task that appends one entry at a time and waits for it to be durable before the
next (a producer with one request in flight), on its own ledger, for a fixed time. The references
run in the same process on the same directory:
  - fsync per entry: one write + fdatasync per entry, the price of durability without group commit;
  - streaming: the same bytes written in 1 MiB chunks with an fdatasync after each (the disk's
    durable bandwidth).
Results are ratios to those references, so a noisy machine shifts both sides alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from storage.api import RetentionPolicy
from storage.bookie.bookie import Bookie
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from storage.metadata.sqlite import SqliteMetadataStore


@dataclass
class Result:
    name: str
    entry_bytes: int
    writers: int
    entries: int
    seconds: float

    @property
    def entries_per_s(self) -> float:
        return self.entries / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.entries * self.entry_bytes / self.seconds / 1e6


def fsync_per_entry(directory: Path, entry_bytes: int, seconds: float) -> Result:
    path = directory / "fsync-per-entry.bin"
    payload = os.urandom(entry_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    count, start = 0, time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, payload)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        path.unlink()
    return Result("write+fsync per entry", entry_bytes, 1, count, time.perf_counter() - start)


def streaming(directory: Path, entry_bytes: int, seconds: float) -> Result:
    path = directory / "streaming.bin"
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    written, start = 0, time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, chunk)
            os.fdatasync(fd)
            written += len(chunk)
    finally:
        os.close(fd)
        path.unlink()
    return Result("write 1 MiB+fsync (bandwidth)", entry_bytes, 1, written // entry_bytes, time.perf_counter() - start)


async def bookie_appends(directory: Path, entry_bytes: int, writers: int, seconds: float) -> Result:
    metadata = await SqliteMetadataStore.open(directory / "meta.db")
    bookie = await Bookie.open(directory / "bookie", StorageConfig(), metadata)
    payload = os.urandom(entry_bytes)
    counts = [0] * writers
    deadline = time.perf_counter() + seconds

    async def writer(ledger_id: int) -> None:
        entry_id = 0
        while time.perf_counter() < deadline:
            await bookie.add(ledger_id, entry_id, payload, entry_id - 1)
            entry_id += 1
        counts[ledger_id] = entry_id

    start = time.perf_counter()
    await asyncio.gather(*(writer(i) for i in range(writers)))
    elapsed = time.perf_counter() - start
    await bookie.close()
    await metadata.close()
    return Result("bookie add", entry_bytes, writers, sum(counts), elapsed)


async def managed_log_appends(directory: Path, entry_bytes: int, writers: int, seconds: float) -> Result:
    storage = await EmbeddedStorage.open(directory / "log", StorageConfig())
    logs = [await storage.logs.open_log(f"bench/ns/t{i}/0", RetentionPolicy()) for i in range(writers)]
    payload = os.urandom(entry_bytes)
    counts = [0] * writers
    deadline = time.perf_counter() + seconds

    async def writer(index: int) -> None:
        log, count = logs[index], 0
        while time.perf_counter() < deadline:
            await log.append(payload, 1, 0)
            count += 1
        counts[index] = count

    start = time.perf_counter()
    await asyncio.gather(*(writer(i) for i in range(writers)))
    elapsed = time.perf_counter() - start
    for log in logs:
        await log.close()
    await storage.close()
    return Result("managed log append", entry_bytes, writers, sum(counts), elapsed)


async def run(directory: Path, seconds: float) -> list[tuple[Result, Result, Result]]:
    rows = []
    for entry_bytes in (1024, 64 * 1024):
        per_entry = fsync_per_entry(directory, entry_bytes, seconds)
        bandwidth = streaming(directory, entry_bytes, seconds)
        for writers in (1, 8):
            for measure in (bookie_appends, managed_log_appends):
                with tempfile.TemporaryDirectory(dir=directory) as sub:
                    result = await measure(Path(sub), entry_bytes, writers, seconds)
                rows.append((result, per_entry, bandwidth))
    return rows


def report(rows: list[tuple[Result, Result, Result]]) -> str:
    lines = ["| what | entry | writers | entries/s | MB/s | × fsync-per-entry | × disk bandwidth |",
             "|---|---|---|---|---|---|---|"]
    for result, per_entry, bandwidth in rows:
        lines.append(f"| {result.name} | {result.entry_bytes // 1024} KiB | {result.writers} | "
                     f"{result.entries_per_s:,.0f} | {result.mb_per_s:,.1f} | "
                     f"{result.entries_per_s / per_entry.entries_per_s:.2f} | "
                     f"{result.mb_per_s / bandwidth.mb_per_s:.2f} |")
    refs = {(r[1].entry_bytes): (r[1], r[2]) for r in rows}
    lines.append("")
    for entry_bytes, (per_entry, bandwidth) in sorted(refs.items()):
        lines.append(f"reference, {entry_bytes // 1024} KiB: write+fsync per entry {per_entry.entries_per_s:,.0f} "
                     f"entries/s; 1 MiB writes + fsync {bandwidth.mb_per_s:,.1f} MB/s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir under ./)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir or Path.cwd(), prefix="bench-") as directory:
        print(report(asyncio.run(run(Path(directory), args.seconds))))


if __name__ == "__main__":
    main()
