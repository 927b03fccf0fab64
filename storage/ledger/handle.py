"""An open ledger: its single writer (pipelined adds acknowledged in entry order) and a reader up to
its LastAddConfirmed.

Each entry goes to its write set (Qw bookies, striped over the ensemble of E from position
entry_id mod E). It is acknowledged once Qa bookies of that write set stored it (and, with
`min_racks_per_write_quorum`, once those span enough racks) *and* every earlier entry is
acknowledged. The writer piggybacks its LastAddConfirmed on every add.

Ensemble change, as BookKeeper does it: when a bookie of the current ensemble fails or times out,
the writer stops sending, picks a replacement (storage/ledger/placement.py), and records a new
fragment starting at LAC + 1 in the ledger's metadata by compare-and-set. Entries after the LAC are
then sent to the bookies that are new in their write set; acks from a replaced bookie no longer
count. Acknowledgements wait while the change is recorded, so the LAC it starts from stays put. A
lost compare-and-set means a recovering reader took the ledger: the writer is fenced.
No replacement available: while every write set still has Qa live bookies the writer goes on
without the failed one (entries get fewer copies until the auditor re-replicates them); every
DEGRADED_RETRY_S it takes the bookie back if it is up again, or replaces it if a spare appeared.
Below Qa it fails with NotEnoughBookies and nothing more is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from storage.api import BadVersion, LedgerClosed, LedgerFenced, NoSuchEntry, NotEnoughBookies, StorageError
from storage.ledger import missing
from storage.ledger.metadata import LedgerMetadata, LedgerState
from storage.ledger.placement import replace_bookies, write_sets

if TYPE_CHECKING:
    from storage.ledger.client import LedgerClient

log = logging.getLogger("gateway.storage.ledger")

DEGRADED_RETRY_S = 5.0

LENGTH = struct.Struct(">Q")
"""Every stored entry starts with the ledger's length in bytes up to and including it (as
BookKeeper's entry header does), so recovery learns the length of a ledger from its last entry."""


def ledger_path(ledger_id: int) -> str:
    return f"/ledgers/{ledger_id}"


class _PendingAdd:
    __slots__ = ("entry_id", "size", "future", "stored", "write_set", "acked")

    def __init__(self, entry_id: int, size: int, future: asyncio.Future, stored: tuple) -> None:
        self.entry_id = entry_id
        self.size = size
        self.future = future
        self.stored = stored                      # what the bookies get: length prefix + parts
        self.write_set: tuple[str, ...] = ()      # empty while not sent (during an ensemble change)
        self.acked: list[str] = []


