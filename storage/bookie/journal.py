"""The journal: one sequential, group-committed, fsynced write stream shared by every ledger.

Adds are queued from the event loop; the journal thread writes whatever queued up while it was busy
in one `pwritev`, fsyncs, hands the written positions to the bookie's index, and only then resolves
the adds' futures. A failed write or fsync is never retried: the data it held may be gone from the
page cache while a retry reports success (the "fsyncgate" lesson), so the journal fails every
pending and future add and the bookie turns read-only.

An add that finds the journal idle is flushed by the event loop itself instead, at the end of the
loop turn, with every add of that turn. At low rates the round trip to the thread (a condition
wake-up, the GIL, the loop's self-pipe) adds ~100 us of latency and several context switches per
add, while overlapping the fsync with the loop's work gains nothing. "Idle" means:
nothing pending, the thread asleep, and the last flush ended at least one fsync ago (so the loop
spends at most about half its time in fsyncs). A slow disk (an fsync over INLINE_MAX_FSYNC_S) and a
turn that queues over INLINE_MAX_BYTES go to the thread, and so does everything that arrives while
it is busy, which is how group commit works under load. Whoever flushes holds the file alone:
the thread only takes records handed to it (`_thread_owns`), and the loop flushes only while the
thread owns none, holding the condition's lock.

Segments are preallocated PREALLOCATE_BYTES at a time (fallocate) and written at explicit
positions, not appended: an fdatasync then flushes the data without also committing a new file
size and new blocks to the file system's journal, which costs about a third of its time and CPU
on ext4 (docs/PERFORMANCE.md). A sealed or closed segment is cut back to what was written; after a
crash the scan tells the preallocated zeros from a torn record (journal_format.py). Where the file
system cannot preallocate, the segment simply grows as it is written.

The byte layout and crash policy are in journal_format.py.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage.api import BookieReadOnly
from storage.bookie import journal_format as fmt
from storage.bookie.group_commit import FlushReason, GroupCommitPolicy, should_flush

log = logging.getLogger("gateway.storage.journal")

_IOV_MAX = 1024
INLINE_MAX_FSYNC_S = 0.002        # a slower disk is better waited on by the thread
INLINE_MAX_BYTES = 256 * 1024     # a burst is better overlapped with the loop's work
PREALLOCATE_BYTES = 16 << 20      # reserved ahead of the write position, a chunk at a time
SLOW_FSYNC_S = 0.2                # an fsync this long is a slow disk: said in the log
SLOW_FSYNC_REPORT_S = 10.0        # at most one such line per this many seconds


@dataclass(slots=True)
class Written:
    """Where one record landed, handed to the index after the fsync."""

    kind: fmt.RecordKind
    ledger_id: int
    entry_id: int
    lac: int
    segment_id: int
    offset: int
    size: int


FlushedCallback = Callable[[list[Written], int, int], None]
"""Called after each fsync, by whoever flushed (the journal thread or the event loop), with the
records written and the end position (segment id, offset) of the journal, before any of their adds
is acknowledged."""

DurableCallback = Callable[[list[Written]], None]
"""Called on the event loop with the records of each flush, just before their futures resolve."""


def list_segments(directory: Path) -> list[int]:
    ids = []
    for name in os.listdir(directory):
        stem, dot, ext = name.partition(".")
        if ext == "log" and len(stem) == 16:
            try:
                ids.append(int(stem, 16))
            except ValueError:
                continue
    return sorted(ids)


def _libc_fallocate() -> Callable[[int, int, int, int], int] | None:
    try:
        call = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):     # not Linux
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    call.restype = ctypes.c_int
    return call


_FALLOCATE = _libc_fallocate()


def preallocate(fd: int, offset: int, length: int) -> int:
    """Reserve blocks for [offset, offset + length) and extend the file over them, as fallocate(2)
    mode 0 does: 0, or the errno (EOPNOTSUPP where the file system cannot; os.posix_fallocate would
    then write a byte into every block, far slower than not preallocating)."""
    if _FALLOCATE is None:
        return errno.ENOSYS
    return 0 if _FALLOCATE(fd, 0, offset, length) == 0 else ctypes.get_errno()


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """Owns the journal directory's current segment. `append` is called from one event loop; the
    file is written by the journal thread, or by the loop when the journal was idle."""

    def __init__(self, directory: Path, first_segment_id: int, policy: GroupCommitPolicy,
                 segment_bytes: int, on_flushed: FlushedCallback, on_durable: DurableCallback,
                 flush_counter: Callable[[FlushReason], None] | None = None,
                 sync_observer: Callable[[float, int, int], None] | None = None) -> None:
        """`sync_observer(fsync seconds, records, bytes)` hears of every flush (from the thread that did it)."""
        self._dir = directory
        self._policy = policy
        self._segment_bytes = segment_bytes
        self._on_flushed = on_flushed
        self._on_durable = on_durable
        self._count_flush = flush_counter or (lambda reason: None)
        self._observe_sync = sync_observer or (lambda seconds, records, size: None)
        self._loop = asyncio.get_running_loop()
        self._cond = threading.Condition()
        # (record buffers, size, kind, ledger id, entry id, lac, future) of each queued record
        self._pending: list[tuple[tuple, int, fmt.RecordKind, int, int, int, asyncio.Future]] = []
        self._pending_bytes = 0
        self._pending_since = 0.0
        self._closing = False
        self._thread_owns = False         # the pending records are the thread's to flush
        self._loop_flush_due = False      # the loop flushes the pending records at the end of this turn
        self._idle_since = time.monotonic()
        self._fsync_s = 0.0               # how long the last fsync took
        self._slow_fsyncs = 0             # since the last report
        self._slow_reported_at = -SLOW_FSYNC_REPORT_S
        self.failure: BaseException | None = None
        self._segment_id = first_segment_id
        self._preallocating = True        # until the file system refuses
        self._fd = self._create_segment(first_segment_id)
        self._segment_size = fmt.SEGMENT_HEADER.size
        self._allocated = self._segment_size   # bytes of the segment the file already covers
        self._thread = threading.Thread(target=self._run, name="journal", daemon=True)
        self._thread.start()

    @property
    def segment_id(self) -> int:
        """The segment currently written to. Lower ids are sealed."""
        return self._segment_id

    def append(self, kind: fmt.RecordKind, ledger_id: int, entry_id: int, lac: int,
               payload: bytes | memoryview | tuple[bytes | memoryview, ...]) -> asyncio.Future:
        """Queue one record; the future resolves once it is fsynced (and indexed). The payload may
        be given as a tuple of parts, which are written one after the other without being joined."""
        fut = self._loop.create_future()
        if self.failure is not None:
            fut.set_exception(BookieReadOnly(f"journal failed: {self.failure}"))
            return fut
        record = fmt.encode_record_parts(kind, ledger_id, entry_id, lac,
                                         payload if isinstance(payload, tuple) else (payload,))
        size = sum(map(len, record))
        with self._cond:
            if self._closing:
                fut.set_exception(BookieReadOnly("journal is closing"))
                return fut
            was_empty = not self._pending
            if was_empty:
                self._pending_since = time.monotonic()
            self._pending.append((record, size, kind, ledger_id, entry_id, lac, fut))
            before = self._pending_bytes
            self._pending_bytes += size
            if self._loop_flush_due:
                if self._pending_bytes > INLINE_MAX_BYTES:   # a burst: the thread overlaps it with the loop's work
                    self._loop_flush_due = False
                    self._thread_owns = True
                    self._cond.notify()
                return fut
            if was_empty and not self._thread_owns and self._idle_enough():
                self._loop_flush_due = True
                self._loop.call_soon(self._flush_on_loop)
                return fut
            self._thread_owns = True
            # The thread sleeps only while nothing is pending, or while it waits out max_wait below
            # max_bytes: only the first record and the one crossing max_bytes can change its mind, so
            # only they pay for a wake-up (most appends under load arrive while it is busy writing).
            if was_empty or before < self._policy.max_bytes <= self._pending_bytes:
                self._cond.notify()
        return fut

    def _idle_enough(self) -> bool:
        return (self._policy.flush_when_idle and self._fsync_s <= INLINE_MAX_FSYNC_S
                and self._pending_since - self._idle_since >= self._fsync_s)

    def _flush_on_loop(self) -> None:
        with self._cond:     # the thread owns nothing and cannot take anything while this is held
            if not self._loop_flush_due or not self._pending:
                return   # handed to the thread as a burst, or drained by it at close
            self._loop_flush_due = False
            batch, self._pending, self._pending_bytes = self._pending, [], 0
            self._count_flush(FlushReason.INLINE)
            written, error = self._write_batch(batch)
            self._idle_since = time.monotonic()
        self._complete(written, batch, error)

    async def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        await asyncio.to_thread(self._thread.join)
        self._seal_segment()

    # --- the journal thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                reason = self._wait_for_flush()
                if reason is None:
                    return
                batch, self._pending, self._pending_bytes = self._pending, [], 0
            self._count_flush(reason)
            written, error = self._write_batch(batch)
            # Queued before ownership is given up, so a flush of the loop's completes after this one.
            self._loop.call_soon_threadsafe(self._complete, written, batch, error)
            with self._cond:
                if not self._pending:
                    self._thread_owns = False
                    self._idle_since = time.monotonic()

    def _wait_for_flush(self) -> FlushReason | None:
        """With the lock held: block until the policy says flush; None once closed and drained."""
        while True:
            if not self._thread_owns and not self._closing:
                self._cond.wait()
                continue
            waited_ms = (time.monotonic() - self._pending_since) * 1000 if self._pending else 0.0
            reason = should_flush(waited_ms, self._pending_bytes, True, self._policy)
            if reason is not None:
                return reason
            if self._closing:
                return FlushReason.IDLE if self._pending else None
            timeout = None if not self._pending else max(self._policy.max_wait_ms - waited_ms, 0) / 1000
            self._cond.wait(timeout)

    def _write_batch(self, batch: list) -> tuple[list[Written], BaseException | None]:
        """Write, fsync and index `batch`: the records written, or the error that failed the journal."""
        if self.failure is not None:
            return [], self.failure
        try:
            written, end = self._write(batch)
            self._on_flushed(written, self._segment_id, end)
            return written, None
        except BaseException as exc:  # never retried: see the module docstring
            log.critical("journal write/fsync failed, bookie turns read-only: %s", exc)
            self.failure = exc
            return [], exc

    def _complete(self, written: list[Written], batch: list, error: BaseException | None) -> None:
        if written:
            self._on_durable(written)
        for item in batch:
            fut = item[6]
            if fut.done():
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(BookieReadOnly(f"journal failed: {error}"))

    def _write(self, batch: list) -> tuple[list[Written], int]:
        batch_bytes = sum(item[1] for item in batch)
        if self._segment_size > fmt.SEGMENT_HEADER.size and self._segment_size + batch_bytes > self._segment_bytes:
            self._roll()
        written: list[Written] = []
        buffers: list[bytes | memoryview] = []
        offset = self._segment_size
        for record, size, kind, ledger_id, entry_id, lac, _ in batch:
            written.append(Written(kind, ledger_id, entry_id, lac, self._segment_id, offset, size))
            buffers.extend(part for part in record if part)
            offset += size
        if offset > self._allocated and self._preallocating:
            self._preallocate(offset)
        position = self._segment_size
        for start in range(0, len(buffers), _IOV_MAX):
            chunk = buffers[start:start + _IOV_MAX]
            expected = sum(map(len, chunk))
            done = os.pwritev(self._fd, chunk, position)
            if done != expected:  # a short write: finish it with plain writes
                data = b"".join(chunk)[done:]
                while data:
                    data = data[os.pwrite(self._fd, data, position + expected - len(data)):]
            position += expected
        started = time.monotonic()
        os.fdatasync(self._fd)
        self._fsync_s = time.monotonic() - started
        self._observe_sync(self._fsync_s, len(batch), offset - self._segment_size)
        if self._fsync_s > SLOW_FSYNC_S:
            self._report_slow_fsync(started)
        self._segment_size = offset
        return written, offset

    def _report_slow_fsync(self, now: float) -> None:
        """A slow disk slows this bookie's adds; writers go on through the others of the ack quorum,
        so the log is where an operator learns which bookie it is."""
        self._slow_fsyncs += 1
        if now - self._slow_reported_at >= SLOW_FSYNC_REPORT_S:
            log.warning("journal fsync took %.0f ms (%d over %.0f ms since the last report): a slow disk",
                        self._fsync_s * 1000, self._slow_fsyncs, SLOW_FSYNC_S * 1000)
            self._slow_reported_at, self._slow_fsyncs = now, 0

    def _preallocate(self, end: int) -> None:
        """Cover the segment up to `end` and at least PREALLOCATE_BYTES beyond the last write."""
        length = max(end, self._segment_size + PREALLOCATE_BYTES) - self._allocated
        error = preallocate(self._fd, self._allocated, length)
        if error == 0:
            self._allocated += length
        elif error in (errno.EOPNOTSUPP, errno.ENOSYS):
            self._preallocating = False
            log.info("the file system cannot preallocate journal segments: they grow as written")
        # else (a full disk): the write below says whether what is left is enough

    def _roll(self) -> None:
        self._seal_segment()
        self._segment_id += 1
        self._fd = self._create_segment(self._segment_id)
        self._segment_size = self._allocated = fmt.SEGMENT_HEADER.size

    def _seal_segment(self) -> None:
        """Close the current segment, cut back to what was written (a crash before the cut leaves
        zeros that recovery tells apart, journal_format.scan)."""
        try:
            if self._allocated > self._segment_size:
                os.ftruncate(self._fd, self._segment_size)
        except OSError as exc:
            log.warning("could not cut journal segment %x back to %d bytes: %s", self._segment_id,
                        self._segment_size, exc)
        finally:
            os.close(self._fd)

    def _create_segment(self, segment_id: int) -> int:
        path = self._dir / fmt.segment_name(segment_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, fmt.segment_header(segment_id))
        os.fsync(fd)
        fsync_directory(self._dir)  # the new file's name must survive a power loss too
        return fd

