"""The ledger client: create, write (pipelined, acknowledged in order), read, recover and close ledgers.

It speaks to bookies through the EntryStore interface, so the same code drives the in-process bookie
of the embedded default and, later, remote bookies over TCP. Each entry is sent to its write set (Qw
bookies, striped over the ensemble of E); it is acknowledged once Qa of them stored it *and* every
earlier entry is acknowledged. The writer piggybacks its LastAddConfirmed on every add.

Recovery (`open(recover=True)`), as BookKeeper does it: mark the ledger IN_RECOVERY by
compare-and-set, fence it on the bookies of its last fragment (fenced bookies refuse the old
writer's adds), read forward from the highest LAC they report, rewrite what is found to the full
write set, and close the ledger at the last entry found. After that, the old writer cannot get any
add acknowledged: fencing plus the CAS on the metadata keep a single writer.

Gap: no ensemble change yet. With E > Qa a failed bookie makes the writer fail instead of replacing
the bookie; the embedded default (E = Qw = Qa = 1) has nothing to replace it with anyway.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from functools import partial

from storage.api import (BadVersion, EntryStore, LedgerClosed, LedgerFenced, MetadataStore, NoNode,
                         NoSuchEntry, NoSuchLedger, NotEnoughBookies, StorageError)
from storage.ledger.metadata import LedgerMetadata, LedgerState

log = logging.getLogger("gateway.storage.ledger")


_LENGTH = struct.Struct(">Q")
"""Every stored entry starts with the ledger's length in bytes up to and including it (as
BookKeeper's entry header does), so recovery learns the length of a ledger from its last entry."""


def _path(ledger_id: int) -> str:
    return f"/ledgers/{ledger_id}"


async def _lac_or_none(bookie: EntryStore, ledger_id: int) -> int:
    try:
        return await bookie.last_add_confirmed(ledger_id)
    except NoSuchLedger:
        return -1


class _PendingAdd:
    __slots__ = ("entry_id", "size", "future", "acks", "error")

    def __init__(self, entry_id: int, size: int, future: asyncio.Future) -> None:
        self.entry_id = entry_id
        self.size = size
        self.future = future
        self.acks = 0
        self.error: BaseException | None = None


