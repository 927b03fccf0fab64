"""A share partition: one partition of a topic as a share group (Kafka's KIP-932) consumes it.

Every member of the group may fetch from the partition; each record goes to one member at a time.
A fetch *acquires* records for a member under a lock (`lock_ms`); the member then accepts them
(done), releases them (available again) or rejects them (done, unprocessable). A lock that runs out
releases the record as well. Each acquisition counts a delivery; a record released after
`delivery_limit` deliveries is archived instead (Kafka's group.share.delivery.count.limit: the
share group's dead records, dropped as Kafka drops them).

The state lives on the core's cursor (core/cursor.py), named `share.<group id>` (escaped), the same
committed offset + individually acknowledged ranges that an AMQP queue's shared subscription uses:

- committed offset  = the share-partition start offset (SPSO): everything below is done;
- acknowledged ranges = records above the SPSO that are done (accepted, rejected, archived);
- delivered offset  = one past the highest record ever acquired.

Acknowledgements are persisted before the answer to them (nothing acknowledged is lost), and with
them the delivery counts of records delivered more than once (core/cursor.py: up to 4,096 at a
time). What is acquired or released lives in memory: after a restart every record between the SPSO
and the delivered offset that is not done is available again, counted as delivered as often as
the cursor stored (at least once), and archived instead if that reached the delivery limit. Kafka
keeps exact counts in its share-group state topic; ours may undercount by the deliveries since the
cursor's last write, never lose a record.

Why not core/queues/subscription.py's SharedSubscription itself: it pushes decoded messages to
consumers with prefetch windows; a share fetch pulls, and Kafka returns the stored batches as they
are plus the offset ranges acquired, which the client filters. So this module reads raw batches,
looks only at batch headers, and keeps per-record state only for records in flight; what the two
share is the cursor and its persistence.

Owned by the event loop; `fetch` and `flush` await storage, the rest is synchronous.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.clock import Clock
from core.cursor import Cursor
from core.partition import Partition
from core.records.batch import read_header, split_batches

ACCEPT, RELEASE, REJECT = 1, 2, 3
GAP = 0                     # no record at the offset (compacted away): done, as accepted
LATEST, EARLIEST = "latest", "earliest"
READ_BYTES = 1 << 20


@dataclass(slots=True)
class Acquired:
    member: str
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class Fetched:
    records: bytes                            # whole batches holding the acquired records
    acquired: list[tuple[int, int, int]]      # (first offset, last offset, delivery count)


class SharePartition:
    def __init__(self, partition: Callable[[], Awaitable[Partition]], cursor: Cursor, clock: Clock, *,
                 lock_ms: int = 30_000, delivery_limit: int = 5) -> None:
        self._partition = partition
        self.cursor = cursor
        self._clock = clock
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self._next = cursor.committed_offset               # the first offset never acquired
        self._delivered_before = cursor.delivered_offset   # below: acquired by an earlier process
        self._acquired: dict[int, Acquired] = {}
        self._counts: dict[int, int] = {}                  # deliveries of records not done
        self._released: list[int] = []                     # sorted; below _next, available again
        self._flush_lock = asyncio.Lock()
        self._watchers: list[asyncio.Future] = []

    # --- state ------------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The share-partition start offset (SPSO)."""
        return self.cursor.committed_offset

    def acquired_by(self, member: str) -> list[int]:
        return sorted(o for o, a in self._acquired.items() if a.member == member)

    def delivery_count(self, offset: int) -> int:
        return self._counts.get(offset, 0)

    def _available(self, offset: int) -> bool:
        if offset in self._acquired or self.cursor.is_acked(offset):
            return False
        return offset >= self._next or _contains(self._released, offset)

    # --- acquiring --------------------------------------------------------------------------------

    async def fetch(self, member: str, max_records: int, max_bytes: int = READ_BYTES) -> Fetched:
        """Acquire up to `max_records` available records for `member`, oldest first."""
        self.expire_locks()
        partition = await self._partition()
        self._skip_below(partition.log_start_offset)
        start = self._released[0] if self._released else self._next
        if max_records <= 0 or start >= partition.last_stable_offset:
            return Fetched(b"", [])
        read = await partition.read_committed(start, max(max_bytes, 1))
        aborted = read.aborted
        deadline = self._clock.now_ms() + self.lock_ms
        batches: list[memoryview] = []
        ranges: list[tuple[int, int, int]] = []
        taken_count = 0
        for batch in split_batches(read.records) if read.records else ():
            header = read_header(batch)
            first, last = header.base_offset, header.base_offset + header.last_offset_delta
            if header.is_control or (header.is_transactional and any(
                    t.producer_id == header.producer_id and t.first_offset <= first <= t.last_offset
                    for t in aborted)):
                self._archive_unread(first, last)     # markers and aborted records never go out
                continue
            taken_before = taken_count
            for offset in range(max(first, start), last + 1):
                if taken_count >= max_records:
                    break
                if self._available(offset):
                    if self._delivered_enough_before(offset):
                        self._done(offset)            # archived: out as often as allowed before a restart
                        continue
                    _extend(ranges, offset, self._acquire(offset, member, deadline))
                    taken_count += 1
            if taken_count > taken_before:
                batches.append(batch)
            if taken_count >= max_records:
                break
        if ranges:
            self.cursor.note_delivered(max(r[1] for r in ranges))
        return Fetched(b"".join(batches), ranges)

    def _acquire(self, offset: int, member: str, deadline_ms: int) -> int:
        if offset >= self._next:
            self._next = offset + 1
        else:
            i = bisect.bisect_left(self._released, offset)
            if i < len(self._released) and self._released[i] == offset:
                del self._released[i]
        count = self._counts.get(offset)
        if count is None:
            count = self._counted_before(offset)
        count += 1
        self._counts[offset] = count
        if count > 1:
            self.cursor.note_handed_out(offset, count)
        self._acquired[offset] = Acquired(member, deadline_ms)
        return count

    def _counted_before(self, offset: int) -> int:
        """The deliveries of a record by an earlier process: as the cursor counted, at least once."""
        return max(1, self.cursor.times_handed_out(offset)) if offset < self._delivered_before else 0

    def _delivered_enough_before(self, offset: int) -> bool:
        return (offset < self._delivered_before and offset not in self._counts
                and self._counted_before(offset) >= self.delivery_limit)

    def _archive_unread(self, first: int, last: int) -> None:
        for offset in range(first, last + 1):
            if self._available(offset):
                self._done(offset)
        self._next = max(self._next, last + 1)

    def _skip_below(self, log_start: int) -> None:
        """Records retention deleted before they were done are gone: the SPSO moves past them."""
        if self.cursor.committed_offset < log_start:
            self.cursor.ack(self.cursor.committed_offset, log_start)
            self._released = [o for o in self._released if o >= log_start]
            self._next = max(self._next, log_start)

    # --- settling ---------------------------------------------------------------------------------

    def acknowledge(self, member: str, first: int, last: int, kinds: list[int]) -> bool:
        """Settle [first, last] by `kinds` (one for the whole range, or one per offset). False if
        some record of the range is not acquired by `member` (INVALID_RECORD_STATE): none is settled.
        A gap (no record at the offset) is settled as accepted; it was acquired with its batch."""
        count = last - first + 1
        if not kinds or (len(kinds) != 1 and len(kinds) != count) or count < 1 or count > len(self._acquired):
            return False           # (a range larger than all that is acquired is not looked through)
        if any(k not in (GAP, ACCEPT, RELEASE, REJECT) for k in kinds):
            return False
        for offset in range(first, last + 1):
            owner = self._acquired.get(offset)
            if owner is None or owner.member != member:
                return False
        for offset in range(first, last + 1):
            if (kinds[0] if len(kinds) == 1 else kinds[offset - first]) == RELEASE:
                self._release(offset)
            else:
                self._done(offset)
        self._wake()
        return True

    def release_member(self, member: str) -> int:
        """Every record `member` holds is released (its session ended); returns how many."""
        offsets = self.acquired_by(member)
        for offset in offsets:
            self._release(offset)
        self._wake()
        return len(offsets)

    def expire_locks(self) -> int:
        """Release the records whose acquisition lock ran out; returns how many."""
        now = self._clock.now_ms()
        due = [o for o, a in self._acquired.items() if a.deadline_ms <= now]
        for offset in due:
            self._release(offset)
        if due:
            self._wake()
        return len(due)

    def next_lock_deadline(self) -> int | None:
        return min((a.deadline_ms for a in self._acquired.values()), default=None)

    def _release(self, offset: int) -> None:
        self._acquired.pop(offset, None)
        if self._counts.get(offset, 0) >= self.delivery_limit:
            self._done(offset)            # archived: delivered as often as allowed
        else:
            bisect.insort(self._released, offset)

    def _done(self, offset: int) -> None:
        self._acquired.pop(offset, None)
        self._counts.pop(offset, None)
        self.cursor.ack(offset)

    async def flush(self) -> None:
        """Persist the acknowledgements so far; durable when it returns."""
        async with self._flush_lock:
            await self.cursor.flush()

    # --- waiting for records ------------------------------------------------------------------------

    def watch(self, waiter: asyncio.Future) -> None:
        """Resolve `waiter` when records become available again (released, lock expired)."""
        self._watchers.append(waiter)

    def unwatch(self, waiter: asyncio.Future) -> None:
        if waiter in self._watchers:
            self._watchers.remove(waiter)

    @property
    def has_released(self) -> bool:
        return bool(self._released)

    def _wake(self) -> None:
        if not self._released:
            return
        watchers, self._watchers = self._watchers, []
        for waiter in watchers:
            if not waiter.done():
                waiter.set_result(True)


def _contains(sorted_offsets: list[int], offset: int) -> bool:
    i = bisect.bisect_left(sorted_offsets, offset)
    return i < len(sorted_offsets) and sorted_offsets[i] == offset


def _extend(ranges: list[tuple[int, int, int]], offset: int, count: int) -> None:
    """Add `offset` to the acquired ranges: one range per run of offsets with one delivery count."""
    if ranges and ranges[-1][1] + 1 == offset and ranges[-1][2] == count:
        ranges[-1] = (ranges[-1][0], offset, count)
    else:
        ranges.append((offset, offset, count))
