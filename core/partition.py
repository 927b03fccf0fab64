"""A partition: Kafka RecordBatches (magic 2) stored exactly as received, over one managed log.

Append validates each batch's framing, magic and CRC-32C and its size against max.message.bytes,
rewrites only the base offset (outside the CRC), and hands the bytes to the log: no per-record work.
Reads return whole batches from the one containing the requested offset, as Kafka does, so a read
that starts inside a batch returns that batch.

Transactions: a transactional batch opens its producer's transaction here (producer_state.py); a
marker written by the transaction coordinator (`write_marker`) closes it, and an abort marker adds
the transaction to the aborted index. The last stable offset (LSO) is the first offset of the oldest
open transaction, or the high watermark; read_committed reads stop there and carry the aborted
transactions of the range read. Clients may not write control batches.

Owned by the event loop: offsets are assigned synchronously in `append`, so concurrent appends to
one partition are ordered by their arrival.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from core.clock import Clock
from core.errors import (BacklogQuotaExceeded, CoreError, CorruptRecord, FencedLeaderEpoch, InvalidRecord, MirrorTopic,
                         NotEnoughReplicas, NotOwner, OffsetOutOfRange, OutOfOrderSequence, RecordTooLarge,
                         SequenceGap, StorageUnavailable, UnknownLeaderEpoch)
from core.meters import NamespaceMeter
from core.producer_state import ProducerStates
from core.records import batch as record_batch
from core.records.decoder import decode_batch
from core.topic_config import EffectiveConfig
from core.producer_notes import ProducerNote, ProducerNotes
from core.producer_snapshots import ProducerSnapshot, ProducerSnapshots
from core.transactions.aborted_index import AbortedIndex, AbortedIndexStore, AbortedTxn
from core.transactions.markers import Marker, build_marker, read_marker
from storage.api import (Fenced, LedgerFenced, LogClosed, ManagedLog, NotEnoughBookies, PositionOutOfRange,
                         RetentionPolicy, StorageError)

MAX_DECODE_BYTES = 64 << 20

logger = logging.getLogger("gateway.core")


@dataclass(slots=True)
class ReadResult:
    records: bytes               # whole batches, back to back (Kafka's "records" field)
    high_watermark: int
    log_start_offset: int


@dataclass(slots=True)
class CommittedRead:
    """A read_committed read: whole batches below the last stable offset, and the aborted
    transactions with records in the range read."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[AbortedTxn]


def as_core_error(exc: BaseException) -> BaseException:
    """The core's protocol-neutral error for a storage failure (others are returned as they are)."""
    if isinstance(exc, (LogClosed, LedgerFenced, Fenced)):
        error: BaseException = NotOwner(str(exc))
    elif isinstance(exc, PositionOutOfRange):
        error = OffsetOutOfRange(str(exc))
    elif isinstance(exc, NotEnoughBookies):
        error = NotEnoughReplicas(str(exc))
    elif isinstance(exc, StorageError):
        error = StorageUnavailable(str(exc))
    else:
        return exc
    error.__cause__ = exc
    return error


@contextmanager
def storage_errors() -> Iterator[None]:
    """Turn storage failures into the core's protocol-neutral errors."""
    try:
        yield
    except StorageError as exc:
        raise as_core_error(exc) from exc


RELEARN_RETRY_S = 0.5
# How long after an append was refused or failed here a sequence gap is answered as retriable: about
# a client's request timeout, within which it sends the missing batch again.
GAP_AFTER_REFUSAL_MS = 30_000
DUPLICATE_WAIT_S = 10.0   # how long a retry waits for the batch it repeats to become durable
SNAPSHOT_EVERY_BYTES = 4 << 20   # opening a partition reads at most about this much of its log back


def _resolved(value: int) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def retention_policy(config: EffectiveConfig) -> RetentionPolicy:
    if not config.deletes:   # compact only (no compaction runs) or no cleanup: nothing is removed, as in Kafka
        return RetentionPolicy(-1, -1, config.segment_bytes, config.segment_ms)
    return RetentionPolicy(config.retention_ms, config.retention_bytes, config.segment_bytes, config.segment_ms)


