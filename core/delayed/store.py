"""One namespace's held (delayed) messages: two system topics, a time index and a delivery task.

    __delayed_messages   one partition: the held messages (held.py), and the store's release and
                         cancel records, in the order they happened. It is the truth; the rest is
                         derived from it. Trimmed below the smallest pending offset (whole ledgers).
    __delayed_index      one partition: runs of sorted keys cut off from memory and checkpoints
                         (index_format.py). Trimmed below the oldest run or checkpoint still listed.
    /delayed/<tenant>/<namespace>   {"checkpoint": offset of the latest checkpoint, or absent}
    memory               a DelayIndex (index.py): at most `limit` keys, the rest in runs

Holding: messages held in the same event-loop turn are appended as RecordBatches of up to
MAX_BATCH_RECORDS; the caller's future resolves once its batch is durable, and only then does the
message enter the index.

Releasing exactly once: a pass pops the due keys (ascending), reads the messages, asks each target's
deliverer where they go (destinations: topic partitions), and then
  1. appends a release record to __delayed_messages (durably) naming the offsets, the pass's
     frontier pair, and per destination its high watermark now and the offsets bound for it;
  2. appends each message to its destinations with the header delayed.id = its offset;
  3. once all of those are durable, the next release record (or checkpoint) says so ("confirmed").
A crash after 1 and before 3 leaves release records that are not confirmed. At start, for each of
them the store reads every destination from the recorded high watermark to its end and collects
the delayed.id headers there: a message found is not sent again, one missing is sent now. A crash
before 1 completes releases nothing (the keys are still pending, as the frontier says). So no
message is released twice and none is lost; what a restart reads is bounded by what the
destinations received since the last unconfirmed release record (the checkpoint every
CHECKPOINT_INTERVAL_MS confirms them).

Starting: the latest checkpoint gives the runs and the frontier; __delayed_messages is replayed from
its `covers_to` (holds since, releases, cancels). A checkpoint that does not decode, or a run that
does not, makes the store rebuild everything from __delayed_messages (log start to end), logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from typing import Protocol

from core.cluster.bundles import partition_bundle
from core.delayed.held import (
    CANCEL,
    RELEASE,
    TARGET,
    TXN_END,
    Target,
    cancel_record,
    cancelled_key,
    committed_copy,
    held_record,
    kind_of,
    release_record,
    released,
    target_of,
    txn_end_record,
    txn_ended,
    txn_of,
)
from core.delayed.index import DelayIndex
from core.delayed.index_format import (
    Checkpoint,
    CorruptIndex,
    Destination,
    Release,
    decode_checkpoint,
    decode_release,
    decode_run,
    encode_checkpoint,
    encode_release,
    encode_run,
)
from core.delayed.remote import delayed_ids, partition_end
from core.errors import StorageUnavailable, TopicExists, UnknownTopic
from core.names import TopicName
from core.partition import Partition, storage_errors
from core.records.batch import batch_views, split_batches
from core.records.builder import Record, build_batch
from core.records.decoder import DecodedRecord, RecordTail, decode_batch, decode_tail, record_tails_at

log = logging.getLogger("gateway.core.delayed")

SYSTEM_TOPIC = "__delayed_messages"
INDEX_TOPIC = "__delayed_index"
TOPIC_CONFIGS = {
    "retention.ms": "-1",                 # kept until released: trimmed by the store itself
    "retention.bytes": "-1",
    "max.message.bytes": str(256 << 20),
    "segment.bytes": str(64 << 20),
}
MAX_IN_MEMORY = 100_000     # keys in memory per namespace (the `delayed.memory.keys` setting)
RUN_SIZE = 4_096            # keys per run
MAX_BATCH_RECORDS = 16      # held batches stay small: a due message is read back with its batch
MAX_BATCH_BYTES = 256 << 10
MAX_BACKLOG_BYTES = 64 << 20
MAX_PASS = 2_000            # messages released per pass (bounds the bodies in memory)
SCAN_BYTES = 4 << 20
MAX_SLEEP_S = 1.0           # wake up now and then: the wall clock may have jumped
RETRY_MS = 1_000
CHECKPOINT_INTERVAL_MS = 1_000
TRIM_INTERVAL_MS = 60_000
_RECORD_OVERHEAD = 96


class Deliverer(Protocol):
    """How the messages of one kind of target reach their destinations (topics of the namespace)."""

    async def route(self, tenant: str, namespace: str, name: str, record: Record) -> list[tuple[str, int]]:
        """The (topic, partition) pairs the message goes to now; [] drops it."""

    def publish(self, tenant: str, namespace: str, topic: str, partition: int,
                records: list[Record]) -> list[Awaitable]:
        """Append `records` there; awaitables that resolve once durable. Raises UnknownTopic if the
        destination is gone (the messages are dropped)."""


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


class DelayedStore:
    """Owned by the event loop. `deliverer_for(kind)` waits until that kind has a deliverer."""

    def __init__(self, core, tenant: str, namespace: str, deliverer_for: Callable[[str], Awaitable[Deliverer]],
                 *, limit: int = MAX_IN_MEMORY, run_size: int = RUN_SIZE) -> None:
        self._core = core
        self.tenant = tenant
        self.namespace = namespace
        self.topic = TopicName(tenant, namespace, SYSTEM_TOPIC)
        # Written as the owner of the schedule (the bundle of the system topic's partition).
        self._metadata = core.owner_metadata(partition_bundle(tenant, namespace, SYSTEM_TOPIC, 0))
        self.index_topic = TopicName(tenant, namespace, INDEX_TOPIC)
        self.index = DelayIndex(limit, run_size, core.clock.now_ms)
        self.counts: Counter[str] = Counter()       # pending messages per target (Target.encode())
        self._deliverer_for = deliverer_for
        self._opened: asyncio.Future = asyncio.get_running_loop().create_future()
        self._opened.add_done_callback(_retrieve)
        self._task: asyncio.Task | None = None
        self._wakeup = asyncio.Event()
        self._last_trim_ms = 0
        self._last_checkpoint_ms = 0
        self._changed = False            # anything to checkpoint
        self._covers_to = 0               # of the latest checkpoint
        self._next_seq = 1
        self._unconfirmed: list[Release] = []   # released, not yet known to be at every destination
        self._last_recovery_ms = 0
        self._spills: set[asyncio.Task] = set()
        self._open_txns: dict[int, list[int]] = {}     # producer id -> offsets of its held messages
        self._cancelled_in_txns: set[int] = set()       # of those offsets, the ones cancelled
        self._txn_ends = asyncio.Lock()                 # a transaction's end, or a cancel of one of its messages
        # holding
        self._records: list[Record] = []
        self._holds: list[tuple[int, str, int | None]] = []
        self._pending_bytes = 0
        self._future: asyncio.Future | None = None
        self._sealed: list[tuple[list[Record], list[tuple[int, str, int | None]], int, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self._backlog = 0
        self._writable = asyncio.Event()
        self._writable.set()
        self.failed = False
        self.delivered = 0
        self.rebuilt = False              # the latest start rebuilt the index from the messages

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"delayed-{self.tenant}/{self.namespace}")

    async def wait_loaded(self) -> None:
        """Until the store is open (holding works from then on); raises if opening failed."""
        await asyncio.shield(self._opened)

    # --- holding ------------------------------------------------------------------------------

    def hold(self, record: Record, due_ms: int, target: Target, txn: int | None = None, *,
             with_id: bool = True) -> asyncio.Future:
        """Store `record` until `due_ms`; the future resolves to its id (its offset in the system
        topic) once it is durable. `txn`: the producer id of its (open) transaction. Without
        `with_id`, the future is the one of its whole batch (shared by the messages held with it)."""
        held = held_record(record, due_ms, target, txn)
        size = len(held.value or b"") + len(held.key or b"") + _RECORD_OVERHEAD
        if self._records and (self._pending_bytes + size > MAX_BATCH_BYTES or len(self._records) >= MAX_BATCH_RECORDS):
            self._seal()
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            self._future.add_done_callback(_retrieve)
        index = len(self._records)
        self._records.append(held)
        self._holds.append((due_ms, target.text, txn))
        self._pending_bytes += size
        self._add_backlog(size)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="delayed-hold")
        return _offset_of(self._future, index) if with_id else self._future

    @property
    def writable(self) -> bool:
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        """Until less than MAX_BACKLOG_BYTES is waiting to be stored."""
        await self._writable.wait()

    @property
    def intake(self) -> DelayedStore:
        """What a publishing connection waits on for back-pressure, as on a queue's intake."""
        return self

    def _seal(self) -> None:
        if self._records:
            self._sealed.append((self._records, self._holds, self._pending_bytes, self._future))
        self._records, self._holds, self._pending_bytes, self._future = [], [], 0, None

    async def _flush(self) -> None:
        batches: list = []
        try:
            await asyncio.shield(self._opened)
            while True:
                self._seal()
                batches, self._sealed = self._sealed, []
                if not batches:
                    return
                partition = await self._core.partition(self.topic, 0)
                for records, holds, size, future in batches:
                    self._append(partition, records, holds, size, future)
                batches = []
        except Exception as exc:
            self._seal()
            batches, self._sealed = batches + self._sealed, []   # those taken before the failure too
            for _, _, size, future in batches:
                self._fail(future, size, exc)
        finally:
            self._flusher = None
            if self._records:
                self._flusher = asyncio.create_task(self._flush(), name="delayed-hold")

    def _append(self, partition: Partition, records: list[Record], holds: list[tuple[int, str, int | None]], size: int,
                future: asyncio.Future) -> None:
        try:
            pending = asyncio.ensure_future(partition.start_append(build_batch(records)))
        except Exception as exc:
            self._fail(future, size, exc)
            return
        pending.add_done_callback(lambda done: self._appended(done, holds, size, future))

    def _appended(self, done: asyncio.Future, holds: list[tuple[int, str, int | None]], size: int, future: asyncio.Future) -> None:
        if done.cancelled() or done.exception() is not None:
            self._fail(future, size, done.exception() if not done.cancelled() else asyncio.CancelledError())
            return
        base_offset = done.result()
        for index, (due_ms, target, txn) in enumerate(holds):
            if txn is not None:
                self._open_txns.setdefault(txn, []).append(base_offset + index)
                continue
            self.index.add(due_ms, base_offset + index)
            self.counts[target] += 1
        self.index.note_indexed(base_offset + len(holds))
        self._spill()                 # memory stays bounded however fast messages are held
        self._changed = True
        self._wakeup.set()
        self._add_backlog(-size)
        if not future.done():
            future.set_result(base_offset)

    def _fail(self, future: asyncio.Future | None, size: int, exc: BaseException) -> None:
        self._add_backlog(-size)
        log.warning("holding delayed messages in %s failed: %s", self.topic, exc)
        if future is not None and not future.done():
            future.set_exception(exc)

    def _add_backlog(self, delta: int) -> None:
        self._backlog += delta
        if self._backlog > MAX_BACKLOG_BYTES:
            self._writable.clear()
        else:
            self._writable.set()

    # --- cancelling and counting --------------------------------------------------------------

    def pending(self) -> dict[str, int]:
        """Pending messages per target (Target.encode() as text)."""
        return {target: count for target, count in self.counts.items() if count > 0}

    async def cancel(self, offset: int, accept: Callable[[Target], bool] | None = None) -> bool:
        """Cancel the held message with this id; False if there is none pending (released, cancelled,
        never held, its transaction ended, or its target not one `accept` accepts). A message of an
        open transaction is cancelled too: its transaction's commit leaves it out. Durable when it
        returns True."""
        await self.wait_loaded()
        partition = await self._core.partition(self.topic, 0)
        if not partition.log_start_offset <= offset < self.index.indexed_to:
            return False
        found = (await self._read(partition, [offset])).get(offset)
        target = target_of(found) if found is not None else None
        if target is None or (accept is not None and not accept(target)):
            return False
        due = found.timestamp_ms
        record = cancel_record(self._core.clock.now_ms(), offset, due, target)
        producer_id = txn_of(found)
        if producer_id is not None:
            async with self._txn_ends:          # not while its transaction ends
                if offset not in self._open_txns.get(producer_id, ()) or offset in self._cancelled_in_txns:
                    return False
                await partition.append(build_batch([record]))
                self._cancelled_in_txns.add(offset)
            return True
        if self.index.is_released((due, offset)) or offset in self.index.cancelled:
            return False
        await partition.append(build_batch([record]))
        if not self.index.cancel(due, offset):     # released meanwhile: the cancel record is moot
            return False
        self.counts[target.text] -= 1
        self._changed = True
        return True

    # --- transactions ----------------------------------------------------------------------------

    async def end_transaction(self, producer_id: int, commit: bool) -> None:
        """Hold the messages of `producer_id`'s open transaction for good (commit: copies without
        the transaction, in one batch with the outcome, so a crash keeps both or neither) or drop
        them (abort). Nothing to do if it held none here (or its end was recorded already)."""
        async with self._txn_ends:
            await self._end_transaction(producer_id, commit)

    async def _end_transaction(self, producer_id: int, commit: bool) -> None:
        offsets = self._open_txns.pop(producer_id, None)    # taken now: the markers of several
        if not offsets:                                      # partitions end it concurrently
            return
        try:
            partition = await self._core.partition(self.topic, 0)
            records = []
            if commit:
                kept = [offset for offset in offsets if offset not in self._cancelled_in_txns]
                found = await self._read(partition, sorted(kept))
                records = [committed_copy(found[offset]) for offset in kept if offset in found]
            outcome = txn_end_record(self._core.clock.now_ms(), producer_id, commit)
            with storage_errors():
                base_offset = await partition.append(build_batch([*records, outcome]))
        except BaseException:      # still open: the coordinator ends it again
            self._open_txns[producer_id] = offsets + self._open_txns.get(producer_id, [])
            raise
        self._cancelled_in_txns.difference_update(offsets)
        for index, record in enumerate(records):
            self.index.add(record.timestamp_ms, base_offset + index)
            self.counts[Target.decode(dict(record.headers)[TARGET]).text] += 1
        self.index.note_indexed(base_offset + len(records) + 1)
        self._changed = True
        self._wakeup.set()

    # --- the delivery task --------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._open()
        except Exception as exc:
            log.warning("opening the delayed messages of %s/%s failed: %s", self.tenant, self.namespace, exc)
            self.failed = True
            if not self._opened.done():
                self._opened.set_exception(exc)
            return
        self._opened.set_result(None)
        while True:
            try:
                await self._pass()
            except Exception:      # never let one bad pass stop this namespace's deliveries
                log.exception("delivering the delayed messages of %s failed", self.topic)
                await self._core.clock.sleep(RETRY_MS / 1000)

    @property
    def _confirmed(self) -> int:
        """Every release record with a smaller seq reached all its destinations."""
        return min(release.seq for release in self._unconfirmed) if self._unconfirmed else self._next_seq

    async def _pass(self) -> None:
        self._wakeup.clear()
        now_ms = self._core.clock.now_ms()
        if self._unconfirmed and now_ms - self._last_recovery_ms >= RETRY_MS:
            self._last_recovery_ms = now_ms
            await self._recover()
            return
        if self._changed and not self._unconfirmed and now_ms - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS:
            await self._checkpoint(now_ms)
            return
        self._spill()
        bucket = self.index.bucket_to_dissolve(now_ms)
        if bucket is not None:
            await self._dissolve(bucket)
            return
        if self.index.waiting_for_spill():
            await self._sleep(now_ms + 50)      # woken when the run is stored
            return
        due = self.index.pop_due(now_ms, MAX_PASS)
        if due:
            await self._release(due)
            return
        wake_at = [at for at in (self.index.next_due(),
                                 self._last_checkpoint_ms + CHECKPOINT_INTERVAL_MS if self._changed else None)
                   if at is not None]
        await self._sleep(min(wake_at) if wake_at else None)

    async def _open(self) -> None:
        metadata = self._metadata
        node = f"/delayed/{self.tenant}/{self.namespace}"
        if await metadata.get(f"/delayed/{self.tenant}") is None:
            await metadata.put(f"/delayed/{self.tenant}", b"{}")
        found = await metadata.get(node)
        if found is None:
            await metadata.put(node, b"{}")
        raw = found.value if found is not None else b"{}"
        for topic in (self.topic, self.index_topic):
            try:
                await self._core.create_topic(topic, 1, dict(TOPIC_CONFIGS))
            except TopicExists:
                pass
        partition = await self._core.partition(self.topic, 0)
        checkpoint_at = json.loads(raw).get("checkpoint")
        checkpoint = None
        if checkpoint_at is not None:
            try:
                checkpoint = decode_checkpoint(await self._index_value(checkpoint_at))
            except (CorruptIndex, LookupError) as exc:
                log.warning("the delayed-delivery checkpoint of %s is unusable (%s): rebuilding from %s",
                            self.index_topic, exc, self.topic)
        if checkpoint is not None:
            self._restore(checkpoint)
        else:
            self.rebuilt = checkpoint_at is not None
        start = checkpoint.replay_from if checkpoint is not None else partition.log_start_offset
        self._unconfirmed = await self._replay(partition, max(start, partition.log_start_offset))
        await self._recover()
        self._changed = True
        await self._checkpoint(self._core.clock.now_ms())

    def _restore(self, checkpoint: Checkpoint) -> None:
        self.index.restore_runs(checkpoint.runs)
        for pair in checkpoint.frontier:
            self.index.note_release(tuple(pair))
        self.index.cancelled = {offset: (due, offset) for offset, due in checkpoint.cancelled}
        self.counts = Counter(checkpoint.counts)
        self._next_seq = checkpoint.next_seq
        self._covers_to = checkpoint.covers_to
        self.index.note_indexed(checkpoint.covers_to)

    async def _index_value(self, offset: int) -> bytes:
        partition = await self._core.partition(self.index_topic, 0)
        found = (await self._read(partition, [offset])).get(offset)
        if found is None or found.value is None:
            raise LookupError(f"nothing at offset {offset} of {self.index_topic}")
        return found.value

    async def _replay(self, partition: Partition, start: int) -> list[Release]:
        """Holds, releases and cancels from `start` to the end; the release records not confirmed."""
        releases: list[Release] = []
        confirmed = self._next_seq
        offset, end = start, partition.high_watermark
        while offset < end:
            result = await partition.read(offset, SCAN_BYTES)
            following = offset
            for batch in split_batches(result.records) if result.records else ():
                _, records = decode_batch(batch)
                for record in records:
                    following = max(following, record.offset + 1)
                    if record.offset >= offset:
                        confirmed = max(confirmed, self._replay_record(record, releases))
                self.index.note_indexed(following)
                self._spill()
                await self._wait_spills()
            if following == offset:
                break
            offset = following
        self.index.note_indexed(end)
        for target, count in list(self.counts.items()):
            if count < 0:         # releases of messages held before what a rebuild read
                self.counts[target] = 0
        return [release for release in releases if release.seq >= confirmed]

    def _replay_record(self, record: DecodedRecord, releases: list[Release]) -> int:
        """Applies one record of the system topic; the `confirmed` a release record carries (else 0)."""
        kind = kind_of(record)
        if kind == TARGET:
            txn = txn_of(record)
            if txn is not None:
                self._open_txns.setdefault(txn, []).append(record.offset)
            elif record.offset >= self._covers_to and self.index.add(record.timestamp_ms, record.offset):
                self.counts[target_of(record).text] += 1
        elif kind == RELEASE and record.offset >= self._covers_to:   # earlier ones are in the checkpoint
            try:
                release = decode_release(record.value or b"")
            except CorruptIndex as exc:
                log.warning("skipping a release record of %s at %d: %s", self.topic, record.offset, exc)
                return
            for offset in release.offsets:
                self.index.forget(offset)
            self.index.note_release(release.pair)
            self.counts.subtract(release.counts)
            self._next_seq = max(self._next_seq, release.seq + 1)
            releases.append(release)
            return release.confirmed
        elif kind == TXN_END:
            found = txn_ended(record.value)
            if found is not None:
                self._cancelled_in_txns.difference_update(self._open_txns.pop(found[0], ()))
        elif kind == CANCEL:
            found = cancelled_key(record.value)
            if found is not None and any(found[0] in offsets for offsets in self._open_txns.values()):
                self._cancelled_in_txns.add(found[0])     # of a transaction still open: its commit leaves it out
            elif found is not None and self.index.cancel(found[1], found[0]):
                self.counts[found[2].text] -= 1
        return 0

    async def _recover(self) -> None:
        """Send what the unconfirmed release records did not get to their destinations (at start,
        and after a failed append); those that fail again stay unconfirmed."""
        if not self._unconfirmed:
            return
        system = await self._core.partition(self.topic, 0)
        still: list[Release] = []
        resent = 0
        for release in self._unconfirmed:
            try:
                for dest in release.destinations:
                    resent += await self._complete(system, dest)
            except Exception as exc:
                log.warning("completing release %d of %s failed: %s", release.seq, self.topic, exc)
                still.append(release)
        log.info("delayed messages of %s: %d unconfirmed release record(s) checked, %d message(s) sent again",
                 self.topic, len(self._unconfirmed) - len(still), resent)
        self._unconfirmed = still
        self._changed = True

    async def _complete(self, system: Partition, dest: Destination) -> int:
        """Append to `dest` the messages of a release that are not there yet; how many."""
        kind, _, topic = dest.topic.partition(":")
        try:
            arrived = await delayed_ids(self._core, TopicName(self.tenant, self.namespace, topic), dest.partition,
                                        dest.high_watermark)
            missing = sorted(set(dest.offsets) - arrived)
            if not missing:
                return 0
            found = await self._read_tails(system, missing)
            now_ms = self._core.clock.now_ms()
            records = [released(found[offset], now_ms)[1] for offset in missing if offset in found]
            deliverer = await self._deliverer_for(kind)
            for waiter in deliverer.publish(self.tenant, self.namespace, topic, dest.partition, records):
                await waiter
            return len(records)
        except UnknownTopic:         # the destination is gone: nothing to complete
            return 0

    async def _sleep(self, wake_at_ms: int | None) -> None:
        """Until the clock reaches `wake_at_ms` (None: no time limit) or a message is stored."""
        waiters = {asyncio.ensure_future(self._wakeup.wait())}
        if wake_at_ms is not None:
            waiters.add(asyncio.ensure_future(self._sleep_until(wake_at_ms)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _sleep_until(self, wake_at_ms: int) -> None:
        clock = self._core.clock
        delay_ms = wake_at_ms - clock.now_ms()     # read when the sleep starts, not when it was asked for
        if delay_ms > 0:
            await clock.sleep(min(delay_ms / 1000, MAX_SLEEP_S))

    # --- runs -----------------------------------------------------------------------------------

    def _spill(self, *, everything: bool = False) -> None:
        """Write the runs the index cut off (in the background; the index waits for them);
        `everything`: every bucket's buffer, over the memory bound or not."""
        for spill_id, keys in self.index.flush_buffers() if everything else self.index.overflow():
            task = asyncio.ensure_future(self._write_spill(spill_id, keys))
            self._spills.add(task)
            task.add_done_callback(self._spills.discard)

    async def _write_spill(self, spill_id: int, keys) -> None:
        try:
            partition = await self._core.partition(self.index_topic, 0)
            offset = await partition.append(build_batch([Record(self._core.clock.now_ms(), b"run", encode_run(keys))]))
        except Exception as exc:
            log.warning("writing a run of delayed keys to %s failed: %s", self.index_topic, exc)
            self.index.spill_failed(spill_id)
        else:
            self.index.stored(spill_id, offset)
        self._changed = True
        self._wakeup.set()

    async def _wait_spills(self) -> None:
        while self._spills:
            await asyncio.wait(set(self._spills))

    async def _dissolve(self, bucket) -> None:
        """Read the runs of the earliest bucket into memory (or into narrower buckets)."""
        runs = self.index.begin_dissolve(bucket)
        try:
            while runs:
                run_id, info = runs[0]
                try:
                    keys = decode_run(await self._index_value(info.index_offset))
                except (CorruptIndex, LookupError) as exc:
                    # The messages are still in the system topic: find this run's keys there.
                    log.warning("a run of %s is unusable (%s): reading its keys from %s",
                                self.index_topic, exc, self.topic)
                    keys = await self._keys_between(info.first, info.last)
                self.index.load(run_id, info, keys)
                runs.pop(0)
                self._spill()
        finally:
            if runs:        # reading failed: what is left is a bucket again
                self.index.restore_runs([info for _, info in runs])
            self.index.end_dissolve()
        self._changed = True

    async def _keys_between(self, first, last) -> list:
        partition = await self._core.partition(self.topic, 0)
        keys = []
        offset, end = max(partition.log_start_offset, 0), self.index.indexed_to
        while offset < end:
            result = await partition.read(offset, SCAN_BYTES)
            following = offset
            for batch in split_batches(result.records) if result.records else ():
                for record in decode_batch(batch)[1]:
                    following = max(following, record.offset + 1)
                    key = (record.timestamp_ms, record.offset)
                    if first <= key <= last and kind_of(record) == TARGET:
                        keys.append(key)
            if following == offset:
                break
            offset = following
        return keys

    # --- releasing ------------------------------------------------------------------------------

    async def _release(self, due: list) -> None:
        now_ms = self._core.clock.now_ms()
        pair = self.index.pair_for(due[-1])
        offsets = [offset for _, offset in due]
        try:
            system = await self._core.partition(self.topic, 0)
            found = await self._read_tails(system, sorted(offsets))
            plan, counts = await self._plan(found, offsets, now_ms)
            destinations = []
            for (kind, topic, index), items in plan.items():
                try:
                    high_watermark = await partition_end(self._core, TopicName(self.tenant, self.namespace, topic),
                                                         index)
                except UnknownTopic:
                    continue
                destinations.append((kind, topic, index, items, high_watermark))
            release = Release(self._next_seq, self._confirmed, pair, offsets, dict(counts),
                              [Destination(f"{kind}:{topic}", index, high_watermark, [offset for offset, _ in items])
                               for kind, topic, index, items, high_watermark in destinations])
            with storage_errors():
                await system.append(build_batch([release_record(now_ms, encode_release(release))]))
        except Exception as exc:
            log.warning("releasing due delayed messages of %s failed: %s", self.topic, exc)
            for key in due:              # nothing was released: they are pending again
                self.index.add(*key)
            await self._core.clock.sleep(RETRY_MS / 1000)
            return
        # Durable: these are released from here on, whatever happens to the appends below.
        self._next_seq += 1
        self.index.note_release(pair)
        self.counts.subtract(counts)
        self._changed = True
        # Unconfirmed until its appends are durable: a close that cuts them short leaves it to the
        # next start (no checkpoint confirms it meanwhile).
        self._unconfirmed.append(release)
        ok = True
        for kind, topic, index, items, _ in destinations:
            try:
                deliverer = await self._deliverer_for(kind)
                for waiter in deliverer.publish(self.tenant, self.namespace, topic, index,
                                                [record for _, record in items]):
                    await waiter
            except UnknownTopic:
                continue
            except Exception as exc:
                # Left unconfirmed: the next start checks what arrived and sends the rest.
                log.warning("appending released delayed messages of %s to %s failed: %s", self.topic, topic, exc)
                ok = False
        if ok:
            self._unconfirmed.remove(release)
        else:
            self._last_recovery_ms = now_ms       # tried again after RETRY_MS
        self.delivered += len(offsets)

    async def _plan(self, found: dict[int, RecordTail], offsets: list[int], now_ms: int):
        """The messages by destination (kind, topic, partition) -> [(offset, record)], and the
        pending count they take off each target."""
        plan: dict[tuple[str, str, int], list] = defaultdict(list)
        counts: Counter[str] = Counter()
        targets: dict[bytes, tuple[Target, Deliverer]] = {}
        for offset in offsets:
            record = found.get(offset)
            item = released(record, now_ms) if record is not None else None
            if item is None:          # trimmed away, or not a held message: nothing to deliver
                continue
            encoded, message = item
            if encoded not in targets:
                target = Target.decode(encoded)
                targets[encoded] = target, await self._deliverer_for(target.kind)
            target, deliverer = targets[encoded]
            counts[target.text] += 1
            # A failure here fails the pass (nothing released, tried again); a target that is gone
            # routes nowhere.
            for topic, index in await deliverer.route(self.tenant, self.namespace, target.name, message):
                plan[(target.kind, topic, index)].append((offset, message))
        return plan, counts

    async def _read(self, partition: Partition, offsets: list[int]) -> dict[int, DecodedRecord]:
        """The records at `offsets` (sorted), read in one go."""
        return {offset: DecodedRecord(offset, tail.timestamp_ms, *decode_tail(tail.tail))
                for offset, tail in (await self._read_tails(partition, offsets)).items()}

    async def _read_tails(self, partition: Partition, offsets: list[int]) -> dict[int, RecordTail]:
        """The records at `offsets` (sorted), read in one go and decoded only up to their tails."""
        found: dict[int, RecordTail] = {}
        for payload in await partition.read_holding(offsets):
            for batch in batch_views(payload):
                for record in record_tails_at(batch, offsets):    # built by build_batch
                    found[record.offset] = record
        return found

    # --- checkpoints ----------------------------------------------------------------------------

    async def _checkpoint(self, now_ms: int) -> None:
        """Runs for what is only in memory, then a checkpoint listing every run still needed;
        now and then both topics are trimmed below what is still needed. Never while a release is
        unconfirmed: a restart must replay its record to complete it."""
        if self._unconfirmed:
            return
        self._last_checkpoint_ms = now_ms
        try:
            self._spill(everything=True)
            await self._wait_spills()
            covers_to = self.index.indexed_to
            # The held messages of open transactions are replayed at start.
            replay_from = min([covers_to, *(offsets[0] for offsets in self._open_txns.values())])
            index_partition = await self._core.partition(self.index_topic, 0)
            heap = self.index.heap_keys()
            if heap is not None:
                spill_id, keys = heap
                try:
                    offset = await index_partition.append(build_batch([Record(now_ms, b"run", encode_run(keys))]))
                except BaseException:
                    self.index.heap_failed(spill_id)
                    raise
                self.index.heap_stored(spill_id, offset)
            checkpoint = Checkpoint(covers_to, replay_from, self.index.listed_runs(), list(self.index.frontier),
                                    [(offset, key[0]) for offset, key in self.index.cancelled.items()],
                                    {t: c for t, c in self.counts.items() if c > 0}, self._next_seq)
            at = await index_partition.append(build_batch([Record(now_ms, b"checkpoint", encode_checkpoint(checkpoint))]))
            with storage_errors():
                await self._metadata.put(f"/delayed/{self.tenant}/{self.namespace}",
                                         json.dumps({"checkpoint": at}).encode())
            self._covers_to = covers_to
            self._changed = False
            if now_ms - self._last_trim_ms >= TRIM_INTERVAL_MS:
                self._last_trim_ms = now_ms
                await self._trim(checkpoint, at)
        except Exception as exc:     # the next pass tries again
            log.warning("checkpointing the delayed messages of %s failed: %s", self.topic, exc)

    async def _trim(self, checkpoint: Checkpoint, at: int) -> None:
        system = await self._core.partition(self.topic, 0)
        smallest = self.index.min_offset()
        keep = min(checkpoint.replay_from, smallest if smallest is not None else checkpoint.replay_from)
        if keep > system.log_start_offset:
            await system.delete_records_before(keep)
        index_partition = await self._core.partition(self.index_topic, 0)
        keep_index = min([run.index_offset for run in checkpoint.runs] + [at])
        if keep_index > index_partition.log_start_offset:
            await index_partition.delete_records_before(keep_index)

    # --- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception as exc:
                log.warning("the delayed delivery of %s failed: %s", self.topic, exc)
        if not self._opened.done():     # closed while opening: holds waiting for it fail
            self._opened.set_exception(StorageUnavailable(f"delayed messages of {self.topic} closed"))
        elif not self.failed and self._changed:
            await self._checkpoint(self._core.clock.now_ms())
        for task in list(self._spills):
            task.cancel()


def _offset_of(batch_future: asyncio.Future, index: int) -> asyncio.Future:
    """A future for one message of a held batch: its offset once the batch is durable."""
    future = asyncio.get_running_loop().create_future()
    future.add_done_callback(_retrieve)

    def done(batch: asyncio.Future) -> None:
        if future.done():
            return
        if batch.cancelled():
            future.cancel()
        elif batch.exception() is not None:
            future.set_exception(batch.exception())
        else:
            future.set_result(batch.result() + index)

    batch_future.add_done_callback(done)
    return future
