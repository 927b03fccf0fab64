"""The newest durable entries of each log's current ledger, kept in memory for tailing readers.

A consumer that keeps up reads what was appended a moment ago; without this, every such read goes
to the bookie through a worker thread (index lookup, pread, checksum) for bytes the process held a
millisecond earlier. Each log keeps the entries of one ledger, the newest last, up to PER_LOG_BYTES;
all logs share one budget of BUDGET_BYTES, and the log appended to least recently gives its entries
up first, so many partitions cost at most the budget. A read the cache cannot start (an offset
before its first entry, another ledger) goes to the bookie as before; entries are immutable once
durable, so a cached entry is the stored one.

Owned by the event loop, like the logs that use it.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict

from storage.api import LogEntry

PER_LOG_BYTES = 4 << 20
BUDGET_BYTES = 64 << 20


class LogTail:
    """One log's cached entries: consecutive entries of ledger `ledger_id`."""

    __slots__ = ("ledger_id", "_bases", "_entries", "_first", "size")

    def __init__(self) -> None:
        self.ledger_id = -1
        self._bases: list[int] = []
        self._entries: list[LogEntry] = []
        self._first = 0          # index of the oldest live entry (dropped ones are compacted lazily)
        self.size = 0

    def __len__(self) -> int:
        return len(self._entries) - self._first

    def _push(self, entry: LogEntry) -> None:
        self._bases.append(entry.base_offset)
        self._entries.append(entry)
        self.size += len(entry.payload)

    def _pop_oldest(self) -> int:
        entry = self._entries[self._first]
        self._entries[self._first] = None   # type: ignore[call-overload]  # free the payload now
        self._first += 1
        if self._first > 64 and self._first * 2 > len(self._entries):
            del self._entries[:self._first]
            del self._bases[:self._first]
            self._first = 0
        size = len(entry.payload)
        self.size -= size
        return size

    def _clear(self) -> int:
        size, self.size = self.size, 0
        self._bases, self._entries, self._first = [], [], 0
        return size

    def read(self, ledger_id: int, offset: int, max_bytes: int) -> list[LogEntry] | None:
        """Entries from the one holding `offset`, within max_bytes (at least one); None when the
        cache does not hold that entry (then the caller reads the bookie)."""
        if ledger_id != self.ledger_id or len(self) == 0 or offset < self._bases[self._first]:
            return None
        index = bisect.bisect_right(self._bases, offset, self._first) - 1
        entry = self._entries[index]
        if offset >= entry.next_offset:
            return None
        out = [entry]
        total = len(entry.payload)
        entries = self._entries
        for index in range(index + 1, len(entries)):
            if total >= max_bytes:
                break
            out.append(entries[index])
            total += len(entries[index].payload)
        return out


class TailCache:
    """Every log's tail under one byte budget (see the module docstring)."""

    def __init__(self, budget_bytes: int = BUDGET_BYTES, per_log_bytes: int = PER_LOG_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.per_log_bytes = per_log_bytes
        self.used = 0
        self._recent: OrderedDict[LogTail, None] = OrderedDict()   # least recently appended first

    def new_tail(self) -> LogTail:
        return LogTail()

    def add(self, tail: LogTail, ledger_id: int, entry: LogEntry) -> None:
        """`entry` of `ledger_id` is durable; the log's previous ledger, if cached, is forgotten."""
        if len(entry.payload) > self.per_log_bytes or len(entry.payload) > self.budget_bytes:
            self.forget(tail)
            return
        if tail.ledger_id != ledger_id:
            self.used -= tail._clear()
            tail.ledger_id = ledger_id
        tail._push(entry)
        self.used += len(entry.payload)
        self._recent[tail] = None
        self._recent.move_to_end(tail)
        while tail.size > self.per_log_bytes:
            self.used -= tail._pop_oldest()
        while self.used > self.budget_bytes:
            oldest = next(iter(self._recent))
            if oldest is tail:
                self.used -= tail._pop_oldest()
            else:
                self.forget(oldest)

    def forget(self, tail: LogTail) -> None:
        """Drop a log's entries (its ledger rolled away, was repaired or deleted, or it closed)."""
        self.used -= tail._clear()
        tail.ledger_id = -1
        self._recent.pop(tail, None)
