"""Child process for the kill -9 tests: `write` appends forever and prints each acknowledgement;
`dump` prints every entry of the log. Run as a script: python crash_child.py MODE DATA_DIR."""

import asyncio
import sys
from pathlib import Path

from storage.api import RetentionPolicy
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

LOG = "t/crash/0"
POLICY = RetentionPolicy(roll_bytes=64 * 1024)  # roll often: crashes land inside rolls too
CONFIG = StorageConfig(journal_segment_bytes=1 << 20)


async def write(data_dir: Path) -> None:
    storage = await EmbeddedStorage.open(data_dir, CONFIG)
    log = await storage.logs.open_log(LOG, POLICY)
    out = sys.stdout
    out.write(f"start {log.high_watermark}\n")
    out.flush()
    in_flight: set[asyncio.Future] = set()
    seq = 0

    def acked(n: int, fut: asyncio.Future) -> None:
        in_flight.discard(fut)
        if fut.exception() is None:
            out.write(f"ack {fut.result()} {n}\n")
            out.flush()

    while True:
        while len(in_flight) < 64:
            payload = f"p{seq}:".encode() + bytes(seq % 251 for _ in range(200 + seq % 700))
            fut = asyncio.ensure_future(log.append(payload, 1, seq))
            fut.add_done_callback(lambda f, n=seq: acked(n, f))
            in_flight.add(fut)
            seq += 1
        await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)


async def dump(data_dir: Path) -> None:
    storage = await EmbeddedStorage.open(data_dir, CONFIG)
    log = await storage.logs.open_log(LOG, POLICY)
    offset = log.log_start_offset
    while offset < log.high_watermark:
        for entry in await log.read(offset, 1 << 20):
            payload = bytes(entry.payload)
            print(f"entry {entry.base_offset} {payload.split(b':', 1)[0].decode()} {len(payload)}")
            offset = entry.next_offset
    print(f"end {log.high_watermark} {len(storage.bookie.recovery_report.dropped)}")
    await log.close()
    await storage.close()


if __name__ == "__main__":
    mode, directory = sys.argv[1], Path(sys.argv[2])
    asyncio.run(write(directory) if mode == "write" else dump(directory))
