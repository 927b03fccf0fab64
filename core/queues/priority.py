"""Priority queues: among the ready messages, a higher priority is handed out first; equal
priorities in log order.

A queue declared with x-max-priority N (1..255) reads its log through a `PriorityReadAhead`
instead of a plain read-ahead buffer: one lane per priority level 0..N, each the offsets of that
level's ready messages in log order (an array: 8 bytes a message). The log is still read once,
front to back; every record read is indexed into the lane of its `queue.priority` header (absent:
0; above N: N), but only the bodies that fit the read-ahead budget stay in memory. When the head
of the highest non-empty lane has no body in memory, it is loaded from the log first (one read
from that offset, which also fills the near heads of every lane it covers).

Strictness: the subscription hands nothing out of the read-ahead until the log is indexed up to
the high watermark it last saw, so a message is passed over only for a stored one of higher
priority, not merely for one that was read sooner. The index holds at most INDEX_LIMIT messages;
past that, reading pauses, and the order is strict among the first INDEX_LIMIT ready messages
(newer ones are indexed as older ones are handed out).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.queues.attributes import PRIORITY, header_int
from core.queues.log_records import data_records

if TYPE_CHECKING:
    from core.partition import Partition
    from core.queues.message import QueuedMessage

INDEX_LIMIT = 4_000_000            # ready messages indexed at most (32 MB of offsets)
BODY_MESSAGES = 512                # bodies kept in memory, as the plain read-ahead
BODY_BYTES = 8 << 20
LOAD_BYTES = 1 << 20               # per load of missing bodies
NEAR_HEADS = 256                   # per lane, the offsets a load fills if it meets them
_COMPACT_AT = 4096


class _Lane:
    """The offsets of one priority level, ascending; `head` skips those already taken."""

    __slots__ = ("offsets", "head")

    def __init__(self) -> None:
        self.offsets = array("q")
        self.head = 0

    def __len__(self) -> int:
        return len(self.offsets) - self.head

    def first(self) -> int:
        return self.offsets[self.head]

    def pop(self) -> None:
        self.head += 1
        if self.head == len(self.offsets):
            self.offsets, self.head = array("q"), 0
        elif self.head >= _COMPACT_AT and self.head * 2 >= len(self.offsets):
            del self.offsets[:self.head]
            self.head = 0

    def insert(self, offset: int) -> None:
        self.offsets.insert(bisect.bisect_left(self.offsets, offset, self.head), offset)

    def near(self) -> array:
        return self.offsets[self.head:self.head + NEAR_HEADS]


class PriorityReadAhead:
    """The read-ahead of a priority queue, a backlog (core/queues/backlog.py). Owned by its
    subscription (and the event loop)."""

    def __init__(self, max_priority: int, *, index_limit: int | None = None, body_messages: int | None = None,
                 body_bytes: int | None = None) -> None:
        self.max_priority = max_priority
        self._lanes = [_Lane() for _ in range(max_priority + 1)]
        self._bodies: dict[int, QueuedMessage] = {}
        self._body_bytes = 0
        self._count = 0
        self._top = 0                   # no lane above this one holds anything
        self._index_limit = INDEX_LIMIT if index_limit is None else index_limit
        self._body_messages = BODY_MESSAGES if body_messages is None else body_messages
        self._body_limit = BODY_BYTES if body_bytes is None else body_bytes
        self.missing: int | None = None     # a lane head whose body must be loaded before it goes out

    def __len__(self) -> int:
        return self._count

    @property
    def full(self) -> bool:
        return self._count >= self._index_limit

    def wants_data(self) -> bool:
        return self._count < self._index_limit or self.missing is not None

    def priority_of(self, message: QueuedMessage) -> int:
        value = header_int(message.headers, PRIORITY) if message.headers else None
        if not value or value < 0:
            return 0
        return min(value, self.max_priority)

    # --- filling --------------------------------------------------------------------------------

    def append(self, message: QueuedMessage) -> None:
        """A message read from the log (newer than every one indexed so far)."""
        level = self.priority_of(message)
        self._lanes[level].offsets.append(message.offset)
        self._indexed(level)
        if len(self._bodies) < self._body_messages and self._body_bytes < self._body_limit:
            self._keep(message)

    strict = True           # a higher priority may still be unread: see holds_back

    def extend(self, messages) -> None:
        for message in messages:
            self.append(message)

    def holds_back(self, read_offset: int, high_watermark: int) -> bool:
        """Not all stored messages are indexed yet: a higher one may be unread (strict order)."""
        return read_offset < high_watermark and not self.full

    def put_back(self, message: QueuedMessage) -> None:
        """A message handed out before and requeued: back to its place in its lane."""
        level = self.priority_of(message)
        self._lanes[level].insert(message.offset)
        self._indexed(level)
        self._keep(message)

    def _indexed(self, level: int) -> None:
        self._count += 1
        if level > self._top:
            self._top = level

    def _keep(self, message: QueuedMessage) -> None:
        if message.offset not in self._bodies:
            self._bodies[message.offset] = message
            self._body_bytes += len(message.value or b"")

    # --- taking ---------------------------------------------------------------------------------

    def _top_lane(self) -> _Lane | None:
        lanes = self._lanes
        while self._top > 0 and not lanes[self._top]:
            self._top -= 1
        lane = lanes[self._top]
        return lane if lane else None

    def peek(self, skip: Callable[[int], bool]) -> QueuedMessage | None:
        """The next message to hand out, dropping those `skip` names (acknowledged, held); None if
        none is indexed, or if the next one's body is not in memory (then `missing` says which)."""
        while True:
            lane = self._top_lane()
            if lane is None:
                return None
            offset = lane.first()
            if skip(offset):
                self._drop_first(lane)
                continue
            message = self._bodies.get(offset)
            if message is None:
                self.missing = offset
            return message

    def take(self) -> None:
        self.pop_first()

    def pop_first(self) -> QueuedMessage | None:
        lane = self._top_lane()
        if lane is None:
            return None
        return self._drop_first(lane)

    def _drop_first(self, lane: _Lane) -> QueuedMessage | None:
        message = self._bodies.pop(lane.first(), None)
        if message is not None:
            self._body_bytes -= len(message.value or b"")
        lane.pop()
        self._count -= 1
        return message

    def clear(self) -> None:
        self._lanes = [_Lane() for _ in range(self.max_priority + 1)]
        self._bodies.clear()
        self._body_bytes = 0
        self._count = 0
        self._top = 0
        self.missing = None

    # --- loading bodies -------------------------------------------------------------------------

    async def load_missing(self, partition: Partition, make: Callable[[Any], QueuedMessage]) -> None:
        """Read the missing head's body (and the near heads of every lane the same read covers).
        A head that is not in the log any more (trimmed, damaged) is dropped."""
        offset, self.missing = self.missing, None
        if offset is None:
            return
        wanted: set[int] = set()
        for lane in self._lanes:
            if lane:
                wanted.update(o for o in lane.near() if o not in self._bodies)
        if offset >= partition.log_start_offset:
            result = await partition.read(offset, LOAD_BYTES)
            records, _ = data_records(result.records,
                                      wanted=lambda header, _: header.base_offset + header.last_offset_delta >= offset)
            for record in records:
                if record.offset in wanted and record.offset not in self._bodies:
                    self._keep(make(record))
        if offset not in self._bodies:
            lane = self._top_lane()
            if lane is not None and lane.first() == offset:
                self._drop_first(lane)
