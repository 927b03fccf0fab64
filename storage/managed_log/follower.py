"""A managed log as a broker that does not own it reads it (a read-only broker).

A follower never recovers, fences or writes. It reads the log's ledger list from the metadata
store and watches it, so a roll, a retention trim or a new owner is seen at once; closed ledgers
are read as they are, and the writer's open ledger up to its LastAddConfirmed, which a background
task follows with long polls on the ledger's bookies (an idle writer sends its LAC on its own: the
explicit LAC of storage/ledger/handle.py). The high watermark is where the last confirmed entry
ends, so a follower serves only what the writer acknowledged, at most about `explicit_lac_ms` plus
a round trip after the writer did. The entries a LAC move confirms are read once, in one ranged
read, into the process's tail cache, so tailing readers (any number of them) are served from
memory, as they are by the writer.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from collections import OrderedDict

from storage.api import LogClosed, MetadataStore, StorageError
from storage.ledger.client import LedgerClient, LedgerHandle
from storage.ledger.metadata import LedgerState
from storage.managed_log.ledger_list import LedgerList
from storage.managed_log.positions import EntryPositions
from storage.managed_log.reading import LogReads, decode_entry
from storage.managed_log.tail_cache import TailCache

log = logging.getLogger("gateway.storage.managed_log")

LONG_POLL_S = 5.0
CATCH_UP_ENTRIES = 256   # a LAC further ahead than this is not read into the cache (only its last entry)
READ_BYTES = 4 << 20     # per ranged read of newly confirmed entries
RETRY_S = 0.5        # after a failed refresh or long poll (bookies or metadata store unreachable)


class LogFollower(LogReads):
    def __init__(self, name: str, ledgers: LedgerClient, metadata: MetadataStore,
                 tail_cache: TailCache | None = None) -> None:
        self.name = name
        self._ledgers = ledgers
        self._metadata = metadata
        self._path = f"/logs/{name}"
        self._list = LedgerList()
        self._hwm = 0
        self._closed: BaseException | None = None
        self._writer = None
        self._bases = array("q")
        self._readers: dict[int, LedgerHandle] = {}
        self._hints = OrderedDict()
        self._positions = EntryPositions()
        self._cache = tail_cache
        self._tail = tail_cache.new_tail() if tail_cache is not None else None
        self._open: LedgerHandle | None = None     # the writer's open ledger, opened without recovery
        self._read_to = (-1, -1)                   # (ledger, entry): the last entry read on a LAC move
        self._listing_changed = asyncio.Event()
        self._append_waiters: list[asyncio.Future] = []
        self.on_append = None                      # called with no argument when the high watermark moves
        self._task: asyncio.Task | None = None
        self._cancel_watch = lambda: None

    @classmethod
    async def open(cls, name: str, ledgers: LedgerClient, metadata: MetadataStore,
                   tail_cache: TailCache | None = None) -> "LogFollower":
        follower = cls(name, ledgers, metadata, tail_cache)
        follower._cancel_watch = metadata.watch(follower._path, lambda _: follower._listing_changed.set())
        try:
            await follower._refresh()
        except BaseException:
            follower._cancel_watch()
            raise
        follower._task = asyncio.create_task(follower._follow(), name=f"follow-{name}")
        return follower

    @property
    def size_bytes(self) -> int:
        """The closed ledgers' bytes (the open ledger's size is known to its writer only)."""
        return sum(r.size_bytes for r in self._list.ledgers if not r.is_open)

    async def _refresh(self) -> None:
        """Read the ledger list again; forget handles of ledgers gone or closed since."""
        self._listing_changed.clear()
        node = await self._metadata.get(self._path)
        listing = LedgerList() if node is None else LedgerList.from_json(node.value)
        ranges = {r.ledger_id: r for r in listing.ledgers}
        for ledger_id, handle in list(self._readers.items()):
            current = ranges.get(ledger_id)
            if current is None or (not current.is_open and handle.metadata.state is not LedgerState.CLOSED):
                del self._readers[ledger_id]
            if current is None:
                self._positions.forget(ledger_id)
        self._list = listing
        last = listing.ledgers[-1] if listing.ledgers else None
        if last is not None and last.is_open:
            self._open = await self._reader(last.ledger_id)     # without recovery: up to its LAC
            await self._advance()
        else:
            self._open = None
            self._set_high_watermark(last.end_offset if last is not None else listing.log_start_offset)

    async def _advance(self) -> None:
        """The high watermark from the open ledger's LAC: where its last confirmed entry ends. The
        entries confirmed since the last move are read, and cached, on the way."""
        handle = self._open
        lac = handle.last_add_confirmed
        if lac < 0:
            self._set_high_watermark(self._list.ledgers[-1].first_offset)
            return
        ledger_id, last_read = self._read_to
        first = last_read + 1 if ledger_id == handle.ledger_id else lac
        if lac - first >= CATCH_UP_ENTRIES:
            first = lac
        while first <= lac:
            entries = [decode_entry(raw) for raw in await handle.read(first, lac, READ_BYTES)]
            if handle is not self._open or not entries:
                return
            first += len(entries)
            self._read_to = (handle.ledger_id, first - 1)
            if self._tail is not None:
                for entry in entries:
                    if len(self._tail) and self._tail.ledger_id == handle.ledger_id \
                            and self._tail.read(handle.ledger_id, entry.base_offset - 1, 1) is None:
                        self._cache.forget(self._tail)      # not right after what is cached: start again
                    self._cache.add(self._tail, handle.ledger_id, entry)
            self._set_high_watermark(entries[-1].next_offset)

    def _set_high_watermark(self, offset: int) -> None:
        offset = max(offset, self._list.log_start_offset)
        if offset <= self._hwm:
            return
        self._hwm = offset
        waiters, self._append_waiters = self._append_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)
        if self.on_append is not None:
            self.on_append()

    async def _follow(self) -> None:
        while True:
            try:
                if self._listing_changed.is_set():
                    await self._refresh()
                elif self._open is None:
                    await self._listing_changed.wait()
                else:
                    await self._poll_lac(self._open)
            except asyncio.CancelledError:
                raise
            except StorageError as exc:
                log.debug("following log %s: %s", self.name, exc)
                await asyncio.sleep(RETRY_S)
            except Exception:
                log.exception("following log %s failed", self.name)
                await asyncio.sleep(RETRY_S)

    async def _poll_lac(self, handle: LedgerHandle) -> None:
        """Until the open ledger's LAC moves (then the high watermark does) or the list changes."""
        before = handle.last_add_confirmed
        poll = asyncio.ensure_future(handle.wait_lac(LONG_POLL_S))
        changed = asyncio.ensure_future(self._listing_changed.wait())
        try:
            await asyncio.wait((poll, changed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not poll.done():
                poll.cancel()
        if poll.done() and not poll.cancelled():
            poll.result()                    # raises what the poll raised
            if handle.last_add_confirmed > before:
                await self._advance()

    async def close(self) -> None:
        if self._closed is not None:
            return
        self._closed = LogClosed(f"log {self.name} is closed")
        self._cancel_watch()
        if self._tail is not None:
            self._cache.forget(self._tail)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for waiter in self._append_waiters:
            if not waiter.done():
                waiter.set_result(False)
