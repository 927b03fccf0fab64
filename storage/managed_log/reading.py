"""Reading a managed log: offsets to ledger entries, for its owner (log.py) and for brokers that
only read it (follower.py).

A read finds the ledger holding an offset in the ledger list, then the entry inside it: from a
remembered position (sequential readers never search), the writer's own entry offsets, or a bisect
over the entries' headers. Nothing is read at or past the high watermark. The owner's newest
durable entries are served from the tail cache without touching a bookie.
"""

from __future__ import annotations

import asyncio
import bisect
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from storage.api import LogClosed, LogEntry, PositionOutOfRange
from storage.ledger.client import LedgerClient, LedgerHandle
from storage.managed_log.ledger_list import ENTRY_HEADER, LedgerList, LedgerRange
from storage.managed_log.positions import EntryPositions, EntrySearch, search_entries
from storage.managed_log.tail_cache import LogTail, TailCache

_HINTS = 256  # remembered (offset -> entry) positions, so sequential readers never search


def decode_entry(raw: memoryview) -> LogEntry:
    base, count, max_ts, _ = ENTRY_HEADER.unpack_from(raw)
    return LogEntry(base, count, max_ts, raw[ENTRY_HEADER.size:])


class LogReads:
    """The reading half of a managed log. Its subclass keeps these up to date."""

    _ledgers: LedgerClient
    _list: LedgerList
    _hwm: int
    _closed: BaseException | None
    _writer: LedgerHandle | None          # the open ledger, when this process writes it
    _bases: array                         # base offset of each entry of the open ledger (writer only)
    _readers: dict[int, LedgerHandle]     # ledgers opened for reading
    _hints: OrderedDict[int, tuple[int, int]]
    _positions: EntryPositions            # where entries of ledgers read (not written) here begin
    _cache: TailCache | None
    _tail: LogTail | None
    _append_waiters: list[asyncio.Future]   # resolved by the subclass when the high watermark moves

    @property
    def log_start_offset(self) -> int:
        return self._list.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._hwm

    @property
    def leader_epoch(self) -> int:
        return self._list.leader_epoch

    def epoch_at(self, offset: int) -> int:
        return self._list.epoch_at(offset)

    def epoch_end(self, epoch: int) -> tuple[int, int]:
        return self._list.epoch_end(epoch, self._hwm)

    async def wait_for_append(self, offset: int, timeout_s: float) -> bool:
        """Whether there is data at `offset`, waiting up to `timeout_s` for it."""
        if self._hwm > offset:
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._append_waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except asyncio.TimeoutError:
            pass
        return self._hwm > offset



    async def read(self, offset: int, max_bytes: int) -> list[LogEntry]:
        if self._closed is not None and not isinstance(self._closed, LogClosed):
            raise self._closed
        hwm = self._hwm
        if offset < self.log_start_offset or offset > hwm:
            raise PositionOutOfRange(f"offset {offset} outside [{self.log_start_offset}, {hwm}]")
        entries: list[LogEntry] = []
        budget = max(max_bytes, 1)
        while offset < hwm and budget > 0:
            chunk = await self._read_ledger(offset, budget, hwm)
            if not chunk:
                break
            entries.extend(chunk)
            budget -= sum(len(e.payload) for e in chunk)
            offset = chunk[-1].next_offset
        return entries

    async def _read_ledger(self, offset: int, max_bytes: int, hwm: int) -> list[LogEntry]:
        """Entries from the one holding `offset` to the end of its ledger, within max_bytes."""
        ledger_range = self._range_for(offset)
        if self._tail is not None:
            cached = self._tail.read(ledger_range.ledger_id, offset, max_bytes)
            if cached is not None:
                return [entry for entry in cached if entry.base_offset < hwm]
        if self._writer is not None and ledger_range.ledger_id == self._writer.ledger_id:
            handle = self._writer
            entry_id = bisect.bisect_right(self._bases, offset) - 1
        else:
            handle = await self._reader(ledger_range.ledger_id)
            entry_id = await self._find_entry(handle, offset, ledger_range)
        raws = await handle.read(entry_id, handle.last_add_confirmed, max_bytes)
        entries = [entry for entry in map(decode_entry, raws) if entry.base_offset < hwm]
        if entries and handle is not self._writer:
            self._positions.learn(ledger_range.ledger_id, entry_id, entries[0].base_offset)
        if entries and entries[-1].next_offset < hwm:
            self._remember(entries[-1].next_offset, ledger_range.ledger_id, entry_id + len(entries))
        return entries

    def _range_for(self, offset: int) -> LedgerRange:
        ledgers = self._list.ledgers
        return _holding(ledgers, [r.first_offset for r in ledgers], offset)

    async def _reader(self, ledger_id: int) -> LedgerHandle:
        handle = self._readers.get(ledger_id)
        if handle is None:
            handle = await self._ledgers.open(ledger_id, recover=False)
            self._readers[ledger_id] = handle
        return handle

    def _remember(self, offset: int, ledger_id: int, entry_id: int) -> None:
        self._hints[offset] = (ledger_id, entry_id)
        if len(self._hints) > _HINTS:
            self._hints.popitem(last=False)

    async def _find_entry(self, handle: LedgerHandle, offset: int, ledger_range: LedgerRange) -> int:
        """The entry of a ledger this process does not write that holds `offset`: remembered for a
        sequential reader, else searched between the nearest entries known (positions.py)."""
        hint = self._hints.get(offset)
        if hint is not None and hint[0] == handle.ledger_id:
            return hint[1]
        ledger_id = handle.ledger_id

        async def base_and_next(entry_id: int) -> tuple[int, int]:
            entry = await self._entry(handle, entry_id)
            self._positions.learn(ledger_id, entry_id, entry.base_offset)
            return entry.base_offset, entry.next_offset
        return await search_entries(self._search(handle, offset, ledger_range), base_and_next)

    def _search(self, handle: LedgerHandle, offset: int, ledger_range: LedgerRange) -> EntrySearch:
        """A search for `offset`'s entry between the nearest entries known around it."""
        ledger_id, count = handle.ledger_id, handle.last_add_confirmed + 1
        below, above = self._positions.around(ledger_id, offset)
        lo, lo_base = below if below is not None else (0, ledger_range.first_offset)
        hi, hi_base = above if above is not None else (count, ledger_range.end_offset if ledger_range.end_offset >= 0
                                                        else self._hwm)
        return EntrySearch(offset, lo, lo_base, hi, hi_base)

    async def read_holding(self, offsets: list[int]) -> list[LogEntry]:
        """The entries holding `offsets` (sorted), each once and in log order; offsets outside
        [log start, high watermark) are skipped. For readers that jump around a log (delayed
        messages coming due out of order): the entries of a ledger are read together, and so are
        the probes of the searches for them."""
        if self._closed is not None and not isinstance(self._closed, LogClosed):
            raise self._closed
        hwm, start, ledgers = self._hwm, self.log_start_offset, self._list.ledgers
        firsts = [r.first_offset for r in ledgers]
        by_ledger: dict[int, tuple[LedgerRange, list[int]]] = {}
        for offset in offsets:
            if start <= offset < hwm:
                ledger_range = _holding(ledgers, firsts, offset)
                by_ledger.setdefault(ledger_range.ledger_id, (ledger_range, []))[1].append(offset)
        found: dict[int, LogEntry] = {}
        await asyncio.gather(*(self._read_holding_in(ledger_range, wanted, hwm, found)
                               for ledger_range, wanted in by_ledger.values()))
        return [found[base] for base in sorted(found)]

    async def _read_holding_in(self, ledger_range: LedgerRange, offsets: list[int], hwm: int,
                               found: dict[int, LogEntry]) -> None:
        ledger_id = ledger_range.ledger_id
        missing = []
        for offset in offsets:
            cached = self._tail.read(ledger_id, offset, 1) if self._tail is not None else None
            if cached:
                found[cached[0].base_offset] = cached[0]
            else:
                missing.append(offset)
        if not missing:
            return
        if self._writer is not None and ledger_id == self._writer.ledger_id:
            ids = sorted({bisect.bisect_right(self._bases, offset) - 1 for offset in missing})
            for raw in await self._writer.read_scattered(ids):
                entry = decode_entry(raw)
                found[entry.base_offset] = entry
            return
        handle = await self._reader(ledger_id)
        searches = [self._search(handle, offset, ledger_range) for offset in missing]
        while searches:
            probes: dict[int, list[EntrySearch]] = {}
            for search in searches:
                probes.setdefault(search.probe(), []).append(search)
            ids = sorted(probes)
            for entry_id, raw in zip(ids, await handle.read_scattered(ids)):
                entry = decode_entry(raw)
                self._positions.learn(ledger_id, entry_id, entry.base_offset)
                for search in probes[entry_id]:
                    if search.narrow(entry_id, entry.base_offset, entry.next_offset) and entry.base_offset < hwm:
                        found[entry.base_offset] = entry
            searches = [search for search in searches if not search.done]

    async def _entry(self, handle: LedgerHandle, entry_id: int) -> LogEntry:
        return decode_entry((await handle.read(entry_id, entry_id, 1))[0])

    async def find_by_timestamp(self, timestamp_ms: int) -> LogEntry | None:
        """Kafka's time lookup: bisect the ledger's running maximum timestamp (monotonic, like
        Kafka's time index) to where it first reaches the target, then scan entries from there
        (never below the log start) for the first whose own maximum does.

        The list, the open ledger and its entry offsets are taken together, before the first await:
        a roll finishing during the lookup replaces all three, and the new ledger's empty offsets
        would place the log start before the old ledger's first entry."""
        listing, writer, bases = self._list, self._writer, self._bases
        start = listing.log_start_offset
        for ledger_range in listing.ledgers:
            is_current = writer is not None and ledger_range.ledger_id == writer.ledger_id
            if not is_current and (ledger_range.max_timestamp_ms < timestamp_ms or ledger_range.end_offset <= start):
                continue
            handle = writer if is_current else await self._reader(ledger_range.ledger_id)

            async def reaches(entry_id: int) -> bool:
                raw = (await handle.read(entry_id, entry_id, 1))[0]
                return ENTRY_HEADER.unpack_from(raw)[3] >= timestamp_ms
            entry_id = await bisect_entries(handle.last_add_confirmed + 1, reaches)
            if ledger_range.first_offset <= start:
                first_live = (bisect.bisect_right(bases, start) - 1 if is_current
                              else await self._find_entry(handle, start, ledger_range))
                entry_id = max(entry_id, first_live)
            while entry_id <= handle.last_add_confirmed:
                entries = [decode_entry(raw) for raw in await handle.read(entry_id, handle.last_add_confirmed, 1 << 20)]
                for entry in entries:
                    if entry.max_timestamp_ms >= timestamp_ms:
                        return entry
                entry_id += len(entries)
        return None


def _holding(ledgers: list[LedgerRange], firsts: list[int], offset: int) -> LedgerRange:
    """The ledger holding `offset`; `firsts` are the ledgers' first offsets."""
    return ledgers[max(bisect.bisect_right(firsts, offset) - 1, 0)]


async def bisect_entries(count: int, is_at_or_after: Callable[[int], Awaitable[bool]]) -> int:
    """The first index in [0, count) for which the (monotonic) predicate holds, or count."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if await is_at_or_after(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


