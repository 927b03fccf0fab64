"""The managed log: one dense sequence of offsets over an ordered list of ledgers (a partition's log).

Appends go to the log's one open ledger, pipelined: each is given the next offset at once and is
acknowledged, in order, when its ledger entry is durable. The ledger is rolled (closed, a new one
created, the list swapped by compare-and-set) past a size or an age; retention drops whole closed
ledgers from the head. Opening a log recovers and fences whichever ledger the list still shows
open, so a previous owner, or this process before a crash, can add nothing more to it.

Ownership: one task owns the append path (`append`, rolls, repairs); reads may run concurrently.
Every change of the ledger list is serialised by `_list_lock` and made by compare-and-set: losing a
CAS means another owner took the log over, and the log closes itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial

from storage.api import (BadVersion, LedgerFenced, LogClosed, LogEntry, MetadataStore, NodeExists,
                         PositionOutOfRange, RetentionPolicy, StorageError)
from storage.ledger.client import LedgerClient, LedgerHandle
from storage.managed_log.ledger_list import ENTRY_HEADER, LedgerList, LedgerRange
from storage.managed_log.positions import EntryPositions
from storage.managed_log.reading import LogReads
from storage.managed_log.tail_cache import TailCache

ROLL_RETRY_MS = 10_000
REPAIR_FIRST_RETRY_S = 0.1
REPAIR_MAX_RETRY_S = 5.0

log = logging.getLogger("gateway.storage.managed_log")



def _now_ms() -> int:
    return int(time.time() * 1000)


class ManagedLogImpl(LogReads):
    """ManagedLog over a LedgerClient. See the module docstring for ownership."""

    def __init__(self, name: str, ledgers: LedgerClient, metadata: MetadataStore, policy: RetentionPolicy,
                 listing: LedgerList, version: int, clock_ms: Callable[[], int] = _now_ms,
                 tail_cache: TailCache | None = None) -> None:
        self.name = name
        self.policy = policy
        self._ledgers = ledgers
        self._metadata = metadata
        self._path = f"/logs/{name}"
        self._list = listing
        self._version = version
        self._list_lock = asyncio.Lock()
        self._clock_ms = clock_ms
        end = listing.ledgers[-1].end_offset if listing.ledgers else listing.log_start_offset
        self._next = self._hwm = max(end, listing.log_start_offset)
        # the open ledger and what was pushed to it
        self._writer: LedgerHandle | None = None
        self._bases = array("q")           # base offset of each entry of the open ledger
        self._pushed_max_ts = -1
        self._pushed_bytes = 0
        self._durable_bytes = 0
        self._durable_max_ts = -1
        self._writer_since_ms = 0
        self._roll_again_ms = 0            # a roll that found too few bookies is tried again from then
        self._waiting: deque[tuple[bytes, int, int, int, asyncio.Future]] = deque()
        self._rolling: asyncio.Task | None = None
        self._broken: BaseException | None = None
        self._closed: BaseException | None = None
        self._readers: dict[int, LedgerHandle] = {}
        self._hints: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._positions = EntryPositions()
        self._append_waiters: list[asyncio.Future] = []
        self._repair_waiters: list[asyncio.Future] = []
        # the newest durable entries, so tailing readers skip the bookie (None: no cache)
        self._cache = tail_cache
        self._tail = tail_cache.new_tail() if tail_cache is not None else None

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    async def open(cls, name: str, ledgers: LedgerClient, metadata: MetadataStore,
                   policy: RetentionPolicy, tail_cache: TailCache | None = None, *,
                   writer: str = "") -> "ManagedLogImpl":
        """Open the log as `writer` (one name per process): recover and fence a ledger left open,
        and begin a new leader epoch unless `writer` began the current one. Both in one
        compare-and-set of the list, which fails (BadVersion) if another writer changed it meanwhile."""
        path = f"/logs/{name}"
        node = await metadata.get(path)
        if node is None:
            listing = LedgerList()
            try:
                version = await metadata.create(path, listing.to_json())
            except NodeExists:
                node = await metadata.get(path)
        if node is not None:
            listing, version = LedgerList.from_json(node.value), node.version
        opened = listing
        if any(r.is_open for r in listing.ledgers):
            recovered = []
            for r in listing.ledgers:
                sealed = await _recover_range(ledgers, r) if r.is_open else r
                if sealed is not None:
                    recovered.append(sealed)
            listing = replace(listing, ledgers=tuple(recovered))
        listing = listing.taken_over_by(writer)
        if listing != opened:
            version = await metadata.put(path, listing.to_json(), version)
        return cls(name, ledgers, metadata, policy, listing, version, tail_cache=tail_cache)

    # --- positions ----------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        return self._next

    @property
    def size_bytes(self) -> int:
        return sum(r.size_bytes for r in self._list.ledgers if not r.is_open) + self._durable_bytes

    def bytes_from(self, offset: int) -> int:
        """About how many stored bytes lie at or above `offset`: whole ledgers above it, and the
        ledger holding it in proportion to its offsets (entries differ in size; no read needed)."""
        total = 0
        for r in self._list.ledgers:
            end, size = (self._hwm, self._durable_bytes) if r.is_open else (r.end_offset, r.size_bytes)
            if end <= offset:
                continue
            first = r.first_offset
            total += size if first >= offset else size * (end - offset) // max(1, end - first)
        return total

    # --- appending ----------------------------------------------------------------------------

    def append(self, payload: bytes, record_count: int, max_timestamp_ms: int) -> Awaitable[int]:
        fut = asyncio.get_running_loop().create_future()
        error = self._closed or self._broken
        if error is not None:
            fut.set_exception(error if isinstance(error, StorageError) else StorageError(str(error)))
            return fut
        if record_count < 1:
            raise ValueError("an entry covers at least one offset")
        base = self._next
        self._next += record_count
        if self._writer is None or self._rolling is not None:
            self._waiting.append((payload, base, record_count, max_timestamp_ms, fut))
            self._start_roll()
        else:
            self._submit(payload, base, record_count, max_timestamp_ms, fut)
            if self._should_roll():
                self._start_roll()
        return fut

    def _submit(self, payload: bytes, base: int, count: int, max_ts: int, fut: asyncio.Future) -> None:
        self._pushed_max_ts = max(self._pushed_max_ts, max_ts)
        header = ENTRY_HEADER.pack(base, count, max_ts, self._pushed_max_ts)
        size = len(header) + len(payload)
        self._bases.append(base)
        self._pushed_bytes += size
        added = self._writer.add((header, payload))    # in parts: the payload is never copied behind a header
        added.add_done_callback(partial(self._on_added, self._writer.ledger_id, payload, base, base + count, size,
                                        max_ts, fut))

    def _on_added(self, ledger_id: int, payload: bytes, base: int, end: int, size: int, max_ts: int,
                  fut: asyncio.Future, added: asyncio.Future) -> None:
        error = added.exception()
        if error is not None:
            self._on_writer_failed(error)
            if not fut.done():
                fut.set_exception(error)
            return
        self._hwm = end
        if end == self._next and self._repair_waiters:
            self._wake_repair_waiters()     # nothing in flight any more (wait_repaired)
        self._durable_bytes += size
        self._durable_max_ts = max(self._durable_max_ts, max_ts)
        if self._tail is not None and self._closed is None:
            if type(payload) is not bytes:
                payload = bytes(payload)   # the cache must not alias a buffer the caller may reuse
            self._cache.add(self._tail, ledger_id, LogEntry(base, end - base, max_ts, payload))
        if not fut.done():
            fut.set_result(base)
        waiters, self._append_waiters = self._append_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    def _should_roll(self) -> bool:
        now = self._clock_ms()
        return ((self._pushed_bytes >= self.policy.roll_bytes or now - self._writer_since_ms >= self.policy.roll_ms)
                and now >= self._roll_again_ms)

    def _start_roll(self) -> None:
        if self._rolling is None and self._closed is None and self._broken is None:
            self._rolling = asyncio.create_task(self._roll(), name=f"roll {self.name}")

    async def _roll(self) -> None:
        try:
            async with self._list_lock:
                if not await self._switch_ledger():
                    self._rolling = None
                    return
            self._rolling = None
            while self._waiting and not self._should_roll():
                self._submit(*self._waiting.popleft())
            if self._should_roll():
                self._start_roll()
        except BaseException as exc:
            self._rolling = None
            self._fail_waiting(exc)
            if isinstance(exc, (BadVersion, LedgerFenced)):
                self._close_with(LogClosed(f"log {self.name} was taken over: {exc}"))
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("log %s: roll failed: %s", self.name, exc)
                self._writer = None
                self._next = self._hwm
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _switch_ledger(self) -> bool:
        """Create the next ledger, then seal the current one and list the new one (the caller holds
        _list_lock). False when the roll was given up and the current ledger stays in use."""
        listing = self._list
        old = self._writer
        try:
            writer = await self._ledgers.create(properties={"log": self.name})
        except StorageError as exc:
            if old is None:
                raise
            # Rolling is housekeeping: write on to the open ledger until the next ledger can be made.
            # (Dropping it instead would leave its pending adds landing after the offsets they hold
            # were handed out again.)
            log.warning("log %s: cannot roll now (%s); writing on to ledger %d", self.name, exc, old.ledger_id)
            self._roll_again_ms = self._clock_ms() + ROLL_RETRY_MS
            while self._waiting:
                self._submit(*self._waiting.popleft())
            return False
        if old is not None:
            try:
                await old.close()
            except BaseException:
                await self._ledgers.delete(writer.ledger_id)
                raise
            if self._broken is not None:
                await self._ledgers.delete(writer.ledger_id)
                return False
            listing = self._sealed_list(listing)
        opened = LedgerRange(writer.ledger_id, self._hwm, ctime_ms=self._clock_ms())
        await self._swap(replace(listing, ledgers=listing.ledgers + (opened,)))
        # the new list and the new writer take effect together: readers never see one without the other
        unlisted = old is not None and not self._bases    # it held no entry: the list dropped it
        if old is not None and not unlisted:
            self._readers[old.ledger_id] = old
        self._writer = writer
        self._bases = array("q")
        self._pushed_max_ts = self._durable_max_ts = -1
        self._pushed_bytes = self._durable_bytes = 0
        self._writer_since_ms = self._clock_ms()
        if unlisted:
            await self._delete_unlisted(old.ledger_id)
        return True

    async def _delete_unlisted(self, ledger_id: int) -> None:
        try:
            await self._ledgers.delete(ledger_id)
        except StorageError as exc:
            log.warning("log %s: could not delete empty ledger %d (%s)", self.name, ledger_id, exc)

    def _sealed_list(self, listing: LedgerList) -> LedgerList:
        """The list with the open ledger marked closed at the durable end."""
        current = listing.ledgers[-1]
        entries = len(self._bases)
        if entries == 0:
            return replace(listing, ledgers=listing.ledgers[:-1])
        sealed = current.sealed(self._hwm, entries, self._durable_bytes, self._durable_max_ts)
        return replace(listing, ledgers=listing.ledgers[:-1] + (sealed,))

    async def _swap(self, listing: LedgerList) -> None:
        """Compare-and-set the ledger list (the caller holds _list_lock). A write once submitted lands
        whether or not its caller waits: a caller cancelled meanwhile still waits for it, under the
        lock, so the log keeps the version it wrote (else its next CAS, e.g. sealing on close, fails)."""
        write = asyncio.ensure_future(self._metadata.put(self._path, listing.to_json(), self._version))
        try:
            version = await asyncio.shield(write)
        except asyncio.CancelledError:
            if not write.done():
                await asyncio.wait((write,))
            if not write.cancelled() and write.exception() is None:
                self._version, self._list = write.result(), listing
            raise
        self._version = version
        self._list = listing

    def _on_writer_failed(self, error: BaseException) -> None:
        if self._broken is not None or self._closed is not None:
            return
        self._broken = error if isinstance(error, StorageError) else StorageError(str(error))
        log.warning("log %s: ledger writer failed (%s); repairing", self.name, error)
        self._fail_waiting(self._broken)
        asyncio.get_running_loop().create_task(self._repair(), name=f"repair {self.name}")

    async def _repair(self) -> None:
        """Recover the failed ledger to learn what really is stored, then accept appends again.
        While bookies are missing, recovery cannot finish: it is retried until they are back."""
        needs_recovery = self._writer is not None
        delay_s = REPAIR_FIRST_RETRY_S
        while self._closed is None:
            try:
                async with self._list_lock:
                    if needs_recovery:
                        self._writer = None
                        sealed = await _recover_range(self._ledgers, self._list.ledgers[-1])
                        ledgers = self._list.ledgers[:-1] + ((sealed,) if sealed is not None else ())
                        await self._swap(replace(self._list, ledgers=ledgers))
                        if sealed is not None:
                            self._hwm = sealed.end_offset
                        needs_recovery = False
                    self._next = self._hwm
                    self._broken = None
                    self._wake_repair_waiters()
                return
            except (BadVersion, LedgerFenced) as exc:
                self._close_with(LogClosed(f"log {self.name} was taken over: {exc}"))
                return
            except StorageError as exc:
                log.error("log %s: repair failed, appends fail until it succeeds (retry in %.1f s): %s",
                          self.name, delay_s, exc)
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, REPAIR_MAX_RETRY_S)

    def _fail_waiting(self, error: BaseException) -> None:
        while self._waiting:
            fut = self._waiting.popleft()[4]
            if not fut.done():
                fut.set_exception(error)

    async def wait_repaired(self) -> None:
        """Return once appends are accepted again after a writer failure and every append already
        made has its outcome (at once if none is under repair or in flight): from then on the log
        holds exactly what the failed ledger turned out to store, and nothing lands behind it."""
        while (self._broken is not None or self._next != self._hwm) and self._closed is None:
            waiter = asyncio.get_running_loop().create_future()
            self._repair_waiters.append(waiter)
            await waiter
        if self._closed is not None:
            raise self._closed if isinstance(self._closed, StorageError) else LogClosed(str(self._closed))

    def _wake_repair_waiters(self) -> None:
        waiters, self._repair_waiters = self._repair_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _close_with(self, error: BaseException) -> None:
        self._wake_repair_waiters()
        self._closed = error
        self._fail_waiting(error)
        if self._tail is not None:
            self._cache.forget(self._tail)

    # --- retention ----------------------------------------------------------------------------

    async def trim(self, policy: RetentionPolicy, now_ms: int) -> int:
        self._roll_if_a_bookie_is_gone()
        async with self._list_lock:
            closed = [r for r in self._list.ledgers if not r.is_open]
            total = self.size_bytes
            drop = 0
            for r in closed:
                expired = policy.retention_ms >= 0 and r.max_timestamp_ms < now_ms - policy.retention_ms
                oversize = policy.retention_bytes >= 0 and total - r.size_bytes >= policy.retention_bytes
                if not (expired or oversize):
                    break
                total -= r.size_bytes
                drop += 1
            return await self._drop_head(drop, None)

    def _roll_if_a_bookie_is_gone(self) -> None:
        """Retention's periodic pass also closes an open ledger naming a bookie that is no longer
        registered: the auditor re-replicates closed ledgers only, and an idle log would otherwise
        keep that ledger open, short of a copy, for as long as it stays idle."""
        writer = self._writer
        if writer is None or self._rolling is not None or self._clock_ms() < self._roll_again_ms:
            return
        live = {b.bookie_id for b in self._ledgers.bookies.candidates()}
        gone = {b for _, ensemble in writer.metadata.ensembles for b in ensemble} - live
        if gone:
            log.info("log %s: rolling ledger %d, which names bookies no longer registered: %s", self.name,
                     writer.ledger_id, ",".join(sorted(gone)))
            self._start_roll()

    async def delete_before(self, offset: int) -> int:
        if offset > self._hwm:
            raise PositionOutOfRange(f"offset {offset} is past the end {self._hwm}")
        async with self._list_lock:
            drop = sum(1 for r in self._list.ledgers if not r.is_open and r.end_offset <= offset)
            return await self._drop_head(drop, offset)

    async def start_at(self, offset: int) -> None:
        async with self._list_lock:
            if self._list.ledgers or self._writer is not None or self._next != self._hwm or offset < self._next:
                raise PositionOutOfRange(f"log {self.name} cannot begin at {offset}: it is not empty at {self._next}")
            await self._swap(replace(self._list, log_start_offset=offset))
            self._next = self._hwm = offset

    async def _drop_head(self, count: int, start: int | None) -> int:
        """Drop the first `count` ledgers and move the log start (the caller holds _list_lock)."""
        dropped = self._list.ledgers[:count]
        kept = self._list.ledgers[count:]
        new_start = self.log_start_offset if start is None else max(self.log_start_offset, start)
        if dropped:
            new_start = max(new_start, dropped[-1].end_offset)
        if not dropped and new_start == self.log_start_offset:
            return new_start
        await self._swap(replace(self._list, log_start_offset=new_start, ledgers=kept).without_epochs_before(new_start))
        for r in dropped:
            if self._tail is not None and self._tail.ledger_id == r.ledger_id:
                self._cache.forget(self._tail)
            self._readers.pop(r.ledger_id, None)
            self._positions.forget(r.ledger_id)
            await self._ledgers.delete(r.ledger_id)
        return new_start

    # --- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Seal the open ledger (so a restart needs no recovery) and refuse further appends."""
        if self._closed is not None:
            return
        if self._rolling is not None:
            try:
                await self._rolling
            except BaseException:
                pass
        self._close_with(LogClosed(f"log {self.name} is closed"))
        async with self._list_lock:
            if self._writer is not None and self._broken is None:
                try:
                    await self._writer.close()
                    await self._swap(self._sealed_list(self._list))
                except StorageError as exc:
                    log.warning("log %s: could not seal its ledger on close (%s); the next open recovers it",
                                self.name, exc)
            self._writer = None
        for waiter in self._append_waiters:
            if not waiter.done():
                waiter.set_result(False)


async def _recover_range(ledgers: LedgerClient, ledger_range: LedgerRange) -> LedgerRange | None:
    """Fence and close a ledger the list shows open; its sealed range, or None if it holds nothing."""
    handle = await ledgers.open(ledger_range.ledger_id, recover=True)
    last = handle.last_add_confirmed
    if last < 0:
        await ledgers.delete(ledger_range.ledger_id)
        return None
    raw = (await handle.read(last, last, 1))[0]
    base, count, _, ledger_max_ts = ENTRY_HEADER.unpack_from(raw)
    return ledger_range.sealed(base + count, last + 1, handle.length, ledger_max_ts)