class LedgerHandle:
    """An open ledger. As a writer: owned by one task, not thread-safe. Also a reader up to its LAC."""

    def __init__(self, client: "LedgerClient", ledger_id: int, metadata: LedgerMetadata, version: int,
                 *, writable: bool, lac: int, length: int = 0) -> None:
        self.ledger_id = ledger_id
        self._client = client
        self._metadata = metadata
        self._version = version
        self._writable = writable
        self._lac = lac
        self._length = length
        self._pushed_length = length
        self._next_entry_id = lac + 1
        self._pending: deque[_PendingAdd] = deque()
        self._failure: BaseException | None = None
        self._closed = not writable
        # Without striping (E = Qw) and with one fragment every entry goes to the whole ensemble:
        # resolve those bookies once rather than per add.
        self._every_entry_to: list | None = None
        ensemble = metadata.ensembles[0][1] if len(metadata.ensembles) == 1 else ()
        if (writable and ensemble and metadata.ensemble_size == metadata.write_quorum
                and all(b in client.bookies for b in ensemble)):
            self._every_entry_to = [client.bookie(b) for b in ensemble]

    @property
    def metadata(self) -> LedgerMetadata:
        return self._metadata

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        return self._length

    @property
    def is_closed(self) -> bool:
        return self._closed

    # --- writing ------------------------------------------------------------------------------

    def add(self, payload: bytes | memoryview | tuple[bytes | memoryview, ...]) -> asyncio.Future:
        """Queue one entry. `payload` may be a tuple of parts (the caller's header, then its data):
        they are stored as one entry, in order, and never joined into a copy on the way down."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self._closed:
            future.set_exception(LedgerClosed(f"ledger {self.ledger_id} is closed"))
            return future
        if self._failure is not None:
            future.set_exception(self._failure)
            return future
        parts = payload if isinstance(payload, tuple) else (payload,)
        size = sum(map(len, parts))
        entry_id = self._next_entry_id
        self._next_entry_id += 1
        self._pushed_length += size
        pending = _PendingAdd(entry_id, size, future)
        self._pending.append(pending)
        stored = (_LENGTH.pack(self._pushed_length), *parts)
        bookies = self._every_entry_to
        if bookies is None:
            bookies = [self._client.bookie(b) for b in self._metadata.write_set(entry_id)]
        for bookie in bookies:
            ack = bookie.add(self.ledger_id, entry_id, stored, self._lac)
            ack.add_done_callback(partial(self._on_bookie_ack, pending))
        return future

    def _on_bookie_ack(self, pending: _PendingAdd, done: asyncio.Future) -> None:
        error = done.exception()
        if error is not None:
            # No ensemble change yet: any bookie failure fails this writer from this entry on.
            self._fail(error)
            return
        pending.acks += 1
        self._complete_in_order()

    def _complete_in_order(self) -> None:
        quorum = self._metadata.ack_quorum
        while self._pending and self._pending[0].acks >= quorum:
            done = self._pending.popleft()
            self._lac = done.entry_id
            self._length += done.size
            if not done.future.done():
                done.future.set_result(done.entry_id)

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
            log.warning("ledger %d writer failed: %s", self.ledger_id, error)
        # Entries already at quorum and in order were completed; everything after fails.
        self._complete_in_order()
        while self._pending:
            pending = self._pending.popleft()
            if not pending.future.done():
                pending.future.set_exception(self._failure)

    async def close(self) -> int:
        """Wait for pending adds, then seal the ledger in its metadata. Returns the last entry id."""
        if self._closed:
            return self._lac
        self._closed = True
        if self._pending:
            await asyncio.gather(*(p.future for p in list(self._pending)), return_exceptions=True)
        closed = self._metadata.closed(self._lac, self._length)
        try:
            self._version = await self._client.metadata.put(_path(self.ledger_id), closed.to_json(), self._version)
        except BadVersion:
            current = await self._client.read_metadata(self.ledger_id)
            raise LedgerFenced(f"ledger {self.ledger_id} was recovered by another client ({current[0].state.value})")
        self._metadata = closed
        return self._lac

    # --- reading ------------------------------------------------------------------------------

    async def read(self, first_entry_id: int, last_entry_id: int, max_bytes: int = 1 << 62) -> list[memoryview]:
        """Entries first..last (bounded by the LAC), stopping once max_bytes is reached."""
        last_entry_id = min(last_entry_id, self._lac)
        if first_entry_id > last_entry_id:
            return []
        return await self._client.read_entries(self._metadata, self.ledger_id, first_entry_id, last_entry_id,
                                               max_bytes)


class LedgerClient:
    """Creates and opens ledgers on a set of bookies named by id."""

    def __init__(self, metadata: MetadataStore, bookies: Mapping[str, EntryStore]) -> None:
        self.metadata = metadata
        self._bookies = dict(bookies)

    @property
    def bookies(self) -> Mapping[str, EntryStore]:
        return self._bookies

    def bookie(self, bookie_id: str) -> EntryStore:
        try:
            return self._bookies[bookie_id]
        except KeyError:
            raise NotEnoughBookies(f"bookie {bookie_id} is not available") from None

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        node = await self.metadata.get(_path(ledger_id))
        if node is None:
            raise NoSuchLedger(str(ledger_id))
        return LedgerMetadata.from_json(node.value), node.version

    async def create(self, *, ensemble_size: int = 1, write_quorum: int = 1, ack_quorum: int = 1,
                     properties: dict[str, str] | None = None) -> LedgerHandle:
        if len(self._bookies) < ensemble_size:
            raise NotEnoughBookies(f"need {ensemble_size} bookies, have {len(self._bookies)}")
        ensemble = tuple(sorted(self._bookies)[:ensemble_size])
        metadata = LedgerMetadata(ensemble_size, write_quorum, ack_quorum, ((0, ensemble),),
                                  properties=dict(properties or {}), ctime_ms=int(time.time() * 1000))
        ledger_id = await self.metadata.next_id("ledger")
        version = await self.metadata.create(_path(ledger_id), metadata.to_json())
        return LedgerHandle(self, ledger_id, metadata, version, writable=True, lac=-1)

    async def open(self, ledger_id: int, *, recover: bool = True) -> LedgerHandle:
        metadata, version = await self.read_metadata(ledger_id)
        if metadata.state is LedgerState.CLOSED:
            return LedgerHandle(self, ledger_id, metadata, version, writable=False, lac=metadata.last_entry_id,
                                length=metadata.length)
        if not recover:
            lac = max([await _lac_or_none(self.bookie(b), ledger_id)
                       for b in metadata.ensembles[-1][1] if b in self._bookies] or [-1])
            return LedgerHandle(self, ledger_id, metadata, version, writable=False, lac=lac)
        return await self._recover(ledger_id, metadata, version)

    async def _recover(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> LedgerHandle:
        recovering = replace(metadata, state=LedgerState.IN_RECOVERY)
        version = await self.metadata.put(_path(ledger_id), recovering.to_json(), version)
        first_of_fragment, ensemble = metadata.ensembles[-1]
        bookies = [self.bookie(b) for b in ensemble]
        lacs = [await _lac_or_none(b, ledger_id) for b in bookies]
        # Fence every bookie of the last fragment; each answers with the last entry it holds.
        # With E = Qw (no striping) the highest answer is the end; striped ledgers need (Qw-Qa)+1
        # answers per write quorum, which comes with remote bookies.
        last_stored = [await b.fence(ledger_id) for b in bookies]
        # Entries up to the highest LAC are known to be at quorum; only the tail after it is read
        # back and rewritten to its full write set before the ledger is closed.
        start = max(first_of_fragment - 1, *lacs)
        end = max(start, *last_stored)
        last_payload: memoryview | None = None
        for entry_id in range(start + 1, end + 1):
            try:
                raw = await self._read_raw(metadata, ledger_id, entry_id)
            except NoSuchEntry:
                end = entry_id - 1
                break
            for bookie_id in metadata.write_set(entry_id):
                await self.bookie(bookie_id).add(ledger_id, entry_id, bytes(raw), entry_id - 1, recovery=True)
            last_payload = raw
        if last_payload is None and end >= 0:
            last_payload = await self._read_raw(metadata, ledger_id, end)
        length = 0 if last_payload is None else _LENGTH.unpack_from(last_payload)[0]
        closed = recovering.closed(end, length)
        version = await self.metadata.put(_path(ledger_id), closed.to_json(), version)
        return LedgerHandle(self, ledger_id, closed, version, writable=False, lac=end, length=length)

    async def read_entries(self, metadata: LedgerMetadata, ledger_id: int, first: int, last: int,
                           max_bytes: int) -> list[memoryview]:
        """Entries first..last as the writer gave them (the length prefix stripped)."""
        if metadata.ensemble_size == metadata.write_quorum and len(metadata.ensembles) == 1:
            # Every bookie of the ensemble holds every entry: one ranged read, next bookie on failure.
            error: BaseException = NoSuchEntry(f"ledger {ledger_id} entry {first}")
            for bookie_id in metadata.ensembles[0][1]:
                try:
                    raws = await self.bookie(bookie_id).read_range(ledger_id, first, last, max_bytes)
                except StorageError as exc:
                    error = exc
                    continue
                return [memoryview(raw)[_LENGTH.size:] for raw in raws]
            raise error
        out: list[memoryview] = []
        total = 0
        for entry_id in range(first, last + 1):
            out.append((await self._read_raw(metadata, ledger_id, entry_id))[_LENGTH.size:])
            total += len(out[-1])
            if total >= max_bytes:
                break
        return out

    async def _read_raw(self, metadata: LedgerMetadata, ledger_id: int, entry_id: int) -> memoryview:
        error: BaseException = NoSuchEntry(f"ledger {ledger_id} entry {entry_id}")
        for bookie_id in metadata.write_set(entry_id):
            try:
                return memoryview(await self.bookie(bookie_id).read(ledger_id, entry_id))
            except StorageError as exc:
                error = exc
        raise error

    async def delete(self, ledger_id: int) -> None:
        try:
            metadata, _ = await self.read_metadata(ledger_id)
        except NoSuchLedger:
            return
        for _, ensemble in metadata.ensembles:
            for bookie_id in ensemble:
                if bookie_id in self._bookies:
                    await self._bookies[bookie_id].delete_ledger(ledger_id)
        try:
            await self.metadata.delete(_path(ledger_id))
        except NoNode:
            pass