class Partition:
    def __init__(self, topic: str, index: int, log: ManagedLog, config: EffectiveConfig, clock: Clock,
                 aborted_store: AbortedIndexStore | None = None, notes: ProducerNotes | None = None, *,
                 snapshots: ProducerSnapshots | None = None, read_only: bool = False) -> None:
        """`read_only`: a read replica over a follower of another broker's log (core/replicas.py):
        reads only, read_uncommitted."""
        self.topic = topic
        self.read_only = read_only
        self.index = index
        self.log = log
        self.config = config
        self._clock = clock
        self.producers = ProducerStates()
        self.aborted = AbortedIndex()
        self._aborted_store = aborted_store   # None: the aborted index is rebuilt from the log tail only
        self.notes = notes                    # sequences of held batches (None: the log's alone)
        self._snapshots = snapshots           # where the producers are snapshotted (None: never)
        self._unsnapshotted_bytes = 0         # appended since the last snapshot was taken
        self._snapshotting = False
        self._stable_waiters: list[asyncio.Future] = []
        self._max_timestamp: int | None = None   # the highest record timestamp stored; None: not known yet
        self._watchers: list[asyncio.Future] = []   # readers waiting for the next durable append
        # After a storage failure the outcome of the failed appends is unknown: the producer state is
        # learned again from the log once it is repaired, and appends wait for that.
        self._relearning: asyncio.Task | None = None
        self._relearns = 0
        self._last_refusal_ms = -GAP_AFTER_REFUSAL_MS    # when an append was last refused or failed (check_sequence)
        self.meter = NamespaceMeter("", "")   # the core gives every partition of a namespace that namespace's meter
        # Traffic while open, for the cluster's load reports (core/cluster/load.py).
        self.messages_in = self.bytes_in = self.bytes_out = 0
        self.refusal: str | None = None       # set while appends are refused (core/backlog_quota.py)
        # How far producer and transaction state is learned from the log (a read replica learns as
        # its log moves on; its last stable offset never passes what it learned).
        self._scan_start = self._learned_to = 0
        self._marked: set[int] = set()
        self._learning: asyncio.Task | None = None

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def leader_epoch(self) -> int:
        """Kafka's partition leader epoch: begun by this broker when it opened the partition."""
        return self.log.leader_epoch

    def check_leader_epoch(self, client_epoch: int) -> None:
        """A client's current_leader_epoch (-1: not given) against this one: older is fenced, newer
        means this broker's view is behind (Kafka's FENCED_ / UNKNOWN_LEADER_EPOCH)."""
        if client_epoch >= 0 and client_epoch != self.log.leader_epoch:
            raise (FencedLeaderEpoch if client_epoch < self.log.leader_epoch else UnknownLeaderEpoch)(
                f"{self.topic}-{self.index}: leader epoch {client_epoch}, the partition's is {self.log.leader_epoch}")

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed readers stop: the oldest open transaction's first offset, else the HW."""
        high_watermark = self.log.high_watermark
        if self.read_only:
            high_watermark = min(high_watermark, self._learned_to)
        first_unstable = self.producers.first_unstable_offset()
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    async def append(self, records: bytes | memoryview) -> int:
        """Store every batch of a Produce "records" field; returns the base offset of the first."""
        return await self.start_append(records)

    def start_append(self, records: bytes | memoryview) -> asyncio.Future:
        """Validate and queue the batches now (their offsets are assigned before this returns);
        the awaitable resolves to the first base offset once all are durable.

        All batches are validated before any is queued, so a bad batch stores nothing.
        """
        if self.config.mirror_source:
            raise MirrorTopic(f"{self.topic} is a mirror of {self.config.mirror_source}: only its replicator "
                              "writes it")
        batches, headers = self._validated(records, from_client=True)
        count = sum(header.record_count for header in headers)
        self.meter.published(len(records), count)
        self.messages_in += count
        self.bytes_in += len(records)
        pending: list[asyncio.Future] = []
        appended = None
        first_queued = self.log.next_offset
        with storage_errors():
            now_ms = self._clock.now_ms() if self.config.log_append_time else 0
            epoch = self.log.leader_epoch
            for batch, header in zip(batches, headers):
                idempotent = header.producer_id >= 0
                if idempotent:
                    duplicate = self.check_sequence(header.producer_id, header.producer_epoch,
                                                    header.base_sequence, header.record_count)
                    if duplicate is not None:   # a retry of a stored batch: its offset, stored once
                        pending.append(self._once_durable(duplicate))
                        continue
                base_offset = self.log.next_offset
                if self.config.log_append_time:
                    stored = record_batch.with_log_append_time(batch, base_offset, now_ms, epoch)
                    max_timestamp = now_ms
                else:
                    stored = record_batch.with_offset_and_epoch(batch, base_offset, epoch)
                    max_timestamp = header.max_timestamp
                appended = self.log.append(stored, header.record_count, max_timestamp)
                pending.append(appended)
                if self._max_timestamp is not None and max_timestamp > self._max_timestamp:
                    self._max_timestamp = max_timestamp
                if idempotent:
                    self.producers.record(header.producer_id, header.producer_epoch, header.base_sequence,
                                          header.record_count, base_offset, header.max_timestamp)
                    if header.is_transactional:
                        self.producers.begin_transaction(header.producer_id, base_offset)
        durable = self._first_offset(pending)
        if self._snapshots is not None and appended is not None:
            self._unsnapshotted_bytes += len(records)
            if self._unsnapshotted_bytes >= SNAPSHOT_EVERY_BYTES and not self._snapshotting:
                self._take_snapshot(durable)
        if appended is not None:
            # Resolved once the log's high watermark covers the last batch (it moves first); a
            # reader may start watching before then, so the callback is always there. Registered
            # after _first_offset's: whoever appended hears of it before the readers wake.
            appended.add_done_callback(self.wake_watchers)
        if self.meter.tracer is not None and self.log.next_offset > first_queued:
            self.meter.tracer.produced(self.topic, self.index, first_queued, self.log.next_offset - 1)
        return durable

    def _once_durable(self, offset: int) -> asyncio.Future:
        """The offset of a batch a retry repeats, once that batch is durable: a retry must not be
        answered while the batch it repeats may still fail (as Kafka holds a duplicate's answer
        until its offset is replicated)."""
        if offset < self.log.high_watermark:
            return _resolved(offset)
        return asyncio.ensure_future(self._wait_durable(offset, self._relearns))

    async def _wait_durable(self, offset: int, relearns: int) -> int:
        deadline = asyncio.get_running_loop().time() + DUPLICATE_WAIT_S
        while self.log.high_watermark <= offset:
            if self._relearns != relearns or asyncio.get_running_loop().time() >= deadline:
                # It failed (its outcome is being learned from the log) or is taking too long: the
                # client asks again, and is answered from what the log holds by then.
                raise StorageUnavailable(f"{self.topic}-{self.index}: the batch at {offset} is not durable yet")
            await self.log.wait_for_append(offset, 0.5)
        return offset

    def refused_at(self, when_ms: int | None) -> None:
        """Opening this partition was refused at `when_ms` (None: not lately): as good as a refused
        append here for check_sequence."""
        if when_ms is not None:
            self._last_refusal_ms = max(self._last_refusal_ms, when_ms)

    def check_sequence(self, producer_id: int, epoch: int, first_seq: int, record_count: int) -> int | None:
        """The producer state's verdict on a batch. A gap is a retriable SequenceGap only while a batch
        refused or failed here moments ago may be what is missing (the client sends it again first);
        otherwise the client skipped a sequence, and it is OUT_OF_ORDER_SEQUENCE, as Kafka answers."""
        try:
            return self.producers.check(producer_id, epoch, first_seq, record_count)
        except SequenceGap as gap:
            if self._clock.now_ms() - self._last_refusal_ms < GAP_AFTER_REFUSAL_MS:
                raise
            raise OutOfOrderSequence(str(gap)) from None

    def _validated(self, records: bytes | memoryview, *, from_client: bool) -> tuple[list, list]:
        """The batches of a Produce "records" field and their headers, all checked before any is
        stored. Control batches come only from a mirror's replicator (`from_client` False)."""
        if self._relearning is not None:
            self._last_refusal_ms = self._clock.now_ms()
            raise StorageUnavailable(f"{self.topic}-{self.index} is recovering from a storage failure")
        if self.refusal is not None:
            raise BacklogQuotaExceeded(self.refusal)
        try:
            batches = record_batch.split_batches(records)
        except record_batch.CorruptBatch as exc:
            raise CorruptRecord(str(exc)) from None
        except record_batch.InvalidBatch as exc:
            raise InvalidRecord(str(exc)) from None
        headers = []
        for batch in batches:
            if len(batch) > self.config.max_message_bytes:
                raise RecordTooLarge(f"batch of {len(batch)} bytes is over max.message.bytes "
                                     f"{self.config.max_message_bytes}")
            header = record_batch.read_header(batch)
            if header.is_control and from_client:
                raise InvalidRecord("clients may not write control batches")
            if header.is_transactional and header.producer_id < 0:
                raise InvalidRecord("a transactional batch needs a producer id")
            headers.append(header)
        return batches, headers

    async def append_mirrored(self, records: bytes | memoryview) -> int:
        """A mirror topic's replicator (protocols/kafka/mirror): the source partition's batches, each
        stored at its own base offset, so the mirror's offsets are the source's. A batch below the
        end is one stored before (a retry after a lost answer) and is skipped; a batch past the end
        of a mirror that never held a record begins it there (the source's head was gone); past the
        end otherwise is a gap, refused. Producer and transaction state is learned as the batches
        are stored, so read_committed readers and a promoted mirror carry on. Returns the first
        batch's base offset once every batch is durable."""
        if not self.config.mirror_source:
            raise MirrorTopic(f"{self.topic} is not a mirror topic")
        batches, headers = self._validated(records, from_client=False)
        first = None
        pending: list[asyncio.Future] = []
        aborted: list[AbortedTxn] = []
        for batch, header in zip(batches, headers):
            first = header.base_offset if first is None else first
            end = self.log.next_offset
            if header.base_offset + header.record_count <= end:
                continue
            if header.base_offset != end:
                if pending or end != self.log_start_offset or self.log.high_watermark != end:
                    raise OffsetOutOfRange(f"{self.topic}-{self.index}: a mirrored batch at {header.base_offset} "
                                           f"leaves a gap after {end}")
                with storage_errors():
                    await self.log.start_at(header.base_offset)
            stored = record_batch.with_offset_and_epoch(batch, header.base_offset, self.log.leader_epoch)
            with storage_errors():
                pending.append(self.log.append(stored, header.record_count, header.max_timestamp))
            self.messages_in += header.record_count
            self.bytes_in += len(batch)
            ended = self._learn_batch(stored, header.base_offset)
            if ended is not None:
                aborted.append(ended)
        if pending:
            self.meter.published(sum(len(b) for b in batches), sum(h.record_count for h in headers))
            await self._first_offset(pending)   # queued together: one group commit, not one each
            self.wake_watchers()
        for transaction in aborted:
            if self._aborted_store is not None:
                with storage_errors():
                    await self._aborted_store.save(transaction)
        return -1 if first is None else first

    async def write_marker(self, marker: Marker) -> int:
        """Append the marker ending `marker.producer_id`'s transaction; returns its offset once durable.
        Only then does the transaction stop holding back the last stable offset."""
        with storage_errors():
            offset = self.log.next_offset
            batch = build_marker(marker, self._clock.now_ms())
            stored = record_batch.with_offset_and_epoch(batch, offset, self.log.leader_epoch)
            timestamp = record_batch.read_header(batch).max_timestamp
            await self.log.append(stored, 1, timestamp)
        if self._max_timestamp is not None and timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        aborted = self._end_transaction(marker, offset)
        self.wake_watchers()   # the high watermark and the last stable offset both moved
        if aborted is not None and self._aborted_store is not None:
            try:
                with storage_errors():
                    await self._aborted_store.save(aborted)
            except CoreError as exc:   # the marker is durable: the tail scan on reopen still finds it
                logger.warning("storing the aborted transaction at %s-%d@%d failed: %s", self.topic, self.index,
                               offset, exc)
        return offset

    def _end_transaction(self, marker: Marker, offset: int) -> AbortedTxn | None:
        first = self.producers.end_transaction(marker.producer_id, marker.producer_epoch)
        aborted = None
        if first is not None and not marker.commit:
            aborted = AbortedTxn(last_offset=offset, first_offset=first, producer_id=marker.producer_id)
            self.aborted.add(marker.producer_id, first, offset)
        waiters, self._stable_waiters = self._stable_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return aborted

    def _first_offset(self, pending: list[asyncio.Future]) -> asyncio.Future:
        """The first batch's offset, once every batch is durable; the first failure fails it.
        Chained by callbacks on the appends rather than awaited by a task: it resolves in the same
        pass of the event loop as the last append, before the readers that one wakes."""
        durable = asyncio.get_running_loop().create_future()
        durable.add_done_callback(_retrieve)      # a caller that went away must not log its failure
        waiting = len(pending)

        def settled(done: asyncio.Future) -> None:
            nonlocal waiting
            if durable.done():
                _retrieve(done)       # an earlier one failed: this one is answered for
                return
            if done.cancelled():
                durable.cancel()
                return
            error = done.exception()
            if error is not None:
                self._append_failed(pending)
                durable.set_exception(as_core_error(error))
                return
            waiting -= 1
            if waiting == 0:
                durable.set_result(pending[0].result())

        for append in pending:
            append.add_done_callback(settled)
        return durable

    def _append_failed(self, pending: list[asyncio.Future]) -> None:
        self._last_refusal_ms = self._clock.now_ms()
        for append in pending:    # what fails after this one: no "never retrieved" warnings
            append.add_done_callback(_retrieve)
        # Whatever failed them, some of these batches may be stored after all (a failed ledger keeps
        # what reached its bookies, and its recovery keeps what it finds on any of them): a retry must
        # find them, or an idempotent producer's retry is stored twice. Only the log knows.
        self._relearn_producers()

    def _relearn_producers(self) -> None:
        if self._relearning is None:
            self._relearns += 1
            self._relearning = asyncio.ensure_future(self._relearn())
            self._max_timestamp = None   # failed appends may have raised it: look again when asked

    async def _relearn(self) -> None:
        try:
            while True:
                try:
                    with storage_errors():
                        await self.log.wait_repaired()
                    self.producers = ProducerStates()
                    self.aborted = AbortedIndex()
                    await self.load_producer_states()
                    return
                except StorageUnavailable as exc:
                    logger.warning("%s-%d: relearning producer state after a storage failure: %s",
                                   self.topic, self.index, exc)
                    await asyncio.sleep(RELEARN_RETRY_S)
                except NotOwner:
                    return
        finally:
            self._relearning = None

    def _take_snapshot(self, durable: asyncio.Future) -> None:
        """Snapshot the producers as of the log's next offset; stored once `durable` (the append
        that carried the last batch below it) is, dropped if it fails (core/producer_snapshots.py)."""
        snapshot = self.producers.snapshot(self.log.next_offset)
        if snapshot is None:
            return
        self._unsnapshotted_bytes = 0
        self._snapshotting = True
        asyncio.ensure_future(self._store_snapshot(snapshot, durable))

    async def _store_snapshot(self, snapshot: ProducerSnapshot, durable: asyncio.Future) -> None:
        try:
            await asyncio.wait((durable,))
            if durable.cancelled() or durable.exception() is not None or self._relearning is not None:
                return
            await self._snapshots.save(snapshot)
        except StorageError as exc:    # the next one is taken a few MiB later; opening scans a little more
            logger.info("%s-%d: producer snapshot at %d not stored: %s", self.topic, self.index, snapshot.offset, exc)
        finally:
            self._snapshotting = False

    async def load_producer_states(self, max_scan_bytes: int = 64 << 20) -> None:
        """Rebuild the idempotent producers' state, the open transactions and the aborted index from
        the newest producer snapshot and the log after it, else from the tail of the log (about the
        last `max_scan_bytes`), and the stored aborted index; producers older than that are treated
        as new, as Kafka treats expired ones."""
        start, end = self.log_start_offset, self.high_watermark
        size = self.log.size_bytes
        if size > max_scan_bytes and end > start:
            start = max(start, end - (end - start) * max_scan_bytes // size)
        notes_from = start
        self.producers.complete = start == 0      # nothing ever removed, all of it scanned
        with storage_errors():
            snapshot = None if self._snapshots is None else await self._snapshots.load()
        if snapshot is not None and start <= snapshot.offset <= end:
            self.producers = ProducerStates.restored(snapshot)
            self.producers.complete = snapshot.complete and self.log_start_offset == 0
            start = snapshot.offset
        self._scan_start, self._learned_to, self._marked = start, start, set()
        with storage_errors():
            if self._aborted_store is not None:
                for entry in await self._aborted_store.load(self.log_start_offset):
                    if entry.last_offset < start:   # the scan below finds the others again
                        self.aborted.add(entry.producer_id, entry.first_offset, entry.last_offset)
            await self._learn_until(end)
            if self.notes is not None:
                for note in await self.notes.load(notes_from):
                    self.producers.relearn_note(note.producer_id, note.epoch, note.first_seq, note.count,
                                                note.base_offset, note.at)

    async def _learn_until(self, end: int) -> None:
        """Learn producers and transactions from the stored batches between what was learned and `end`."""
        offset = self._learned_to
        while offset < end:
            entries = await self.log.read(offset, 4 << 20)
            if not entries:
                break
            for entry in entries:
                self._learn_batch(entry.payload, entry.base_offset)
            offset = self._learned_to = entries[-1].next_offset

    def _learn_batch(self, payload: bytes | memoryview, base_offset: int) -> AbortedTxn | None:
        """What a stored batch tells of its producer and transaction; the transaction it aborted, if any."""
        header = record_batch.read_header(payload)
        if header.producer_id < 0:
            return None
        if header.is_control:
            marker = read_marker(payload)
            if marker is None:
                return None
            if header.producer_id not in self._marked:
                # A transaction that began before the scanned tail is taken to begin where the
                # scan does: the producer wrote nothing else in between.
                self.producers.begin_transaction(header.producer_id, self._scan_start)
                self._marked.add(header.producer_id)
            return self._end_transaction(marker, base_offset)
        self.producers.record(header.producer_id, header.producer_epoch, header.base_sequence,
                              header.record_count, base_offset, header.max_timestamp)
        if header.is_transactional:
            self.producers.begin_transaction(header.producer_id, base_offset)
        return None

    def replica_advanced(self) -> None:
        """A read replica's log moved on (its follower calls this): wake read_uncommitted readers
        at once, and learn the new batches' transactions before read_committed ones may see them."""
        self.wake_watchers()
        if self._learning is None:
            self._learning = asyncio.ensure_future(self._learn_replica())

    async def _learn_replica(self) -> None:
        try:
            while self._learned_to < self.log.high_watermark:
                with storage_errors():
                    await self._learn_until(self.log.high_watermark)
                self.wake_watchers()
        except CoreError as exc:     # tried again at the next advance
            logger.warning("%s-%d: replica could not learn transactions: %s", self.topic, self.index, exc)
        finally:
            self._learning = None

    async def note_held(self, note: ProducerNote) -> None:
        """Keep what a held batch did to its producer's sequence (core/producer_notes.py)."""
        if self.notes is not None:
            with storage_errors():
                await self.notes.save(note)

    async def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> ReadResult:
        """Whole batches from `offset` within max_bytes; with min_one the first batch even when it
        alone exceeds max_bytes (Kafka's rule: only the response's first batch may cross a limit)."""
        with storage_errors():
            entries = _within(await self.log.read(offset, max_bytes), max_bytes, min_one)
        records = b"".join(entry.payload for entry in entries)
        self.meter.dispatched(len(records))
        self.bytes_out += len(records)
        if self.meter.tracer is not None and entries:
            self.meter.tracer.read(self.topic, self.index, offset, entries[-1].next_offset - 1)
        return ReadResult(records, self.log.high_watermark, self.log.log_start_offset)

    async def read_holding(self, offsets: list[int]) -> list[bytes | memoryview]:
        """The batches holding `offsets` (sorted), each once and in log order; offsets outside the
        log are skipped. For readers that jump around a log, such as held messages coming due."""
        with storage_errors():
            return [entry.payload for entry in await self.log.read_holding(offsets)]

    async def read_committed(self, offset: int, max_bytes: int, *, min_one: bool = True) -> CommittedRead:
        """Whole batches from `offset` below the last stable offset (none when it is not below it),
        within max_bytes as read() counts them."""
        stable = self.last_stable_offset
        if offset > self.high_watermark or offset < self.log_start_offset:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self.log_start_offset}, {self.high_watermark}]")
        entries = []
        if offset < stable:
            with storage_errors():
                entries = _within([entry for entry in await self.log.read(offset, max_bytes)
                                   if entry.base_offset < stable], max_bytes, min_one)
        end = entries[-1].next_offset if entries else offset
        self.aborted.trim_before(self.log.log_start_offset)
        records = b"".join(entry.payload for entry in entries)
        self.meter.dispatched(len(records))
        self.bytes_out += len(records)
        if self.meter.tracer is not None and entries:
            self.meter.tracer.read(self.topic, self.index, offset, entries[-1].next_offset - 1)
        return CommittedRead(records, self.log.high_watermark, stable,
                             self.log.log_start_offset, self.aborted.overlapping(offset, end) if entries else [])

    def watch(self, waiter: asyncio.Future) -> None:
        """Resolve `waiter` (if not done) at the next durable append or transaction marker: one
        future can watch many partitions, without a task per partition (a Fetch's wait)."""
        self._watchers.append(waiter)

    def unwatch(self, waiter: asyncio.Future) -> None:
        try:
            self._watchers.remove(waiter)
        except ValueError:
            pass

    def wake_watchers(self, _appended: object = None) -> None:
        watchers, self._watchers = self._watchers, []
        for waiter in watchers:
            if not waiter.done():
                waiter.set_result(True)

    async def wait_for_data(self, offset: int, timeout_s: float, *, committed: bool = False) -> bool:
        """Wait until there is data at `offset` (for read_committed: below the last stable offset)."""
        if not committed or self.high_watermark <= offset:
            return await self.log.wait_for_append(offset, timeout_s)
        if self.last_stable_offset > offset:
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._stable_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except asyncio.TimeoutError:
            return False
        finally:
            if waiter in self._stable_waiters:
                self._stable_waiters.remove(waiter)
        return self.last_stable_offset > offset

    async def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= timestamp_ms, or None."""
        with storage_errors():
            entry = await self.log.find_by_timestamp(timestamp_ms)
        while entry is not None:
            _, records = decode_batch(bytes(entry.payload), max_decompressed_bytes=MAX_DECODE_BYTES)
            for record in records:
                if record.timestamp_ms >= timestamp_ms and record.offset >= self.log_start_offset:
                    return record.offset, record.timestamp_ms
            # The entry's max timestamp was reached by a record below the log start; look further.
            with storage_errors():
                following = await self.log.read(entry.next_offset, 1) if entry.next_offset < self.high_watermark else []
            entry = following[0] if following else None
        return None

    async def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the highest timestamp, or None when the
        log holds no record (Kafka's ListOffsets MAX_TIMESTAMP, KIP-734)."""
        if self._max_timestamp is None:
            self._max_timestamp = await self._search_max_timestamp()
        if self._max_timestamp is None:
            return None
        return await self.offset_for_timestamp(self._max_timestamp)

    async def _search_max_timestamp(self) -> int | None:
        """The highest stored timestamp: the largest T that some entry's timestamp reaches, found by
        galloping then bisecting over T with the log's time lookup (about 45 lookups)."""
        async def reached(timestamp_ms: int) -> bool:
            with storage_errors():
                return await self.log.find_by_timestamp(timestamp_ms) is not None
        low = -1   # "no timestamp" sorts lowest
        if not await reached(low):
            return None
        step = 1 << 40
        high = max(low, self._clock.now_ms())
        while await reached(high):          # producers may write timestamps in the future
            low, high = high, high + step
            step *= 2
        while high - low > 1:               # reached(low) and not reached(high)
            middle = (low + high) // 2
            if await reached(middle):
                low = middle
            else:
                high = middle
        return low

    async def delete_records_before(self, offset: int) -> int:
        """Kafka DeleteRecords: -1 means the high watermark. Returns the new log start offset."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRange(f"offset {offset} is outside [0, {self.high_watermark}]")
        self._max_timestamp = None   # the record holding it may go: look again when asked
        with storage_errors():
            return await self.log.delete_before(target)

    async def enforce_retention(self, now_ms: int) -> int:
        self._max_timestamp = None   # the record holding it may go: look again when asked
        with storage_errors():
            return await self.log.trim(retention_policy(self.config), now_ms)

    async def close(self) -> None:
        if self._learning is not None:
            self._learning.cancel()
        await self.log.close()


def _within(entries: list, max_bytes: int, min_one: bool) -> list:
    """The leading entries whose bytes fit in max_bytes; the first one regardless when min_one.
    The log's read stops after the entry that crosses its limit, so the crossing one is dropped here."""
    total = 0
    for count, entry in enumerate(entries):
        total += len(entry.payload)
        if total > max_bytes and (count or not min_one):
            return entries[:count]
    return entries
