"""One namespace's held (delayed) messages: a system topic, a schedule, and a delivery task.

    topic   <tenant>/<namespace>/__delayed_messages, one partition, records as held.py describes,
            kept until delivered (trimmed below the cursor, whole ledgers at a time)
    cursor  "delivered" on partition 0: the committed offset (everything below is delivered) plus
            the offsets above it delivered one by one (messages fall due out of offset order)
    memory  a Schedule of (due, offset) pairs, no bodies, bounded (schedule.py)

Holding: messages held in the same event-loop turn are appended as RecordBatches of up to
MAX_BATCH_RECORDS (small, since they are read back one by one); the caller's future resolves once
its batch is durable, and only then does the message enter the schedule.

Delivering: the task sleeps until the earliest due time (or until a message due earlier is
stored), reads the due records back, hands each to the deliverer of its target kind (which routes
and appends it), waits until every target append is durable, then acknowledges the offsets on
the cursor; the cursor is persisted at most once per PERSIST_INTERVAL_MS (one metadata write per
second however many messages fall due), and when the store closes.

Starting: the cursor is loaded and the topic scanned from it, so delays survive a restart.
Delivery is at least once: a crash delivers again what was appended to its targets in the last
second or so before it (whatever the cursor had not persisted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from core.cursor import Cursor
from core.delayed.held import Target, held_record, released
from core.delayed.schedule import Entry, Schedule
from core.errors import StorageUnavailable, TopicExists
from core.names import TopicName
from core.partition import Partition, storage_errors
from core.records.batch import read_header, split_batches
from core.records.builder import Record, build_batch
from core.records.decoder import DecodedRecord, decode_records_at, decode_timestamps

log = logging.getLogger("gateway.core.delayed")

SYSTEM_TOPIC = "__delayed_messages"
CURSOR_NAME = "delivered"
TOPIC_CONFIGS = {
    "retention.ms": "-1",                 # kept until delivered: trimmed by the store itself
    "retention.bytes": "-1",
    "max.message.bytes": str(256 << 20),
    "segment.bytes": str(64 << 20),
}
MAX_SCHEDULED = 100_000     # (due, offset) pairs in memory per namespace; the rest wait on disk
# Held batches stay small: messages fall due out of offset order, so reading one back means
# reading its whole batch and stepping over the records before it.
MAX_BATCH_RECORDS = 64
MAX_BATCH_BYTES = 256 << 10
MAX_BACKLOG_BYTES = 64 << 20
MAX_PASS = 1_000            # messages delivered per pass (bounds the bodies in memory)
SCAN_BYTES = 4 << 20
MAX_SLEEP_S = 5.0           # wake up now and then: the wall clock may have jumped
RETRY_MS = 1_000
PERSIST_INTERVAL_MS = 1_000  # the cursor is written at most this often (a crash repeats at most this much)
TRIM_INTERVAL_MS = 60_000
_RECORD_OVERHEAD = 96

# (tenant, namespace, target name, message) -> awaitables that resolve once it is durable where it went
Deliverer = Callable[[str, str, str, Record], Awaitable[list[Awaitable]]]


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


class DelayedStore:
    """Owned by the event loop. `deliverer_for(kind)` waits until that kind has a deliverer."""

    def __init__(self, core, tenant: str, namespace: str, deliverer_for: Callable[[str], Awaitable[Deliverer]],
                 *, limit: int = MAX_SCHEDULED) -> None:
        self._core = core
        self.tenant = tenant
        self.namespace = namespace
        self.topic = TopicName(tenant, namespace, SYSTEM_TOPIC)
        self.schedule = Schedule(limit)
        self._deliverer_for = deliverer_for
        self._opened: asyncio.Future = asyncio.get_running_loop().create_future()
        self._opened.add_done_callback(_retrieve)
        self._cursor: Cursor | None = None
        self._task: asyncio.Task | None = None
        self._wakeup = asyncio.Event()
        self._last_trim_ms = 0
        self._last_persist_ms = 0
        self._unpersisted = False      # deliveries acknowledged on the cursor but not yet persisted
        # holding
        self._records: list[Record] = []
        self._dues: list[int] = []
        self._pending_bytes = 0
        self._future: asyncio.Future | None = None
        self._sealed: list[tuple[list[Record], list[int], int, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self._backlog = 0
        self._writable = asyncio.Event()
        self._writable.set()
        self.failed = False
        self.delivered = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"delayed-{self.tenant}/{self.namespace}")

    async def wait_loaded(self) -> None:
        """Until the topic is open (holding works from then on); raises if opening failed."""
        await asyncio.shield(self._opened)

    # --- holding ------------------------------------------------------------------------------

    def hold(self, record: Record, due_ms: int, target: Target) -> asyncio.Future:
        """Store `record` until `due_ms`; the future resolves (to nothing) once it is durable."""
        held = held_record(record, due_ms, target)
        size = len(held.value or b"") + len(held.key or b"") + _RECORD_OVERHEAD
        if self._records and (self._pending_bytes + size > MAX_BATCH_BYTES or len(self._records) >= MAX_BATCH_RECORDS):
            self._seal()
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            self._future.add_done_callback(_retrieve)
        self._records.append(held)
        self._dues.append(due_ms)
        self._pending_bytes += size
        self._add_backlog(size)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="delayed-hold")
        return self._future

    @property
    def writable(self) -> bool:
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        """Until less than MAX_BACKLOG_BYTES is waiting to be stored."""
        await self._writable.wait()

    @property
    def publisher(self) -> "DelayedStore":
        """What a publishing connection waits on for back-pressure, as on a queue's publisher."""
        return self

    def _seal(self) -> None:
        if self._records:
            self._sealed.append((self._records, self._dues, self._pending_bytes, self._future))
        self._records, self._dues, self._pending_bytes, self._future = [], [], 0, None

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
                for records, dues, size, future in batches:
                    self._append(partition, records, dues, size, future)
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

    def _append(self, partition: Partition, records: list[Record], dues: list[int], size: int,
                future: asyncio.Future) -> None:
        try:
            pending = asyncio.ensure_future(partition.start_append(build_batch(records)))
        except Exception as exc:
            self._fail(future, size, exc)
            return
        pending.add_done_callback(lambda done: self._appended(done, dues, size, future))

    def _appended(self, done: asyncio.Future, dues: list[int], size: int, future: asyncio.Future) -> None:
        if done.cancelled() or done.exception() is not None:
            self._fail(future, size, done.exception() if not done.cancelled() else asyncio.CancelledError())
            return
        base_offset = done.result()
        for index, due_ms in enumerate(dues):
            self.schedule.add(due_ms, base_offset + index)
        self._wakeup.set()
        self._add_backlog(-size)
        if not future.done():
            future.set_result(None)

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
        await self._scan_or_wait()
        while True:
            try:
                await self._pass()
            except Exception:      # never let one bad pass stop this namespace's deliveries
                log.exception("delivering the delayed messages of %s failed", self.topic)
                self.schedule.abort_scan()      # forget what is in memory: the next pass rescans
                await self._core.clock.sleep(RETRY_MS / 1000)

    async def _pass(self) -> None:
        self._wakeup.clear()
        now_ms = self._core.clock.now_ms()
        if self._unpersisted and now_ms - self._last_persist_ms >= PERSIST_INTERVAL_MS:
            await self._persist(now_ms)
            now_ms = self._core.clock.now_ms()
        if self.schedule.needs_rescan:
            await self._scan_or_wait()
            return
        due = self.schedule.pop_due(now_ms, MAX_PASS)
        if due:
            await self._deliver(due)
            return
        wake_at = [at for at in (self.schedule.next_due(),
                                 self._last_persist_ms + PERSIST_INTERVAL_MS if self._unpersisted else None)
                   if at is not None]
        await self._sleep(min(wake_at) if wake_at else None)

    async def _open(self) -> None:
        metadata = self._core.metadata
        for path in (f"/delayed/{self.tenant}", f"/delayed/{self.tenant}/{self.namespace}"):
            if await metadata.get(path) is None:
                await metadata.put(path, b"{}")
        try:
            await self._core.create_topic(self.topic, 1, dict(TOPIC_CONFIGS))
        except TopicExists:
            pass
        partition = await self._core.partition(self.topic, 0)
        self._cursor = await self._core.cursor(self.topic, 0, CURSOR_NAME,
                                               initial_offset=partition.log_start_offset)

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

    async def _scan_or_wait(self) -> None:
        try:
            await self._scan()
        except Exception as exc:
            log.warning("reading the delayed messages of %s failed: %s", self.topic, exc)
            await self._core.clock.sleep(RETRY_MS / 1000)

    async def _scan(self) -> None:
        """Bring the earliest pending messages into the schedule by reading the topic from the cursor."""
        cursor = self._cursor
        self.schedule.begin_scan()
        try:
            partition = await self._core.partition(self.topic, 0)
            end = partition.high_watermark
            offset = max(cursor.committed_offset, partition.log_start_offset)
            while offset < end:
                following = offset
                result = await partition.read(offset, SCAN_BYTES)
                for batch in split_batches(result.records) if result.records else ():
                    for record_offset, due_ms in decode_timestamps(batch):
                        following = max(following, record_offset + 1)
                        if offset <= record_offset < end and not cursor.is_acked(record_offset):
                            self.schedule.offer(due_ms, record_offset)
                if following == offset:
                    break
                offset = following
        except BaseException:
            self.schedule.abort_scan()
            raise
        self.schedule.finish_scan(end)

    async def _deliver(self, due: list[Entry]) -> None:
        now_ms = self._core.clock.now_ms()
        try:
            partition = await self._core.partition(self.topic, 0)
            found = await self._read(partition, sorted(offset for _, offset in due))
        except Exception as exc:
            log.warning("reading due delayed messages of %s failed: %s", self.topic, exc)
            self._retry(due, now_ms)
            await self._core.clock.sleep(RETRY_MS / 1000)
            return
        done: list[int] = []
        retry: list[Entry] = []
        appended: list[tuple[Entry, list[Awaitable]]] = []
        for entry in due:
            record = found.get(entry[1])
            item = released(record, now_ms) if record is not None else None
            if item is None:          # trimmed away, or not a held message: nothing to deliver
                done.append(entry[1])
                continue
            target, message = item
            deliver = await self._deliverer_for(target.kind)
            try:
                appended.append((entry, await deliver(self.tenant, self.namespace, target.name, message)))
            except Exception as exc:
                log.warning("delivering a delayed message of %s to %s failed: %s", self.topic, target, exc)
                retry.append(entry)
        for entry, durable in appended:
            try:
                for waiter in durable:
                    await waiter
            except Exception as exc:
                log.warning("a delayed message of %s was not stored at its target: %s", self.topic, exc)
                retry.append(entry)
            else:
                done.append(entry[1])
        for offset in done:
            self._cursor.ack(offset)
        self.delivered += len(done)
        self._unpersisted = True
        self._retry(retry, now_ms)

    def _retry(self, entries: list[Entry], now_ms: int) -> None:
        for _, offset in entries:
            self.schedule.add(now_ms + RETRY_MS, offset)

    async def _read(self, partition: Partition, offsets: list[int]) -> dict[int, DecodedRecord]:
        """The records at `offsets` (sorted): each batch holding some is read once, and only the
        wanted records of it are decoded."""
        wanted = set(offsets)
        found: dict[int, DecodedRecord] = {}
        read_to = -1       # every batch below this was read already
        for offset in offsets:
            if offset in found or offset < read_to or offset < partition.log_start_offset:
                continue
            result = await partition.read(offset, 1)      # the batch holding `offset`
            for batch in split_batches(result.records) if result.records else ():
                header = read_header(batch)
                read_to = max(read_to, header.base_offset + header.last_offset_delta + 1)
                for record in decode_records_at(batch, wanted):
                    found[record.offset] = record
            if offset >= read_to:     # nothing came back: the log ends before it
                break
        return found

    async def _persist(self, now_ms: int) -> None:
        """The cursor, durably; now and then the topic below it is dropped (whole ledgers)."""
        self._last_persist_ms = now_ms
        try:
            with storage_errors():
                await self._cursor.flush()
            self._unpersisted = False
            partition = await self._core.partition(self.topic, 0)
            committed = self._cursor.committed_offset
            if now_ms - self._last_trim_ms >= TRIM_INTERVAL_MS and committed > partition.log_start_offset:
                self._last_trim_ms = now_ms
                await partition.delete_records_before(committed)
        except Exception as exc:     # the acks stay in memory; the next pass persists them
            log.warning("persisting the delayed-delivery cursor of %s failed: %s", self.topic, exc)

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
        if self._cursor is not None:
            try:
                with storage_errors():
                    await self._cursor.flush()
            except Exception as exc:
                log.warning("persisting the delayed-delivery cursor of %s failed: %s", self.topic, exc)
