"""The bookie: the entry store every ledger of this node writes to.

Directory layout (under `<data dir>/bookie/`):

    COOKIE          instance cookie (cookie.py)
    journal/        journal segments, which are also the entry logs (journal_format.py)
    index/          LMDB index (index.py), derived from the journal

Start-up recovery: open the index (rebuilding it when unreadable), replay every journal record
after its checkpoint, and truncate a torn or corrupt tail of the last segment. What was dropped is
reported in `recovery_report` and logged; dropped bytes were never acknowledged when they sit at the
tail of the last segment. A bad record inside a sealed segment (or a bad sealed segment header) is
media corruption: it is reported at ERROR, the segment is left as it is and marked (damage.py),
and the entries after it are not served; from then on an entry the bookie cannot find is answered
CorruptEntry (unknown), never NoSuchEntry. An entry whose record fails its checksum when read is
answered CorruptEntry too, so a reader takes it from another replica and never gets the bad bytes.

Thread-safety: the public methods are called from one event loop; the journal thread writes the
index; reads run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from storage.api import BookieReadOnly, CorruptEntry, LedgerFenced, MetadataStore, NoSuchEntry, NoSuchLedger
from storage.bookie import cookie, damage
from storage.bookie import journal_format as fmt
from storage.bookie.group_commit import FlushReason, GroupCommitPolicy
from storage.bookie.index import LedgerIndex, LedgerState, Location
from storage.bookie.journal import Journal, Written, fsync_directory, list_segments
from storage.bookie.stats import BookieStats
from storage.config import StorageConfig

log = logging.getLogger("gateway.storage.bookie")


@dataclass(slots=True)
class RecoveryReport:
    replayed_records: int = 0
    index_rebuilt: bool = False
    dropped: list[tuple[int, int, int, str]] = field(default_factory=list)  # segment, offset, bytes, why
    damaged: dict[int, tuple[int, str]] = field(default_factory=dict)   # sealed segment -> (offset, why)


class Bookie:
    """EntryStore on local disk."""

    def __init__(self, directory: Path, index: LedgerIndex, states: dict[int, LedgerState],
                 report: RecoveryReport) -> None:
        self.directory = directory
        self.recovery_report = report
        self._index = index
        self._states = states
        self._journal: Journal | None = None
        self._read_fds: dict[int, int] = {}
        self._fd_lock = threading.Lock()
        self.flush_counts: dict[FlushReason, int] = {reason: 0 for reason in FlushReason}
        self.stats = BookieStats()
        self._sync_task: asyncio.Task | None = None
        self._lac_waiters: dict[int, list[tuple[int, asyncio.Future]]] = {}

    @classmethod
    async def open(cls, directory: Path, config: StorageConfig, metadata: MetadataStore,
                   bookie_id: str = "local") -> "Bookie":
        journal_dir = directory / "journal"
        journal_dir.mkdir(parents=True, exist_ok=True)
        # A new directory's name is durable only once its parent is fsynced: without this, a power
        # loss can take the whole bookie directory (and every entry acknowledged in it) away.
        await asyncio.to_thread(_fsync_directories, directory, directory.parent)
        segments = await asyncio.to_thread(list_segments, journal_dir)
        await cookie.verify_or_create(directory, bookie_id, metadata, has_data=bool(segments))
        index, states, report = await asyncio.to_thread(_recover, directory, journal_dir, segments)
        report.damaged = await asyncio.to_thread(damage.load, journal_dir)
        for segment_id, (offset, why) in sorted(report.damaged.items()):
            log.error("journal segment %x is damaged from offset %d (%s): entries this bookie cannot find are "
                      "answered as unknown, not missing", segment_id, offset, why)
        bookie = cls(directory, index, states, report)
        policy = GroupCommitPolicy(config.journal_max_wait_ms, config.journal_max_bytes)
        bookie._journal = Journal(journal_dir, (segments[-1] + 1) if segments else 1, policy,
                                  config.journal_segment_bytes, index.apply, bookie._on_durable,
                                  bookie._count_flush, bookie.stats.synced)
        bookie._sync_task = asyncio.create_task(bookie._sync_index(config.index_sync_interval_s),
                                                name="bookie-index-sync")
        return bookie

    def _count_flush(self, reason: FlushReason) -> None:
        self.flush_counts[reason] += 1  # journal thread; a plain int add is atomic enough for a counter

    def _on_durable(self, written: list[Written]) -> None:
        for rec in written:
            if rec.kind is fmt.RecordKind.ENTRY:
                self.stats.entries_added += 1
                state = self._states.setdefault(rec.ledger_id, LedgerState())
                state.last_entry_id = max(state.last_entry_id, rec.entry_id)
                state.lac = max(state.lac, rec.lac)
        if self._lac_waiters:
            self._wake_lac_waiters()

    def _wake_lac_waiters(self) -> None:
        for ledger_id, waiters in list(self._lac_waiters.items()):
            state = self._states.get(ledger_id)
            lac = -1 if state is None else state.lac
            still = [(after, fut) for after, fut in waiters if not fut.done() and lac <= after]
            for after, fut in waiters:
                if not fut.done() and lac > after:
                    fut.set_result(lac)
            if still:
                self._lac_waiters[ledger_id] = still
            else:
                del self._lac_waiters[ledger_id]

    async def _sync_index(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self._index.sync)

    @property
    def is_read_only(self) -> bool:
        return self._journal is None or self._journal.failure is not None

    # --- EntryStore ---------------------------------------------------------------------------

    def add(self, ledger_id: int, entry_id: int, payload: bytes, lac: int, *, recovery: bool = False) -> asyncio.Future:
        """A future, not a coroutine: the ledger writer pipelines thousands of these."""
        state = self._states.get(ledger_id)
        if state is not None and state.is_fenced and not recovery:
            return _failed(LedgerFenced(f"ledger {ledger_id} is fenced"))
        if self.is_read_only:
            return _failed(BookieReadOnly("bookie is read-only"))
        return self._journal.append(fmt.RecordKind.ENTRY, ledger_id, entry_id, lac, payload)

    async def fence(self, ledger_id: int) -> int:
        state = self._states.setdefault(ledger_id, LedgerState())
        already = state.is_fenced
        state.is_fenced = True  # at once: adds arriving from now on are refused
        if not already:
            await self._journal.append(fmt.RecordKind.FENCE, ledger_id, -1, -1, b"")
        return state.last_entry_id

    def is_fenced(self, ledger_id: int) -> bool:
        state = self._states.get(ledger_id)
        return state is not None and state.is_fenced

    async def last_add_confirmed(self, ledger_id: int) -> int:
        state = self._states.get(ledger_id)
        if state is None:
            raise NoSuchLedger(str(ledger_id))
        return state.lac

    async def wait_lac(self, ledger_id: int, after: int, timeout_s: float) -> int:
        """Long poll: the LAC once it is above `after`, or whatever it is when the timeout passes."""
        state = self._states.get(ledger_id)
        lac = -1 if state is None else state.lac
        if lac > after or timeout_s <= 0:
            if state is None:
                raise NoSuchLedger(str(ledger_id))
            return lac
        waiter = asyncio.get_running_loop().create_future()
        self._lac_waiters.setdefault(ledger_id, []).append((after, waiter))
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except asyncio.TimeoutError:
            state = self._states.get(ledger_id)
            if state is None:
                raise NoSuchLedger(str(ledger_id)) from None
            return state.lac
        finally:
            if not waiter.done():
                waiter.cancel()

    async def write_lac(self, ledger_id: int, lac: int) -> None:
        """Kept in memory only: after a restart the LAC piggybacked on the stored entries stands,
        which is never above the true one."""
        state = self._states.setdefault(ledger_id, LedgerState())
        if lac > state.lac:
            state.lac = lac
            if self._lac_waiters:
                self._wake_lac_waiters()

    def ledger_ids(self) -> list[int]:
        """Every ledger this bookie holds entries or a fence for."""
        return list(self._states)

    def lac_of(self, ledger_id: int) -> int:
        state = self._states.get(ledger_id)
        return -1 if state is None else state.lac

    def last_entry_id(self, ledger_id: int) -> int:
        state = self._states.get(ledger_id)
        return -1 if state is None else state.last_entry_id

    async def delete_ledger(self, ledger_id: int) -> None:
        if self._states.pop(ledger_id, None) is None:
            return
        await self._journal.append(fmt.RecordKind.LEDGER_DELETED, ledger_id, -1, -1, b"")

    async def read(self, ledger_id: int, entry_id: int, *, fence: bool = False) -> bytes:
        if fence:
            await self.fence(ledger_id)
        payload = await asyncio.to_thread(self._read_one, ledger_id, entry_id)
        self.stats.read([payload])
        return payload

    async def read_range(self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int) -> list[bytes]:
        payloads = await asyncio.to_thread(self._read_range, ledger_id, first_entry_id, last_entry_id, max_bytes)
        self.stats.read(payloads)
        return payloads

    async def read_entries(self, ledger_id: int, entry_ids: list[int]) -> list[bytes]:
        payloads = await asyncio.to_thread(self._read_entries, ledger_id, entry_ids)
        self.stats.read(payloads)
        return payloads

    @property
    def ledger_count(self) -> int:
        """Ledgers this bookie holds entries or state of."""
        return len(self._states)

    # --- reads (worker threads) ---------------------------------------------------------------

    def _missing(self, ledger_id: int, entry_id: int) -> Exception:
        """What to answer for an entry the index lacks: NoSuchEntry, unless a damaged segment may
        have held it (then unknown: CorruptEntry)."""
        if self.recovery_report.damaged:
            segments = ", ".join(f"{s:x}" for s in sorted(self.recovery_report.damaged))
            return CorruptEntry(f"ledger {ledger_id} entry {entry_id}: not found, and journal segment(s) {segments} "
                                "are damaged: it may have been there")
        return NoSuchEntry(f"ledger {ledger_id} entry {entry_id}")

    def _read_one(self, ledger_id: int, entry_id: int) -> bytes:
        location = self._index.locate(ledger_id, entry_id)
        if location is None:
            raise self._missing(ledger_id, entry_id)
        return self._read_at(ledger_id, entry_id, location)

    def _read_entries(self, ledger_id: int, entry_ids: list[int]) -> list[bytes]:
        out = []
        for entry_id, location in zip(entry_ids, self._index.locate_many(ledger_id, entry_ids)):
            if location is None:
                raise self._missing(ledger_id, entry_id)
            out.append(self._read_at(ledger_id, entry_id, location))
        return out

    def _read_range(self, ledger_id: int, first: int, last: int, max_bytes: int) -> list[bytes]:
        out: list[bytes] = []
        total = 0
        expected = first
        locations = self._index.locate_range(ledger_id, first, last)
        for entry_id, location in locations:
            if entry_id != expected:
                break  # a hole: never serve past it
            payload = self._read_at(ledger_id, entry_id, location)
            out.append(payload)
            total += len(payload)
            expected += 1
            if total >= max_bytes:
                break
        locations.close()     # ends its index read transaction now
        if not out and first <= last:
            raise self._missing(ledger_id, first)
        return out

    def _read_at(self, ledger_id: int, entry_id: int, location: Location) -> bytes:
        raw = os.pread(self._segment_fd(location.segment_id), location.size, location.offset)
        try:
            record = fmt.decode_record(raw, location.offset)
        except ValueError as exc:
            raise CorruptEntry(f"ledger {ledger_id} entry {entry_id}: {exc}") from None
        if (record.ledger_id, record.entry_id) != (ledger_id, entry_id):
            raise CorruptEntry(f"ledger {ledger_id} entry {entry_id}: index points at another entry")
        return record.payload

    def _segment_fd(self, segment_id: int) -> int:
        with self._fd_lock:
            fd = self._read_fds.get(segment_id)
            if fd is None:
                fd = os.open(self.directory / "journal" / fmt.segment_name(segment_id), os.O_RDONLY)
                self._read_fds[segment_id] = fd
            return fd

    # --- space --------------------------------------------------------------------------------

    async def collect_garbage(self) -> list[int]:
        """Delete sealed journal segments that no live ledger has entries in; returns their ids."""
        current = self._journal.segment_id
        return await asyncio.to_thread(self._collect, current)

    def _collect(self, current_segment: int) -> list[int]:
        removed = []
        journal_dir = self.directory / "journal"
        for segment_id in list_segments(journal_dir):
            if (segment_id >= current_segment or self._index.segment_is_live(segment_id)
                    or segment_id in self.recovery_report.damaged):   # its unreadable part may hold live entries
                continue
            with self._fd_lock:
                fd = self._read_fds.pop(segment_id, None)
            if fd is not None:
                os.close(fd)
            os.unlink(journal_dir / fmt.segment_name(segment_id))
            self._index.forget_segment(segment_id)
            removed.append(segment_id)
        if removed:
            fsync_directory(journal_dir)
        return removed

    async def close(self) -> None:
        if self._sync_task is not None:
            self._sync_task.cancel()
        if self._journal is not None:
            await self._journal.close()
        with self._fd_lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
        await asyncio.to_thread(self._index.close)


def _fsync_directories(*directories: Path) -> None:
    for directory in directories:
        fsync_directory(directory)


def _failed(error: Exception) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_exception(error)
    return fut


# --- start-up recovery (a worker thread) ----------------------------------------------------------


def _recover(directory: Path, journal_dir: Path, segments: list[int]) -> tuple[LedgerIndex, dict[int, LedgerState], RecoveryReport]:
    report = RecoveryReport()
    index_dir = directory / "index"
    try:
        index = LedgerIndex(index_dir)
        checkpoint = index.checkpoint()
    except Exception as exc:  # an unreadable index is rebuilt: it is derived data
        log.warning("bookie index unreadable (%s): rebuilding from the journal", exc)
        LedgerIndex.wipe(index_dir)
        index, checkpoint = LedgerIndex(index_dir), None
    if segments and (checkpoint is None or checkpoint[0] not in segments):
        if checkpoint is not None:
            log.warning("index checkpoint names a missing segment %x: rebuilding", checkpoint[0])
            index.close()
            LedgerIndex.wipe(index_dir)
            index = LedgerIndex(index_dir)
        report.index_rebuilt = True
        checkpoint = (segments[0], fmt.SEGMENT_HEADER.size)
    for segment_id in segments:
        if checkpoint is None or segment_id < checkpoint[0]:
            continue
        start = checkpoint[1] if segment_id == checkpoint[0] else fmt.SEGMENT_HEADER.size
        _replay_segment(journal_dir, segment_id, start, is_last=segment_id == segments[-1], index=index,
                        report=report)
    index.sync()
    for segment_id, offset, dropped, why in report.dropped:
        log.warning("journal segment %x: dropped %d bytes at offset %d: %s", segment_id, dropped, offset, why)
    return index, index.all_ledger_states(), report


def _replay_segment(journal_dir: Path, segment_id: int, start: int, *, is_last: bool, index: LedgerIndex,
                    report: RecoveryReport) -> None:
    path = journal_dir / fmt.segment_name(segment_id)
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        try:
            fmt.read_segment_header(fd, segment_id)
        except fmt.BadSegment as exc:
            if not is_last:    # acknowledged entries may be in it: keep it, mark it, serve nothing from it
                log.error("sealed journal segment is unreadable: %s", exc)
                _mark_damaged(journal_dir, segment_id, 0, str(exc), report)
                return
            # Only a segment created just before a crash can lack its header; it holds nothing.
            report.dropped.append((segment_id, 0, size, str(exc)))
            os.ftruncate(fd, 0)
            os.pwrite(fd, fmt.segment_header(segment_id), 0)
            os.fsync(fd)
            return
        batch: list[Written] = []
        end = max(start, fmt.SEGMENT_HEADER.size)
        for item in fmt.scan(fd, end, size):
            if isinstance(item, fmt.ScanStop):
                if item.preallocated:    # the unused end of a segment written until the crash
                    if not is_last:      # a crash while rolling, before the old one was cut back
                        log.warning("sealed journal segment %x ends in %d bytes of preallocated space: cut back",
                                    segment_id, item.dropped_bytes)
                    os.ftruncate(fd, item.offset)
                    break
                if not is_last:   # media damage: cutting here would throw away the good records after it
                    log.error("sealed journal segment %x is corrupt at %d: %s", segment_id, item.offset, item.reason)
                    _mark_damaged(journal_dir, segment_id, item.offset, item.reason, report)
                    break
                report.dropped.append((segment_id, item.offset, item.dropped_bytes, item.reason))
                os.ftruncate(fd, item.offset)
                os.fsync(fd)
                break
            batch.append(Written(item.kind, item.ledger_id, item.entry_id, item.lac, segment_id, item.offset,
                                 item.size))
            end = item.offset + item.size
            if len(batch) >= 10_000:
                index.apply(batch, segment_id, end)
                report.replayed_records += len(batch)
                batch = []
        index.apply(batch, segment_id, end)
        report.replayed_records += len(batch)
    finally:
        os.close(fd)


def _mark_damaged(journal_dir: Path, segment_id: int, offset: int, reason: str, report: RecoveryReport) -> None:
    damage.mark(journal_dir, segment_id, offset, reason)
    report.damaged[segment_id] = (offset, reason)