class LedgerHandle:
    """An open ledger. As a writer: owned by one task, not thread-safe. Also a reader up to its LAC."""

    def __init__(self, client: "LedgerClient", ledger_id: int, metadata: LedgerMetadata, version: int,
                 *, writable: bool, lac: int, length: int = 0) -> None:
        self.ledger_id = ledger_id
        self._client = client
        self._metadata = metadata
        self._version = version
        self._lac = lac
        self._length = length
        self._pushed_length = length
        self._next_entry_id = lac + 1
        self._pending: deque[_PendingAdd] = deque()
        self._failure: BaseException | None = None
        self._closed = not writable
        self._failed_bookies: set[str] = set()
        self._noted_missing: set[str] = set()     # bookies noted at /missing-copies (storage/ledger/missing.py)
        self._noting: set[asyncio.Future] = set()
        self._down: set[str] = set()              # failed, not replaced: no longer sent to
        self._changing: asyncio.Task | None = None
        self._min_racks = client.min_racks_per_write_quorum if writable else 1
        self._every_entry_to: tuple[str, ...] | None = None
        self._resolve_fast_path()
        # explicit LAC: the LAC last sent on its own, and the timer that will send the next one
        self._lac_pushed = lac
        self._lac_timer: asyncio.TimerHandle | None = None
        self._lac_sends: set[asyncio.Future] = set()

    def _resolve_fast_path(self) -> None:
        """Without striping (E = Qw) every entry of the current fragment goes to the whole ensemble:
        resolve those bookies once rather than per add."""
        metadata = self._metadata
        self._every_entry_to = (metadata.ensembles[-1][1] if metadata.ensemble_size == metadata.write_quorum
                                else None)

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
        future = asyncio.get_running_loop().create_future()
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
        pending = _PendingAdd(entry_id, size, future, (LENGTH.pack(self._pushed_length), *parts))
        self._pending.append(pending)
        if self._changing is None:
            self._send(pending, self._every_entry_to or self._metadata.write_set(entry_id))
        return future

    def _send(self, pending: _PendingAdd, write_set: tuple[str, ...]) -> None:
        previous = pending.write_set
        pending.write_set = write_set
        client = self._client
        for bookie_id in write_set:
            if bookie_id in previous or bookie_id in self._down:
                continue   # already sent there (and still in its write set), or known down
            try:
                store = client.bookie(bookie_id)
            except NotEnoughBookies as exc:
                self._bookie_failed(bookie_id, exc)
                continue
            ack = store.add(self.ledger_id, pending.entry_id, pending.stored, self._lac)
            ack.add_done_callback(partial(self._on_bookie_ack, pending, bookie_id))

    def _on_bookie_ack(self, pending: _PendingAdd, bookie_id: str, done: asyncio.Future) -> None:
        error = StorageError("cancelled") if done.cancelled() else done.exception()
        if error is None:
            if bookie_id in pending.write_set and bookie_id not in pending.acked:
                pending.acked.append(bookie_id)
                self._complete_in_order()
            return
        if isinstance(error, LedgerFenced):
            self._fail(error)
        elif bookie_id in self._metadata.ensembles[-1][1]:
            self._bookie_failed(bookie_id, error)

    def _complete_in_order(self) -> None:
        if self._changing is not None and self._failure is None:
            # Held during an ensemble change: the new fragment starts at LAC + 1 and only entries still
            # pending are sent to the new bookie, so the LAC must not move until the change is recorded.
            return
        quorum = self._metadata.ack_quorum
        while self._pending:
            head = self._pending[0]
            if len(head.acked) < quorum or (self._min_racks > 1 and not self._racks_ok(head)):
                break
            self._pending.popleft()
            self._lac = head.entry_id
            self._length += head.size
            if not head.future.done():
                head.future.set_result(head.entry_id)
        if self._lac_timer is None and self._lac > self._lac_pushed and self._client.explicit_lac_s > 0:
            self._lac_timer = asyncio.get_running_loop().call_later(self._client.explicit_lac_s, self._push_lac)

    def _push_lac(self) -> None:
        """Send the LAC to the current ensemble on its own. An add carries only the LAC from before
        it, so without this a reader that is not the writer (a read-only broker) would not see the
        last entry of a writer that went idle. At most one push per interval, none while idle."""
        self._lac_timer = None
        if self._closed or self._failure is not None or self._lac <= self._lac_pushed:
            return
        self._lac_pushed = self._lac
        for bookie_id in self._metadata.ensembles[-1][1]:
            if bookie_id not in self._down:
                sending = asyncio.ensure_future(self._send_lac(bookie_id, self._lac))
                self._lac_sends.add(sending)
                sending.add_done_callback(self._lac_sends.discard)

    async def _send_lac(self, bookie_id: str, lac: int) -> None:
        try:
            await self._client.bookie(bookie_id).write_lac(self.ledger_id, lac)
        except StorageError as exc:    # a reader waits for the next push or add; the writer goes on
            log.debug("ledger %d: LAC %d not sent to %s: %s", self.ledger_id, lac, bookie_id, exc)

    def _racks_ok(self, pending: _PendingAdd) -> bool:
        rack_of = self._client.bookies.rack_of
        racks_in_set = {rack_of(b) for b in pending.write_set}
        needed = min(self._min_racks, len(racks_in_set))
        return len({rack_of(b) for b in pending.acked}) >= needed

    # --- ensemble change ----------------------------------------------------------------------

    def _bookie_failed(self, bookie_id: str, error: BaseException) -> None:
        if self._failure is not None:
            return
        if bookie_id not in self._failed_bookies:
            log.warning("ledger %d: bookie %s failed (%s); changing the ensemble", self.ledger_id, bookie_id, error)
            self._failed_bookies.add(bookie_id)
        if bookie_id not in self._noted_missing and self._metadata.write_quorum > 1:
            # Fragments that keep naming it may lack entries there: the auditor refills them once closed.
            self._noted_missing.add(bookie_id)
            noting = asyncio.ensure_future(self._note_missing(bookie_id))
            self._noting.add(noting)
            noting.add_done_callback(self._noting.discard)
        if self._changing is None:
            self._changing = asyncio.ensure_future(self._change_ensemble())

    async def _note_missing(self, bookie_id: str) -> None:
        try:
            await missing.note(self._client.metadata, self.ledger_id, bookie_id)
        except StorageError as exc:
            log.warning("ledger %d: could not note that bookie %s may lack entries (%s)", self.ledger_id,
                        bookie_id, exc)

    async def _change_ensemble(self) -> None:
        try:
            while self._failed_bookies and self._failure is None:
                failed = set(self._failed_bookies)
                metadata = self._metadata
                first_entry_id, current = metadata.ensembles[-1]
                try:
                    new_ensemble = replace_bookies(current, failed, metadata.write_quorum,
                                                   self._client.bookies.candidates(), min_racks=self._min_racks)
                except NotEnoughBookies as exc:
                    self._go_on_without(failed, exc)
                    continue
                start = self._lac + 1
                fragments = list(metadata.ensembles)
                if first_entry_id == start:
                    fragments[-1] = (start, new_ensemble)   # nothing was acknowledged in that fragment
                else:
                    fragments.append((start, new_ensemble))
                changed = replace(metadata, ensembles=tuple(fragments))
                try:
                    self._version = await self._client.metadata.put(ledger_path(self.ledger_id), changed.to_json(),
                                                                    self._version)
                except BadVersion:
                    raise LedgerFenced(f"ledger {self.ledger_id} was recovered by another client") from None
                self._metadata = changed
                self._failed_bookies -= failed
                self._down -= failed
                self._resolve_fast_path()
                log.info("ledger %d: ensemble from entry %d is %s", self.ledger_id, start, ",".join(new_ensemble))
                for pending in list(self._pending):
                    write_set = self._metadata.write_set(pending.entry_id)
                    pending.acked = [b for b in pending.acked if b in write_set]
                    self._send(pending, write_set)
            for pending in list(self._pending):   # entries added while the change was under way
                if not pending.write_set:
                    self._send(pending, self._metadata.write_set(pending.entry_id))
        except StorageError as exc:
            self._fail(exc)
        except Exception as exc:
            log.exception("ledger %d: ensemble change failed", self.ledger_id)
            self._fail(StorageError(f"ensemble change failed: {exc!r}"))
        finally:
            self._changing = None
            self._complete_in_order()

    def _go_on_without(self, failed: set[str], cause: NotEnoughBookies) -> None:
        """No replacement: write on with the rest if Qa of every write set are still up."""
        down = self._down | failed
        quorum = self._metadata.ack_quorum
        ensemble = self._metadata.ensembles[-1][1]
        if any(len(set(ws) - down) < quorum for ws in write_sets(ensemble, self._metadata.write_quorum)):
            raise cause
        if not failed <= self._down:
            log.warning("ledger %d: %s; writing on without %s until a bookie can replace it", self.ledger_id,
                        cause, ",".join(sorted(failed)))
        self._down = down
        self._failed_bookies -= failed
        asyncio.get_running_loop().call_later(DEGRADED_RETRY_S, self._retry_replacing)

    def _retry_replacing(self) -> None:
        """A bookie left out is taken back once it is up again (the entries it missed stay with
        fewer copies until re-replication), else replaced if a spare appeared meanwhile."""
        if not self._down or self._closed or self._failure is not None:
            return
        writable = {b.bookie_id for b in self._client.bookies.candidates() if b.writable}
        back = self._down & writable
        if back:
            log.info("ledger %d: writing to %s again", self.ledger_id, ",".join(sorted(back)))
            self._down -= back
        if self._down:
            self._failed_bookies |= self._down
            if self._changing is None:
                self._changing = asyncio.ensure_future(self._change_ensemble())

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
        if self._lac_timer is not None:
            self._lac_timer.cancel()
            self._lac_timer = None
        while self._pending and self._failure is None:
            await asyncio.gather(*(p.future for p in list(self._pending)), return_exceptions=True)
        if self._changing is not None:
            await asyncio.gather(self._changing, return_exceptions=True)
        closed = self._metadata.closed(self._lac, self._length)
        try:
            self._version = await self._client.metadata.put(ledger_path(self.ledger_id), closed.to_json(),
                                                            self._version)
        except BadVersion:
            current, _ = await self._client.read_metadata(self.ledger_id)
            raise LedgerFenced(f"ledger {self.ledger_id} was recovered by another client ({current.state.value})")
        self._metadata = closed
        return self._lac

    # --- reading ------------------------------------------------------------------------------

    async def wait_lac(self, timeout_s: float) -> int:
        """A reader's long poll (not the writer's): the LAC once a bookie of the current ensemble
        has a higher one, or as it is after the timeout; reads here go up to it from then on."""
        for bookie_id in self._metadata.ensembles[-1][1]:
            try:
                lac = await self._client.bookie(bookie_id).wait_lac(self.ledger_id, self._lac, timeout_s)
            except StorageError:
                continue     # down, or holds nothing of this ledger yet: ask the next one
            self._lac = max(self._lac, lac)
            return self._lac
        raise StorageError(f"ledger {self.ledger_id}: no bookie of its ensemble answered for its LAC")

    async def read(self, first_entry_id: int, last_entry_id: int, max_bytes: int = 1 << 62) -> list[memoryview]:
        """Entries first..last (bounded by the LAC), stopping once max_bytes is reached."""
        last_entry_id = min(last_entry_id, self._lac)
        if first_entry_id > last_entry_id:
            return []
        return await self._read_fresh(self._client.read_entries, first_entry_id, last_entry_id, max_bytes)

    async def read_scattered(self, entry_ids: list[int]) -> list[memoryview]:
        """The entries named (each at most the LAC), in that order."""
        if not entry_ids:
            return []
        if max(entry_ids) > self._lac:
            raise NoSuchEntry(f"ledger {self.ledger_id}: entry {max(entry_ids)} is past the LAC {self._lac}")
        return await self._read_fresh(self._client.read_scattered, entry_ids)

    async def _read_fresh(self, read, *args) -> list[memoryview]:
        """`read` (a LedgerClient read) of this ledger, once more if its replicas moved meanwhile."""
        try:
            return await read(self._metadata, self.ledger_id, *args)
        except StorageError:
            if not await self._refresh_closed_metadata():
                raise
            return await read(self._metadata, self.ledger_id, *args)

    async def _refresh_closed_metadata(self) -> bool:
        """A closed ledger's fragments move when the auditor re-replicates a lost bookie's share: a
        handle kept open for reading learns of it when its replicas fail. True if they moved."""
        if self._metadata.state is not LedgerState.CLOSED:
            return False
        fresh, version = await self._client.read_metadata(self.ledger_id)
        if fresh.ensembles == self._metadata.ensembles:
            return False
        log.info("ledger %d: re-replicated meanwhile; reading from %s", self.ledger_id,
                 " ".join(f"{first}:{','.join(bookies)}" for first, bookies in fresh.ensembles))
        self._metadata, self._version = fresh, version
        self._resolve_fast_path()
        return True
