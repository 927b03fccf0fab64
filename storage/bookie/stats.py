"""What a bookie counts about its work, as plain numbers: storage/ knows no metrics library, the
process serving the bookie exports these (gateway/bookie_metrics.py).

The journal thread adds to the fsync and flush counters, the event loop to the others; each is a
single integer or float add, and a scrape that reads one mid-update is off by one flush at most.
"""

from __future__ import annotations

import bisect
from collections import Counter

# Upper bounds of the fsync latency histogram, in seconds: a healthy SSD syncs in well under a
# millisecond, a disk that makes writers wait takes tens of milliseconds.
FSYNC_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class BookieStats:
    def __init__(self) -> None:
        self.fsync_buckets = [0] * (len(FSYNC_BUCKETS_S) + 1)   # the last one: above every bound
        self.fsync_seconds = 0.0
        self.flushes = 0
        self.flushed_records = 0
        self.flushed_bytes = 0
        self.entries_added = 0
        self.entries_read = 0
        self.bytes_read = 0
        self.request_errors: Counter[tuple[str, str]] = Counter()   # (operation, status) -> count

    def synced(self, seconds: float, records: int, size: int) -> None:
        """One journal flush: its fsync took `seconds` and made `records` records of `size` bytes durable."""
        self.fsync_buckets[bisect.bisect_left(FSYNC_BUCKETS_S, seconds)] += 1
        self.fsync_seconds += seconds
        self.flushes += 1
        self.flushed_records += records
        self.flushed_bytes += size

    def read(self, payloads: list[bytes]) -> None:
        self.entries_read += len(payloads)
        self.bytes_read += sum(map(len, payloads))

    def failed(self, operation: str, status: str) -> None:
        self.request_errors[(operation, status)] += 1
